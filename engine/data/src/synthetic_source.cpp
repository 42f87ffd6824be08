#include "dstrain/engine/data/synthetic_source.hpp"

#include "dstrain/engine/data/split_mix.hpp"
#include "dstrain/runtime/error.hpp"

#include <algorithm>
#include <string>

namespace ds::data {

SyntheticSource::SyntheticSource(int64_t vocab_size, int64_t block_size, uint64_t seed)
    : TokenSource(vocab_size, block_size), seed_(seed) {
  if (vocab_size < kSuccessors) {
    throw Error("the synthetic corpus needs a vocabulary of at least " + std::to_string(kSuccessors) +
                " tokens, got " + std::to_string(vocab_size))
        .with_key("dstrain.model.vocab_size");
  }
  // The chain's own stream: sample streams come from sample_seed(seed, step, index) instead.
  SplitMix64 rng(seed);
  for (int64_t token = 0; token < vocab_size; ++token) {
    std::vector<int64_t> chosen;
    while (static_cast<int64_t>(chosen.size()) < kSuccessors) {
      const int64_t next = static_cast<int64_t>(rng.below(vocab_size));
      if (std::find(chosen.begin(), chosen.end(), next) == chosen.end()) chosen.push_back(next);
    }
    successors_.insert(successors_.end(), chosen.begin(), chosen.end());
  }
}

void SyntheticSource::sample(int64_t step, int64_t index, int64_t* tokens) const {
  SplitMix64 rng(sample_seed(seed_, step, index));
  tokens[0] = static_cast<int64_t>(rng.below(vocab_size()));
  for (int64_t t = 1; t <= block_size(); ++t) {
    tokens[t] = rng.uniform() < kNoise ? static_cast<int64_t>(rng.below(vocab_size()))
                                       : successors(tokens[t - 1])[rng.below(kSuccessors)];
  }
}

}  // namespace ds::data
