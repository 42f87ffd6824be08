// Gpt2Bpe: GPT-2's byte-level BPE (OpenAI's encoder.py), read from vocab.json (token -> id) and
// merges.txt (one merge "a b" per line, earlier lines first; an optional "#version" line on top).
// A document is split by GPT-2's pre-tokenization regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// each piece's bytes become single-byte symbols, and the adjacent pair with the earliest merge is
// joined, everywhere in the piece, until no pair has a merge; each symbol is then looked up in
// the vocabulary. "<|endoftext|>" in vocab.json is the document separator.
#pragma once

#include "dstrain/engine/tokenizer/tokenizer.hpp"

#include <unordered_map>

namespace ds::tokenizer {

class Gpt2Bpe : public Tokenizer {
 public:
  // Throws ds::Error naming the file and, for merges.txt, the line.
  Gpt2Bpe(const std::string& vocab_path, const std::string& merges_path);
  ~Gpt2Bpe() override;

  void encode(std::string_view document, std::vector<uint32_t>& ids, const Progress& progress = {}) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  std::optional<uint32_t> end_of_text() const override { return end_of_text_; }
  std::string description() const override;

 private:
  struct Merge {
    uint32_t rank;
    uint32_t joined;  // the symbol the pair becomes
  };
  // Symbols are byte strings, numbered as they are first met (the 256 single bytes first).
  uint32_t intern(const std::string& bytes);
  void encode_piece(std::string_view piece, size_t offset, std::vector<uint32_t>& ids) const;

  std::string vocab_path_;
  std::vector<std::string> symbols_;
  std::unordered_map<std::string, uint32_t> symbol_of_bytes_;
  std::unordered_map<uint64_t, Merge> merges_;  // key: left << 32 | right
  std::vector<int64_t> id_of_symbol_;           // -1: the vocabulary has no token for it
  int64_t vocab_size_ = 0;
  std::optional<uint32_t> end_of_text_;
  struct Regex;
  std::unique_ptr<Regex> regex_;
  // Pieces repeat (words): their ids are kept. Encoding is single-threaded per tokenizer.
  mutable std::unordered_map<std::string, std::vector<uint32_t>> cache_;
};

}  // namespace ds::tokenizer
