// tokenizer.json's "decoder", tokens back to text: ByteLevel, Metaspace, Replace, ByteFallback,
// Fuse, Strip, Sequence, as Rust's tokenizers does them (each works on the list of token strings).
// WordPiece, BPEDecoder and CTC are refused by name.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "hf/json_field.hpp"

namespace ds::tokenizer::hf {

using Decoder = std::function<std::vector<std::string>(std::vector<std::string> tokens)>;

// An empty function for null (the tokens are then joined with spaces, as Rust does).
Decoder make_decoder(const Field& field);

}  // namespace ds::tokenizer::hf
