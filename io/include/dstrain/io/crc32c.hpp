// CRC-32C (Castagnoli, the polynomial of iSCSI, ext4 and RocksDB): the checksum of checkpoint
// shards and of swap blocks. Incremental, so a file is checksummed piece by piece as it is written
// or read, and pieces checksummed apart (by different threads) combine:
//   uint32_t crc = 0;
//   crc = ds::io::crc32c(crc, first, n1);
//   crc = ds::io::crc32c(crc, second, n2);   // == crc32c(0, first+second)
//   ds::io::crc32c_combine(crc32c(0, first, n1), crc32c(0, second, n2), n2)   // the same
#pragma once

#include <cstddef>
#include <cstdint>

namespace ds::io {

// The CRC-32C of `bytes` continuing from `crc` (0 to start): the SSE4.2 instruction where the CPU
// has it, a table otherwise; both give the standard value (crc32c("123456789") == 0xE3069283).
uint32_t crc32c(uint32_t crc, const void* bytes, size_t size);
// The table version alone, the reference the hardware path is tested against.
uint32_t crc32c_portable(uint32_t crc, const void* bytes, size_t size);
// The CRC-32C of A followed by B, from crc32c(0, A) and crc32c(0, B) and B's length: a few dozen
// carry-less products (log2 of size_b), whatever the sizes.
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, int64_t size_b);
// The CRC-32C of `size` zero bytes, without reading them (a preallocated file's blocks).
uint32_t crc32c_of_zeros(int64_t size);

}  // namespace ds::io
