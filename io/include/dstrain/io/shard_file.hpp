// Plain files written front to back in pieces and read back by byte range: the shards of a
// checkpoint. The writer keeps the running CRC-32C and size, so a producer can hand it data a
// buffer at a time (a tensor, a slice of one, or a buffer just swapped in from NVMe) without ever
// holding the whole file in memory.
//
//   ds::io::ShardWriter out(path);
//   out.append(data, bytes);  ...  out.finish();   // fsync'd; out.bytes(), out.crc32c()
//   ds::io::ShardReader in(path);
//   in.read(offset, dst, bytes);                    // exactly bytes, or a ds::Error naming the file
#pragma once

#include <cstdint>
#include <string>

namespace ds::io {

class ShardWriter {
 public:
  // Creates (or truncates) the file; a ds::Error with the path and errno otherwise. With the final
  // size known, `expected_bytes` reserves the file's blocks now (io::preallocate: a full disk fails
  // here, before any byte is written); finish() trims what was reserved and not written.
  explicit ShardWriter(std::string path, int64_t expected_bytes = 0);
  ~ShardWriter();  // closes an unfinished file and leaves it for the caller to remove
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Appends `size` bytes. A failed write (ENOSPC, EDQUOT, EIO, ...) is a ds::Error carrying the
  // path, the errno, the offset reached and the bytes still to write.
  void append(const void* data, int64_t size);
  // Flushes the file to the device (fsync) and closes it.
  void finish();

  int64_t bytes() const { return bytes_; }
  uint32_t crc32c() const { return crc_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  int64_t bytes_ = 0;
  int64_t reserved_ = 0;
  uint32_t crc_ = 0;
};

class ShardReader {
 public:
  // Opens the file for reading; a ds::Error with the path and errno otherwise.
  explicit ShardReader(std::string path);
  ~ShardReader();
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Reads exactly `size` bytes at `offset`; a range past the end is a ds::Error saying the file is
  // truncated (with the path, the offset and the length asked for).
  void read(int64_t offset, void* dst, int64_t size) const;
  // The CRC-32C of the whole file, read through `buffer` (`buffer_size` bytes) one piece at a time.
  uint32_t crc32c(void* buffer, int64_t buffer_size) const;

 private:
  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
};

}  // namespace ds::io
