#include "dstrain/io/swap_preflight.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statfs.h>
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

// What the error messages add to the problem: the space the swap files need and the space there is.
std::string need_and_free(const std::string& who, int64_t bytes_needed, int64_t free_bytes) {
  return who + " needs " + std::to_string(bytes_needed) + " bytes for swap files there, the file system has " +
         std::to_string(free_bytes) + " free";
}

int64_t free_bytes_of(const std::string& nvme_path, const std::string& key) {
  struct statvfs fs {};
  if (::statvfs(nvme_path.c_str(), &fs) != 0)
    throw Error("cannot read the free space of the NVMe path").with_key(key).with_path(nvme_path).with_errno(errno);
  return static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
}

// The name of a file system that keeps its files in memory, or "".
std::string memory_file_system(const std::string& nvme_path) {
  struct statfs fs {};
  if (::statfs(nvme_path.c_str(), &fs) != 0) return "";
  if (fs.f_type == TMPFS_MAGIC) return "tmpfs";
  if (fs.f_type == RAMFS_MAGIC) return "ramfs";
  return "";
}

// Writes one aligned block through O_DIRECT into `folder`, a fresh folder in `nvme_path`: the only
// proof that the file system takes it (ramfs refuses at open, as tmpfs did before Linux 6.6; some
// FUSE file systems only at the write).
void check_direct_io(const std::string& nvme_path, const std::string& folder, const std::string& key,
                     const std::string& because) {
  const std::string probe = folder + "/o_direct_probe";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0600);
  if (fd < 0)
    throw Error("the NVMe path does not take O_DIRECT, which the swap files need (use a folder on a disk); " + because)
        .with_key(key).with_path(nvme_path).with_errno(errno);
  void* block = nullptr;
  if (::posix_memalign(&block, kDirectIoAlignment, kDirectIoAlignment) != 0) {
    ::close(fd);
    throw Error("cannot allocate the O_DIRECT probe block").with_key(key).with_path(nvme_path);
  }
  std::fill_n(static_cast<char*>(block), kDirectIoAlignment, 0);
  const ssize_t written = ::pwrite(fd, block, kDirectIoAlignment, 0);
  const int err = errno;
  std::free(block);
  ::close(fd);
  ::unlink(probe.c_str());
  if (written != kDirectIoAlignment)
    throw Error("an O_DIRECT write to the NVMe path failed, and the swap files need O_DIRECT; " + because)
        .with_key(key).with_path(nvme_path).with_errno(written < 0 ? err : 0);
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

namespace {

// The checks, in order: the path is a writable folder that takes O_DIRECT, with room for
// `bytes_needed` bytes (`who` needs them), on a disk rather than in memory. Creates a fresh folder `<nvme_path>/<prefix>-<host>-<pid>-XXXXXX`
// for the O_DIRECT probe and returns it; removes it when a check fails.
std::string make_checked_folder(const std::string& nvme_path, const std::string& prefix, const std::string& key,
                                const std::string& who, int64_t bytes_needed) {
  struct stat info {};
  if (::stat(nvme_path.c_str(), &info) != 0)
    throw Error("the NVMe path does not exist").with_key(key).with_path(nvme_path).with_errno(errno);
  if (!S_ISDIR(info.st_mode)) throw Error("the NVMe path is not a folder").with_key(key).with_path(nvme_path);
  const int64_t free_bytes = free_bytes_of(nvme_path, key);
  const std::string because = need_and_free(who, bytes_needed, free_bytes);
  // access() sees read-only mounts and immutable folders, even for root; mkdtemp sees the rest.
  if (::access(nvme_path.c_str(), W_OK | X_OK) != 0)
    throw Error("the NVMe path is not writable; " + because).with_key(key).with_path(nvme_path).with_errno(errno);
  const std::string pattern = nvme_path + "/" + prefix + "-" + host_name() + "-" + std::to_string(::getpid()) + "-XXXXXX";
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  if (!::mkdtemp(name.data()))
    throw Error("the NVMe path is not writable (cannot create a folder in it); " + because)
        .with_key(key).with_path(nvme_path).with_errno(errno);
  const std::string folder(name.data());
  try {
    check_direct_io(nvme_path, folder, key, because);
    if (free_bytes < bytes_needed)
      throw Error("the NVMe path is too small: " + because).with_key(key).with_path(nvme_path).with_length(bytes_needed);
    // After O_DIRECT, which tmpfs takes since Linux 6.6: its files are this node's memory, counted
    // against the very budget that offloading is meant to relieve.
    if (const std::string memory = memory_file_system(nvme_path); !memory.empty())
      throw Error("the NVMe path is on " + memory + ", which keeps its files in memory: the swap files would take " +
                  "the memory that offloading frees (use a folder on a disk); " + because)
          .with_key(key).with_path(nvme_path);
  } catch (...) {
    remove_tree(folder);
    throw;
  }
  return folder;
}

}  // namespace

std::string make_swap_folder(const std::string& nvme_path, const std::string& prefix, const std::string& key,
                             int64_t bytes_needed) {
  // First: their space counts towards what this run needs.
  remove_dead_swap_folders(nvme_path);
  return make_checked_folder(nvme_path, prefix, key, "this rank", bytes_needed);
}

void check_swap_path(const std::string& nvme_path, const std::string& key, const std::string& who,
                     int64_t bytes_needed) {
  remove_dead_swap_folders(nvme_path);
  remove_tree(make_checked_folder(nvme_path, "dstrain-preflight", key, who, bytes_needed));
}

bool same_file_system(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev;
}

}  // namespace ds::io
