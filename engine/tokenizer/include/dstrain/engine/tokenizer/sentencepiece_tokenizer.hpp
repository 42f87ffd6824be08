// SentencePieceTokenizer: a SentencePiece .model (BPE or unigram) through the SentencePiece
// library. A document is encoded line by line, each line as one sentence (the unit spm_train
// learns from), and each '\n' becomes the model's newline byte piece "<0x0A>" when it has one
// (models trained with --byte_fallback); without it the line breaks leave no token. A piece the
// model maps to <unk> is an error naming its offset: a token file must not hide lost text.
#pragma once

#include "dstrain/engine/tokenizer/tokenizer.hpp"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace ds::tokenizer {

class SentencePieceTokenizer : public Tokenizer {
 public:
  // Throws ds::Error with the path when the file is missing or not a model.
  explicit SentencePieceTokenizer(const std::string& model_path);
  ~SentencePieceTokenizer() override;

  void encode(std::string_view document, std::vector<uint32_t>& ids, const Progress& progress = {}) const override;
  int64_t vocab_size() const override;
  std::optional<uint32_t> end_of_text() const override;
  std::string description() const override;

 private:
  std::string model_path_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
  std::optional<uint32_t> newline_;
};

}  // namespace ds::tokenizer
