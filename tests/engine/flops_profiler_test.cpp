// The flops profiler: the GPT's and the Llama's per-module FLOPs and parameters against the closed
// form of two shapes each (one Llama with grouped-query attention and tied embeddings), a user
// module's unknown type named as not counted, the printed profile honouring module_depth,
// top_modules, detailed and output_file, the settings block, and a measured model-FLOPs
// utilisation inside (0, 1].
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <unistd.h>

#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/engine/models/llama.hpp"
#include "dstrain/engine/models/loss.hpp"
#include "dstrain/engine/profiler/flops_profiler_settings.hpp"
#include "dstrain/engine/profiler/gemm_peak.hpp"
#include "dstrain/engine/profiler/model_profile_report.hpp"
#include "dstrain/engine/profiler/module_profile.hpp"
#include "dstrain/runtime/error.hpp"
#include "flops_closed_form.hpp"

using ds::models::GPT;
using ds::models::GPTConfig;
using ds::models::Llama;
using ds::models::LlamaConfig;
using ds::test::closed_form_flops;
using ds::test::closed_form_params;
using ds::test::llama_closed_form_flops;
using ds::test::llama_closed_form_params;
using ds::test::llama_shape;
using ds::test::shape;
using ds::profiler::FlopsProfilerSettings;
using ds::profiler::ModuleProfile;

namespace {

const ModuleProfile& child(const ModuleProfile& parent, const std::string& name) {
  for (const ModuleProfile& each : parent.children)
    if (each.name == name) return each;
  FAIL("no child " << name << " under " << parent.type);
  throw;
}

std::string temp_path(const std::string& name) {
  return "/tmp/dstrain_flops_" + std::to_string(::getpid()) + "_" + name;
}

}  // namespace

TEST_CASE("GPT FLOPs and params per module match the closed form for two shapes", "[profiler]") {
  for (const GPTConfig& config : {shape(2, 2, 16, 8, 50, true), shape(3, 4, 32, 16, 64, false)}) {
    CAPTURE(config.n_layer, config.n_embd, config.bias);
    torch::manual_seed(1);
    GPT model(config);
    for (int64_t T : {config.block_size, config.block_size / 2}) {
      const int64_t B = 3;
      const ModuleProfile profile = ds::profiler::profile_module(*model, B, T);
      CHECK(profile.type == "GPT");
      CHECK(profile.params == static_cast<int64_t>(closed_form_params(config)));
      int64_t torch_count = 0;
      for (const at::Tensor& p : model->parameters()) torch_count += p.numel();
      CHECK(profile.params == torch_count);
      CHECK(profile.flops == Approx(closed_form_flops(config, B, T)).epsilon(1e-12));
      CHECK(profile.macs() == Approx(profile.flops / 2));

      const double C = config.n_embd, tokens = double(B) * T;
      const ModuleProfile& block = child(child(profile, "h"), "0");
      CHECK(block.type == "Block");
      const ModuleProfile& attention = child(block, "attn");
      CHECK(child(attention, "c_attn").flops == Approx(2 * tokens * C * 3 * C));
      CHECK(attention.flops == Approx(2 * tokens * 4 * C * C + B * 4.0 * T * T * C));
      CHECK(child(block, "mlp").flops == Approx(2 * tokens * 8 * C * C + tokens * 4 * C));
      CHECK(child(profile, "wte").flops == 0);
      CHECK(child(profile, "wte").params == config.vocab_size * config.n_embd);
    }
  }
}

TEST_CASE("Llama FLOPs and params per module match the closed form for two shapes, one with GQA", "[profiler]") {
  for (const LlamaConfig& config : {llama_shape(2, 4, 4, 32, 80, 50, false), llama_shape(3, 8, 2, 64, 160, 64, true)}) {
    CAPTURE(config.num_hidden_layers, config.num_key_value_heads, config.tie_word_embeddings);
    torch::manual_seed(1);
    Llama model(config);
    const int64_t B = 2, T = 12;
    const ModuleProfile profile = ds::profiler::profile_module(*model, B, T);
    CHECK(profile.type == "Llama");
    CHECK(profile.params == static_cast<int64_t>(llama_closed_form_params(config)));
    CHECK(profile.params == ds::models::num_parameters(config));
    int64_t torch_count = 0;
    for (const at::Tensor& p : model->parameters()) torch_count += p.numel();
    CHECK(profile.params == torch_count);
    CHECK(profile.flops == Approx(llama_closed_form_flops(config, B, T)).epsilon(1e-12));
    CHECK(ds::profiler::uncounted_modules(profile).empty());

    const double C = config.hidden_size, I = config.intermediate_size, tokens = double(B) * T;
    const double kv = config.num_key_value_heads * (C / config.num_attention_heads);
    const ModuleProfile& layer = child(child(child(profile, "model"), "layers"), "0");
    CHECK(layer.type == "LlamaDecoderLayer");
    const ModuleProfile& attention = child(layer, "self_attn");
    CHECK(child(attention, "k_proj").flops == Approx(2 * tokens * C * kv));
    CHECK(child(attention, "k_proj").params == C * kv);
    CHECK(attention.flops == Approx(2 * tokens * (2 * C * C + 2 * C * kv) + B * 4.0 * T * T * C + 3 * tokens * (C + kv)));
    CHECK(child(layer, "mlp").flops == Approx(2 * tokens * 3 * C * I + 2 * tokens * I));
    CHECK(child(layer, "input_layernorm").flops == Approx(4 * tokens * C));
    CHECK(child(child(profile, "model"), "embed_tokens").flops == 0);
  }
}

TEST_CASE("a user module's Linears and LayerNorms count by shape; a type with unknown FLOPs is named", "[profiler]") {
  struct ScaleImpl : torch::nn::Module {
    ScaleImpl() : gain(register_parameter("gain", torch::ones({6}))) {}
    at::Tensor forward(const at::Tensor& x) { return x * gain; }
    at::Tensor gain;
  };
  torch::nn::Sequential model(torch::nn::Linear(6, 10), torch::nn::LayerNorm(torch::nn::LayerNormOptions({10})),
                              torch::nn::Tanh(), torch::nn::Linear(torch::nn::LinearOptions(10, 6).bias(false)));
  model->push_back("scale", std::make_shared<ScaleImpl>());
  const ModuleProfile profile = ds::profiler::profile_module(*model, 4, 3);
  const double rows = 4 * 3;
  CHECK(profile.flops == Approx(rows * (2 * 6 * 10 + 5 * 10 + 2 * 10 * 6)));
  CHECK(profile.params == (6 * 10 + 10) + 2 * 10 + 10 * 6 + 6);
  const auto uncounted = ds::profiler::uncounted_modules(profile);
  REQUIRE(uncounted.size() == 1);
  CHECK(uncounted[0].rfind("scale (", 0) == 0);
  ds::profiler::StepProfile step;
  const std::string text = ds::profiler::format_model_profile(profile, step, FlopsProfilerSettings());
  CHECK(text.find("FLOPs not counted (params only):") != std::string::npos);
  CHECK(text.find("(its own FLOPs not counted)") != std::string::npos);
}

TEST_CASE("the model profile honours module_depth, top_modules, detailed and output_file", "[profiler]") {
  const GPTConfig config = shape(2, 2, 16, 8, 50, true);
  torch::manual_seed(1);
  GPT model(config);
  const ModuleProfile profile = ds::profiler::profile_module(*model, 2, 8);
  ds::profiler::StepProfile step;
  step.step = 2;
  step.micro_batch = 2;
  step.forward_seconds = 0.01;
  step.backward_seconds = 0.02;
  step.step_seconds = 0.005;
  step.iteration_seconds = 0.04;
  step.peak_flops = 1e11;

  FlopsProfilerSettings settings;
  settings.module_depth = 1;
  settings.top_modules = 2;
  std::string text = ds::profiler::format_model_profile(profile, step, settings);
  CHECK(text.find("Profile Summary at step 2") != std::string::npos);
  CHECK(text.find("(h): ModuleDict(") != std::string::npos);
  CHECK(text.find("(attn)") == std::string::npos);  // depth 3, below module_depth
  CHECK(text.find("depth 1:") != std::string::npos);
  CHECK(text.find("depth 2:") == std::string::npos);
  // Depth 1 holds wte, wpe, h and ln_f: by params the blocks (ModuleDict), then both embeddings
  // summed; by MACs the blocks, then ln_f (5·C·16 tokens / 2; embeddings cost none).
  CHECK(text.find("params      - {'ModuleDict': '6.56 K', 'Embedding': '928.00'}") != std::string::npos);
  CHECK(text.find("MACs        - {'ModuleDict': ") != std::string::npos);
  CHECK(text.find("'LayerNorm': '640.00 MACs'}") != std::string::npos);

  settings.module_depth = -1;
  text = ds::profiler::format_model_profile(profile, step, settings);
  CHECK(text.find("(c_attn): Linear(") != std::string::npos);
  CHECK(text.find("depth 4:") != std::string::npos);

  settings.detailed = false;
  settings.output_file = temp_path("profile.txt");
  text = ds::profiler::format_model_profile(profile, step, settings);
  CHECK(text.find("Detailed Profile") == std::string::npos);
  ds::profiler::emit_model_profile(text, settings);
  std::ifstream in(settings.output_file);
  const std::string written((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(written == text + "\n");
  std::remove(settings.output_file.c_str());

  settings.output_file = "/nonexistent-dir/profile.txt";
  CHECK_THROWS_WITH(ds::profiler::emit_model_profile(text, settings), Catch::Contains("/nonexistent-dir/profile.txt"));
}

TEST_CASE("flops_profiler settings read DeepSpeed's block and name bad keys", "[profiler]") {
  const auto settings = FlopsProfilerSettings::from_json({{"enabled", true}, {"profile_step", 3}, {"module_depth", 2},
                                                          {"top_modules", 4}, {"detailed", false},
                                                          {"output_file", nullptr}});
  CHECK(settings.enabled);
  CHECK(settings.profile_step == 3);
  CHECK(settings.module_depth == 2);
  CHECK(settings.top_modules == 4);
  CHECK_FALSE(settings.detailed);
  CHECK(settings.output_file.empty());
  CHECK_FALSE(FlopsProfilerSettings::from_json(nullptr).enabled);
  CHECK_THROWS_WITH(FlopsProfilerSettings::from_json({{"module_depth", -2}}),
                    Catch::Contains("flops_profiler.module_depth"));
  CHECK_THROWS_WITH(FlopsProfilerSettings::from_json({{"top_modules", 0}}), Catch::Contains("flops_profiler.top_modules"));
  CHECK_THROWS_WITH(FlopsProfilerSettings::from_json({{"profile_stp", 1}}), Catch::Contains("flops_profiler.profile_stp"));
}

TEST_CASE("model FLOPs utilisation of a GPT training step against the GEMM peak lies in (0, 1]", "[profiler]") {
  const double peak = ds::profiler::measure_gemm_peak_flops();
  REQUIRE(peak > 0);
  const GPTConfig config = shape(2, 4, 128, 64, 256, true);
  torch::manual_seed(2);
  GPT model(config);
  const int64_t B = 8, T = config.block_size;
  const at::Tensor tokens = torch::randint(config.vocab_size, {B, T});
  const double model_flops = 3 * ds::profiler::profile_module(*model, B, T).flops;
  auto step = [&] {
    at::Tensor logits = model->forward(tokens.narrow(1, 0, T));
    ds::models::cross_entropy_loss(logits, tokens).backward();
  };
  step();  // warm-up
  const auto start = std::chrono::steady_clock::now();
  step();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double mfu = model_flops / seconds / peak;
  CAPTURE(peak, seconds, mfu);
  CHECK(mfu > 0);
  CHECK(mfu <= 1);
}
