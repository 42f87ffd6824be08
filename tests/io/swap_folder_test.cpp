// The swap folder against plain reads of its files.
#include <catch2/catch.hpp>

#include <cstring>

#include "dstrain/io/locked_buffers.hpp"
#include "dstrain/io/raw_aio_handle.hpp"
#include "dstrain/io/swap_folder.hpp"
#include "dstrain/runtime/error.hpp"
#include "io_test_support.hpp"

namespace {

using ds::io::AioSettings;
using ds::io::LockedBuffers;
using ds::io::RawAioHandle;
using ds::io::SwapFolder;
using namespace ds::io::testing;

}  // namespace

TEST_CASE("swapped-out buffers come back byte for byte", "[io][swap]") {
  TempDir dir;
  RawAioHandle handle(AioSettings{64 * 1024, 8, false, true, 2});
  SwapFolder swap(dir.file("nested/swap"), handle);
  LockedBuffers locked;
  const std::vector<std::pair<std::string, size_t>> parts = {{"param_0", 1 << 20}, {"param_1", 12345}, {"grad", 0}};

  std::vector<Bytes> payloads;
  std::vector<char*> buffers;
  for (const auto& [name, size] : parts) {
    payloads.push_back(random_bytes(size, payloads.size()));
    buffers.push_back(static_cast<char*>(locked.allocate(size)));
    if (size > 0) std::memcpy(buffers.back(), payloads.back().data(), size);
    swap.swap_out(name, buffers.back(), static_cast<int64_t>(size));
  }
  REQUIRE(swap.wait() == 3);

  for (size_t i = 0; i < parts.size(); ++i) {
    REQUIRE(swap.contains(parts[i].first));
    REQUIRE(swap.size_of(parts[i].first) == static_cast<int64_t>(parts[i].second));
    REQUIRE(plain_read_all(swap.path_of(parts[i].first)) == payloads[i]);
    std::memset(buffers[i], 0, parts[i].second);
    swap.swap_in(parts[i].first, buffers[i], static_cast<int64_t>(parts[i].second));
  }
  REQUIRE(swap.wait() == 3);
  for (size_t i = 0; i < parts.size(); ++i)
    REQUIRE(Bytes(buffers[i], buffers[i] + parts[i].second) == payloads[i]);
}

TEST_CASE("a name swapped out again holds only the new bytes", "[io][swap]") {
  TempDir dir;
  RawAioHandle handle(AioSettings{4096, 4, false, true, 1});
  SwapFolder swap(dir.path(), handle);
  const Bytes large = random_bytes(20000, 1), small = random_bytes(5000, 2);
  swap.swap_out("state", large.data(), static_cast<int64_t>(large.size()));
  swap.wait();
  swap.swap_out("state", small.data(), static_cast<int64_t>(small.size()));
  swap.wait();
  REQUIRE(plain_read_all(swap.path_of("state")) == small);
  REQUIRE(swap.size_of("state") == 5000);
}

TEST_CASE("unknown names, wrong sizes and bad names are errors", "[io][swap]") {
  TempDir dir;
  RawAioHandle handle(AioSettings{4096, 4, false, true, 1});
  SwapFolder swap(dir.path(), handle);
  char buffer[64] = {};
  REQUIRE_THROWS_AS(swap.swap_in("never", buffer, sizeof buffer), ds::Error);
  swap.swap_out("known", buffer, sizeof buffer);
  swap.wait();
  try {
    swap.swap_in("known", buffer, 32);
    FAIL("swap_in with the wrong size succeeded");
  } catch (const ds::Error& error) {
    REQUIRE(error.path() == swap.path_of("known"));
  }
  for (const std::string bad : {"", ".", "..", "a/b"})
    REQUIRE_THROWS_AS(swap.swap_out(bad, buffer, sizeof buffer), ds::Error);
  REQUIRE(swap.wait() == 0);
}

TEST_CASE("removing a name deletes its file", "[io][swap]") {
  TempDir dir;
  RawAioHandle handle(AioSettings{4096, 4, false, true, 1});
  SwapFolder swap(dir.path(), handle);
  char buffer[64] = {};
  swap.swap_out("gone", buffer, sizeof buffer);
  swap.wait();
  REQUIRE(file_size(swap.path_of("gone")) == 64);
  swap.remove("gone");
  REQUIRE_FALSE(swap.contains("gone"));
  REQUIRE(file_size(swap.path_of("gone")) == -1);
  REQUIRE_THROWS_AS(swap.remove("gone"), ds::Error);
}

TEST_CASE("a swap file changed behind the folder's back fails the swap_in's wait, naming it", "[io][swap]") {
  TempDir dir;
  RawAioHandle handle(AioSettings{64 * 1024, 8, false, true, 2});
  SwapFolder swap(dir.path(), handle);
  LockedBuffers locked;
  char* buffer = static_cast<char*>(locked.allocate(256 * 1024));
  const Bytes payload = random_bytes(256 * 1024, 9);
  std::memcpy(buffer, payload.data(), payload.size());
  swap.swap_out("state", buffer, 256 * 1024);
  swap.wait();
  swap.swap_in("state", buffer, 256 * 1024);
  REQUIRE(swap.wait() == 1);  // untouched: no false alarm
  plain_write(swap.path_of("state"), Bytes(8, 'x'), 100000);
  swap.swap_in("state", buffer, 256 * 1024);
  try {
    swap.wait();
    FAIL("no error");
  } catch (const ds::Error& e) {
    CHECK(e.path() == swap.path_of("state"));
    CHECK(std::string(e.message()).find("CRC-32C") != std::string::npos);
  }
}
