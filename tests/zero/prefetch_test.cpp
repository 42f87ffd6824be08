// ZeRO-3 prefetch: once the first forward has recorded the module order, a module's forward finds
// the next module's parameters already gathered or in flight; a zero prefetch budget gathers none
// ahead; stage3_max_live_parameters caps what is whole at once.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/engine/engine.hpp"
#include "dstrain/zero/module.hpp"
#include "dstrain/zero/module_call.hpp"
#include "dstrain/zero/param_status.hpp"

namespace {

struct ChainImpl;

struct LayerImpl : ds::zero::Module {
  explicit LayerImpl(ChainImpl* chain, int index)
      : linear(register_module("linear", torch::nn::Linear(32, 32))), chain(chain), index(index) {}
  at::Tensor forward(const at::Tensor& x);
  torch::nn::Linear linear;
  ChainImpl* chain;
  int index;
};
TORCH_MODULE(Layer);

struct ChainImpl : ds::zero::Module {
  ChainImpl() {
    for (int i = 0; i < 3; ++i) layers.push_back(register_module("layer" + std::to_string(i), Layer(this, i)));
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = x;
    for (auto& layer : layers) h = ds::zero::call(layer, h);
    return h.sum();
  }
  std::vector<Layer> layers;
  std::vector<ds::zero::ParamStatus> next_status;  // during layer i: status of layer i+1's weight
};
TORCH_MODULE(Chain);

at::Tensor LayerImpl::forward(const at::Tensor& x) {
  if (index + 1 < static_cast<int>(chain->layers.size()))
    chain->next_status.push_back(ds::zero::param_status(chain->layers[index + 1]->linear->weight));
  return torch::tanh(linear(x));
}

std::vector<ds::zero::ParamStatus> statuses_on_second_forward(int64_t prefetch_bucket, int64_t max_live) {
  Chain chain;
  auto engine = ds::initialize(chain, ds::Config::from_json({
      {"train_micro_batch_size_per_gpu", 1},
      {"optimizer", {{"type", "SGD"}, {"params", {{"lr", 0.1}}}}},
      {"zero_optimization",
       {{"stage", 3},
        {"stage3_param_persistence_threshold", 0},
        {"stage3_prefetch_bucket_size", prefetch_bucket},
        {"stage3_max_live_parameters", max_live}}},
  }));
  for (int step = 0; step < 2; ++step) {
    chain->next_status.clear();
    at::Tensor loss = engine->forward(torch::ones({2, 32}));
    engine->backward(loss);
    engine->step();
  }
  return chain->next_status;
}

}  // namespace

TEST_CASE("ZeRO-3 prefetches along the recorded module order", "[mpi][zero]") {
  using ds::zero::ParamStatus;
  const int world = ds::comm::get_world_size();
  const int64_t layer_numel = (32 * 32 + world - 1) / world * world + (32 + world - 1) / world * world;
  // Each of the three layers but the last records the next one's status: two per forward.
  const auto prefetched = statuses_on_second_forward(/*prefetch_bucket=*/10 * layer_numel, 1000000000);
  REQUIRE(prefetched.size() == 2);
  for (ParamStatus status : prefetched) REQUIRE(status != ParamStatus::NotAvailable);
  const auto no_budget = statuses_on_second_forward(/*prefetch_bucket=*/0, 1000000000);
  REQUIRE(no_budget.size() == 2);
  for (ParamStatus status : no_budget) REQUIRE(status == ParamStatus::NotAvailable);
  // Room for the running layer only: nothing may be gathered ahead of it.
  const auto capped = statuses_on_second_forward(10 * layer_numel, /*max_live=*/layer_numel);
  REQUIRE(capped.size() == 2);
  for (ParamStatus status : capped) REQUIRE(status == ParamStatus::NotAvailable);
}
