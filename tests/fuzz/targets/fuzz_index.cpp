// A checkpoint's index.json as the loader reads it: trusted only after its checksum and every
// field's checks, refused otherwise with a ds::Error naming the file and the field.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

#include "dstrain/engine/checkpoint/index.hpp"
#include "dstrain/io/crc32c.hpp"
#include "expect_named.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json json = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return 0;
  // A mutated index almost never carries its own checksum, which would leave the field checks
  // behind it unexercised: for even-sized inputs the target seals the mutation as a writer would.
  if (size % 2 == 0 && json.is_object() && json.contains("index_crc32c")) {
    nlohmann::json body = json;
    body.erase("index_crc32c");
    const std::string text = body.dump();
    json["index_crc32c"] = ds::io::crc32c(0, text.data(), text.size());
  }
  expect_named([&] { (void)ds::ckpt::CheckpointIndex::from_json(json, "fuzz/index.json"); });
  return 0;
}
