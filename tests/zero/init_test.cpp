// Partitioned construction (ds::zero::Init) and the memory-efficient linear: the GPT built under
// Init holds 1/N of every large parameter from the start and equals, once gathered, the GPT built
// whole after the same seed; ds::zero::linear computes what torch::linear computes, and under
// ZeRO-3 a forward through it leaves no gathered weight alive for backward where torch::linear does.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/engine/engine.hpp"
#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/runtime/memory.hpp"
#include "dstrain/zero/init.hpp"
#include "dstrain/zero/linear.hpp"
#include "dstrain/zero/module.hpp"
#include "dstrain/zero/module_call.hpp"

namespace {

constexpr int64_t kPersistence = 100;

ds::Config stage3_config() {
  return ds::Config::from_json({{"train_micro_batch_size_per_gpu", 1},
                                {"optimizer", {{"type", "SGD"}, {"params", {{"lr", 0.1}}}}},
                                {"zero_optimization", {{"stage", 3}, {"stage3_param_persistence_threshold", kPersistence}}}});
}

ds::models::GPTConfig small_gpt() {
  ds::models::GPTConfig config;
  config.n_layer = 2;
  config.n_head = 2;
  config.n_embd = 32;
  config.block_size = 8;
  config.vocab_size = 50;
  return config;
}

}  // namespace

TEST_CASE("ds::zero::Init builds the GPT partitioned, equal to the GPT built whole", "[mpi][zero]") {
  const int world = ds::comm::get_world_size();
  const int rank = ds::comm::get_rank();
  torch::manual_seed(7);
  ds::models::GPT whole(small_gpt());
  torch::manual_seed(7);
  ds::models::GPT built = ds::zero::build(stage3_config(), [] { return ds::models::GPT(small_gpt()); });

  auto whole_params = whole->named_parameters();
  auto built_params = built->named_parameters();
  REQUIRE(whole_params.size() == built_params.size());
  int64_t held = 0, whole_bytes = 0;
  for (size_t i = 0; i < whole_params.size(); ++i) {
    const at::Tensor& expected = whole_params[i].value();
    const at::Tensor& param = built_params[i].value();
    REQUIRE(param.sizes() == expected.sizes());
    held += static_cast<int64_t>(param.storage().nbytes());
    whole_bytes += expected.nbytes();
    const int64_t numel = expected.numel();
    const int64_t chunk = (numel + world - 1) / world;
    if (world == 1 || numel <= kPersistence) {
      REQUIRE_FALSE(ds::zero::is_partitioned(param));
      REQUIRE(torch::equal(param, expected));
      continue;
    }
    REQUIRE(ds::zero::is_partitioned(param));
    const at::Tensor mine = ds::zero::partition_chunk(param);
    REQUIRE(mine.numel() == chunk);
    const int64_t begin = std::min(rank * chunk, numel);
    const int64_t valid = std::min(chunk, numel - begin);
    REQUIRE(torch::equal(mine.narrow(0, 0, valid), expected.reshape({-1}).narrow(0, begin, valid)));
    REQUIRE(mine.narrow(0, valid, chunk - valid).count_nonzero().item<int64_t>() == 0);
  }
  // What one rank holds: its chunks plus the small parameters kept whole, about 1/N of the model.
  if (world > 1) REQUIRE(held < whole_bytes / world + 4 * kPersistence * static_cast<int64_t>(whole_params.size()));

  auto engine = ds::initialize(built, stage3_config());
  const auto weights = engine->consolidated_weights();
  for (const auto& item : whole_params) REQUIRE(torch::equal(weights.at(item.key()), item.value()));
}

TEST_CASE("ds::zero::linear computes torch::linear's values and gradients", "[zero]") {
  torch::manual_seed(3);
  for (bool with_bias : {true, false}) {
    const at::Tensor x = torch::randn({2, 3, 5}, torch::requires_grad());
    const at::Tensor w = torch::randn({4, 5}, torch::requires_grad());
    const at::Tensor b = with_bias ? torch::randn({4}, torch::requires_grad()) : at::Tensor();
    const at::Tensor g = torch::randn({2, 3, 4});
    const at::Tensor ours = ds::zero::linear(x, w, b);
    const auto our_grads = torch::autograd::grad({ours}, with_bias ? std::vector<at::Tensor>{x, w, b}
                                                                     : std::vector<at::Tensor>{x, w}, {g});
    const at::Tensor reference = torch::linear(x, w, b);
    const auto reference_grads = torch::autograd::grad({reference}, with_bias ? std::vector<at::Tensor>{x, w, b}
                                                                                : std::vector<at::Tensor>{x, w}, {g});
    REQUIRE(torch::equal(ours, reference));
    for (size_t i = 0; i < our_grads.size(); ++i) REQUIRE(torch::allclose(our_grads[i], reference_grads[i], 1e-6, 1e-6));
  }
}

namespace {

constexpr int64_t kWidth = 512;
constexpr int kLayers = 4;

template <class LinearHolder>
struct StackImpl : ds::zero::Module {
  StackImpl() {
    for (int i = 0; i < kLayers; ++i) layers.push_back(register_module("l" + std::to_string(i), LinearHolder(kWidth, kWidth)));
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = x;
    for (auto& layer : layers) h = ds::zero::call(layer, h);
    return h.sum();
  }
  std::vector<LinearHolder> layers;
};

template <class LinearHolder>
using Stack = torch::nn::ModuleHolder<StackImpl<LinearHolder>>;

// Bytes a ZeRO-3 forward leaves allocated for its backward (a one-row input: almost no activations).
template <class LinearHolder>
int64_t kept_by_forward() {
  Stack<LinearHolder> model;
  auto engine = ds::initialize(model, stage3_config());
  const at::Tensor x = torch::randn({1, kWidth});
  const int64_t before = ds::allocated_bytes();
  at::Tensor loss = engine->forward(x);
  const int64_t kept = ds::allocated_bytes() - before;
  engine->backward(loss);
  engine->step();
  return kept;
}

}  // namespace

TEST_CASE("Under ZeRO-3, ds::zero::Linear frees each gathered weight after its forward", "[mpi][zero]") {
  const int64_t weight_bytes = kWidth * kWidth * 4;
  // torch::linear's autograd keeps every gathered weight (as weight.t()) until backward...
  REQUIRE(kept_by_forward<torch::nn::Linear>() >= (kLayers - 1) * weight_bytes);
  // ...the memory-efficient linear keeps none of them.
  REQUIRE(kept_by_forward<ds::zero::Linear>() < weight_bytes / 2);
}
