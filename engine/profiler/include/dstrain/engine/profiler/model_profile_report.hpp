// The text DeepSpeed's print_model_profile writes at the profile step: the summary (world, batch,
// params, forward FLOPs and MACs, latencies of forward, backward and step and the FLOP/s they give,
// and here also the GEMM peak and the model-FLOPs utilisation), the aggregated profile (per depth,
// the top_modules types by params and by MACs) and the detailed tree down to module_depth.
// Per-module latencies are not measured: LibTorch's C++ modules have no forward hooks.
#pragma once

#include <cstdint>
#include <string>

#include "dstrain/engine/profiler/flops_profiler_settings.hpp"
#include "dstrain/engine/profiler/module_profile.hpp"

namespace ds::profiler {

// What the trainer measured of the profiled step, per rank.
struct StepProfile {
  int64_t step = 0;  // the profiled step, 1-based as the trainer's log counts
  int world_size = 1;
  int data_parallel_size = 1;
  int64_t micro_batch = 1;       // sequences per forward
  int gradient_accumulation = 1;  // forwards per step (the pipeline's micro-batches)
  double forward_seconds = 0;     // all of the step's forwards; 0: not measured (the pipeline's)
  double backward_seconds = 0;
  double step_seconds = 0;        // the optimizer steps
  double iteration_seconds = 0;   // the whole step, wall clock
  double peak_flops = 0;          // this rank's measured GEMM FLOP/s
  // In a pipeline (stages > 1) the profiled model is stage `stage`'s slice, holding `layers`;
  // model_fwd_flops is one forward of one micro-batch through every stage, and pipeline_mfu the
  // whole pipeline's: all ranks' model FLOPs over (ranks x GEMM peak x iteration time).
  int stage = 0;
  int stages = 1;
  std::string layers;
  double model_fwd_flops = 0;
  double pipeline_mfu = 0;
};

std::string format_model_profile(const ModuleProfile& model, const StepProfile& step,
                                 const FlopsProfilerSettings& settings);

// Writes the profile where the settings say: output_file (replaced), or the log. Throws ds::Error
// with the path and errno when the file cannot be written.
void emit_model_profile(const std::string& text, const FlopsProfilerSettings& settings);

}  // namespace ds::profiler
