#include "dstrain/runtime/remove_tree.hpp"

#include <ftw.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>

#include "dstrain/runtime/error.hpp"

namespace ds {
namespace {

// nftw's callback has no user pointer: the failing path goes out through these.
thread_local std::string failed_path;
thread_local int failed_errno = 0;

int remove_entry(const char* path, const struct stat*, int, struct FTW*) {
  if (std::remove(path) == 0 || errno == ENOENT) return 0;
  failed_path = path;
  failed_errno = errno;
  return 1;
}

}  // namespace

void remove_tree(const std::string& path) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) {
    if (errno == ENOENT) return;
    throw Error("cannot remove").with_path(path).with_errno(errno);
  }
  // Depth first (contents before their folder), never following links, staying on one file system.
  constexpr int kOpenFolders = 64;
  const int result = ::nftw(path.c_str(), remove_entry, kOpenFolders, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
  if (result == 1) throw Error("cannot remove").with_path(failed_path).with_errno(failed_errno);
  if (result != 0) throw Error("cannot walk the folder to remove it").with_path(path).with_errno(errno);
}

}  // namespace ds
