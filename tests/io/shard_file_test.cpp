// Checkpoint shard files: CRC-32C against its published check value and the table reference, and
// the writer and reader on real files, a full device (/dev/full) and truncated files.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "dstrain/io/crc32c.hpp"
#include "dstrain/io/shard_file.hpp"
#include "dstrain/runtime/error.hpp"
#include "io_test_support.hpp"

using namespace ds::io;
using namespace ds::io::testing;

TEST_CASE("crc32c gives the standard check value and matches the table version piecewise", "[io][crc32c]") {
  // The check value of CRC-32C (RFC 3720, appendix B.4): "123456789" -> 0xE3069283.
  REQUIRE(crc32c(0, "123456789", 9) == 0xE3069283u);
  REQUIRE(crc32c_portable(0, "123456789", 9) == 0xE3069283u);
  const Bytes data = random_bytes(100003, 11);
  for (size_t offset : {0, 1, 3, 7}) {
    for (size_t size : {0, 1, 7, 8, 9, 63, 4096, 99000}) {
      INFO("offset " << offset << ", size " << size);
      REQUIRE(crc32c(0, data.data() + offset, size) == crc32c_portable(0, data.data() + offset, size));
    }
  }
  // Incremental: any split gives the one-shot value.
  const uint32_t whole = crc32c(0, data.data(), data.size());
  uint32_t pieces = 0;
  for (size_t at = 0; at < data.size(); at += 777) pieces = crc32c(pieces, data.data() + at, std::min<size_t>(777, data.size() - at));
  REQUIRE(pieces == whole);
}

TEST_CASE("a shard written in pieces reads back by range with its checksum", "[io][shard]") {
  TempDir dir;
  const Bytes data = random_bytes(300001, 5);
  ShardWriter out(dir.file("rank0.bin"));
  for (size_t at = 0; at < data.size(); at += 65536)
    out.append(data.data() + at, static_cast<int64_t>(std::min<size_t>(65536, data.size() - at)));
  out.finish();
  REQUIRE(out.bytes() == static_cast<int64_t>(data.size()));
  REQUIRE(out.crc32c() == crc32c_portable(0, data.data(), data.size()));
  REQUIRE(plain_read_all(dir.file("rank0.bin")) == data);

  ShardReader in(dir.file("rank0.bin"));
  REQUIRE(in.size() == static_cast<int64_t>(data.size()));
  Bytes range(1000);
  in.read(12345, range.data(), 1000);
  REQUIRE(std::memcmp(range.data(), data.data() + 12345, 1000) == 0);
  Bytes buffer(4096);
  REQUIRE(in.crc32c(buffer.data(), 4096) == out.crc32c());
  try {
    in.read(static_cast<int64_t>(data.size()) - 10, range.data(), 20);
    FAIL("read past the end");
  } catch (const ds::Error& e) {
    REQUIRE(std::string(e.what()).find("truncated") != std::string::npos);
    REQUIRE(e.path() == dir.file("rank0.bin"));
  }
}

TEST_CASE("a full device is reported with the path, errno and bytes", "[io][shard]") {
  ShardWriter out("/dev/full");  // every write fails with ENOSPC
  const Bytes data = random_bytes(8192, 1);
  try {
    out.append(data.data(), 8192);
    FAIL("a write to /dev/full succeeded");
  } catch (const ds::Error& e) {
    REQUIRE(e.errnum() == ENOSPC);
    REQUIRE(e.path() == "/dev/full");
    REQUIRE(e.length() == 8192);
    REQUIRE(std::string(e.what()).find("no space left") != std::string::npos);
  }
  REQUIRE_THROWS_AS(ShardReader("/nonexistent/dir/rank0.bin"), ds::Error);
  REQUIRE_THROWS_AS(ShardWriter("/nonexistent/dir/rank0.bin"), ds::Error);
}
