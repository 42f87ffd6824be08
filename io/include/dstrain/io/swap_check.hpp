// The checks of a swap block read back from NVMe: the CRC-32C its write produced against the one its
// read produced, and the read's own failures (a short file reads past its end), each a ds::Error
// that names the file, the offset, the length and which block of which swapper it was.
//
//   try { reader.wait(); } catch (const ds::Error& e) { throw io::naming_block(e, "sub-group 3 of exp_avg"); }
//   io::check_swap_block(written_crc, read_crc, path, offset, bytes, "sub-group 3 of exp_avg", rank);
#pragma once

#include <cstdint>
#include <string>

#include "dstrain/runtime/error.hpp"

namespace ds::io {

// Throws when the checksums differ: the file was overwritten, truncated and written past, or the
// device returned other bytes than it was given.
void check_swap_block(uint32_t written, uint32_t read, const std::string& path, int64_t offset, int64_t length,
                      const std::string& block, int rank);
// The error with `block` named in its message, its context kept.
Error naming_block(const Error& error, const std::string& block);

}  // namespace ds::io
