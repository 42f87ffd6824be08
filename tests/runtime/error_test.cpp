#include <catch2/catch.hpp>
#include <cerrno>

#include "dstrain/runtime/error.hpp"

TEST_CASE("Error carries and formats its context", "[runtime]") {
  ds::Error error = ds::Error("short read").with_path("/tmp/x").with_offset(4096).with_errno(ENOENT);
  REQUIRE(error.path() == std::string("/tmp/x"));
  REQUIRE(error.offset() == 4096);
  REQUIRE(std::string(error.what()) == "short read [path=/tmp/x, offset=4096, errno=2 (No such file or directory)]");
}

TEST_CASE("Error names the config key first", "[runtime]") {
  ds::Error error = ds::Error("must be positive, got -1").with_key("train_batch_size");
  REQUIRE(std::string(error.what()) == "config key 'train_batch_size': must be positive, got -1");
}
