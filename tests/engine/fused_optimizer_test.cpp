// The fused ShardOptimizers against torch::optim on the same tensors, 100 steps; and the kernels'
// range property (an offloaded step runs them on sub-ranges).
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>

#include "dstrain/engine/kernels/fused_optimizer.hpp"
#include "dstrain/engine/optim/optimizer.hpp"

namespace {

// Not a multiple of any vector width or of the kernels' task size.
constexpr int64_t kNumel = 200003;
constexpr int kSteps = 100;

// max |a − b| / max |b|: the update of a weight near zero is as exact as that of a large one, so
// the error is measured against the tensor's scale rather than element by element.
double relative_error(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
}

ds::OptimizerConfig optimizer_config(ds::OptimizerType type) {
  ds::OptimizerConfig config;
  config.type = type;
  config.lr = 1e-2;
  config.betas = {0.8, 0.95};
  config.eps = 1e-6;
  return config;
}

// Runs `ours` and `reference` (a torch::optim optimizer over `reference_param`) for kSteps steps on
// the same gradients (lr halves every 30 steps, as a schedule would change it) and returns the
// relative error of the weights.
double run_against(ds::ShardOptimizer& ours, torch::optim::Optimizer& reference, at::Tensor& reference_param,
                   at::Tensor ours_param, double lr) {
  torch::manual_seed(7);
  for (int step = 1; step <= kSteps; ++step) {
    const double step_lr = lr * std::pow(0.5, (step - 1) / 30);
    // Gradients of mixed scale, some tiny, as real ones are.
    at::Tensor grad = torch::randn({kNumel}) * torch::rand({kNumel}).pow(4);
    ours.step(ours_param, grad, step_lr, step);
    for (auto& group : reference.param_groups()) group.options().set_lr(step_lr);
    reference_param.mutable_grad() = grad.clone();
    reference.step();
  }
  return relative_error(ours_param, reference_param.detach());
}

template <class TorchOptimizer, class Options>
double compare(const ds::OptimizerConfig& config, std::unique_ptr<ds::ShardOptimizer> ours, const Options& options) {
  torch::manual_seed(3);
  at::Tensor start = torch::randn({kNumel}) * 0.1;
  at::Tensor ours_param = start.clone();
  at::Tensor reference_param = start.clone().set_requires_grad(true);
  TorchOptimizer reference({reference_param}, options);
  return run_against(*ours, reference, reference_param, ours_param, config.lr);
}

}  // namespace

TEST_CASE("fused AdamW equals torch::optim::AdamW over 100 steps", "[optimizer]") {
  ds::OptimizerConfig config = optimizer_config(ds::OptimizerType::AdamW);
  config.weight_decay = 0.1;
  auto options = torch::optim::AdamWOptions(config.lr).betas({0.8, 0.95}).eps(1e-6).weight_decay(0.1);
  const double error = compare<torch::optim::AdamW>(config, ds::make_shard_optimizer(config, kNumel, at::kCPU), options);
  INFO("relative error " << error);
  REQUIRE(error < 1e-6);
}

TEST_CASE("fused Adam with L2 weight decay equals torch::optim::Adam over 100 steps", "[optimizer]") {
  ds::OptimizerConfig config = optimizer_config(ds::OptimizerType::Adam);
  config.weight_decay = 0.05;
  config.adam_w_mode = false;
  auto options = torch::optim::AdamOptions(config.lr).betas({0.8, 0.95}).eps(1e-6).weight_decay(0.05);
  const double error = compare<torch::optim::Adam>(config, ds::make_shard_optimizer(config, kNumel, at::kCPU), options);
  INFO("relative error " << error);
  REQUIRE(error < 1e-6);
}

TEST_CASE("fused SGD equals torch::optim::SGD over 100 steps", "[optimizer]") {
  struct Case {
    std::string name;
    double momentum, dampening, weight_decay;
    bool nesterov;
  };
  for (const Case& c : {Case{"plain", 0, 0, 0, false}, Case{"weight decay", 0, 0, 0.01, false},
                        Case{"momentum, dampening", 0.9, 0.3, 0.01, false}, Case{"nesterov", 0.9, 0, 0.01, true}}) {
    DYNAMIC_SECTION(c.name) {
      ds::OptimizerConfig config = optimizer_config(ds::OptimizerType::SGD);
      config.momentum = c.momentum;
      config.dampening = c.dampening;
      config.weight_decay = c.weight_decay;
      config.nesterov = c.nesterov;
      auto options = torch::optim::SGDOptions(config.lr)
                         .momentum(c.momentum)
                         .dampening(c.dampening)
                         .weight_decay(c.weight_decay)
                         .nesterov(c.nesterov);
      const double error = compare<torch::optim::SGD>(config, ds::make_shard_optimizer(config, kNumel, at::kCPU), options);
      INFO("relative error " << error);
      REQUIRE(error < 1e-6);
    }
  }
}

TEST_CASE("a fused kernel over sub-ranges equals one call over the whole range", "[optimizer]") {
  torch::manual_seed(5);
  const at::Tensor g = torch::randn({kNumel});
  const at::Tensor p0 = torch::randn({kNumel}), m0 = torch::randn({kNumel}), v0 = torch::rand({kNumel});
  ds::fused::AdamStep s;
  s.weight_decay = 0.01;
  s.bias_correction1 = 0.19;
  s.bias_correction2 = 0.0975;
  at::Tensor p = p0.clone(), m = m0.clone(), v = v0.clone();
  ds::fused::adam(p.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), kNumel, s);
  at::Tensor ps = p0.clone(), ms = m0.clone(), vs = v0.clone();
  // Uneven pieces, as swapped sub-groups would be.
  for (int64_t begin = 0, size = 1; begin < kNumel; begin += size, size = size * 7 + 3) {
    const int64_t n = std::min(size, kNumel - begin);
    ds::fused::adam(ps.data_ptr<float>() + begin, g.data_ptr<float>() + begin, ms.data_ptr<float>() + begin,
                    vs.data_ptr<float>() + begin, n, s);
  }
  REQUIRE(torch::equal(p, ps));
  REQUIRE(torch::equal(m, ms));
  REQUIRE(torch::equal(v, vs));
  REQUIRE_FALSE(torch::equal(p, p0));
}

TEST_CASE("the fused sum of squares matches a double-precision reduction", "[optimizer]") {
  torch::manual_seed(9);
  const at::Tensor x = torch::randn({kNumel}) * 3;
  const double expected = x.to(torch::kDouble).pow(2).sum().item<double>();
  const double got = ds::fused::sum_of_squares(x.data_ptr<float>(), kNumel);
  REQUIRE(std::abs(got - expected) <= 1e-12 * expected);
}

TEST_CASE("a shard optimizer refuses a shard the kernels cannot take", "[optimizer]") {
  ds::OptimizerConfig config = optimizer_config(ds::OptimizerType::AdamW);
  auto optimizer = ds::make_shard_optimizer(config, 16, at::kCPU);
  REQUIRE_THROWS_WITH(optimizer->step(torch::zeros({16}), torch::zeros({16}, torch::kDouble), 1e-3, 1),
                      Catch::Contains("contiguous fp32 CPU shards of 16"));
  REQUIRE_THROWS_WITH(optimizer->step(torch::zeros({32}).slice(0, 0, 32, 2), torch::zeros({16}), 1e-3, 1),
                      Catch::Contains("contiguous fp32"));
}
