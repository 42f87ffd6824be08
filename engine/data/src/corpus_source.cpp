#include "dstrain/engine/data/corpus_source.hpp"

#include "dstrain/engine/data/split_mix.hpp"
#include "dstrain/runtime/error.hpp"

#include <string>

namespace ds::data {

CorpusSource::CorpusSource(std::vector<uint16_t> tokens, std::string origin, int64_t vocab_size,
                           int64_t block_size, uint64_t seed)
    : TokenSource(vocab_size, block_size), tokens_(std::move(tokens)), seed_(seed) {
  if (num_tokens() < block_size + 1) {
    throw Error("corpus of " + std::to_string(num_tokens()) + " tokens is shorter than block_size + 1 = " +
                std::to_string(block_size + 1))
        .with_path(origin);
  }
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (tokens_[i] >= vocab_size) {
      throw Error("token " + std::to_string(i) + " is " + std::to_string(tokens_[i]) +
                  ", not below the model's vocab_size " + std::to_string(vocab_size))
          .with_path(origin);
    }
  }
}

void CorpusSource::sample(int64_t step, int64_t index, int64_t* tokens) const {
  const int64_t length = block_size() + 1;
  SplitMix64 rng(sample_seed(seed_, step, index));
  const int64_t start = static_cast<int64_t>(rng.below(num_tokens() - length + 1));
  for (int64_t t = 0; t < length; ++t) tokens[t] = tokens_[start + t];
}

}  // namespace ds::data
