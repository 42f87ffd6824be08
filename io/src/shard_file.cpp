#include "dstrain/io/shard_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "dstrain/io/crc32c.hpp"
#include "dstrain/io/preallocate.hpp"
#include "dstrain/runtime/error.hpp"

namespace ds::io {

ShardWriter::ShardWriter(std::string path, int64_t expected_bytes) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error("cannot create checkpoint shard").with_path(path_).with_errno(errno);
  try {
    if (expected_bytes > 0 && preallocate(fd_, path_, expected_bytes)) reserved_ = expected_bytes;
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

ShardWriter::~ShardWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void ShardWriter::append(const void* data, int64_t size) {
  if (fd_ < 0) throw Error("append to a finished shard").with_path(path_);
  crc_ = io::crc32c(crc_, data, static_cast<size_t>(size));
  const char* p = static_cast<const char*>(data);
  for (int64_t left = size; left > 0;) {
    const ssize_t n = ::write(fd_, p, static_cast<size_t>(std::min<int64_t>(left, int64_t{1} << 30)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;  // a zero-byte write means the device is full
      const std::string what = err == ENOSPC ? "no space left on device writing checkpoint shard"
                                             : "cannot write checkpoint shard: " + std::string(std::strerror(err));
      throw Error(what + " (" + std::to_string(bytes_) + " bytes written, " + std::to_string(left) +
                  " more of this piece to write)")
          .with_path(path_).with_offset(bytes_).with_length(left).with_errno(err);
    }
    p += n;
    left -= n;
    bytes_ += n;
  }
}

void ShardWriter::finish() {
  // The file was grown to the reserved size: it must end where the data ends.
  if (reserved_ > bytes_ && ::ftruncate(fd_, bytes_) != 0)
    throw Error("cannot trim checkpoint shard to its size").with_path(path_).with_length(bytes_).with_errno(errno);
  if (::fsync(fd_) != 0) {
    const int err = errno;
    throw Error("fsync of checkpoint shard failed").with_path(path_).with_errno(err);
  }
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) throw Error("close of checkpoint shard failed").with_path(path_).with_errno(errno);
}

ShardReader::ShardReader(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw Error("cannot open checkpoint shard").with_path(path_).with_errno(errno);
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    throw Error("cannot stat checkpoint shard").with_path(path_).with_errno(err);
  }
  size_ = st.st_size;
}

ShardReader::~ShardReader() {
  if (fd_ >= 0) ::close(fd_);
}

void ShardReader::read(int64_t offset, void* dst, int64_t size) const {
  if (offset < 0 || size < 0 || offset + size > size_)
    throw Error("checkpoint shard is truncated: it has " + std::to_string(size_) + " bytes, the index places data up to byte " +
                std::to_string(offset + size))
        .with_path(path_).with_offset(offset).with_length(size);
  char* p = static_cast<char*>(dst);
  for (int64_t done = 0; done < size;) {
    const ssize_t n = ::pread(fd_, p + done, static_cast<size_t>(std::min<int64_t>(size - done, int64_t{1} << 30)),
                              offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error("cannot read checkpoint shard").with_path(path_).with_offset(offset + done).with_errno(errno);
    if (n == 0)
      throw Error("checkpoint shard ended early (shrunk while reading?)").with_path(path_).with_offset(offset + done);
    done += n;
  }
}

uint32_t ShardReader::crc32c(void* buffer, int64_t buffer_size) const {
  uint32_t crc = 0;
  for (int64_t offset = 0; offset < size_; offset += buffer_size) {
    const int64_t n = std::min(buffer_size, size_ - offset);
    read(offset, buffer, n);
    crc = io::crc32c(crc, buffer, static_cast<size_t>(n));
  }
  return crc;
}

}  // namespace ds::io
