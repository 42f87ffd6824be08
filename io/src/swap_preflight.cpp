#include "dstrain/io/swap_preflight.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <vector>

#include "dstrain/io/aio_settings.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"
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

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

// The pid of a folder named dstrain-<anything>-<host>-<pid>-XXXXXX, or -1 when the name is not
// that with this `host`.
long pid_of_folder(const std::string& name, const std::string& host) {
  if (name.rfind("dstrain-", 0) != 0 || name.size() < 7 || name[name.size() - 7] != '-') return -1;
  const std::string rest = name.substr(0, name.size() - 7);  // without -XXXXXX
  const size_t dash = rest.rfind('-');
  if (dash == std::string::npos || dash + 1 == rest.size()) return -1;
  const std::string digits = rest.substr(dash + 1);
  if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  const std::string before = rest.substr(0, dash);
  const std::string suffix = "-" + host;
  if (before.size() <= suffix.size() || before.compare(before.size() - suffix.size(), suffix.size(), suffix) != 0) return -1;
  return std::stol(digits);
}

bool process_runs(long pid) { return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH); }

// Bytes of disk the folder's files hold (a swap folder is flat).
int64_t allocated_bytes(const std::string& folder) {
  int64_t bytes = 0;
  DIR* dir = ::opendir(folder.c_str());
  if (!dir) return 0;
  while (const dirent* entry = ::readdir(dir)) {
    struct stat info {};
    if (::fstatat(::dirfd(dir), entry->d_name, &info, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(info.st_mode))
      bytes += static_cast<int64_t>(info.st_blocks) * 512;
  }
  ::closedir(dir);
  return bytes;
}

}  // namespace

int64_t remove_dead_swap_folders(const std::string& nvme_path) {
  const std::string host = host_name();
  std::vector<std::string> dead;
  if (DIR* dir = ::opendir(nvme_path.c_str())) {
    while (const dirent* entry = ::readdir(dir)) {
      const long pid = pid_of_folder(entry->d_name, host);
      if (pid > 0 && !process_runs(pid)) dead.push_back(nvme_path + "/" + entry->d_name);
    }
    ::closedir(dir);
  }
  int64_t freed = 0;
  int removed = 0;
  for (const std::string& folder : dead) {
    const int64_t bytes = allocated_bytes(folder);
    try {
      remove_tree(folder);
      freed += bytes;
      ++removed;
    } catch (const Error& e) {
      log::warn_all("could not remove the swap folder of a dead run: ", e.what());
    }
  }
  if (removed > 0)
    log::info_all("removed ", removed, " swap folder(s) of dead runs on this host from ", nvme_path, ", freeing ",
                  freed, " bytes");
  return freed;
}

std::string make_swap_folder(const std::string& nvme_path, const std::string& prefix, const std::string& key,
                             int64_t bytes_needed) {
  // First: their space counts towards what this run needs.
  remove_dead_swap_folders(nvme_path);
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

  const std::string pattern =
      nvme_path + "/" + prefix + "-" + host_name() + "-" + std::to_string(::getpid()) + "-XXXXXX";
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
