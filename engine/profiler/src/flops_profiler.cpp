#include "dstrain/engine/profiler/flops_profiler.hpp"

#include <ATen/ATen.h>

#include "dstrain/engine/profiler/gemm_peak.hpp"
#include "dstrain/runtime/log.hpp"

namespace ds::profiler {

FlopsProfiler::FlopsProfiler(FlopsProfilerSettings settings, const models::GPTImpl& model, comm::Backend& group,
                             int64_t micro_batch, int gradient_accumulation, int64_t seq_len)
    : settings_(std::move(settings)),
      model_(profile_gpt(model, micro_batch, seq_len)),
      rank_(group.rank()),
      world_size_(group.world_size()),
      micro_batch_(micro_batch),
      gradient_accumulation_(gradient_accumulation) {
  group.barrier();
  rank_peak_flops_ = measure_gemm_peak_flops();
  at::Tensor peak = at::tensor({rank_peak_flops_}, at::kDouble);
  group.all_reduce(peak);
  peak_flops_ = peak.item<double>();
  step_flops_ = 3 * model_.flops * gradient_accumulation_ * world_size_;
  log::info("flops profiler: ", model_.flops / 1e9, " GFLOPs per forward of ", micro_batch, " x ", seq_len,
            " tokens; GEMM peak ", peak_flops_ / 1e12, " TFLOP/s over ", world_size_, " rank(s) (torch::mm, ",
            at::get_num_threads(), " thread(s) per rank)");
}

FlopsProfiler::Rate FlopsProfiler::rate(double step_seconds) const {
  if (step_seconds <= 0) return {};
  const double achieved = step_flops_ / step_seconds;
  return {achieved / 1e12, peak_flops_ > 0 ? achieved / peak_flops_ : 0};
}

void FlopsProfiler::print_profile(StepProfile step) const {
  if (rank_ != 0) return;
  step.world_size = world_size_;
  step.data_parallel_size = world_size_;
  step.micro_batch = micro_batch_;
  step.gradient_accumulation = gradient_accumulation_;
  step.peak_flops = rank_peak_flops_;
  emit_model_profile(format_model_profile(model_, step, settings_), settings_);
}

}  // namespace ds::profiler
