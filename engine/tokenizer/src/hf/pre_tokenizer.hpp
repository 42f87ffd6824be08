// tokenizer.json's "pre_tokenizer": Split (a pattern and Rust's five behaviours, `invert`),
// ByteLevel (add_prefix_space, use_regex: GPT-2's pattern; each piece's bytes become GPT-2's byte
// alphabet), Metaspace (replacement, prepend_scheme always/first/never, split), Digits
// (individual_digits), WhitespaceSplit, Sequence. Others are refused by name.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "hf/json_field.hpp"

namespace ds::tokenizer::hf {

// Splits `pieces` further. `first_section`: the pieces begin where the text begins (Metaspace's
// prepend_scheme "first" prepends only there).
using PreTokenizer = std::function<std::vector<std::string>(std::vector<std::string> pieces, bool first_section)>;

// An empty function for null.
PreTokenizer make_pre_tokenizer(const Field& field);

}  // namespace ds::tokenizer::hf
