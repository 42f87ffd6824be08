// A write that runs out of space must fail with the errno and leave earlier data alone. The file
// system is a 256 KiB tmpfs mounted in a private mount namespace of a forked child; where
// namespaces are not allowed, RLIMIT_FSIZE stands in for the full disk (EFBIG instead of ENOSPC).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <stdexcept>

#include "dstrain/io/locked_buffers.hpp"
#include "dstrain/io/raw_aio_handle.hpp"
#include "dstrain/runtime/error.hpp"
#include "io_test_support.hpp"

namespace {

using ds::io::AioSettings;
using ds::io::LockedBuffers;
using ds::io::RawAioHandle;
using namespace ds::io::testing;

constexpr int64_t kCapacity = 256 * 1024;

bool write_text(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY);
  if (fd < 0) return false;
  bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return written;
}

// Root needs only a mount namespace; anyone else first becomes root of a new user namespace.
bool mount_small_tmpfs(const std::string& directory) {
  if (::geteuid() == 0) {
    if (::unshare(CLONE_NEWNS) != 0) return false;
  } else {
    const std::string uid = std::to_string(::geteuid()), gid = std::to_string(::getegid());
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return false;
    if (!write_text("/proc/self/setgroups", "deny") || !write_text("/proc/self/uid_map", "0 " + uid + " 1") ||
        !write_text("/proc/self/gid_map", "0 " + gid + " 1"))
      return false;
  }
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return false;
  const std::string options = "size=" + std::to_string(kCapacity);
  return ::mount("tmpfs", directory.c_str(), "tmpfs", 0, options.c_str()) == 0;
}

void limit_file_size() {
  std::signal(SIGXFSZ, SIG_IGN);  // the write then fails with EFBIG instead of killing us
  struct rlimit limit = {static_cast<rlim_t>(kCapacity), static_cast<rlim_t>(kCapacity)};
  if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) throw std::runtime_error("setrlimit(RLIMIT_FSIZE) failed");
}

void expect(bool condition, const std::string& what) {
  if (!condition) throw std::runtime_error(what);
}

}  // namespace

TEST_CASE("a write that fills the file system fails and leaves earlier data intact", "[io]") {
  const bool locked_buffer = GENERATE(true, false);
  const int parallelism = GENERATE(1, 2);
  CAPTURE(locked_buffer, parallelism);
  TempDir dir;

  std::string failure = run_in_child([&] {
    int expected_errno = ENOSPC;
    if (!mount_small_tmpfs(dir.path())) {
      limit_file_size();
      expected_errno = EFBIG;
    }
    const std::string data = dir.file("data.bin");
    const std::string other = dir.file("other.bin");
    const Bytes earlier = random_bytes(64 * 1024, 1);
    const Bytes other_bytes = random_bytes(32 * 1024, 2);
    plain_write(data, earlier);
    plain_write(other, other_bytes);

    const size_t big = 1 << 20;
    const Bytes payload = random_bytes(big, 3);
    LockedBuffers locked;
    AlignedBuffer aligned(big + 1);
    char* buffer = locked_buffer ? static_cast<char*>(locked.allocate(big)) : aligned.data() + 1;
    std::memcpy(buffer, payload.data(), big);

    RawAioHandle handle(AioSettings{64 * 1024, 4, false, true, parallelism});
    try {
      handle.sync_pwrite(buffer, static_cast<int64_t>(big), data, static_cast<int64_t>(earlier.size()));
      throw std::runtime_error("a 1 MiB write into a 256 KiB file system succeeded");
    } catch (const ds::Error& error) {
      expect(error.errnum() == expected_errno, std::string("wrong errno in: ") + error.what());
      expect(error.path() == data, std::string("wrong path in: ") + error.what());
    }
    expect(plain_read(data, 0, static_cast<int64_t>(earlier.size())) == earlier, "earlier bytes of data.bin changed");
    expect(plain_read_all(other) == other_bytes, "other.bin changed");

    // The handle is still usable after the failure.
    std::memset(buffer, 0, earlier.size());
    handle.sync_pread(buffer, static_cast<int64_t>(earlier.size()), data);
    expect(Bytes(buffer, buffer + earlier.size()) == earlier, "read back after the failure differs");
  });
  REQUIRE(failure == "");
}
