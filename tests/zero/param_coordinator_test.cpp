// zero::ParameterCoordinator on its own, driven as the engine drives it (ds::zero::call under
// ActiveHooks), against a plain LibTorch copy of the model's weights. Before partitioning, each rank
// overwrites every element of a partitioned parameter outside its own chunk, so a parameter found
// whole and equal to the copy was assembled from every rank's chunk. Checked: a module's parameters
// are whole during its forward and released after it, gathered again for its backward; the
// forward's output and the gradients are the plain computation's; the second forward prefetches
// the next module within stage3_prefetch_bucket_size and no further; parameters of at most
// stage3_param_persistence_threshold elements stay whole throughout.
#include <catch2/catch.hpp>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/runtime/config.hpp"
#include "dstrain/zero/module.hpp"
#include "dstrain/zero/module_call.hpp"
#include "dstrain/zero/param_coordinator.hpp"
#include "dstrain/zero/param_swapper.hpp"
#include "dstrain/zero/shard_layout.hpp"

namespace {

using ds::zero::ParamStatus;

constexpr int kLayers = 3;
constexpr int64_t kIn = 5, kOut = 5;  // weight 25, bias 5: both padded at 2 and 4 ranks

struct LayerImpl : ds::zero::Module {
  explicit LayerImpl(int index) : linear(register_module("linear", torch::nn::Linear(kIn, kOut))), index(index) {}
  at::Tensor forward(const at::Tensor& x) {
    if (on_forward) on_forward(index);
    return torch::tanh(linear(x));
  }
  torch::nn::Linear linear;
  int index;
  std::function<void(int)> on_forward;
};
TORCH_MODULE(Layer);

struct NetImpl : ds::zero::Module {
  NetImpl() {
    for (int i = 0; i < kLayers; ++i) layers.push_back(register_module("layer" + std::to_string(i), Layer(i)));
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = x;
    for (auto& layer : layers) h = ds::zero::call(layer, h);
    return h;
  }
  std::vector<Layer> layers;
};
TORCH_MODULE(Net);

// Elements of a parameter gathered whole: its chunks padded to a multiple of the ranks.
int64_t gathered_numel(int64_t numel) {
  const int world = ds::comm::get_world_size();
  return (numel + world - 1) / world * world;
}

// The model under the coordinator, and what plain LibTorch computes from the same weights.
struct Fixture {
  Net net;
  std::vector<at::Tensor> params;     // layer i's weight at 2i, its bias at 2i + 1
  std::vector<at::Tensor> reference;  // the weights as built, identical on every rank
  // Autograd records a leaf's shape when its gradient accumulator is created: before partitioning,
  // as the engine's GradientReducer does.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  ds::ZeroConfig config;
  std::unique_ptr<ds::zero::ShardLayout> layout;
  std::unique_ptr<ds::zero::ParameterCoordinator> coordinator;

  Fixture(int64_t prefetch_bucket, int64_t persistence_threshold) {
    torch::manual_seed(3);
    net = Net();
    params = net->parameters();
    const int world = ds::comm::get_world_size(), rank = ds::comm::get_rank();
    for (const at::Tensor& p : params) {
      reference.push_back(p.detach().clone());
      accumulators.push_back(torch::autograd::impl::grad_accumulator(p));
      if (p.numel() <= persistence_threshold) continue;  // kept whole as every rank holds it
      // Everything but this rank's chunk becomes a value no rank's true weights have.
      at::NoGradGuard no_grad;
      const at::Tensor flat = p.detach().view({-1});
      const int64_t chunk = (p.numel() + world - 1) / world;
      const int64_t begin = std::min(rank * chunk, p.numel()), end = std::min(begin + chunk, p.numel());
      flat.narrow(0, 0, begin).fill_(1000 + rank);
      flat.narrow(0, end, p.numel() - end).fill_(1000 + rank);
    }
    config.stage = 3;
    config.stage3_prefetch_bucket_size = prefetch_bucket;
    config.stage3_param_persistence_threshold = persistence_threshold;
    layout = std::make_unique<ds::zero::ShardLayout>(params, world, rank);
    coordinator = std::make_unique<ds::zero::ParameterCoordinator>(params, *layout, ds::comm::world(), config);
  }

  at::Tensor forward(const at::Tensor& x) {
    ds::zero::ActiveHooks hooks(coordinator.get());
    coordinator->begin_forward();
    return ds::zero::call(net, x);
  }
  void backward(const at::Tensor& output) {
    coordinator->begin_backward();
    output.sum().backward();
  }

  ParamStatus weight_status(int layer) const { return coordinator->status(2 * layer); }
  bool whole_and_true(size_t i) const {
    return params[i].sizes() == reference[i].sizes() && torch::equal(params[i].detach(), reference[i]);
  }
};

const at::Tensor& input() {
  static const at::Tensor x = [] {
    torch::manual_seed(11);
    return torch::randn({4, kIn});
  }();
  return x;
}

// The plain computation: the output and each parameter's gradient of output.sum().
std::pair<at::Tensor, std::vector<at::Tensor>> plain_forward_backward(const std::vector<at::Tensor>& weights) {
  std::vector<at::Tensor> leaves;
  for (const at::Tensor& w : weights) leaves.push_back(w.clone().requires_grad_(true));
  at::Tensor h = input();
  for (int i = 0; i < kLayers; ++i) h = torch::tanh(torch::linear(h, leaves[2 * i], leaves[2 * i + 1]));
  h.sum().backward();
  std::vector<at::Tensor> grads;
  for (const at::Tensor& leaf : leaves) grads.push_back(leaf.grad());
  return {h.detach(), grads};
}

}  // namespace

TEST_CASE("ParameterCoordinator gathers a module's parameters for its forward and releases them after",
          "[mpi][zero][coordinator]") {
  Fixture f(/*prefetch_bucket=*/0, /*persistence_threshold=*/0);
  for (size_t i = 0; i < f.params.size(); ++i) {
    REQUIRE(f.coordinator->status(i) == ParamStatus::NotAvailable);
    REQUIRE(f.params[i].numel() == 0);  // partitioned: only the shard holds it
  }
  int calls = 0;
  for (auto& layer : f.net->layers) {
    layer->on_forward = [&](int index) {
      ++calls;
      for (int l = 0; l < kLayers; ++l) {
        INFO("in layer " << index << "'s forward, layer " << l);
        const ParamStatus expected = l == index ? ParamStatus::Available : ParamStatus::NotAvailable;
        REQUIRE(f.coordinator->status(2 * l) == expected);
        REQUIRE(f.coordinator->status(2 * l + 1) == expected);
      }
      REQUIRE(f.whole_and_true(2 * index));
      REQUIRE(f.whole_and_true(2 * index + 1));
    };
  }
  const at::Tensor output = f.forward(input());
  REQUIRE(calls == kLayers);
  for (size_t i = 0; i < f.params.size(); ++i) REQUIRE(f.coordinator->status(i) == ParamStatus::NotAvailable);

  const auto [expected_output, expected_grads] = plain_forward_backward(f.reference);
  REQUIRE(torch::allclose(output, expected_output));
  f.backward(output);
  for (size_t i = 0; i < f.params.size(); ++i) {
    INFO("parameter " << i);
    REQUIRE(f.coordinator->status(i) == ParamStatus::Available);  // gathered again for backward
    REQUIRE(f.whole_and_true(i));
    REQUIRE(torch::allclose(f.params[i].grad(), expected_grads[i]));
  }
  f.coordinator->release_all();
  for (size_t i = 0; i < f.params.size(); ++i) REQUIRE(f.coordinator->status(i) == ParamStatus::NotAvailable);
}

TEST_CASE("ParameterCoordinator prefetches the next module within stage3_prefetch_bucket_size",
          "[mpi][zero][coordinator]") {
  const int64_t layer_numel = gathered_numel(kIn * kOut) + gathered_numel(kOut);
  for (int ahead : {0, 1, 2}) {
    DYNAMIC_SECTION(ahead << " layers' worth of prefetch") {
      Fixture f(/*prefetch_bucket=*/ahead * layer_numel, /*persistence_threshold=*/0);
      std::vector<std::vector<ParamStatus>> seen;  // per layer's forward: every layer's weight status
      for (auto& layer : f.net->layers) {
        layer->on_forward = [&](int index) {
          std::vector<ParamStatus> statuses;
          for (int l = 0; l < kLayers; ++l) statuses.push_back(f.weight_status(l));
          seen.push_back(statuses);
          REQUIRE(f.whole_and_true(2 * index));
        };
      }
      // The first forward records the module order; the second prefetches along it.
      for (int pass = 0; pass < 2; ++pass) {
        seen.clear();
        const at::Tensor output = f.forward(input());
        f.backward(output);
        f.coordinator->release_all();
      }
      REQUIRE(seen.size() == static_cast<size_t>(kLayers));
      for (int index = 0; index < kLayers; ++index) {
        for (int l = index + 1; l < kLayers; ++l) {
          INFO("in layer " << index << "'s forward, layer " << l);
          // The layers within the budget after the running one are gathered or in flight.
          if (l - index <= ahead)
            REQUIRE(seen[index][l] != ParamStatus::NotAvailable);
          else
            REQUIRE(seen[index][l] == ParamStatus::NotAvailable);
        }
      }
    }
  }
}

TEST_CASE("parameters within stage3_param_persistence_threshold stay whole", "[mpi][zero][coordinator]") {
  Fixture f(/*prefetch_bucket=*/0, /*persistence_threshold=*/kOut);  // the biases, not the weights
  const auto check_biases_whole = [&] {
    for (int l = 0; l < kLayers; ++l) {
      REQUIRE(f.coordinator->persistent(2 * l + 1));
      REQUIRE(f.coordinator->status(2 * l + 1) == ParamStatus::Available);
      REQUIRE(f.whole_and_true(2 * l + 1));
      REQUIRE_FALSE(f.coordinator->persistent(2 * l));
    }
  };
  check_biases_whole();
  for (int l = 0; l < kLayers; ++l) REQUIRE(f.weight_status(l) == ParamStatus::NotAvailable);
  const at::Tensor output = f.forward(input());
  check_biases_whole();
  for (int l = 0; l < kLayers; ++l) REQUIRE(f.weight_status(l) == ParamStatus::NotAvailable);
  REQUIRE(torch::allclose(output, plain_forward_backward(f.reference).first));
  f.backward(output);
  f.coordinator->release_all();
  check_biases_whole();
  for (int l = 0; l < kLayers; ++l) REQUIRE(f.weight_status(l) == ParamStatus::NotAvailable);
}
