#include "dstrain/io/swap_check.hpp"

#include <cstdio>

namespace ds::io {
namespace {

std::string hex(uint32_t value) {
  char text[11];
  std::snprintf(text, sizeof text, "0x%08x", value);
  return text;
}

}  // namespace

void check_swap_block(uint32_t written, uint32_t read, const std::string& path, int64_t offset, int64_t length,
                      const std::string& block, int rank) {
  if (written == read) return;
  throw Error("swap file corrupted: " + block + " was read back with CRC-32C " + hex(read) + ", but was written with " +
              hex(written) + " (the file was changed, or cut short and written past, behind the run's back)")
      .with_path(path)
      .with_offset(offset)
      .with_length(length)
      .with_rank(rank);
}

Error naming_block(const Error& error, const std::string& block) {
  Error named(error.message() + " (swap " + block + ")");
  if (error.key()) named.with_key(*error.key());
  if (error.path()) named.with_path(*error.path());
  if (error.offset()) named.with_offset(*error.offset());
  if (error.length()) named.with_length(*error.length());
  if (error.rank()) named.with_rank(*error.rank());
  if (error.errnum()) named.with_errno(*error.errnum());
  return named;
}

}  // namespace ds::io
