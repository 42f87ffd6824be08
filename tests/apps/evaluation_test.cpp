// validation_loss against a plain LibTorch computation: every sample's window read from the
// source, the untouched model's logits, the cross entropy as -log_softmax at the target in double.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "dstrain/engine/data/corpus_source.hpp"
#include "dstrain/engine/models/gpt.hpp"
#include "evaluation.hpp"

namespace {

ds::models::GPTConfig small_gpt() {
  ds::models::GPTConfig config;
  config.n_layer = 2;
  config.n_head = 2;
  config.n_embd = 32;
  config.block_size = 16;
  config.vocab_size = 50;
  config.dropout = 0.25;  // in force only in training mode: evaluation must switch it off
  return config;
}

ds::data::CorpusSource corpus(int64_t vocab, int64_t block_size) {
  torch::manual_seed(7);
  const at::Tensor drawn = torch::randint(vocab, {2000}, torch::kLong);
  std::vector<uint16_t> tokens(2000);
  for (int64_t i = 0; i < 2000; ++i) tokens[i] = static_cast<uint16_t>(drawn[i].item<int64_t>());
  return ds::data::CorpusSource(std::move(tokens), "drawn", vocab, block_size, 11);
}

// Mean over batches 0 .. iters - 1 of the mean over samples [first, first + count) of the per-token
// cross entropy, computed sample by sample.
double reference_loss(ds::models::GPT& model, const ds::data::TokenSource& source, int64_t iters, int64_t first,
                      int64_t count) {
  torch::NoGradGuard no_grad;
  model->eval();
  const int64_t T = source.block_size();
  double total = 0;
  for (int64_t i = 0; i < iters; ++i) {
    double batch = 0;
    for (int64_t j = first; j < first + count; ++j) {
      std::vector<int64_t> window(T + 1);
      source.sample(i, j, window.data());
      const at::Tensor tokens = torch::tensor(window, torch::kLong);
      const at::Tensor logits = model->forward(tokens.slice(0, 0, T).unsqueeze(0)).squeeze(0).to(torch::kDouble);
      const at::Tensor picked = logits.log_softmax(-1).gather(1, tokens.slice(0, 1, T + 1).unsqueeze(1));
      batch += -picked.mean().item<double>();
    }
    total += batch / count;
  }
  model->train();
  return total / iters;
}

}  // namespace

TEST_CASE("validation_loss is the held-out cross entropy in eval mode, without gradients, split over ranks") {
  const ds::models::GPTConfig config = small_gpt();
  torch::manual_seed(3);
  ds::models::GPT model(config);
  const ds::data::CorpusSource source = corpus(config.vocab_size, config.block_size);
  auto forward = [&](const at::Tensor& x) { return model->forward(x); };
  const int64_t iters = 3, micro = 2;

  const double whole = ds::app::validation_loss(forward, *model, source, iters, 0, 1, 2 * micro, torch::kCPU);
  CHECK(whole == Approx(reference_loss(model, source, iters, 0, 2 * micro)).epsilon(1e-5));
  CHECK(model->is_training());
  for (const at::Tensor& p : model->parameters()) CHECK_FALSE(p.grad().defined());

  // Two ranks of `micro` each read the same samples as one of 2 * micro: their mean is the whole's.
  const double rank0 = ds::app::validation_loss(forward, *model, source, iters, 0, 2, micro, torch::kCPU);
  const double rank1 = ds::app::validation_loss(forward, *model, source, iters, 1, 2, micro, torch::kCPU);
  CHECK(rank0 == Approx(reference_loss(model, source, iters, 0, micro)).epsilon(1e-5));
  CHECK(rank1 == Approx(reference_loss(model, source, iters, micro, micro)).epsilon(1e-5));
  CHECK((rank0 + rank1) / 2 == Approx(whole).epsilon(1e-6));
  CHECK(rank0 != Approx(rank1).epsilon(1e-3));  // the ranks did read different samples
}
