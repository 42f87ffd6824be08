#include "dstrain/engine/tokenizer/sentencepiece_tokenizer.hpp"

#include <sentencepiece_processor.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>

#include "dstrain/engine/tokenizer/utf8.hpp"
#include "dstrain/runtime/error.hpp"

namespace ds::tokenizer {

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path)
    : model_path_(model_path), processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  // SentencePiece's own message for a missing file does not say which errno; ours does.
  struct stat info {};
  if (::stat(model_path.c_str(), &info) != 0) throw Error("cannot open file").with_path(model_path).with_errno(errno);
  const auto status = processor_->Load(model_path);
  if (!status.ok())
    throw Error("not a SentencePiece model: " + std::string(status.message())).with_path(model_path);
  const int newline = processor_->PieceToId("<0x0A>");
  if (processor_->IsByte(newline)) newline_ = static_cast<uint32_t>(newline);
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

int64_t SentencePieceTokenizer::vocab_size() const { return processor_->GetPieceSize(); }

std::optional<uint32_t> SentencePieceTokenizer::end_of_text() const {
  const int eos = processor_->eos_id();
  return eos >= 0 ? std::optional<uint32_t>(static_cast<uint32_t>(eos)) : std::nullopt;
}

std::string SentencePieceTokenizer::description() const {
  return "SentencePiece (" + std::to_string(vocab_size()) + " pieces) from " + model_path_;
}

void SentencePieceTokenizer::encode(std::string_view document, std::vector<uint32_t>& ids,
                                    const Progress& progress) const {
  require_utf8(document);
  for (size_t start = 0; start < document.size();) {
    size_t end = document.find('\n', start);
    const bool has_newline = end != std::string_view::npos;
    if (!has_newline) end = document.size();
    const auto pieces = processor_->EncodeAsImmutableProto(document.substr(start, end - start));
    for (const auto& piece : pieces.pieces()) {
      if (processor_->IsUnknown(static_cast<int>(piece.id())))
        throw Error("the SentencePiece model has no piece for \"" + piece.surface() + "\" (it would be <unk>)")
            .with_offset(static_cast<int64_t>(start + piece.begin()));
      ids.push_back(piece.id());
    }
    if (has_newline && newline_) ids.push_back(*newline_);
    start = end + 1;
    if (progress) progress(std::min(start, document.size()));
  }
}

}  // namespace ds::tokenizer
