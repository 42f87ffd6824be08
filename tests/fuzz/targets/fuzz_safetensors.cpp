// A safetensors header as SafetensorsReader checks it before any tensor is read: the input's first
// 8 bytes are the size of the data area (little-endian, reduced below 2^40), the rest the header's
// JSON. Whatever the bytes, the result is a header whose tensors tile that data area exactly, or a
// ds::Error naming the file.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "dstrain/io/safetensors.hpp"
#include "expect_named.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  uint64_t data_bytes = 0;
  for (int i = 7; i >= 0; --i) data_bytes = data_bytes << 8 | data[i];
  data_bytes %= uint64_t{1} << 40;
  expect_named([&] {
    const auto header = ds::io::SafetensorsHeader::parse(reinterpret_cast<const char*>(data + 8), size - 8,
                                                         static_cast<int64_t>(data_bytes), "fuzz/model.safetensors");
    int64_t covered = 0;
    for (const auto& tensor : header.tensors) {
      if (tensor.begin != covered || tensor.bytes() != tensor.numel() * ds::io::safetensors_dtype_size(tensor.dtype))
        std::abort();  // a header accepted with a gap, an overlap or a size its shape does not give
      covered = tensor.end;
    }
    if (covered != static_cast<int64_t>(data_bytes)) std::abort();
  });
  return 0;
}
