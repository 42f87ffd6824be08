// Tokenizer: text to the token ids a language model trains on. Three kinds, all loaded from files a
// user already has, named by a spec:
//   "gpt2:DIR"   GPT-2's byte-level BPE from DIR/vocab.json and DIR/merges.txt (gpt2_bpe.hpp)
//   "spm:FILE"   a SentencePiece model, e.g. one spm_train wrote (sentencepiece_tokenizer.hpp)
//   "hf:DIR"     a Hugging Face folder's tokenizer.json and tokenizer_config.json (hf_tokenizer.hpp)
// Text is UTF-8; a document is encoded whole, so ids never depend on how a caller reads a file.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ds::tokenizer {

// Told, now and then during an encode, how many bytes of the document are done.
using Progress = std::function<void(size_t bytes_done)>;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Appends the ids of `document` to `ids`. Throws ds::Error with the byte offset in `document`
  // for bytes that are not UTF-8 or that the vocabulary has no token for.
  virtual void encode(std::string_view document, std::vector<uint32_t>& ids, const Progress& progress = {}) const = 0;

  // One more than the largest id.
  virtual int64_t vocab_size() const = 0;
  // The id that separates documents (GPT-2's <|endoftext|>, SentencePiece's </s>), if the
  // vocabulary has one.
  virtual std::optional<uint32_t> end_of_text() const = 0;
  // "GPT-2 BPE from DIR" and the like, for logs.
  virtual std::string description() const = 0;
};

// Throws ds::Error naming the file and what is wrong with it (a missing file, broken JSON, a
// malformed merge line, a model SentencePiece rejects), or the spec if it has no known prefix.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec);

}  // namespace ds::tokenizer
