// The fused CUDA Adam/AdamW (fused_adam_cuda.hpp) against Adam written out in fp64 with ATen ops on
// the CPU and against the fused CPU kernel, on lengths and alignments that exercise every path of
// the kernel (a lone element, an unaligned head, float4s, a tail, pointers that never align
// together); its multi-range launch against each range stepped alone, bit for bit; and
// AdamShardOptimizer on a CUDA shard against the same optimizer on the CPU.
#include <c10/cuda/CUDAStream.h>
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "dstrain/engine/kernels/fused_adam_cuda.hpp"
#include "dstrain/engine/kernels/fused_optimizer.hpp"
#include "dstrain/engine/optim/optimizer.hpp"

namespace {

constexpr int kSteps = 5;
constexpr double kTolerance = 1e-6;

// max |a − b| / max |b|: a weight near zero is updated as exactly as a large one, so the error is
// measured against the tensor's scale.
double relative_error(const at::Tensor& a, const at::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>() / (scale > 0 ? scale : 1);
}

void* current_stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

ds::fused::AdamStep step_of(int step, bool decoupled) {
  ds::fused::AdamStep s;
  s.lr = 1e-2;
  s.beta1 = 0.8;
  s.beta2 = 0.95;
  s.eps = 1e-6;
  s.weight_decay = 0.1;
  s.decoupled = decoupled;
  s.bias_correction1 = 1 - std::pow(s.beta1, step);
  s.bias_correction2 = 1 - std::pow(s.beta2, step);
  return s;
}

// Adam as its formula, in fp64 tensors.
struct Reference {
  at::Tensor p, m, v;

  void step(const at::Tensor& grad32, const ds::fused::AdamStep& s) {
    at::Tensor g = grad32.to(at::kDouble);
    if (s.decoupled)
      p = p * (1 - s.lr * s.weight_decay);
    else
      g = g + s.weight_decay * p;
    m = s.beta1 * m + (1 - s.beta1) * g;
    v = s.beta2 * v + (1 - s.beta2) * g * g;
    p = p - s.lr / s.bias_correction1 * m / (v.sqrt() / std::sqrt(s.bias_correction2) + s.eps);
  }
};

// `n` fp32 elements on cuda:0 starting `offset` elements into their allocation (allocations are
// 256-byte aligned, so the offset sets the misalignment).
at::Tensor at_offset(const at::Tensor& values, int64_t offset) {
  at::Tensor storage = at::zeros({values.numel() + offset}, at::dtype(at::kFloat).device(at::kCUDA));
  at::Tensor view = storage.narrow(0, offset, values.numel());
  view.copy_(values);
  return view;
}

}  // namespace

TEST_CASE("fused CUDA Adam and AdamW equal the fp64 formula and the CPU kernel", "[gpu]") {
  // Offsets per tensor (params, grads, exp_avg, exp_avg_sq): aligned, a shared unaligned head, and
  // pointers that never align together.
  const std::vector<std::vector<int64_t>> layouts = {{0, 0, 0, 0}, {1, 1, 1, 1}, {3, 3, 3, 3}, {2, 1, 0, 3}};
  for (const int64_t n : {int64_t{1}, int64_t{3}, int64_t{4099}, int64_t{1000003}}) {
    for (const auto& offsets : layouts) {
      for (const bool decoupled : {true, false}) {
        CAPTURE(n, offsets, decoupled);
        torch::manual_seed(11);
        const at::Tensor p0 = torch::randn({n});
        const at::Tensor m0 = 0.1 * torch::randn({n});
        const at::Tensor v0 = 0.01 * torch::rand({n});
        at::Tensor p = at_offset(p0, offsets[0]), m = at_offset(m0, offsets[2]), v = at_offset(v0, offsets[3]);
        at::Tensor cpu_p = p0.clone(), cpu_m = m0.clone(), cpu_v = v0.clone();
        Reference reference{p0.to(at::kDouble), m0.to(at::kDouble), v0.to(at::kDouble)};
        for (int step = 1; step <= kSteps; ++step) {
          const at::Tensor grad = torch::randn({n});
          const at::Tensor g = at_offset(grad, offsets[1]);
          const ds::fused::AdamStep s = step_of(step, decoupled);
          ds::fused::cuda::adam(p.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), n,
                                s, current_stream());
          ds::fused::adam(cpu_p.data_ptr<float>(), grad.data_ptr<float>(), cpu_m.data_ptr<float>(),
                          cpu_v.data_ptr<float>(), n, s);
          reference.step(grad, s);
        }
        CHECK(relative_error(p.cpu(), reference.p) <= kTolerance);
        CHECK(relative_error(m.cpu(), reference.m) <= kTolerance);
        CHECK(relative_error(v.cpu(), reference.v) <= kTolerance);
        CHECK(relative_error(p.cpu(), cpu_p) <= kTolerance);
        CHECK(relative_error(m.cpu(), cpu_m) <= kTolerance);
        CHECK(relative_error(v.cpu(), cpu_v) <= kTolerance);
      }
    }
  }
}

TEST_CASE("one multi-range launch equals each range stepped alone, bit for bit", "[gpu]") {
  // More ranges than one launch takes, of lengths from 0 to several chunks, the parameters at
  // their own offsets (some sharing the state's misalignment, some not).
  const std::vector<int64_t> lengths = {0, 1, 3, 4, 5, 17, 1000, 4099, 16384, 16387, 50001};
  const int64_t count = ds::fused::cuda::kMaxRangesPerLaunch + 100;
  std::vector<int64_t> offset(count), param_offset(count), length(count);
  int64_t state_total = 0, param_total = 0;
  for (int64_t i = 0; i < count; ++i) {
    length[i] = lengths[i % lengths.size()];
    offset[i] = state_total + i % 3;
    param_offset[i] = param_total + (i % 5 == 0 ? 2 : i % 3);
    state_total = offset[i] + length[i];
    param_total = param_offset[i] + length[i];
  }
  torch::manual_seed(3);
  const auto opts = at::dtype(at::kFloat).device(at::kCUDA);
  const at::Tensor p0 = torch::randn({param_total}, opts), g = torch::randn({state_total}, opts);
  const at::Tensor m0 = 0.1 * torch::randn({state_total}, opts), v0 = 0.01 * torch::rand({state_total}, opts);
  at::Tensor p_multi = p0.clone(), m_multi = m0.clone(), v_multi = v0.clone();
  at::Tensor p_alone = p0.clone(), m_alone = m0.clone(), v_alone = v0.clone();
  for (int step = 1; step <= 2; ++step) {
    const ds::fused::AdamStep s = step_of(step, /*decoupled=*/true);
    std::vector<ds::fused::cuda::AdamRange> ranges;
    for (int64_t i = 0; i < count; ++i) {
      ranges.push_back({p_multi.data_ptr<float>() + param_offset[i], g.data_ptr<float>() + offset[i],
                        m_multi.data_ptr<float>() + offset[i], v_multi.data_ptr<float>() + offset[i], length[i]});
      ds::fused::cuda::adam(p_alone.data_ptr<float>() + param_offset[i], g.data_ptr<float>() + offset[i],
                            m_alone.data_ptr<float>() + offset[i], v_alone.data_ptr<float>() + offset[i], length[i], s,
                            current_stream());
    }
    ds::fused::cuda::adam(ranges.data(), count, s, current_stream());
  }
  CHECK_FALSE(torch::equal(p_multi, p0));
  CHECK(torch::equal(p_multi, p_alone));
  CHECK(torch::equal(m_multi, m_alone));
  CHECK(torch::equal(v_multi, v_alone));
}

TEST_CASE("AdamShardOptimizer on a CUDA shard equals the same optimizer on the CPU", "[gpu]") {
  constexpr int64_t kNumel = 300007;
  for (const auto type : {ds::OptimizerType::Adam, ds::OptimizerType::AdamW}) {
    CAPTURE(ds::to_string(type));
    ds::OptimizerConfig config;
    config.type = type;
    config.lr = 1e-2;
    config.weight_decay = 0.05;
    // "Adam" as L2 added to the gradient, "AdamW" as decayed weights.
    ds::AdamShardOptimizer cpu(config, kNumel, at::kCPU, type == ds::OptimizerType::AdamW);
    ds::AdamShardOptimizer gpu(config, kNumel, at::kCUDA, type == ds::OptimizerType::AdamW);
    ds::AdamShardOptimizer gpu_ranges(config, kNumel, at::kCUDA, type == ds::OptimizerType::AdamW);
    REQUIRE(gpu.steps_ranges());
    torch::manual_seed(5);
    at::Tensor cpu_p = torch::randn({kNumel});
    at::Tensor gpu_p = cpu_p.cuda(), ranges_p = cpu_p.cuda();
    // The shard cut as a model's slices would be (uneven, one element alone).
    const std::vector<int64_t> cuts = {0, 1, 1000, 77777, 200000, kNumel};
    for (int step = 1; step <= kSteps; ++step) {
      const at::Tensor grad = torch::randn({kNumel});
      const at::Tensor gpu_grad = grad.cuda();
      cpu.step(cpu_p, grad, 1e-2, step);
      gpu.step(gpu_p, gpu_grad, 1e-2, step);
      std::vector<ds::ShardRange> ranges;
      for (size_t i = 0; i + 1 < cuts.size(); ++i)
        ranges.push_back({ranges_p.data_ptr<float>() + cuts[i], gpu_grad.data_ptr<float>() + cuts[i], cuts[i],
                          cuts[i + 1] - cuts[i]});
      gpu_ranges.step_ranges(ranges, 1e-2, step);
    }
    CHECK(relative_error(gpu_p.cpu(), cpu_p) <= kTolerance);
    CHECK(relative_error(gpu.exp_avg().cpu(), cpu.exp_avg()) <= kTolerance);
    CHECK(relative_error(gpu.exp_avg_sq().cpu(), cpu.exp_avg_sq()) <= kTolerance);
    CHECK(torch::equal(ranges_p, gpu_p));
    CHECK(torch::equal(gpu_ranges.exp_avg(), gpu.exp_avg()));
    CHECK(torch::equal(gpu_ranges.exp_avg_sq(), gpu.exp_avg_sq()));
  }
}

TEST_CASE("step_ranges on a CPU shard equals one step of the whole shard, bit for bit", "[gpu]") {
  constexpr int64_t kNumel = 100003;
  for (const auto type : {ds::OptimizerType::AdamW, ds::OptimizerType::SGD}) {
    CAPTURE(ds::to_string(type));
    ds::OptimizerConfig config;
    config.type = type;
    config.lr = 1e-2;
    config.momentum = 0.9;
    config.weight_decay = 0.05;
    const auto whole = ds::make_shard_optimizer(config, kNumel, at::kCPU);
    const auto sliced = ds::make_shard_optimizer(config, kNumel, at::kCPU);
    REQUIRE(sliced->steps_ranges());
    torch::manual_seed(9);
    const at::Tensor p0 = torch::randn({kNumel});
    at::Tensor whole_p = p0.clone(), sliced_p = p0.clone();
    const std::vector<int64_t> cuts = {0, 3, 4000, 60001, kNumel};
    for (int step = 1; step <= 3; ++step) {
      const at::Tensor grad = torch::randn({kNumel});
      whole->step(whole_p, grad, 1e-2, step);
      std::vector<ds::ShardRange> ranges;
      for (size_t i = 0; i + 1 < cuts.size(); ++i)
        ranges.push_back({sliced_p.data_ptr<float>() + cuts[i], grad.data_ptr<float>() + cuts[i], cuts[i],
                          cuts[i + 1] - cuts[i]});
      sliced->step_ranges(ranges, 1e-2, step);
    }
    CHECK_FALSE(torch::equal(whole_p, p0));
    CHECK(torch::equal(sliced_p, whole_p));
    for (size_t k = 0; k < whole->state().size(); ++k) CHECK(torch::equal(sliced->state()[k].second, whole->state()[k].second));
  }
}
