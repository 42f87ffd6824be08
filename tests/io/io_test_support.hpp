// Helpers shared by the io tests: a scratch directory, random bytes, and the plain
// pread/pwrite reference that every aio transfer is checked against.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ds::io::testing {

using Bytes = std::vector<char>;

// A fresh directory under $TMPDIR (or /tmp), removed with its content at scope exit.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

Bytes random_bytes(size_t count, uint64_t seed);

// The reference I/O: plain pwrite/pread loops, no io_uring, no O_DIRECT.
void plain_write(const std::string& path, const Bytes& bytes, int64_t offset = 0);
Bytes plain_read(const std::string& path, int64_t offset, int64_t length);
Bytes plain_read_all(const std::string& path);
int64_t file_size(const std::string& path);  // -1 when the file does not exist

// Whether the file system under directory accepts O_DIRECT (tmpfs before Linux 6.6 does not).
bool supports_o_direct(const std::string& directory);

// Runs body in a forked child (for tests that change process-wide state: namespaces, limits,
// capabilities). Returns "" when body returned, or the message of what it threw.
std::string run_in_child(const std::function<void()>& body);

// Page-aligned memory that is not a LockedBuffers allocation: a plain malloc-like buffer.
class AlignedBuffer {
 public:
  explicit AlignedBuffer(size_t bytes);
  ~AlignedBuffer();
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  char* data() const { return data_; }

 private:
  char* data_;
};

}  // namespace ds::io::testing
