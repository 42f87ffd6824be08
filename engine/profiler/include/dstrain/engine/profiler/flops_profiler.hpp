// FlopsProfiler: DeepSpeed's flops profiler as the trainer runs it on the GPT. Built once at start:
// every rank of the group measures its GEMM peak at the same moment (as the ranks will compute
// at once, sharing the node's cores and memory) and the peaks are summed. Each step it turns the
// step's wall time into the model's FLOP/s over the group and the model-FLOPs utilisation (MFU);
// at the profile step it prints the model profile (model_profile_report.hpp).
//
// Model FLOPs are 3x the forward's (module_profile.hpp) of every micro-batch of every rank:
// recomputation under activation checkpointing is left out of MFU, as PaLM defines it.
#pragma once

#include <cstdint>

#include "dstrain/comm/backend.hpp"
#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/engine/profiler/flops_profiler_settings.hpp"
#include "dstrain/engine/profiler/model_profile_report.hpp"
#include "dstrain/engine/profiler/module_profile.hpp"

namespace ds::profiler {

class FlopsProfiler {
 public:
  // Collective over `group`. micro_batch sequences of seq_len tokens per forward,
  // gradient_accumulation forwards per step on each rank.
  FlopsProfiler(FlopsProfilerSettings settings, const models::GPTImpl& model, comm::Backend& group,
                int64_t micro_batch, int gradient_accumulation, int64_t seq_len);

  // Whether the step that begins after `steps_done` steps is the one to profile.
  bool is_profile_step(int64_t steps_done) const { return steps_done == settings_.profile_step; }

  double peak_flops() const { return peak_flops_; }  // summed over the group
  // Model FLOPs of one optimizer step over the whole group.
  double step_flops() const { return step_flops_; }

  struct Rate {
    double tflops = 0;  // model TFLOP/s of the whole group
    double mfu = 0;     // over the summed GEMM peak
  };
  Rate rate(double step_seconds) const;

  // Prints the profile of the step (rank 0), to the log or to output_file. `step`: this rank's
  // times; the profiler fills in its sizes and peak.
  void print_profile(StepProfile step) const;

 private:
  FlopsProfilerSettings settings_;
  ModuleProfile model_;
  int rank_;
  int world_size_;
  int64_t micro_batch_;
  int gradient_accumulation_;
  double rank_peak_flops_;
  double peak_flops_;
  double step_flops_;
};

}  // namespace ds::profiler
