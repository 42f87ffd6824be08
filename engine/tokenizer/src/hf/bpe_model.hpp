// tokenizer.json's "model" of type BPE: vocab (token -> id), merges ("a b" strings or [a, b] pairs,
// earlier first), unk_token, fuse_unk, byte_fallback (<0xXX> tokens for characters outside the
// vocabulary), ignore_merges (a word that is a token is that token), continuing_subword_prefix,
// end_of_word_suffix. The word's characters are joined pair by pair, the earliest merge first and
// the leftmost of equal ones, with a heap over a linked list (Rust's Word::merge_all), so a long
// word (Metaspace without split gives one per line) costs n log n.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "hf/json_field.hpp"

namespace ds::tokenizer::hf {

class BpeModel {
 public:
  // Throws naming the field: a merge naming a token outside the vocabulary, dropout, ...
  explicit BpeModel(const Field& model);

  // Appends the ids of one pre-tokenized word. A character with no token, no byte fallback and no
  // unk_token is an error (Rust drops it; a token file must not lose text silently).
  void encode_word(const std::string& word, std::vector<uint32_t>& ids) const;

  std::optional<uint32_t> id_of(const std::string& token) const;
  const std::unordered_map<uint32_t, std::string>& token_of_id() const { return token_of_id_; }

 private:
  struct Merge {
    uint32_t rank;
    uint32_t joined;
  };
  void merge_word(const std::string& word, std::vector<uint32_t>& ids) const;

  std::unordered_map<std::string, uint32_t> vocab_;
  std::unordered_map<uint32_t, std::string> token_of_id_;
  std::unordered_map<uint64_t, Merge> merges_;  // left << 32 | right
  std::optional<uint32_t> unk_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  std::string continuing_subword_prefix_, end_of_word_suffix_;
  uint32_t byte_token_[256];  // <0xXX>'s id, when byte_fallback; kNone when absent
  static constexpr uint32_t kNone = 0xFFFFFFFF;
  // Words repeat: their ids are kept (short ones, a bounded number). Single-threaded per tokenizer.
  mutable std::unordered_map<std::string, std::vector<uint32_t>> cache_;
};

}  // namespace ds::tokenizer::hf
