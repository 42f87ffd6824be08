// tokenizer.json's "normalizer": Sequence, Replace, Prepend, NFC, NFD, NFKC, NFKD, Lowercase, Strip.
// BertNormalizer, StripAccents and Precompiled (SentencePiece's charsmap, in Unigram files) are
// refused by name.
#pragma once

#include <functional>
#include <string>

#include "hf/json_field.hpp"

namespace ds::tokenizer::hf {

using Normalizer = std::function<std::string(std::string)>;

// An empty function for null.
Normalizer make_normalizer(const Field& field);

}  // namespace ds::tokenizer::hf
