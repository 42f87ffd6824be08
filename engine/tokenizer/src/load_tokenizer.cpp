#include "dstrain/engine/tokenizer/gpt2_bpe.hpp"
#include "dstrain/engine/tokenizer/hf_tokenizer.hpp"
#include "dstrain/engine/tokenizer/sentencepiece_tokenizer.hpp"
#include "dstrain/engine/tokenizer/tokenizer.hpp"
#include "dstrain/runtime/error.hpp"

namespace ds::tokenizer {

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec) {
  const size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  const std::string where = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (kind == "gpt2" && !where.empty()) return std::make_unique<Gpt2Bpe>(where + "/vocab.json", where + "/merges.txt");
  if (kind == "spm" && !where.empty()) return std::make_unique<SentencePieceTokenizer>(where);
  if (kind == "hf" && !where.empty()) return std::make_unique<HfTokenizer>(where);
  throw Error("unknown tokenizer \"" + spec + "\": expected gpt2:DIR (vocab.json, merges.txt), spm:FILE (.model) or hf:DIR (tokenizer.json)");
}

}  // namespace ds::tokenizer
