#include "dstrain/io/preallocate.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"

namespace ds::io {

bool preallocate(int fd, const std::string& path, int64_t bytes) {
  if (bytes <= 0) return true;
  int result;
  while ((result = ::fallocate(fd, 0, 0, bytes)) != 0 && errno == EINTR) {}
  if (result == 0) return true;
  const int err = errno;
  if (err != EOPNOTSUPP && err != ENOSYS)
    throw Error("cannot reserve the file's blocks (fallocate)").with_path(path).with_length(bytes).with_errno(err);
  // One warning: a run preallocates many files on the same file system.
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true))
    log::warn_all("the file system of ", path, " does not preallocate (fallocate: ", std::strerror(err),
                  "): files are allocated as they are written, which makes writes slower");
  return false;
}

bool preallocate(const std::string& path, int64_t bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("cannot open the file to preallocate").with_path(path).with_errno(errno);
  try {
    const bool reserved = preallocate(fd, path, bytes);
    ::close(fd);
    return reserved;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

}  // namespace ds::io
