// SyntheticSource: the default corpus, so the quick start needs no download. Sequences follow a
// fixed random first-order Markov chain over the vocabulary: every token has kSuccessors distinct
// likely successors, drawn once from the seed; the next token is one of them, uniformly, except
// with probability kNoise, when it is uniform over the whole vocabulary. Every token's next-token
// distribution thus has the same entropy, about (1 - kNoise) ln kSuccessors + H(kNoise) +
// kNoise ln vocab_size nats (2.1 for vocab 256, against ln 256 = 5.5 for guessing): a model that
// learns the bigrams sees its loss fall well below ln(vocab_size).
#pragma once

#include "dstrain/engine/data/token_source.hpp"

#include <vector>

namespace ds::data {

class SyntheticSource : public TokenSource {
 public:
  static constexpr int64_t kSuccessors = 4;
  static constexpr double kNoise = 0.1;

  // Throws ds::Error (key dstrain.model.vocab_size) for a vocabulary smaller than kSuccessors.
  SyntheticSource(int64_t vocab_size, int64_t block_size, uint64_t seed);

  void sample(int64_t step, int64_t index, int64_t* tokens) const override;

  // The likely successors of `token`.
  const int64_t* successors(int64_t token) const { return &successors_[token * kSuccessors]; }

 private:
  std::vector<int64_t> successors_;  // [vocab_size, kSuccessors]
  uint64_t seed_;
};

}  // namespace ds::data
