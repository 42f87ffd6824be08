#include "dstrain/engine/profiler/flops_profiler.hpp"

#include <ATen/ATen.h>

#include <cstring>
#include <vector>

#include "dstrain/engine/profiler/gemm_peak.hpp"
#include "dstrain/runtime/log.hpp"

namespace ds::profiler {
namespace {

// Collective: every rank's text, in rank order (byte tensors, as the backend moves tensors only).
std::vector<std::string> gather_texts(comm::Backend& world, const std::string& text) {
  const int ranks = world.world_size();
  std::vector<at::Tensor> lengths(ranks);
  for (at::Tensor& each : lengths) each = at::empty({1}, at::kLong);
  world.all_gather(lengths, at::tensor({static_cast<int64_t>(text.size())}, at::kLong));
  int64_t longest = 1;
  for (const at::Tensor& each : lengths) longest = std::max(longest, each.item<int64_t>());
  at::Tensor mine = at::zeros({longest}, at::kByte);
  std::memcpy(mine.data_ptr(), text.data(), text.size());
  at::Tensor all = at::empty({ranks * longest}, at::kByte);
  world.all_gather_into(all, mine);
  std::vector<std::string> texts;
  for (int r = 0; r < ranks; ++r)
    texts.emplace_back(static_cast<const char*>(all.data_ptr()) + r * longest, lengths[r].item<int64_t>());
  return texts;
}

}  // namespace

FlopsProfiler::FlopsProfiler(FlopsProfilerSettings settings, const torch::nn::Module& model, comm::Backend& world,
                             int64_t micro_batch, int gradient_accumulation, int64_t seq_len, PipelinePlace place)
    : settings_(std::move(settings)),
      model_(profile_module(model, micro_batch, seq_len)),
      world_(world),
      place_(std::move(place)),
      micro_batch_(micro_batch),
      gradient_accumulation_(gradient_accumulation) {
  world.barrier();
  rank_peak_flops_ = measure_gemm_peak_flops();
  at::Tensor sums = at::tensor({rank_peak_flops_, 3 * model_.flops * gradient_accumulation_}, at::kDouble);
  world.all_reduce(sums);
  peak_flops_ = sums[0].item<double>();
  step_flops_ = sums[1].item<double>();
  log::info("flops profiler: ", model_.flops / 1e9, " GFLOPs per forward of ", micro_batch, " x ", seq_len,
            " tokens", place_.stages > 1 ? " on stage 0" : "", "; GEMM peak ", peak_flops_ / 1e12,
            " TFLOP/s over ", world.world_size(), " rank(s) (torch::mm, ", at::get_num_threads(),
            " thread(s) per rank)");
}

FlopsProfiler::Rate FlopsProfiler::rate(double step_seconds) const {
  if (step_seconds <= 0) return {};
  const double achieved = step_flops_ / step_seconds;
  return {achieved / 1e12, peak_flops_ > 0 ? achieved / peak_flops_ : 0};
}

void FlopsProfiler::print_profile(StepProfile step) const {
  const int replicas = world_.world_size() / place_.stages;
  step.world_size = world_.world_size();
  step.data_parallel_size = replicas;
  step.micro_batch = micro_batch_;
  step.gradient_accumulation = gradient_accumulation_;
  step.peak_flops = rank_peak_flops_;
  step.stage = place_.stage;
  step.stages = place_.stages;
  step.layers = place_.layers;
  step.model_fwd_flops = step_flops_ / (3.0 * gradient_accumulation_ * replicas);
  step.pipeline_mfu = rate(step.iteration_seconds).mfu;
  if (place_.stages == 1) {
    if (world_.rank() == 0) emit_model_profile(format_model_profile(model_, step, settings_), settings_);
    return;
  }
  const std::vector<std::string> texts =
      gather_texts(world_, place_.replica == 0 ? format_model_profile(model_, step, settings_) : std::string());
  if (world_.rank() != 0) return;
  std::string all;
  for (const std::string& text : texts)
    if (!text.empty()) all += (all.empty() ? "" : "\n") + text;
  emit_model_profile(all, settings_);
}

}  // namespace ds::profiler
