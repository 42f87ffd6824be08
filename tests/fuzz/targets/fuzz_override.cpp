// --set KEY=VALUE applied to a config: the input's first line is the assignment, the rest the JSON
// it applies to. Applied and read, or refused with a ds::Error.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "dstrain/runtime/config.hpp"
#include "expect_named.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint8_t* newline = std::find(data, data + size, uint8_t('\n'));
  const std::string assignment(data, newline);
  nlohmann::json json = nlohmann::json::object();
  if (newline != data + size) {
    json = nlohmann::json::parse(newline + 1, data + size, nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded()) return 0;
  }
  expect_named([&] {
    ds::Config::apply_override(json, assignment);
    (void)ds::Config::from_json(json);
  });
  return 0;
}
