// The NVMe path checks against the file system itself: statvfs for room, mkdtemp for freshness.
// (The O_DIRECT refusal is not exercised: tmpfs takes O_DIRECT since Linux 6.6, and no other file
// system that refuses it can be mounted here.)
#include <catch2/catch.hpp>
#include <sys/statvfs.h>

#include <filesystem>

#include "dstrain/io/swap_preflight.hpp"
#include "dstrain/runtime/error.hpp"
#include "io_test_support.hpp"

namespace {

using namespace ds::io::testing;
using Catch::Matchers::Contains;

constexpr const char* kKey = "zero_optimization.offload_optimizer.nvme_path";

ds::Error preflight_error(const std::string& path, int64_t bytes) {
  try {
    ds::io::make_swap_folder(path, "swap", kKey, bytes);
  } catch (const ds::Error& e) {
    return e;
  }
  FAIL("no error for " << path);
  return ds::Error("");
}

}  // namespace

TEST_CASE("swap folders are fresh and unique, and contain nothing", "[io][swap]") {
  TempDir dir;
  const std::string first = ds::io::make_swap_folder(dir.path(), "run-rank0", kKey, 1 << 20);
  const std::string second = ds::io::make_swap_folder(dir.path(), "run-rank0", kKey, 1 << 20);
  CHECK(first != second);
  for (const std::string& folder : {first, second}) {
    CHECK(std::filesystem::path(folder).parent_path() == std::filesystem::path(dir.path()));
    CHECK(std::filesystem::is_directory(folder));
    CHECK(std::filesystem::is_empty(folder));  // the O_DIRECT probe is gone
  }
}

TEST_CASE("a swap path that is missing, a file or too small names the key and the path", "[io][swap]") {
  TempDir dir;
  ds::Error missing = preflight_error(dir.file("absent"), 1);
  CHECK_THAT(missing.message(), Contains("does not exist"));
  CHECK(missing.key() == std::string(kKey));
  CHECK(missing.path() == dir.file("absent"));

  plain_write(dir.file("plain"), random_bytes(10, 1));
  CHECK_THAT(preflight_error(dir.file("plain"), 1).message(), Contains("not a folder"));

  // More than the file system has free, by statvfs's own count.
  struct statvfs fs {};
  REQUIRE(::statvfs(dir.path().c_str(), &fs) == 0);
  const int64_t free_bytes = static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
  const int64_t needed = free_bytes + (int64_t{1} << 40);
  ds::Error full = preflight_error(dir.path(), needed);
  CHECK_THAT(full.message(), Contains("needs " + std::to_string(needed)));
  CHECK(full.key() == std::string(kKey));
  CHECK(full.path() == dir.path());
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()), {}) == 1);  // only "plain"
}
