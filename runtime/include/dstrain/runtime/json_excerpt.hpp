// Short, safe renderings of user JSON for error messages: a value of any size or depth becomes at
// most a few hundred characters, and nothing here recurses deeper than a few levels.
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace ds {

// The value as compact JSON (as dump()), cut after max_chars (strings after max_chars / 2), containers shown three
// levels deep, with "..." and the full size where something was left out: e.g.
// `"aaaa..." (52428800 bytes)`, `[[[...]]]`.
std::string json_excerpt(const nlohmann::json& value, size_t max_chars = 200);

// How deeply containers nest in the value (a scalar is 0), counted without recursion and without
// looking further than limit + 1 levels.
size_t json_depth(const nlohmann::json& value, size_t limit);

}  // namespace ds
