// Config::from_json on any JSON document: accepted, or refused with a ds::Error.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>

#include "dstrain/runtime/config.hpp"
#include "expect_named.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json json = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return 0;  // not JSON: the file reader's own error, not this target's
  expect_named([&] {
    ds::Config config = ds::Config::from_json(json);
    for (int world : {1, 2, 3, 8}) {
      ds::Config resolved = config;
      resolved.resolve_batch(world);
    }
    (void)ds::Config::from_json(config.to_json());  // the effective config reads back
  });
  return 0;
}
