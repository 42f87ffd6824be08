// The "flops_profiler" block of a DeepSpeed config: whether and when the trainer profiles the model
// (docs/config.md says what each key does here).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>

namespace ds::profiler {

struct FlopsProfilerSettings {
  bool enabled = false;
  // The profiled step is the one that begins after this many steps (DeepSpeed's global_steps at
  // that forward): the default 1 profiles the second step, past the first step's warm-up.
  int64_t profile_step = 1;
  int module_depth = -1;  // deepest level of the tree printed; -1: all
  int top_modules = 1;    // modules listed per depth in the aggregated profile
  bool detailed = true;   // print the module tree itself
  std::string output_file;  // "" (DeepSpeed's null): the log
  // Forwards recomputed per step as a share of one (activation checkpointing: 1), added to the
  // profile's fwd+bwd FLOPs as DeepSpeed does; model-FLOPs utilisation leaves recomputation out.
  double recompute_fwd_factor = 0.0;

  // From the block as written (absent or null: the defaults). Throws ds::Error naming the key
  // ("flops_profiler.module_depth") for a wrong type or range or an unknown key.
  static FlopsProfilerSettings from_json(const nlohmann::json& block);
};

}  // namespace ds::profiler
