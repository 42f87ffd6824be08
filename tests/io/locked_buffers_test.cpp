// Locked buffers against the kernel's own accounting: VmLck in /proc/self/status.
#include <catch2/catch.hpp>

#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string>

#include "dstrain/io/locked_buffers.hpp"
#include "dstrain/runtime/error.hpp"
#include "io_test_support.hpp"

namespace {

using ds::io::LockedBuffers;
using namespace ds::io::testing;

int64_t locked_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmLck:", 0) == 0) return std::stoll(line.substr(6));
  throw std::runtime_error("no VmLck in /proc/self/status");
}

bool aligned_to_page(const void* address) {
  return reinterpret_cast<uintptr_t>(address) % static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE)) == 0;
}

// CAP_IPC_LOCK lifts RLIMIT_MEMLOCK; drop_ipc_lock removes it from this process for good.
bool has_ipc_lock() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  return ::syscall(SYS_capget, &header, data) == 0 && (data[0].effective & (1u << CAP_IPC_LOCK));
}

void drop_ipc_lock() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &header, data) != 0) throw std::runtime_error("capget failed");
  data[0].effective &= ~(1u << CAP_IPC_LOCK);
  data[0].permitted &= ~(1u << CAP_IPC_LOCK);
  if (::syscall(SYS_capset, &header, data) != 0) throw std::runtime_error("capset failed");
}

constexpr size_t kSize = 64 * 1024;

}  // namespace

TEST_CASE("locked buffers are page-aligned, zeroed and counted in VmLck", "[io]") {
  struct rlimit limit;
  REQUIRE(::getrlimit(RLIMIT_MEMLOCK, &limit) == 0);
  const int64_t before = locked_kib();
  const bool may_lock = has_ipc_lock() || limit.rlim_cur == RLIM_INFINITY ||
                        static_cast<int64_t>(limit.rlim_cur) >= (before * 1024 + static_cast<int64_t>(kSize));

  LockedBuffers buffers;
  char* buffer = static_cast<char*>(buffers.allocate(kSize));
  REQUIRE(aligned_to_page(buffer));
  REQUIRE(Bytes(buffer, buffer + kSize) == Bytes(kSize, 0));
  REQUIRE(buffers.is_locked(buffer) == may_lock);
  REQUIRE(locked_kib() - before == (may_lock ? static_cast<int64_t>(kSize / 1024) : 0));

  buffers.release(buffer);
  REQUIRE(locked_kib() == before);
}

TEST_CASE("buffers of 2 MiB or more are 2 MiB-aligned and locked whole", "[io]") {
  const size_t huge_page = size_t{2} << 20;
  const size_t size = 3 * (size_t{1} << 20) + 5;  // rounds up to two huge pages
  struct rlimit limit;
  REQUIRE(::getrlimit(RLIMIT_MEMLOCK, &limit) == 0);
  const int64_t before = locked_kib();
  const bool may_lock = has_ipc_lock() || limit.rlim_cur == RLIM_INFINITY ||
                        static_cast<int64_t>(limit.rlim_cur) >= (before * 1024 + static_cast<int64_t>(2 * huge_page));

  LockedBuffers buffers;
  char* buffer = static_cast<char*>(buffers.allocate(size));
  REQUIRE(reinterpret_cast<uintptr_t>(buffer) % huge_page == 0);
  REQUIRE(buffers.is_locked(buffer) == may_lock);
  REQUIRE(locked_kib() - before == (may_lock ? static_cast<int64_t>(2 * huge_page / 1024) : 0));
  buffer[0] = 1;
  buffer[size - 1] = 2;
  buffers.release(buffer);
  REQUIRE(locked_kib() == before);
}

TEST_CASE("releasing a buffer that is not a locked buffer is an error", "[io]") {
  LockedBuffers buffers;
  LockedBuffers other;
  char* buffer = static_cast<char*>(buffers.allocate(kSize));
  int on_stack = 0;
  REQUIRE_THROWS_AS(buffers.release(&on_stack), ds::Error);
  REQUIRE_THROWS_AS(buffers.release(buffer + 4096), ds::Error);
  REQUIRE_THROWS_AS(other.release(buffer), ds::Error);
  buffers.release(buffer);
  REQUIRE_THROWS_AS(buffers.release(buffer), ds::Error);
}

TEST_CASE("zero-byte locked buffers are distinct", "[io]") {
  LockedBuffers buffers;
  void* first = buffers.allocate(0);
  void* second = buffers.allocate(0);
  REQUIRE(first != second);
  buffers.release(first);
  buffers.release(second);
}

TEST_CASE("when RLIMIT_MEMLOCK refuses, locked buffers fall back to pageable memory", "[io]") {
  std::string failure = run_in_child([] {
    if (has_ipc_lock()) drop_ipc_lock();
    struct rlimit none = {0, 0};
    if (::setrlimit(RLIMIT_MEMLOCK, &none) != 0) throw std::runtime_error("setrlimit(RLIMIT_MEMLOCK) failed");
    const int64_t before = locked_kib();

    LockedBuffers buffers;
    char* buffer = static_cast<char*>(buffers.allocate(kSize));
    if (buffers.is_locked(buffer)) throw std::runtime_error("buffer claims to be locked");
    if (locked_kib() != before) throw std::runtime_error("VmLck grew although mlock was refused");
    if (!aligned_to_page(buffer)) throw std::runtime_error("fallback buffer is not page-aligned");
    buffer[0] = 1;
    buffer[kSize - 1] = 2;
    buffers.release(buffer);
  });
  REQUIRE(failure == "");
}
