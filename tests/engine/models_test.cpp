#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "dstrain/engine/data/synthetic_source.hpp"
#include "dstrain/engine/models/causal_attention.hpp"
#include "dstrain/engine/models/gelu.hpp"
#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/engine/models/loss.hpp"
#include "dstrain/engine/models/mlp.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/zero/module_call.hpp"

#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <set>

using ds::models::GPT;
using ds::models::GPTConfig;
using ds::models::MLP;
using ds::models::MLPConfig;

namespace {

GPTConfig tiny_gpt(int64_t n_layer = 2) {
  GPTConfig config;
  config.n_layer = n_layer;
  config.n_head = 2;
  config.n_embd = 16;
  config.block_size = 8;
  config.vocab_size = 32;
  return config;
}

// The config key of the ds::Error that `action` throws, or "no error".
std::string error_key(const std::function<void()>& action) {
  try {
    action();
  } catch (const ds::Error& error) {
    return error.key().value_or("no key");
  }
  return "no error";
}

std::map<std::string, at::Tensor> parameters_by_name(const torch::nn::Module& module) {
  std::map<std::string, at::Tensor> result;
  for (const auto& item : module.named_parameters()) result[item.key()] = item.value();
  return result;
}

int64_t count_parameters(const torch::nn::Module& module) {
  int64_t count = 0;
  for (const at::Tensor& parameter : module.parameters()) count += parameter.numel();
  return count;
}

at::Tensor random_tokens(int64_t batch, int64_t length, int64_t vocab) {
  return torch::randint(vocab, {batch, length}, torch::kLong);
}

}  // namespace

TEST_CASE("GPTConfig reads the dstrain.model block and names the bad key", "[models]") {
  const nlohmann::json good = {{"type", "gpt"}, {"n_layer", 2}, {"n_head", 4}, {"n_embd", 64},
                               {"block_size", 32}, {"vocab_size", 256}};
  const GPTConfig config = GPTConfig::from_json(good);
  REQUIRE(config.n_layer == 2);
  REQUIRE(config.n_head == 4);
  REQUIRE(config.n_embd == 64);
  REQUIRE(config.block_size == 32);
  REQUIRE(config.vocab_size == 256);
  REQUIRE(config.dropout == 0.0);
  REQUIRE(config.bias);
  REQUIRE(config.num_layers() == 4);

  auto with = [&](const std::string& key, const nlohmann::json& value) {
    nlohmann::json block = good;
    block[key] = value;
    return block;
  };
  auto key_of = [](const nlohmann::json& block) { return error_key([&] { GPTConfig::from_json(block); }); };
  nlohmann::json missing = good;
  missing.erase("n_head");
  REQUIRE(key_of(missing) == "dstrain.model.n_head");
  REQUIRE(key_of(with("n_head", 5)) == "dstrain.model.n_head");  // 64 % 5 != 0
  REQUIRE(key_of(with("n_layer", -1)) == "dstrain.model.n_layer");
  REQUIRE(key_of(with("n_embd", "64")) == "dstrain.model.n_embd");
  REQUIRE(key_of(with("dropout", 1.5)) == "dstrain.model.dropout");
  REQUIRE(key_of(with("bias", 1)) == "dstrain.model.bias");
  REQUIRE(key_of(with("n_heads", 4)) == "dstrain.model.n_heads");
  REQUIRE(GPTConfig::from_json(with("bias", false)).bias == false);
  REQUIRE(GPTConfig::from_json(with("dropout", 0.1)).dropout == 0.1);
}

TEST_CASE("GPT maps tokens [B, T] to logits [B, T, V] for any T up to block_size", "[models]") {
  torch::manual_seed(0);
  const GPTConfig config = tiny_gpt();
  GPT model(config);
  for (int64_t T : {1, 5, 8}) {
    const at::Tensor logits = model->forward(random_tokens(3, T, config.vocab_size));
    REQUIRE(logits.sizes() == at::IntArrayRef({3, T, config.vocab_size}));
    REQUIRE(logits.scalar_type() == torch::kFloat);
  }
  REQUIRE(error_key([&] { model->forward(random_tokens(3, 9, config.vocab_size)); }) == "dstrain.model.block_size");
  REQUIRE_THROWS_AS(model->forward(torch::zeros({3, 4}, torch::kFloat)), ds::Error);
}

TEST_CASE("GPT is causal: a later token never changes earlier logits", "[models]") {
  torch::manual_seed(1);
  const GPTConfig config = tiny_gpt();
  GPT model(config);
  model->eval();
  const at::Tensor tokens = random_tokens(2, 8, config.vocab_size);
  at::Tensor changed = tokens.clone();
  changed.select(1, 5).add_(1).remainder_(config.vocab_size);
  const at::Tensor before = model->forward(tokens);
  const at::Tensor after = model->forward(changed);
  REQUIRE(torch::allclose(before.narrow(1, 0, 5), after.narrow(1, 0, 5), 0.0, 1e-6));
  // The changed position and those after it do see the change.
  for (int64_t t = 5; t < 8; ++t) REQUIRE_FALSE(torch::allclose(before.select(1, t), after.select(1, t)));
}

TEST_CASE("GPT ties its output head to the token embedding", "[models]") {
  torch::manual_seed(2);
  const GPTConfig config = tiny_gpt();
  GPT model(config);
  int64_t vocab_by_embd = 0;
  for (const at::Tensor& parameter : model->parameters()) {
    if (parameter.sizes() == at::IntArrayRef({config.vocab_size, config.n_embd})) ++vocab_by_embd;
  }
  REQUIRE(vocab_by_embd == 1);
  REQUIRE(model->external_parameters().size() == 1);
  REQUIRE(model->external_parameters()[0].is_same(model->wte->weight));
  REQUIRE(model->tied_weight().is_same(model->wte->weight));

  // The input uses tokens 0 and 1 only, so the embedding lookup's gradient reaches rows 0 and 1
  // alone: any other row's gradient comes from the head.
  const at::Tensor tokens = torch::randint(2, {2, 8}, torch::kLong);
  ds::models::cross_entropy_loss(model->forward(tokens), random_tokens(2, 8, config.vocab_size)).backward();
  const at::Tensor grad = model->wte->weight.grad();
  REQUIRE(grad.defined());
  for (int64_t row = 2; row < config.vocab_size; ++row) REQUIRE(grad[row].abs().sum().item<float>() > 0.0f);
}

TEST_CASE("GPT initialization is deterministic and follows GPT-2's scheme", "[models]") {
  GPTConfig config = tiny_gpt(4);
  config.n_embd = 64;
  config.vocab_size = 512;
  torch::manual_seed(42);
  GPT first(config);
  torch::manual_seed(42);
  GPT second(config);
  torch::manual_seed(43);
  GPT other(config);
  const auto a = parameters_by_name(*first), b = parameters_by_name(*second), c = parameters_by_name(*other);
  REQUIRE(a.size() == b.size());
  for (const auto& [name, value] : a) REQUIRE(torch::equal(value, b.at(name)));
  REQUIRE_FALSE(torch::equal(a.at("wte.weight"), c.at("wte.weight")));
  REQUIRE_FALSE(torch::equal(a.at("h.0.attn.c_attn.weight"), a.at("h.1.attn.c_attn.weight")));

  const double residual_std = 0.02 / std::sqrt(2.0 * config.n_layer);
  for (const auto& [name, value] : a) {
    INFO(name);
    const auto ends_with = [&](const std::string& suffix) {
      return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    if (ends_with(".bias")) {
      REQUIRE(value.abs().max().item<float>() == 0.0f);
    } else if (name.find("ln_") != std::string::npos) {
      REQUIRE(torch::equal(value, torch::ones_like(value)));
    } else {
      const double expected = ends_with("c_proj.weight") ? residual_std : 0.02;
      REQUIRE(value.std().item<double>() == Approx(expected).epsilon(0.1));
      REQUIRE(std::abs(value.mean().item<double>()) < expected / 10);
    }
  }
}

TEST_CASE("the GPT's parameter count has a closed form", "[models]") {
  for (bool bias : {true, false}) {
    GPTConfig config = tiny_gpt(3);
    config.bias = bias;
    const int64_t V = config.vocab_size, T = config.block_size, C = config.n_embd, L = config.n_layer;
    // Per block: two LayerNorms, c_attn C x 3C, c_proj C x C, c_fc C x 4C, c_proj 4C x C.
    const int64_t expected = bias ? V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
                                  : V * C + T * C + L * (12 * C * C + 2 * C) + C;
    torch::manual_seed(3);
    GPT model(config);
    REQUIRE(count_parameters(*model) == expected);
    REQUIRE(ds::models::num_parameters(config) == expected);
  }
}

TEST_CASE("a pipeline slice of the GPT holds exactly those layers of the whole model", "[models]") {
  const GPTConfig config = tiny_gpt(3);  // layers: embedding, 3 blocks, head
  torch::manual_seed(5);
  GPT whole(config);
  whole->eval();
  const auto whole_parameters = parameters_by_name(*whole);
  const at::Tensor tokens = random_tokens(2, 8, config.vocab_size);
  const at::Tensor logits = whole->forward(tokens);

  const std::vector<std::vector<std::pair<int64_t, int64_t>>> partitions = {
      {{0, 5}}, {{0, 2}, {2, 5}}, {{0, 1}, {1, 4}, {4, 5}}, {{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}}};
  for (const auto& partition : partitions) {
    at::Tensor activation = tokens;
    for (const auto& [first, last] : partition) {
      INFO("slice [" << first << ", " << last << ")");
      torch::manual_seed(5);
      GPT stage(config, first, last);
      stage->eval();
      for (const auto& [name, value] : parameters_by_name(*stage)) {
        INFO(name);
        REQUIRE(whole_parameters.count(name) == 1);
        REQUIRE(torch::equal(value, whole_parameters.at(name)));
      }
      const bool holds_tied = first == 0 || last == config.num_layers();
      REQUIRE(stage->tied_weight().defined() == holds_tied);
      activation = stage->forward(activation);
    }
    REQUIRE(torch::allclose(activation, logits, 1e-5, 1e-6));
  }

  // Each layer alone holds what layer_parameter_counts says (the head counts its copy of wte).
  const std::vector<int64_t> counts = ds::models::layer_parameter_counts(config);
  REQUIRE(static_cast<int64_t>(counts.size()) == config.num_layers());
  for (int64_t layer = 0; layer < config.num_layers(); ++layer) {
    REQUIRE(count_parameters(*GPT(config, layer, layer + 1)) == counts[layer]);
  }
  REQUIRE_THROWS_AS(GPT(config, 2, 2), ds::Error);
  REQUIRE_THROWS_AS(GPT(config, 0, 6), ds::Error);
}

TEST_CASE("a tiny GPT overfits a fixed batch", "[models]") {
  torch::manual_seed(6);
  GPTConfig config = tiny_gpt();
  config.n_embd = 32;
  config.block_size = 16;
  GPT model(config);
  const at::Tensor inputs = random_tokens(4, 16, config.vocab_size);
  const at::Tensor targets = random_tokens(4, 16, config.vocab_size);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-2));
  double initial = 0.0, last = 0.0;
  for (int step = 0; step < 100; ++step) {
    optimizer.zero_grad();
    at::Tensor loss = ds::models::cross_entropy_loss(model->forward(inputs), targets);
    loss.backward();
    optimizer.step();
    (step == 0 ? initial : last) = loss.item<double>();
  }
  // Small initial weights give near-uniform predictions; memorizing 64 random targets takes the
  // loss far below that.
  REQUIRE(initial == Approx(std::log(config.vocab_size)).margin(0.3));
  REQUIRE(last < 0.1 * initial);
}

TEST_CASE("a small GPT learns the synthetic corpus within 100 steps", "[models]") {
  torch::manual_seed(7);
  GPTConfig config = tiny_gpt(1);
  config.n_embd = 32;
  config.block_size = 32;
  config.vocab_size = 64;
  GPT model(config);
  const ds::data::SyntheticSource source(config.vocab_size, config.block_size, 1);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-2));
  double recent = 0.0;
  for (int step = 0; step < 100; ++step) {
    const ds::data::Batch batch = source.batch(step, 0, 0, 1, 16);
    optimizer.zero_grad();
    at::Tensor loss = ds::models::cross_entropy_loss(model->forward(batch.inputs), batch.targets);
    loss.backward();
    optimizer.step();
    if (step >= 90) recent += loss.item<double>() / 10;
  }
  REQUIRE(recent < 0.7 * std::log(config.vocab_size));
}

TEST_CASE("GPT runs in bfloat16", "[models]") {
  torch::manual_seed(8);
  const GPTConfig config = tiny_gpt();
  GPT model(config);
  model->to(torch::kBFloat16);
  const at::Tensor logits = model->forward(random_tokens(2, 8, config.vocab_size));
  REQUIRE(logits.scalar_type() == torch::kBFloat16);
  at::Tensor loss = ds::models::cross_entropy_loss(logits, random_tokens(2, 8, config.vocab_size));
  REQUIRE(loss.scalar_type() == torch::kFloat);
  REQUIRE(std::isfinite(loss.item<float>()));
  loss.backward();
  REQUIRE(model->wte->weight.grad().scalar_type() == torch::kBFloat16);
}

TEST_CASE("GPT dropout acts in training only", "[models]") {
  torch::manual_seed(9);
  GPTConfig config = tiny_gpt();
  config.dropout = 0.5;
  GPT model(config);
  const at::Tensor tokens = random_tokens(2, 8, config.vocab_size);
  REQUIRE_FALSE(torch::equal(model->forward(tokens), model->forward(tokens)));
  model->eval();
  REQUIRE(torch::equal(model->forward(tokens), model->forward(tokens)));
}

namespace {

// Records every module that ds::zero::call announced.
class RecordingHooks : public ds::zero::ModuleHooks {
 public:
  void pre_forward(torch::nn::Module& module) override { called.insert(&module); }
  void post_forward(torch::nn::Module&, const std::vector<at::Tensor*>&) override {}
  std::set<const torch::nn::Module*> called;
};

// Every submodule that owns parameters must be called through ds::zero::call, or ZeRO stage 3
// would run it with its parameters still partitioned. wte's weight is also used directly by the
// head, which is why the model lists it as external.
void require_all_calls_hooked(const torch::nn::Module& model, const std::function<void()>& forward) {
  RecordingHooks hooks;
  {
    ds::zero::ActiveHooks active(&hooks);
    forward();
  }
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    if (item.value()->parameters(/*recurse=*/false).empty()) continue;
    INFO(item.key());
    REQUIRE(hooks.called.count(item.value().get()) == 1);
  }
}

}  // namespace

TEST_CASE("the built-in models call every parameter-owning submodule through ds::zero::call", "[models]") {
  torch::manual_seed(10);
  const GPTConfig gpt_config = tiny_gpt();
  GPT gpt(gpt_config);
  require_all_calls_hooked(*gpt, [&] { gpt->forward(random_tokens(2, 8, gpt_config.vocab_size)); });
  MLP mlp(MLPConfig{4, 8, 2, 3});
  require_all_calls_hooked(*mlp, [&] { mlp->forward(torch::randn({5, 4})); });
}

TEST_CASE("cross_entropy_loss is the mean negative log-likelihood of the targets", "[models]") {
  torch::manual_seed(11);
  const at::Tensor logits = torch::randn({2, 3, 5});
  const at::Tensor targets = torch::randint(5, {2, 3}, torch::kLong);
  double expected = 0.0;
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t t = 0; t < 3; ++t) {
      double sum_exp = 0.0;
      for (int64_t k = 0; k < 5; ++k) sum_exp += std::exp(logits[b][t][k].item<double>());
      expected += std::log(sum_exp) - logits[b][t][targets[b][t].item<int64_t>()].item<double>();
    }
  }
  expected /= 6;
  REQUIRE(ds::models::cross_entropy_loss(logits, targets).item<double>() == Approx(expected).epsilon(1e-5));
  REQUIRE(ds::models::cross_entropy_loss(logits.to(torch::kBFloat16), targets).scalar_type() == torch::kFloat);
}

TEST_CASE("gelu_tanh and its gradient equal torch's tanh GELU computed in double", "[models]") {
  torch::manual_seed(5);
  // Long enough to be split over threads, with an odd tail; far tails where the sigmoid saturates.
  at::Tensor x = torch::randn({100003}) * 4;
  x.narrow(0, 0, 6).copy_(torch::tensor({-100.0f, 100.0f, -9.0f, 0.0f, 1e-30f, -1e-30f}));
  x.requires_grad_(true);
  const at::Tensor weights = torch::randn({100003});
  const at::Tensor y = ds::models::gelu_tanh(x);
  const at::Tensor grad = torch::autograd::grad({(y * weights).sum()}, {x})[0];

  const at::Tensor xd = x.detach().to(torch::kDouble).requires_grad_(true);
  const at::Tensor yd = torch::gelu(xd, "tanh");
  const at::Tensor gradd = torch::autograd::grad({(yd * weights.to(torch::kDouble)).sum()}, {xd})[0];
  const auto max_error = [](const at::Tensor& ours, const at::Tensor& reference) {
    return ((ours.to(torch::kDouble) - reference).abs() / (reference.abs() + 1e-6)).max().item<double>();
  };
  CHECK(max_error(y, yd) < 2e-6);
  // The gradient cancels to zero near x = -0.75, so its relative error there is large in any fp32
  // formula: check the absolute error, and that it is no larger than torch's own fp32 GELU's.
  const at::Tensor xf = x.detach().clone().requires_grad_(true);
  const at::Tensor torch_grad = torch::autograd::grad({(torch::gelu(xf, "tanh") * weights).sum()}, {xf})[0];
  const double error = (grad.to(torch::kDouble) - gradd).abs().max().item<double>();
  CHECK(error < 1e-6);
  CHECK(error <= (torch_grad.to(torch::kDouble) - gradd).abs().max().item<double>());
  CHECK(y[1].item<float>() == 100.0f);
  CHECK(y[3].item<float>() == 0.0f);

  // Tensors the kernel does not take (other dtypes, strided views) get torch's own GELU.
  const at::Tensor bf16 = torch::randn({64}).to(torch::kBFloat16);
  CHECK(torch::equal(ds::models::gelu_tanh(bf16), torch::gelu(bf16, "tanh")));
  const at::Tensor strided = torch::randn({8, 8}).t();
  CHECK(torch::equal(ds::models::gelu_tanh(strided), torch::gelu(strided, "tanh")));
}

namespace {

// softmax(q k^T / sqrt(hs), masked to t' <= t) v per head, in double, from LibTorch's own ops.
at::Tensor reference_attention(const at::Tensor& qkv, int64_t n_head) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, hs = C / n_head;
  const std::vector<at::Tensor> parts = qkv.to(torch::kDouble).split(C, 2);
  const auto heads = [&](const at::Tensor& t) { return t.reshape({B, T, n_head, hs}).permute({0, 2, 1, 3}); };
  const at::Tensor scores = heads(parts[0]).matmul(heads(parts[1]).transpose(-2, -1)) / std::sqrt(double(hs));
  const at::Tensor mask = torch::ones({T, T}, torch::kBool).triu(1);
  const at::Tensor weights = scores.masked_fill(mask, -INFINITY).softmax(-1);
  return weights.matmul(heads(parts[2])).permute({0, 2, 1, 3}).reshape({B, T, C});
}

}  // namespace

TEST_CASE("causal_attention and its gradient equal LibTorch's masked softmax attention in double", "[models]") {
  torch::manual_seed(6);
  // Sequence lengths that are and are not multiples of the kernel's 6-row and 16-column tiles,
  // head sizes 16 and 64, one and three heads.
  for (const auto& [B, T, n_head, hs] : std::vector<std::array<int64_t, 4>>{
           {2, 1, 3, 16}, {2, 5, 3, 16}, {3, 37, 3, 16}, {1, 48, 1, 64}, {2, 128, 4, 64}}) {
    CAPTURE(B, T, n_head, hs);
    const int64_t C = n_head * hs;
    const at::Tensor qkv = (torch::randn({B, T, 3 * C}) * 2).requires_grad_(true);
    const at::Tensor weights = torch::randn({B, T, C});
    const at::Tensor y = ds::models::causal_attention(qkv, n_head, 0.0, true);
    const at::Tensor grad = torch::autograd::grad({(y * weights).sum()}, {qkv})[0];

    const at::Tensor qkvd = qkv.detach().to(torch::kDouble).requires_grad_(true);
    const at::Tensor yd = reference_attention(qkvd, n_head);
    const at::Tensor gradd = torch::autograd::grad({(yd * weights.to(torch::kDouble)).sum()}, {qkvd})[0];
    const auto relative_error = [](const at::Tensor& ours, const at::Tensor& reference) {
      return (ours.to(torch::kDouble) - reference).abs().max().item<double>() / reference.abs().max().item<double>();
    };
    CHECK(relative_error(y, yd) < 1e-5);
    CHECK(relative_error(grad, gradd) < 1e-5);
  }

  // Input the kernel does not take (bf16, a head size not a multiple of 16, dropout in training)
  // goes through tensor ops, which give the same attention.
  const at::Tensor odd = torch::randn({2, 9, 3 * 2 * 12});
  CHECK(torch::allclose(ds::models::causal_attention(odd, 2, 0.0, true).to(torch::kDouble),
                        reference_attention(odd, 2), 1e-5, 1e-6));
  const at::Tensor bf16 = torch::randn({2, 9, 3 * 32}).to(torch::kBFloat16);
  CHECK(torch::allclose(ds::models::causal_attention(bf16, 2, 0.0, true).to(torch::kDouble),
                        reference_attention(bf16, 2), 5e-2, 5e-2));
  const at::Tensor x = torch::randn({2, 9, 3 * 32});
  CHECK(torch::allclose(ds::models::causal_attention(x, 2, 0.5, false).to(torch::kDouble),
                        reference_attention(x, 2), 1e-5, 1e-6));
  CHECK(!torch::allclose(ds::models::causal_attention(x, 2, 0.5, true).to(torch::kDouble),
                         reference_attention(x, 2), 1e-5, 1e-6));
  CHECK_THROWS_AS(ds::models::causal_attention(x, 5, 0.0, true), ds::Error);
  CHECK_THROWS_AS(ds::models::causal_attention(x.view({18, 3 * 32}), 2, 0.0, true), ds::Error);
}

TEST_CASE("MLPConfig reads the dstrain.model block and names the bad key", "[models]") {
  const nlohmann::json good = {{"type", "mlp"}, {"input_dim", 4}, {"hidden_dim", 8}, {"n_layers", 2}, {"output_dim", 3}};
  const MLPConfig config = MLPConfig::from_json(good);
  REQUIRE(config.input_dim == 4);
  REQUIRE(config.hidden_dim == 8);
  REQUIRE(config.n_layers == 2);
  REQUIRE(config.output_dim == 3);
  nlohmann::json bad = good;
  bad["hidden_dim"] = 0;
  REQUIRE(error_key([&] { MLPConfig::from_json(bad); }) == "dstrain.model.hidden_dim");
  bad = good;
  bad["depth"] = 3;
  REQUIRE(error_key([&] { MLPConfig::from_json(bad); }) == "dstrain.model.depth");
}

TEST_CASE("MLP has the closed-form parameter count and learns a nonlinear classification", "[models]") {
  torch::manual_seed(12);
  const MLPConfig config{2, 32, 2, 2};
  MLP model(config);
  const int64_t I = config.input_dim, H = config.hidden_dim, O = config.output_dim;
  REQUIRE(count_parameters(*model) == (I * H + H) + (H * H + H) + (H * O + O));

  // XOR of the coordinates' signs: no linear model gets past 50%.
  const at::Tensor points = torch::rand({256, 2}) * 2 - 1;
  const at::Tensor labels = (points.select(1, 0) * points.select(1, 1) > 0).to(torch::kLong);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-2));
  for (int step = 0; step < 300; ++step) {
    optimizer.zero_grad();
    at::Tensor loss = ds::models::cross_entropy_loss(model->forward(points), labels);
    loss.backward();
    optimizer.step();
  }
  const at::Tensor predicted = model->forward(points).argmax(1);
  REQUIRE(predicted.eq(labels).to(torch::kFloat).mean().item<float>() > 0.9f);
}
