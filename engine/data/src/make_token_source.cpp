#include "dstrain/engine/data/corpus_source.hpp"
#include "dstrain/engine/data/synthetic_source.hpp"
#include "dstrain/engine/data/token_file.hpp"
#include "dstrain/engine/data/token_source.hpp"
#include "dstrain/runtime/json_block.hpp"
#include "dstrain/runtime/error.hpp"

namespace ds::data {

std::unique_ptr<TokenSource> make_token_source(const nlohmann::json& block, int64_t vocab_size, int64_t block_size) {
  JsonBlock keys(block, "dstrain.data");
  const std::string type = keys.string("type", "synthetic");
  const uint64_t seed = keys.non_negative_int("seed", 1337);
  std::unique_ptr<TokenSource> source;
  if (type == "synthetic") {
    source = std::make_unique<SyntheticSource>(vocab_size, block_size, seed);
  } else if (type == "tokens") {
    const std::string path = keys.string("path");
    source = std::make_unique<CorpusSource>(read_token_file(path), path, vocab_size, block_size, seed);
  } else if (type == "text") {
    const std::string path = keys.string("path");
    if (vocab_size < 256) {
      throw Error("text data has byte tokens 0..255 and needs vocab_size >= 256, got " + std::to_string(vocab_size))
          .with_key("dstrain.model.vocab_size");
    }
    source = std::make_unique<CorpusSource>(read_text_tokens(path), path, vocab_size, block_size, seed);
  } else {
    throw Error("unknown data type \"" + type + "\"; expected synthetic, tokens or text")
        .with_key(keys.full_key("type"));
  }
  keys.skip("valid");  // make_validation_source reads it
  keys.reject_unknown_keys();
  return source;
}

std::unique_ptr<TokenSource> make_validation_source(const nlohmann::json& block, int64_t vocab_size,
                                                    int64_t block_size) {
  if (!block.is_object() || !block.contains("valid")) return nullptr;
  JsonBlock keys(block, "dstrain.data");
  const std::string type = keys.string("type", "synthetic");
  const uint64_t seed = keys.non_negative_int("seed", 1337);
  const std::string path = keys.string("valid");
  if (type == "tokens")
    return std::make_unique<CorpusSource>(read_token_file(path), path, vocab_size, block_size, seed);
  if (type == "text")
    return std::make_unique<CorpusSource>(read_text_tokens(path), path, vocab_size, block_size, seed);
  throw Error("a validation file needs data of type tokens or text (the training data's own kind), not \"" + type +
              "\"")
      .with_key(keys.full_key("valid"));
}

}  // namespace ds::data
