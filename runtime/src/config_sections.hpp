// The key tables of a ds_config, one visit per section. Each lists the section's keys with their
// ranges; the Reader pass also applies DeepSpeed's derived defaults, aliases and deprecations.
// Defined and instantiated for Reader and Writer in config_training.cpp, config_optimizer.cpp and
// config_zero.cpp. Private to dstrain_runtime.
#pragma once

#include "config_fields.hpp"
#include "dstrain/runtime/config.hpp"

namespace ds::config_detail {

// Top-level scalar keys: visited on the root object itself, not on a block.
template <class V> void visit(V& v, TrainingConfig& config);
template <class V> void visit(V& v, Fp16Config& config);
template <class V> void visit(V& v, Bf16Config& config);
template <class V> void visit(V& v, PipelineConfig& config);

template <class V> void visit(V& v, OptimizerConfig& config);
template <class V> void visit(V& v, SchedulerConfig& config);

template <class V> void visit(V& v, ZeroConfig& config);
template <class V> void visit(V& v, OffloadParamConfig& config);
template <class V> void visit(V& v, OffloadOptimizerConfig& config);
template <class V> void visit(V& v, AioConfig& config);
template <class V> void visit(V& v, CheckpointConfig& config);

}  // namespace ds::config_detail
