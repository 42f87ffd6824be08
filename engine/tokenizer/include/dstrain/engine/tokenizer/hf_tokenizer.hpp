// HfTokenizer: a Hugging Face tokenizer folder, DIR/tokenizer.json and, if present,
// DIR/tokenizer_config.json, encoded and decoded as Rust's `tokenizers` (the library transformers
// uses) does, for the BPE files current models ship: byte-level BPE (GPT-2, Llama 3, Qwen2: the
// Split pattern, ByteLevel, ignore_merges) and SentencePiece-style BPE (Llama 2, Mistral, Gemma:
// Metaspace or Replace+Prepend normalizers, byte_fallback). The pipeline, in HF's names:
//   added tokens (raw text) -> normalizer -> added tokens (normalized) -> pre_tokenizer -> model
//   -> post_processor (only when special tokens are asked for)
// and back: ids -> tokens -> decoder. What is supported, and where tokenizers.js differs from
// Rust: docs/tokenizers.md. A model type other than BPE (WordPiece, Unigram, WordLevel), a
// component we do not read, or a malformed file is a ds::Error naming the file and the field.
// tokenizer_config.json: bos_token/eos_token (a string or an AddedToken object), add_bos_token/
// add_eos_token (as transformers' Llama and Gemma tokenizers, they replace the post-processor's
// template by [bos] $A [eos]), added_tokens_decoder, clean_up_tokenization_spaces (default false).
#pragma once

#include <memory>

#include "dstrain/engine/tokenizer/tokenizer.hpp"

namespace ds::tokenizer {

class HfTokenizer : public Tokenizer {
 public:
  // Reads DIR/tokenizer.json and DIR/tokenizer_config.json (if present).
  explicit HfTokenizer(const std::string& dir);
  // The files' text, named by `json_path` and `config_path` in errors; `config_text` may be empty.
  HfTokenizer(const std::string& json_text, const std::string& json_path, const std::string& config_text,
              const std::string& config_path);
  ~HfTokenizer() override;

  // Throws ds::Error for text that is not UTF-8 or a character nothing can encode.
  std::vector<uint32_t> encode(std::string_view text, bool add_special_tokens) const;
  // Throws ds::Error for an id outside the vocabulary.
  std::string decode(const std::vector<uint32_t>& ids, bool skip_special_tokens) const;

  // Tokenizer: the document's ids without special tokens (the trainer puts end_of_text between).
  void encode(std::string_view document, std::vector<uint32_t>& ids, const Progress& progress = {}) const override;
  int64_t vocab_size() const override;
  std::optional<uint32_t> end_of_text() const override;
  std::string description() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds::tokenizer
