#include "dstrain/io/swap_preflight.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <vector>

#include "dstrain/io/aio_settings.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/remove_tree.hpp"

namespace ds::io {
namespace {

// Writes one aligned block through O_DIRECT: the only proof that the file system takes it (tmpfs
// refuses at open, some FUSE file systems only at the write).
void check_direct_io(const std::string& folder, const std::string& key) {
  const std::string probe = folder + "/o_direct_probe";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0600);
  if (fd < 0)
    throw Error("the NVMe path does not support O_DIRECT (tmpfs does not; use a folder on a disk)")
        .with_key(key).with_path(folder).with_errno(errno);
  void* block = nullptr;
  if (::posix_memalign(&block, kDirectIoAlignment, kDirectIoAlignment) != 0) {
    ::close(fd);
    throw Error("cannot allocate the O_DIRECT probe block").with_key(key).with_path(folder);
  }
  std::fill_n(static_cast<char*>(block), kDirectIoAlignment, 0);
  const ssize_t written = ::pwrite(fd, block, kDirectIoAlignment, 0);
  const int err = errno;
  std::free(block);
  ::close(fd);
  ::unlink(probe.c_str());
  if (written != kDirectIoAlignment)
    throw Error("an O_DIRECT write to the NVMe path failed").with_key(key).with_path(folder).with_errno(written < 0 ? err : 0);
}

}  // namespace

std::string make_swap_folder(const std::string& nvme_path, const std::string& prefix, const std::string& key,
                             int64_t bytes_needed) {
  struct stat info {};
  if (::stat(nvme_path.c_str(), &info) != 0)
    throw Error("the NVMe path does not exist").with_key(key).with_path(nvme_path).with_errno(errno);
  if (!S_ISDIR(info.st_mode)) throw Error("the NVMe path is not a folder").with_key(key).with_path(nvme_path);
  if (::access(nvme_path.c_str(), W_OK | X_OK) != 0)
    throw Error("the NVMe path is not writable").with_key(key).with_path(nvme_path).with_errno(errno);
  struct statvfs fs {};
  if (::statvfs(nvme_path.c_str(), &fs) != 0)
    throw Error("cannot read the free space of the NVMe path").with_key(key).with_path(nvme_path).with_errno(errno);
  const int64_t free_bytes = static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
  if (free_bytes < bytes_needed)
    throw Error("the NVMe path has " + std::to_string(free_bytes) + " bytes free, this rank needs " +
                std::to_string(bytes_needed))
        .with_key(key).with_path(nvme_path).with_length(bytes_needed);

  const std::string pattern = nvme_path + "/" + prefix + "-XXXXXX";
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  if (!::mkdtemp(name.data()))
    throw Error("cannot create a folder in the NVMe path").with_key(key).with_path(nvme_path).with_errno(errno);
  const std::string folder(name.data());
  try {
    check_direct_io(folder, key);
  } catch (...) {
    remove_tree(folder);
    throw;
  }
  return folder;
}

}  // namespace ds::io
