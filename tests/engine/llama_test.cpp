// The built-in Llama against independent references: a plain LibTorch implementation written here
// from the equations (per-head loops, RoPE as a rotation of feature pairs, GQA by indexing the shared
// key/value head), and, where the tests' Python (tests/support/python.hpp) has torch, a Python transcription of Hugging Face's
// modeling_llama (rotate_half, repeat_kv; tests/apps/hf_llama_reference.py) run on the same weights. Then RoPE against its closed form,
// the fused RMSNorm and RoPE kernels against their tensor-op versions, pipeline slices against the
// whole model, the KV cache against the full forward, and the config's errors.
#include <catch2/catch.hpp>
#include <torch/torch.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "dstrain/engine/models/llama.hpp"
#include "dstrain/engine/models/llama_inference.hpp"
#include "dstrain/engine/models/loss.hpp"
#include "dstrain/engine/models/rms_norm.hpp"
#include "dstrain/engine/models/rotary.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/remove_tree.hpp"
#include "python.hpp"

using ds::models::Llama;
using ds::models::LlamaConfig;

namespace {

namespace fs = std::filesystem;
using Params = std::map<std::string, at::Tensor>;

LlamaConfig tiny_llama(int64_t kv_heads, int64_t hidden = 64, bool tied = false, int64_t layers = 2) {
  return LlamaConfig::from_json({{"type", "llama"},
                                 {"vocab_size", 50},
                                 {"hidden_size", hidden},
                                 {"intermediate_size", 96},
                                 {"num_hidden_layers", layers},
                                 {"num_attention_heads", 4},
                                 {"num_key_value_heads", kv_heads},
                                 {"max_position_embeddings", 16},
                                 {"rms_norm_eps", 1e-5},
                                 {"rope_theta", 500.0},
                                 {"tie_word_embeddings", tied}});
}

Params parameters_by_name(const torch::nn::Module& module) {
  Params result;
  for (const auto& item : module.named_parameters()) result[item.key()] = item.value();
  return result;
}

std::string error_key(const std::function<void()>& action) {
  try {
    action();
  } catch (const ds::Error& error) {
    return error.key().value_or("no key");
  }
  return "no error";
}

// |a - b| <= tolerance * max(1, max |b|), elementwise.
void require_close(const at::Tensor& actual, const at::Tensor& expected, double tolerance, const std::string& what) {
  INFO(what << ": max |difference| " << (actual - expected).abs().max().item<double>() << ", max |expected| "
            << expected.abs().max().item<double>());
  REQUIRE(actual.sizes() == expected.sizes());
  const double scale = std::max(1.0, expected.abs().max().item<double>());
  REQUIRE((actual - expected).abs().max().item<double>() <= tolerance * scale);
}

// ---- The reference: the Llama's equations in plain tensor ops, one head at a time. ----

at::Tensor reference_rms(const at::Tensor& x, const at::Tensor& w, double eps) {
  return w * x / torch::sqrt((x * x).mean(-1, true) + eps);
}

// x [B, T, n * D]: each head's feature pair (i, i + D/2) at position t rotated by t * theta^(-2i/D).
at::Tensor reference_rope(const at::Tensor& x, int64_t n, int64_t D, double theta) {
  const int64_t B = x.size(0), T = x.size(1), half = D / 2;
  at::Tensor cos = torch::empty({T, half}, torch::kDouble), sin = torch::empty({T, half}, torch::kDouble);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(t) * std::pow(theta, -2.0 * static_cast<double>(i) / D);
      cos[t][i] = std::cos(angle);
      sin[t][i] = std::sin(angle);
    }
  cos = cos.to(torch::kFloat).view({1, T, 1, half});
  sin = sin.to(torch::kFloat).view({1, T, 1, half});
  const at::Tensor h = x.view({B, T, n, D});
  const at::Tensor a = h.narrow(3, 0, half), b = h.narrow(3, half, half);
  return torch::cat({a * cos - b * sin, b * cos + a * sin}, 3).view({B, T, n * D});
}

at::Tensor reference_logits(const Params& p, const LlamaConfig& c, const at::Tensor& tokens) {
  const int64_t B = tokens.size(0), T = tokens.size(1), C = c.hidden_size, H = c.num_attention_heads,
                KV = c.num_key_value_heads, D = C / H;
  const at::Tensor mask = torch::ones({T, T}, torch::kBool).triu(1);
  at::Tensor x = p.at("model.embed_tokens.weight").index_select(0, tokens.flatten()).view({B, T, C});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    const at::Tensor h = reference_rms(x, p.at(pre + "input_layernorm.weight"), c.rms_norm_eps);
    const at::Tensor q = reference_rope(h.matmul(p.at(pre + "self_attn.q_proj.weight").t()), H, D, c.rope_theta);
    const at::Tensor k = reference_rope(h.matmul(p.at(pre + "self_attn.k_proj.weight").t()), KV, D, c.rope_theta);
    const at::Tensor v = h.matmul(p.at(pre + "self_attn.v_proj.weight").t());
    std::vector<at::Tensor> heads;
    for (int64_t head = 0; head < H; ++head) {
      const int64_t shared = head / (H / KV);
      const at::Tensor qh = q.narrow(2, head * D, D), kh = k.narrow(2, shared * D, D), vh = v.narrow(2, shared * D, D);
      const at::Tensor scores = qh.matmul(kh.transpose(1, 2)) / std::sqrt(static_cast<double>(D));
      heads.push_back(scores.masked_fill(mask, -INFINITY).softmax(-1).matmul(vh));
    }
    x = x + torch::cat(heads, 2).matmul(p.at(pre + "self_attn.o_proj.weight").t());
    const at::Tensor g = reference_rms(x, p.at(pre + "post_attention_layernorm.weight"), c.rms_norm_eps);
    const at::Tensor gate = g.matmul(p.at(pre + "mlp.gate_proj.weight").t());
    const at::Tensor up = g.matmul(p.at(pre + "mlp.up_proj.weight").t());
    x = x + (gate * torch::sigmoid(gate) * up).matmul(p.at(pre + "mlp.down_proj.weight").t());
  }
  const at::Tensor head = c.tie_word_embeddings ? p.at("model.embed_tokens.weight") : p.at("lm_head.weight");
  return reference_rms(x, p.at("model.norm.weight"), c.rms_norm_eps).matmul(head.t());
}

struct Gradients {
  at::Tensor logits;
  Params grads;
};

// The model's logits, and its loss's gradient for every parameter.
Gradients model_gradients(Llama& model, const at::Tensor& tokens, const at::Tensor& targets) {
  model->zero_grad();
  Gradients out;
  out.logits = model->forward(tokens);
  ds::models::cross_entropy_loss(out.logits, targets).backward();
  out.logits = out.logits.detach();
  for (const auto& [name, param] : parameters_by_name(*model)) out.grads[name] = param.grad().clone();
  return out;
}

Gradients reference_gradients(const Params& weights, const LlamaConfig& config, const at::Tensor& tokens,
                              const at::Tensor& targets) {
  Params leaves;
  for (const auto& [name, w] : weights) leaves[name] = w.detach().clone().requires_grad_(true);
  Gradients out;
  out.logits = reference_logits(leaves, config, tokens);
  const at::Tensor log_probs = out.logits.view({-1, config.vocab_size}).log_softmax(-1);
  (-log_probs.gather(1, targets.view({-1, 1})).mean()).backward();
  out.logits = out.logits.detach();
  for (const auto& [name, leaf] : leaves) out.grads[name] = leaf.grad();
  return out;
}

void require_same(const Gradients& actual, const Gradients& expected, double tolerance) {
  require_close(actual.logits, expected.logits, tolerance, "logits");
  REQUIRE(actual.grads.size() == expected.grads.size());
  for (const auto& [name, grad] : expected.grads) require_close(actual.grads.at(name), grad, tolerance, name);
}

// ---- The Python reference: HF's modeling_llama (tests/apps/hf_llama_reference.py, which the
// Hugging Face export's tests load exported weights into), run by the tests' Python if it has torch. ----

const fs::path kHfLlamaReference = fs::path(__FILE__).parent_path().parent_path() / "apps";

const char* kHfLlama = R"PY(
import json, sys
import torch
import torch.nn.functional as F

folder = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from hf_llama_reference import LlamaForCausalLM

manifest = json.load(open(folder + "/manifest.json"))
def load(name, shape, dtype=torch.float32):
    data = bytearray(open(folder + "/" + name + ".bin", "rb").read())
    return torch.frombuffer(data, dtype=dtype).reshape(shape).clone()
def save(name, tensor):
    open(folder + "/" + name + ".out", "wb").write(tensor.detach().contiguous().numpy().tobytes())

c = manifest["config"]
model = LlamaForCausalLM(c)
model.load_state_dict({name: load(name, shape) for name, shape in manifest["params"].items()}, strict=True)
tokens = load("tokens", manifest["tokens"], torch.int64)
targets = load("targets", manifest["tokens"], torch.int64)
logits = model(tokens)
F.cross_entropy(logits.view(-1, c["vocab_size"]), targets.view(-1)).backward()
save("logits", logits)
for name, param in model.named_parameters():
    save(name, param.grad)
)PY";

bool python_has_torch() { return std::system((ds::testing::python() + " -c 'import torch' > /dev/null 2>&1").c_str()) == 0; }

void write_raw(const fs::path& path, const at::Tensor& tensor) {
  const at::Tensor data = tensor.detach().contiguous();
  std::ofstream(path, std::ios::binary).write(static_cast<const char*>(data.data_ptr()), data.nbytes());
}

at::Tensor read_raw(const fs::path& path, at::IntArrayRef shape) {
  at::Tensor out = torch::empty(shape, torch::kFloat);
  std::ifstream in(path, std::ios::binary);
  in.read(static_cast<char*>(out.data_ptr()), out.nbytes());
  REQUIRE(in.gcount() == static_cast<std::streamsize>(out.nbytes()));
  return out;
}

Gradients python_gradients(const Params& weights, const LlamaConfig& c, const at::Tensor& tokens,
                           const at::Tensor& targets) {
  const fs::path folder = fs::temp_directory_path() / ("dstrain_llama_hf_" + std::to_string(::getpid()));
  ds::remove_tree(folder.string());
  fs::create_directories(folder);
  nlohmann::json manifest = {{"config",
                              {{"hidden_size", c.hidden_size},
                               {"num_attention_heads", c.num_attention_heads},
                               {"num_key_value_heads", c.num_key_value_heads},
                               {"num_hidden_layers", c.num_hidden_layers},
                               {"vocab_size", c.vocab_size},
                               {"rms_norm_eps", c.rms_norm_eps},
                               {"rope_theta", c.rope_theta},
                               {"intermediate_size", c.intermediate_size},
                               {"tie_word_embeddings", c.tie_word_embeddings}}},
                             {"tokens", tokens.sizes().vec()}};
  for (const auto& [name, w] : weights) {
    manifest["params"][name] = w.sizes().vec();
    write_raw(folder / (name + ".bin"), w);
  }
  write_raw(folder / "tokens.bin", tokens);
  write_raw(folder / "targets.bin", targets);
  std::ofstream(folder / "manifest.json") << manifest.dump();
  std::ofstream(folder / "hf_llama.py") << kHfLlama;
  const std::string command =
      ds::testing::python() + " " + (folder / "hf_llama.py").string() + " " + folder.string() + " " + kHfLlamaReference.string();
  REQUIRE(std::system(command.c_str()) == 0);
  Gradients out;
  out.logits = read_raw(folder / "logits.out", {tokens.size(0), tokens.size(1), c.vocab_size});
  for (const auto& [name, w] : weights) out.grads[name] = read_raw(folder / (name + ".out"), w.sizes());
  ds::remove_tree(folder.string());
  return out;
}

}  // namespace

TEST_CASE("the Llama's parameters are HF LlamaForCausalLM's state dict", "[llama]") {
  torch::manual_seed(1);
  Llama model(tiny_llama(2));
  std::vector<std::string> expected = {"model.embed_tokens.weight"};
  for (const std::string layer : {"0", "1"})
    for (const std::string name : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                   "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "input_layernorm",
                                   "post_attention_layernorm"})
      expected.push_back("model.layers." + layer + "." + name + ".weight");
  expected.push_back("model.norm.weight");
  expected.push_back("lm_head.weight");
  std::vector<std::string> names;
  for (const auto& item : model->named_parameters()) names.push_back(item.key());
  REQUIRE(names == expected);
  const Params p = parameters_by_name(*model);
  CHECK(p.at("model.layers.0.self_attn.q_proj.weight").sizes() == at::IntArrayRef{64, 64});
  CHECK(p.at("model.layers.0.self_attn.k_proj.weight").sizes() == at::IntArrayRef{32, 64});  // 2 kv heads of 16
  CHECK(p.at("model.layers.0.mlp.gate_proj.weight").sizes() == at::IntArrayRef{96, 64});
  CHECK(p.at("model.layers.0.mlp.down_proj.weight").sizes() == at::IntArrayRef{64, 96});
  CHECK(p.at("lm_head.weight").sizes() == at::IntArrayRef{50, 64});
  CHECK(torch::equal(p.at("model.norm.weight"), torch::ones({64})));
  int64_t total = 0;
  std::vector<int64_t> numels;
  for (const at::Tensor& w : model->parameters()) numels.push_back(w.numel());
  for (const auto& [name, w] : p) total += w.numel();
  CHECK(ds::models::parameter_numels(model->config()) == numels);
  CHECK(ds::models::num_parameters(model->config()) == total);

  Llama tied(tiny_llama(2, 64, /*tied=*/true));
  const Params t = parameters_by_name(*tied);
  CHECK(t.count("lm_head.weight") == 0);
  CHECK(ds::models::num_parameters(tied->config()) == total - 50 * 64);
  numels.pop_back();
  CHECK(ds::models::parameter_numels(tied->config()) == numels);
}

TEST_CASE("the Llama's logits and gradients equal the equations in plain LibTorch", "[llama]") {
  // Head size 16 runs the fused attention kernel, 8 the tensor-op attention; kv heads 1 (multi-query),
  // 2 (grouped) and 4 (= heads, multi-head).
  for (const auto& [kv_heads, hidden, tied] : {std::tuple{1, 64, false}, std::tuple{2, 64, false},
                                               std::tuple{4, 64, false}, std::tuple{2, 32, true}}) {
    INFO("num_key_value_heads " << kv_heads << ", hidden " << hidden << ", tied " << tied);
    torch::manual_seed(3);
    const LlamaConfig config = tiny_llama(kv_heads, hidden, tied);
    Llama model(config);
    // Random norms, so that their weights matter to the comparison.
    {
      torch::NoGradGuard no_grad;
      for (auto& [name, w] : parameters_by_name(*model))
        if (name.find("norm") != std::string::npos) w.uniform_(0.5, 1.5);
    }
    const at::Tensor tokens = torch::randint(config.vocab_size, {3, 12}, torch::kLong);
    const at::Tensor targets = torch::randint(config.vocab_size, {3, 12}, torch::kLong);
    const Gradients actual = model_gradients(model, tokens, targets);
    require_same(actual, reference_gradients(parameters_by_name(*model), config, tokens, targets), 1e-5);

    if (!python_has_torch()) {
      WARN(ds::testing::python() << " has no torch: the HF transcription is skipped");
      continue;
    }
    require_same(actual, python_gradients(parameters_by_name(*model), config, tokens, targets), 1e-5);
  }
}

TEST_CASE("RoPE rotates each feature pair by position times theta^(-2i/D)", "[llama][kernels]") {
  constexpr int64_t D = 8, heads = 2, T = 14;
  constexpr double theta = 10000.0;
  const ds::models::RotaryTables tables = ds::models::rotary_tables(D, theta, T);
  torch::manual_seed(4);
  const at::Tensor x = torch::randn({1, T, heads * D});
  const at::Tensor by_ops = ds::models::apply_rotary_ops(x, heads, tables);
  const at::Tensor in_place = ds::models::apply_rotary_(x.clone(), heads, tables);
  for (const int64_t p : {0, 1, 5, 13})
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < D / 2; ++i) {
        const double angle = p * std::pow(theta, -2.0 * i / D);
        INFO("position " << p << ", head " << h << ", pair " << i);
        CHECK(tables.cos[p][i].item<double>() == Approx(std::cos(angle)).margin(1e-7));
        CHECK(tables.sin[p][i + D / 2].item<double>() == Approx(std::sin(angle)).margin(1e-7));
        const double a = x[0][p][h * D + i].item<double>(), b = x[0][p][h * D + i + D / 2].item<double>();
        const double first = a * std::cos(angle) - b * std::sin(angle), second = b * std::cos(angle) + a * std::sin(angle);
        for (const at::Tensor& y : {by_ops, in_place}) {
          CHECK(y[0][p][h * D + i].item<double>() == Approx(first).margin(1e-6));
          CHECK(y[0][p][h * D + i + D / 2].item<double>() == Approx(second).margin(1e-6));
        }
      }
}

TEST_CASE("the fused RMSNorm and in-place RoPE equal their tensor-op versions", "[llama][kernels]") {
  torch::manual_seed(5);
  SECTION("RMSNorm, forward and backward") {
    for (const int64_t width : {40, 64, 7}) {
      INFO("width " << width);
      const at::Tensor x = torch::randn({3, 70, width});
      const at::Tensor w = torch::rand({width}) + 0.5;
      const at::Tensor dy = torch::randn({3, 70, width});
      std::vector<at::Tensor> grads[2];
      at::Tensor outputs[2];
      for (int fused = 0; fused < 2; ++fused) {
        const at::Tensor xi = x.clone().requires_grad_(true), wi = w.clone().requires_grad_(true);
        outputs[fused] = fused ? ds::models::rms_norm(xi, wi, 1e-6) : ds::models::rms_norm_ops(xi, wi, 1e-6);
        outputs[fused].backward(dy);
        grads[fused] = {xi.grad(), wi.grad()};
      }
      require_close(outputs[1], outputs[0], 1e-5, "y");
      require_close(grads[1][0], grads[0][0], 1e-5, "dx");
      require_close(grads[1][1], grads[0][1], 1e-5, "dweight");
    }
  }
  SECTION("RoPE, forward and backward") {
    constexpr int64_t heads = 3, D = 16, T = 11;
    const ds::models::RotaryTables tables = ds::models::rotary_tables(D, 10000.0, 32).rows(0, T);
    const at::Tensor x = torch::randn({2, T, heads * D});
    const at::Tensor w = torch::randn({heads * D, heads * D});
    const at::Tensor dy = torch::randn({2, T, heads * D});
    at::Tensor outputs[2], grads[2];
    for (int fused = 0; fused < 2; ++fused) {
      const at::Tensor xi = x.clone().requires_grad_(true);
      const at::Tensor projected = xi.matmul(w);  // in place on a non-leaf, as on a projection's output
      outputs[fused] = fused ? ds::models::apply_rotary_(projected, heads, tables)
                             : ds::models::apply_rotary_ops(projected, heads, tables);
      outputs[fused].backward(dy);
      grads[fused] = xi.grad();
    }
    require_close(outputs[1], outputs[0], 1e-5, "y");
    require_close(grads[1], grads[0], 1e-5, "dx");
  }
}

TEST_CASE("Llama pipeline slices compose to the whole model", "[llama]") {
  for (const bool tied : {false, true}) {
    INFO("tied " << tied);
    const LlamaConfig config = tiny_llama(2, 64, tied, /*layers=*/3);  // 5 pipeline layers
    torch::manual_seed(6);
    Llama whole(config);
    const Params whole_params = parameters_by_name(*whole);
    const at::Tensor tokens = torch::randint(config.vocab_size, {2, 10}, torch::kLong);
    at::Tensor x = tokens;
    for (const auto& [first, last] : {std::pair{0, 2}, std::pair{2, 4}, std::pair{4, 5}}) {
      torch::manual_seed(6);
      Llama slice(config, first, last);
      for (const auto& [name, w] : parameters_by_name(*slice)) {
        INFO("slice [" << first << ", " << last << ") " << name);
        REQUIRE(whole_params.count(name) == 1);
        REQUIRE(torch::equal(w, whole_params.at(name)));
      }
      CHECK(slice->tied_weight().defined() == (tied && (first == 0 || last == 5)));
      x = slice->forward(x);
    }
    require_close(x, whole->forward(tokens), 1e-6, "composed logits");
  }
  CHECK_THROWS_AS(Llama(tiny_llama(2), 2, 2), ds::Error);
  CHECK_THROWS_AS(Llama(tiny_llama(2), 0, 5), ds::Error);  // 2 layers: 4 pipeline layers
}

TEST_CASE("Llama activation checkpointing gives the same gradients", "[llama]") {
  LlamaConfig config = tiny_llama(2);
  torch::manual_seed(7);
  Llama plain(config);
  config.activation_checkpoint_interval = 1;
  torch::manual_seed(7);
  Llama checkpointed(config);
  const at::Tensor tokens = torch::randint(config.vocab_size, {2, 12}, torch::kLong);
  const at::Tensor targets = torch::randint(config.vocab_size, {2, 12}, torch::kLong);
  require_same(model_gradients(checkpointed, tokens, targets), model_gradients(plain, tokens, targets), 1e-6);
}

TEST_CASE("the Llama's KV cache gives the full forward's logits", "[llama]") {
  torch::manual_seed(8);
  Llama model(tiny_llama(1));
  model->eval();
  const at::Tensor tokens = torch::randint(50, {2, 12}, torch::kLong);
  const at::Tensor full = model->forward(tokens).detach();
  ds::models::KVCache cache;
  for (const auto& [first, count] : {std::pair{0, 5}, std::pair{5, 1}, std::pair{6, 6}}) {
    INFO("positions " << first << " .. " << first + count - 1);
    const at::Tensor logits = ds::models::forward_cached(*model, tokens.narrow(1, first, count), cache);
    require_close(logits, full.narrow(1, first, count), 1e-5, "cached logits");
  }
  CHECK(cache.length() == 12);
  CHECK(cache.keys[0].size(1) == 1);  // one key/value head cached, not four
  CHECK(error_key([&] { ds::models::forward_cached(*model, tokens.narrow(1, 0, 5), cache); }) ==
        "dstrain.model.max_position_embeddings");

  // Greedy generation with the cache picks what recomputing the whole sequence picks.
  const std::vector<int64_t> prompt = {3, 1, 4};
  const std::vector<int64_t> generated = ds::models::generate(*model, prompt, 8, {0.0, 0}, 1);
  std::vector<int64_t> sequence = prompt;
  torch::NoGradGuard no_grad;
  for (int n = 0; n < 8; ++n) {
    const at::Tensor logits = model->forward(torch::tensor(sequence, torch::kLong).unsqueeze(0));
    sequence.push_back(logits[0][-1].argmax().item<int64_t>());
  }
  CHECK(generated == std::vector<int64_t>(sequence.begin() + 3, sequence.end()));
}

TEST_CASE("LlamaConfig reads HF's key names and names the key it refuses", "[llama]") {
  const nlohmann::json base = {{"type", "llama"},        {"vocab_size", 32},         {"hidden_size", 64},
                               {"intermediate_size", 128}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
                               {"max_position_embeddings", 16}};
  const LlamaConfig defaults = LlamaConfig::from_json(base);
  CHECK(defaults.num_key_value_heads == 4);
  CHECK(defaults.rms_norm_eps == 1e-6);
  CHECK(defaults.rope_theta == 10000.0);
  CHECK_FALSE(defaults.tie_word_embeddings);
  CHECK(defaults.num_layers() == 4);
  auto with = [&](const std::string& key, const nlohmann::json& value) {
    nlohmann::json block = base;
    if (value.is_null()) block.erase(key);
    else block[key] = value;
    return error_key([&] { LlamaConfig::from_json(block); });
  };
  CHECK(with("hidden_size", nullptr) == "dstrain.model.hidden_size");
  CHECK(with("num_key_value_heads", 3) == "dstrain.model.num_key_value_heads");
  CHECK(with("num_key_value_heads", 0) == "dstrain.model.num_key_value_heads");
  CHECK(with("num_attention_heads", 3) == "dstrain.model.num_attention_heads");  // 64 / 3
  CHECK(with("num_attention_heads", 64) == "dstrain.model.num_attention_heads");  // head size 1: no pairs
  CHECK(with("rms_norm_eps", -1) == "dstrain.model.rms_norm_eps");
  CHECK(with("rope_theta", "big") == "dstrain.model.rope_theta");
  CHECK(with("num_hidden_layers", 1 << 20) == "dstrain.model.num_hidden_layers");
  CHECK(with("n_layer", 2) == "dstrain.model.n_layer");  // a GPT key
  CHECK(with("tie_word_embeddings", 1) == "dstrain.model.tie_word_embeddings");
  CHECK(with("rope_theta", 500000.0) == "no error");
}
