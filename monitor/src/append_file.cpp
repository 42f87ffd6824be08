#include "append_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "dstrain/runtime/error.hpp"

namespace ds::monitor {

AppendFile::AppendFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error("cannot open the monitor file for appending").with_path(path_).with_errno(errno);
  struct stat info {};
  if (::fstat(fd_, &info) != 0) {
    const int errnum = errno;
    ::close(fd_);
    throw Error("cannot stat the monitor file").with_path(path_).with_errno(errnum);
  }
  size_at_open_ = info.st_size;
}

AppendFile::~AppendFile() { ::close(fd_); }

void AppendFile::append(const void* bytes, size_t size) {
  const char* next = static_cast<const char*>(bytes);
  while (size > 0) {
    const ssize_t written = ::write(fd_, next, size);
    if (written < 0 && errno == EINTR) continue;
    // write() returns 0 only for a zero-byte request; a full disk is ENOSPC.
    if (written <= 0) throw Error("cannot write the monitor file").with_path(path_).with_errno(errno);
    next += written;
    size -= static_cast<size_t>(written);
  }
}

}  // namespace ds::monitor
