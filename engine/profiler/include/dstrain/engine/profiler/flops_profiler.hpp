// FlopsProfiler: DeepSpeed's flops profiler as the trainer runs it, on the GPT, the Llama or a
// pipeline stage's slice of either (or any module: module_profile.hpp says what is counted). Built
// once at start: every rank of the world measures its GEMM peak at the same moment (as the ranks
// will compute at once, sharing the node's cores and memory) and the peaks are summed. Each step it
// turns the step's wall time into the model's FLOP/s over the world and the model-FLOPs utilisation
// (MFU); at the profile step it prints the model profile (model_profile_report.hpp).
//
// Model FLOPs are 3x the forward's (module_profile.hpp) of every micro-batch of every rank, each
// rank counting its own model: in a pipeline each stage its slice, so the world's sum is every
// stage's FLOPs over the replicas and MFU = that sum / (ranks x peak x time). Recomputation under
// activation checkpointing is left out of MFU, as PaLM defines it.
#pragma once

#include <cstdint>
#include <string>

#include "dstrain/comm/backend.hpp"
#include "dstrain/engine/profiler/flops_profiler_settings.hpp"
#include "dstrain/engine/profiler/model_profile_report.hpp"
#include "dstrain/engine/profiler/module_profile.hpp"

namespace ds::profiler {

// Where this rank's model sits in a pipeline of `stages` stages, `replicas` copies each (the rank
// grid is stage-major: rank = stage * replicas + replica). The default: data parallelism over the
// whole world.
struct PipelinePlace {
  int stage = 0;
  int stages = 1;
  int replica = 0;
  std::string layers;  // the stage's layers, as the profile names them, e.g. "layers 0..2"
};

class FlopsProfiler {
 public:
  // Collective over `world`. micro_batch sequences of seq_len tokens per forward,
  // gradient_accumulation forwards per step on each rank.
  FlopsProfiler(FlopsProfilerSettings settings, const torch::nn::Module& model, comm::Backend& world,
                int64_t micro_batch, int gradient_accumulation, int64_t seq_len, PipelinePlace place = {});

  // Whether the step that begins after `steps_done` steps is the one to profile.
  bool is_profile_step(int64_t steps_done) const { return steps_done == settings_.profile_step; }

  const ModuleProfile& model() const { return model_; }  // this rank's
  double peak_flops() const { return peak_flops_; }  // summed over the world
  // Model FLOPs of one optimizer step over the whole world.
  double step_flops() const { return step_flops_; }

  struct Rate {
    double tflops = 0;  // model TFLOP/s of the whole world
    double mfu = 0;     // over the summed GEMM peak
  };
  Rate rate(double step_seconds) const;

  // Prints the profile of the step (rank 0), to the log or to output_file. `step`: this rank's
  // times; the profiler fills in its sizes and peak. In a pipeline it is collective: each stage's
  // first replica formats its stage's profile and rank 0 prints them all, stage by stage.
  void print_profile(StepProfile step) const;

 private:
  FlopsProfilerSettings settings_;
  ModuleProfile model_;
  comm::Backend& world_;
  PipelinePlace place_;
  int64_t micro_batch_;
  int gradient_accumulation_;
  double rank_peak_flops_;
  double peak_flops_;
  double step_flops_;
};

}  // namespace ds::profiler
