// The bad swap paths of a run bigger than its box, each against the file system itself: ramfs (no
// O_DIRECT), tmpfs (takes O_DIRECT since Linux 6.6, but its files are memory), a read-only mount
// (root ignores mode bits, not a read-only mount) and a file system with less room than the swap
// files (a small tmpfs: the room is checked before tmpfs is refused).
// Each error names the key, the path, the bytes needed and the bytes free (statvfs's own count),
// and nothing is left in the folder. The file systems are mounted in a private mount namespace of
// a forked child; where mounting is refused the case is skipped, saying so.
#include <catch2/catch.hpp>

#include <sched.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>

#include "dstrain/io/swap_preflight.hpp"
#include "dstrain/runtime/error.hpp"
#include "io_test_support.hpp"

namespace {

using namespace ds::io::testing;

constexpr const char* kKey = "zero_optimization.offload_param.nvme_path";
constexpr const char* kSkip = "skip: ";

int64_t free_bytes(const std::string& path) {
  struct statvfs fs {};
  if (::statvfs(path.c_str(), &fs) != 0) throw std::runtime_error("statvfs failed on " + path);
  return static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
}

// A private mount namespace (root only: the read-only case needs real root to mean anything).
bool private_mounts() {
  return ::geteuid() == 0 && ::unshare(CLONE_NEWNS) == 0 && ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
}

void expect(bool condition, const std::string& what) {
  if (!condition) throw std::runtime_error(what);
}

// Both entry points refuse `path` for `needed` bytes with a message containing `problem`, the
// bytes needed and the bytes free; the folder stays as it was.
void expect_refused(const std::string& path, int64_t needed, const std::string& problem) {
  const int64_t free = free_bytes(path);
  const size_t entries = static_cast<size_t>(std::distance(std::filesystem::directory_iterator(path), {}));
  const std::function<void()> calls[] = {
      [&] { ds::io::make_swap_folder(path, "dstrain-param-rank0", kKey, needed); },
      [&] { ds::io::check_swap_path(path, kKey, "this node (2 ranks)", needed); }};
  for (const auto& call : calls) {
    try {
      call();
    } catch (const ds::Error& e) {
      const std::string message = e.message();
      expect(message.find(problem) != std::string::npos, "no '" + problem + "' in: " + message);
      expect(message.find("needs " + std::to_string(needed) + " bytes") != std::string::npos, "no bytes needed in: " + message);
      // Within 1% of the free bytes measured here: on a shared disk other processes (the suite runs in
      // parallel) write between the two measurements.
      const size_t has = message.find("has "), free_word = message.find(" free", has);
      expect(has != std::string::npos && free_word != std::string::npos, "no bytes free in: " + message);
      const int64_t named = std::stoll(message.substr(has + 4, free_word - has - 4));
      expect(std::llabs(named - free) <= free / 100, "free bytes off in: " + message);
      expect(e.key() == std::string(kKey), "no key in: " + std::string(e.what()));
      expect(e.path() == path, "no path in: " + std::string(e.what()));
      expect(static_cast<size_t>(std::distance(std::filesystem::directory_iterator(path), {})) == entries,
             "the refused check left something in " + path);
      continue;
    }
    throw std::runtime_error("no error for " + path);
  }
}

// Runs `body` in a child with `path` mounted as `type` with `options`; "" when it passed, "skip: ..."
// when the mount was refused.
std::string on_mount(const std::string& path, const char* type, const std::string& options,
                     const std::function<void()>& body) {
  return run_in_child([&] {
    if (!private_mounts() || ::mount(type, path.c_str(), type, 0, options.c_str()) != 0)
      throw std::runtime_error(std::string(kSkip) + "cannot mount " + type + " here (not root, or no mount namespace)");
    body();
  });
}

void pass_or_skip(const std::string& outcome) {
  if (outcome.rfind(kSkip, 0) == 0) {
    WARN(outcome);
    return;
  }
  CHECK(outcome == "");
}

}  // namespace

TEST_CASE("a swap path without O_DIRECT (ramfs) names the path, the bytes needed and free", "[io][swap]") {
  TempDir dir;
  pass_or_skip(on_mount(dir.path(), "ramfs", "", [&] { expect_refused(dir.path(), 1 << 30, "does not take O_DIRECT"); }));
}

TEST_CASE("a swap path on tmpfs is refused: its files are memory", "[io][swap]") {
  TempDir dir;
  pass_or_skip(on_mount(dir.path(), "tmpfs", "size=64m", [&] {
    expect_refused(dir.path(), 1 << 20, "is on tmpfs, which keeps its files in memory");
  }));
}

TEST_CASE("a read-only swap path names the path, the bytes needed and free", "[io][swap]") {
  TempDir dir;
  // A read-only bind of the disk folder: the file system stays the disk's, only writing is refused.
  pass_or_skip(run_in_child([&] {
    if (!private_mounts() || ::mount(dir.path().c_str(), dir.path().c_str(), nullptr, MS_BIND, nullptr) != 0 ||
        ::mount(nullptr, dir.path().c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0)
      throw std::runtime_error(std::string(kSkip) + "cannot bind-mount read-only here");
    expect_refused(dir.path(), 1 << 20, "is not writable");
  }));
}

TEST_CASE("a swap path with less room than the swap files names the bytes needed and free", "[io][swap]") {
  TempDir dir;
  // A 1 MiB file system asked for 2 MiB (checked before tmpfs's own refusal, so a small tmpfs is a
  // small disk here).
  pass_or_skip(on_mount(dir.path(), "tmpfs", "size=1m", [&] { expect_refused(dir.path(), 2 << 20, "is too small"); }));
  // With room, the node-wide check passes and leaves nothing behind.
  ds::io::check_swap_path(dir.path(), kKey, "this node (2 ranks)", 1 << 20);
  CHECK(std::filesystem::is_empty(dir.path()));
}
