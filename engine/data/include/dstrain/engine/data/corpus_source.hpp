// CorpusSource: samples cut from one long token sequence (an llm.c token file, or a text file's
// bytes). Sample i of step s is the window of block_size + 1 consecutive tokens starting at an
// offset drawn from (seed, s, i), uniform over every window that fits.
#pragma once

#include "dstrain/engine/data/token_source.hpp"

#include <string>
#include <vector>

namespace ds::data {

class CorpusSource : public TokenSource {
 public:
  // `origin` names the tokens' file in errors. Throws ds::Error if the corpus is shorter than
  // block_size + 1 tokens or holds a token not below vocab_size.
  CorpusSource(std::vector<uint16_t> tokens, std::string origin, int64_t vocab_size, int64_t block_size,
               uint64_t seed);

  void sample(int64_t step, int64_t index, int64_t* tokens) const override;

  int64_t num_tokens() const { return static_cast<int64_t>(tokens_.size()); }

 private:
  std::vector<uint16_t> tokens_;
  uint64_t seed_;
};

}  // namespace ds::data
