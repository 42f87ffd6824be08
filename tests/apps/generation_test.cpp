// The GPT's KV-cache inference path against the plain model: logits, greedy tokens, seeded draws.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <vector>

#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/engine/models/gpt_inference.hpp"
#include "dstrain/runtime/error.hpp"

namespace {

ds::models::GPT small_gpt(double dropout = 0.0) {
  ds::models::GPTConfig config;
  config.n_layer = 3;
  config.n_head = 2;
  config.n_embd = 32;  // head size 16: the full forward takes the attention kernel
  config.block_size = 24;
  config.vocab_size = 40;
  config.dropout = dropout;
  torch::manual_seed(5);
  ds::models::GPT model(config);
  model->eval();
  return model;
}

// Greedy decoding the plain way: the whole sequence through the model for every new token.
std::vector<int64_t> greedy_by_recomputing(ds::models::GPT& model, std::vector<int64_t> tokens, int64_t n) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> generated;
  for (int64_t i = 0; i < n; ++i) {
    const at::Tensor logits = model->forward(torch::tensor(tokens, torch::kLong).unsqueeze(0));
    generated.push_back(logits[0][-1].argmax().item<int64_t>());
    tokens.push_back(generated.back());
  }
  return generated;
}

}  // namespace

TEST_CASE("forward_cached gives the full forward's logits, chunk by chunk") {
  ds::models::GPT model = small_gpt();
  torch::manual_seed(9);
  const at::Tensor tokens = torch::randint(40, {2, 20}, torch::kLong);
  torch::NoGradGuard no_grad;
  const at::Tensor full = model->forward(tokens);
  ds::models::KVCache cache;
  std::vector<at::Tensor> parts;
  for (auto [begin, end] : std::vector<std::pair<int64_t, int64_t>>{{0, 7}, {7, 8}, {8, 20}})
    parts.push_back(ds::models::forward_cached(*model, tokens.slice(1, begin, end), cache));
  CHECK(cache.length() == 20);
  CHECK(torch::allclose(torch::cat(parts, 1), full, 1e-4, 1e-5));
}

TEST_CASE("greedy generation with the KV cache equals recomputing the whole forward, token for token") {
  ds::models::GPT model = small_gpt();
  const std::vector<int64_t> prompt = {3, 17, 0, 39, 8};
  std::vector<int64_t> streamed;
  const std::vector<int64_t> cached = ds::models::generate(*model, prompt, 20, {1.0, 1}, 0,
                                                           [&](int64_t token) { streamed.push_back(token); });
  CHECK(cached == greedy_by_recomputing(model, prompt, 20));
  CHECK(streamed == cached);
  // Temperature 0 is greedy too.
  CHECK(ds::models::generate(*model, prompt, 20, {0.0, 0}, 123) == cached);
}

TEST_CASE("a seed gives one sequence; dropout is never applied") {
  ds::models::GPT model = small_gpt(0.5);
  model->train();  // the inference path must not depend on the module's mode
  const std::vector<int64_t> prompt = {1, 2, 3};
  const ds::models::Sampling sampling{1.0, 10};
  const std::vector<int64_t> a = ds::models::generate(*model, prompt, 18, sampling, 42);
  const std::vector<int64_t> b = ds::models::generate(*model, prompt, 18, sampling, 42);
  const std::vector<int64_t> c = ds::models::generate(*model, prompt, 18, sampling, 43);
  CHECK(a == b);
  CHECK(a != c);
  model->eval();
  CHECK(ds::models::generate(*model, prompt, 18, sampling, 42) == a);
}

TEST_CASE("generation past block_size is an error naming it") {
  ds::models::GPT model = small_gpt();
  const std::vector<int64_t> prompt(20, 1);
  CHECK(ds::models::generate(*model, prompt, 5, {1.0, 1}, 0).size() == 5);  // positions 0..23 fit
  try {
    ds::models::generate(*model, prompt, 6, {1.0, 1}, 0);
    FAIL("no error");
  } catch (const ds::Error& e) {
    CHECK(std::string(e.what()).find("block_size 24") != std::string::npos);
    CHECK(std::string(e.what()).find("dstrain.model.block_size") != std::string::npos);
  }
  CHECK_THROWS_AS(ds::models::generate(*model, {}, 1, {1.0, 1}, 0), ds::Error);
}
