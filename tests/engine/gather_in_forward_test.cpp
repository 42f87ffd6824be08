// dstrain.gather_in_forward: at stages 1-2 the other ranks' slices of the stepped parameters arrive
// during the next forward (zero::SliceGather), each module's as it runs, instead of inside step().
// The training must be the one the gather in the step gives, bit for bit, and plain LibTorch
// AdamW's over the whole batch; reading the model through the engine (module(), checkpoints)
// waits for the gathers.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/engine/engine.hpp"
#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/remove_tree.hpp"
#include "dstrain/zero/module.hpp"
#include "shared_folder.hpp"
#include "training_loop.hpp"

namespace {

constexpr int64_t kSeed = 23;
constexpr double kLr = 3e-3;
constexpr double kWeightDecay = 0.01;
constexpr int kGlobalBatch = 8;
constexpr int kSteps = 4;

ds::models::GPT make_gpt() {
  torch::manual_seed(kSeed);
  // n_embd 165: the attention's input and the MLP's weights are over SliceGather::kSmallNumel
  // (gathered in place, one each; 495 x 165 ends in padding at 2 and 4 ranks), the rest under it
  // (gathered together).
  return ds::models::GPT(ds::models::GPTConfig::from_json(
      {{"n_layer", 2}, {"n_head", 5}, {"n_embd", 165}, {"block_size", 16}, {"vocab_size", 64}, {"dropout", 0.0}}));
}

// A block the root calls through ds::zero::call.
struct BlockImpl : ds::zero::Module {
  explicit BlockImpl(int64_t width) : fc(register_module("fc", torch::nn::Linear(width, width))) {}
  at::Tensor forward(const at::Tensor& x) { return x + torch::tanh(ds::zero::call(fc, x)); }
  torch::nn::Linear fc;
};
TORCH_MODULE(Block);

// A model that reads a large parameter outside any ds::zero::call: `mix`, a plain child of the
// root, never called, whose weight the root multiplies by directly. Its gather is its own (over
// kSmallNumel elements), so only the root's own waiting makes it current.
struct OddModelImpl : ds::zero::Module {
  OddModelImpl()
      : wte(register_module("wte", torch::nn::Embedding(64, 256))),
        first(register_module("first", Block(256))),
        second(register_module("second", Block(256))),
        mix(register_module("mix", torch::nn::Linear(256, 256))) {}
  at::Tensor forward(const at::Tensor& tokens) {
    at::Tensor x = ds::zero::call(wte, tokens);
    x = ds::zero::call(first, x);
    x = torch::matmul(x, mix->weight.t()) / 16;
    x = ds::zero::call(second, x);
    return torch::matmul(x, wte->weight.t());
  }
  torch::nn::Embedding wte;
  Block first, second;
  torch::nn::Linear mix;
};
TORCH_MODULE(OddModel);

OddModel make_odd() {
  torch::manual_seed(kSeed);
  return OddModel();
}

nlohmann::json config_for(int stage, bool gather_in_forward) {
  const int world = ds::comm::get_world_size();
  return {
      {"train_micro_batch_size_per_gpu", kGlobalBatch / world},
      {"gradient_accumulation_steps", 1},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", kLr}, {"weight_decay", kWeightDecay}}}}},
      {"zero_optimization", {{"stage", stage}, {"reduce_bucket_size", 20000}}},
      {"dstrain", {{"gather_in_forward", gather_in_forward}}},
  };
}

template <class Model>
std::shared_ptr<ds::Engine<Model>> make_engine(Model model, int stage, bool gather_in_forward) {
  return ds::initialize(std::move(model), ds::Config::from_json(config_for(stage, gather_in_forward)),
                        ds::comm::init_distributed("mpi"));
}

template <class Model>
std::map<std::string, at::Tensor> weights_of(ds::Engine<Model>& engine) {
  std::map<std::string, at::Tensor> weights;
  for (const auto& item : engine.module()->named_parameters()) weights[item.key()] = item.value().detach().clone();
  return weights;
}

void require_equal(const std::map<std::string, at::Tensor>& a, const std::map<std::string, at::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (const auto& [name, tensor] : a) {
    INFO(name);
    REQUIRE(torch::equal(tensor, b.at(name)));
  }
}

}  // namespace

TEST_CASE("stages 1-2 gathering in the next forward train as gathering in the step", "[mpi][engine]") {
  ds::models::GPT reference = make_gpt();  // plain LibTorch AdamW over the whole batch
  const std::vector<double> plain = training_loop::train_plain_adamw(reference, kSteps, kGlobalBatch, kLr, kWeightDecay);
  for (int stage : {1, 2}) {
    DYNAMIC_SECTION("stage " << stage) {
      auto in_step = make_engine(make_gpt(), stage, false);
      auto in_forward = make_engine(make_gpt(), stage, true);
      const std::vector<double> expected = training_loop::train(*in_step, kSteps);
      const std::vector<double> losses = training_loop::train(*in_forward, kSteps);
      REQUIRE(losses == expected);
      // module() waits for the last step's gathers.
      require_equal(weights_of(*in_forward), weights_of(*in_step));
      // (The weights themselves differ from plain AdamW's by more than rounding where Adam's
      // update of a near-zero gradient takes the sign of its rounding error; master_storage_test
      // checks them on a smaller model.)
      for (size_t i = 0; i < plain.size(); ++i) REQUIRE(losses[i] == Approx(plain[i]).epsilon(1e-5));
    }
  }
}

TEST_CASE("a parameter read outside ds::zero::call is gathered before its owner runs", "[mpi][engine]") {
  auto in_step = make_engine(make_odd(), 2, false);
  auto in_forward = make_engine(make_odd(), 2, true);
  const std::vector<double> expected = training_loop::train(*in_step, kSteps);
  REQUIRE(training_loop::train(*in_forward, kSteps) == expected);
  require_equal(weights_of(*in_forward), weights_of(*in_step));
}

TEST_CASE("a checkpoint saved with gathers in flight holds the stepped weights", "[mpi][engine]") {
  const std::string dir = fresh_shared_folder("dstrain_gather_in_forward_test");
  auto saved = make_engine(make_gpt(), 1, true);
  training_loop::train(*saved, 2);
  saved->save_checkpoint(dir, "in_flight");  // straight after a step: the gathers were just posted
  auto reference = make_engine(make_gpt(), 1, false);
  training_loop::train(*reference, 2);
  auto loaded = make_engine(make_gpt(), 1, false);
  loaded->load_checkpoint(dir, "in_flight");
  require_equal(weights_of(*loaded), weights_of(*reference));
  const std::vector<double> resumed = training_loop::train(*loaded, 1);
  REQUIRE(resumed == training_loop::train(*saved, 1));
  ds::comm::barrier();
  if (ds::comm::get_rank() == 0) ds::remove_tree(dir);
}

TEST_CASE("dstrain.gather_in_forward must be a bool", "[engine]") {
  nlohmann::json config = config_for(1, true);
  config["dstrain"]["gather_in_forward"] = "yes";
  try {
    ds::initialize(make_gpt(), ds::Config::from_json(config), ds::comm::init_distributed("mpi"));
    FAIL("a string was accepted");
  } catch (const ds::Error& e) {
    REQUIRE(std::string(e.what()).find("dstrain.gather_in_forward") != std::string::npos);
  }
}
