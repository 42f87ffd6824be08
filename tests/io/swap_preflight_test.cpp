// The NVMe path checks against the file system itself: statvfs for room, mkdtemp for freshness.
// (O_DIRECT, tmpfs and read-only mounts: swap_bad_path_test.cpp.)
#include <catch2/catch.hpp>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

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

namespace {

// A pid that ran and is gone: a child reaped before its pid is used.
pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

std::string this_host() {
  char name[256] = {};
  REQUIRE(::gethostname(name, sizeof name - 1) == 0);
  return name;
}

}  // namespace

TEST_CASE("a run removes the swap folders of dead runs of its host, and only those", "[io][swap]") {
  TempDir dir;
  const std::string host = this_host();
  auto folder_with_file = [&](const std::string& name, int64_t bytes) {
    std::filesystem::create_directory(dir.file(name));
    plain_write(dir.file(name) + "/master.swp", random_bytes(static_cast<size_t>(bytes), 3));
    return dir.file(name);
  };
  const std::string dead = "dstrain-optimizer-rank0-" + host + "-" + std::to_string(dead_pid()) + "-a1B2c3";
  const std::string dead_param = "dstrain-param-rank1-" + host + "-" + std::to_string(dead_pid()) + "-zzzzzz";
  const std::string live = "dstrain-optimizer-rank0-" + host + "-" + std::to_string(::getpid()) + "-x9Y8z7";
  const std::string other_host = "dstrain-optimizer-rank0-not" + host + "x-" + std::to_string(dead_pid()) + "-q1w2e3";
  const std::string not_ours = "mydata-" + host + "-" + std::to_string(dead_pid()) + "-abcdef";
  folder_with_file(dead, 1 << 20);
  folder_with_file(dead_param, 3 << 20);
  for (const std::string& name : {live, other_host, not_ours}) folder_with_file(name, 4096);

  const std::string made = ds::io::make_swap_folder(dir.path(), "dstrain-optimizer-rank0", kKey, 1 << 20);
  CHECK(!std::filesystem::exists(dir.file(dead)));
  CHECK(!std::filesystem::exists(dir.file(dead_param)));
  for (const std::string& name : {live, other_host, not_ours}) CHECK(std::filesystem::exists(dir.file(name)));
  // The new folder is named by this host and pid, so that a later run can tell whether it is dead.
  CHECK(std::filesystem::path(made).filename().string().rfind(
            "dstrain-optimizer-rank0-" + host + "-" + std::to_string(::getpid()) + "-", 0) == 0);

  // The count of bytes freed is the disk the dead folders' files held (st_blocks).
  const std::string again = "dstrain-build-rank0-" + host + "-" + std::to_string(dead_pid()) + "-r4t5y6";
  folder_with_file(again, 2 << 20);
  CHECK(ds::io::remove_dead_swap_folders(dir.path()) >= 2 << 20);
  CHECK(!std::filesystem::exists(dir.file(again)));
  CHECK(std::filesystem::exists(made));  // this process's own
}
