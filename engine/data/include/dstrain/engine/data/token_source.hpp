// TokenSource: where the language-model trainer's batches come from.
//
// A batch holds inputs [B, T] and targets [B, T], int64, targets being inputs shifted by one
// token (T = block_size). The global batch of optimizer step s is a sequence of train_batch_size
// samples, sample i a pure function of (source, seed, s, i). Rank r of world_size, at gradient
// accumulation step a with micro-batch size m, takes samples
//     [(a * world_size + r) * m, (a * world_size + r) * m + m)
// so at each accumulation step the ranks together take one contiguous run, and over all ranks and
// accumulation steps they take the whole global batch exactly once, however it is split: -np 2 with
// micro-batch b reads what -np 1 with micro-batch 2b reads, and 4 accumulation steps of b what one
// of 4b reads.
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>

namespace ds::data {

struct Batch {
  at::Tensor inputs;   // [B, T] int64
  at::Tensor targets;  // [B, T] int64
};

class TokenSource {
 public:
  virtual ~TokenSource() = default;

  int64_t vocab_size() const { return vocab_size_; }
  int64_t block_size() const { return block_size_; }

  // This rank's micro-batch, laid out as described above.
  Batch batch(int64_t step, int64_t micro_step, int rank, int world_size, int64_t micro_batch_size) const;

  // Writes sample `index` of step `step`'s global batch: block_size + 1 tokens, each below
  // vocab_size.
  virtual void sample(int64_t step, int64_t index, int64_t* tokens) const = 0;

 protected:
  TokenSource(int64_t vocab_size, int64_t block_size) : vocab_size_(vocab_size), block_size_(block_size) {}

 private:
  int64_t vocab_size_;
  int64_t block_size_;
};

// The source that the "dstrain.data" block describes (null: all defaults):
//   "type": "synthetic" (default, see synthetic_source.hpp) | "tokens" (llm.c token file) |
//           "text" (a file's bytes as tokens; needs vocab_size >= 256)
//   "path": the file, required for "tokens" and "text"
//   "seed": non-negative integer, default 1337
//   "valid": held-out data of the same type (make_validation_source)
// Errors name the key, e.g. "dstrain.data.path", or the file.
std::unique_ptr<TokenSource> make_token_source(const nlohmann::json& block, int64_t vocab_size, int64_t block_size);

// The held-out source of the block's "valid" file (null when there is none): its "step" s is the
// s-th validation batch, the same windows at every evaluation, so that losses compare over time.
std::unique_ptr<TokenSource> make_validation_source(const nlohmann::json& block, int64_t vocab_size,
                                                    int64_t block_size);

}  // namespace ds::data
