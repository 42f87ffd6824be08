// io::preallocate and its users: a preallocated file has its blocks allocated right after creation
// (stat's st_blocks, the kernel's count, against the size), bytes already written stay, and a file
// that was only sized (ftruncate) has none: the check can tell the two apart.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dstrain/io/preallocate.hpp"
#include "dstrain/io/raw_aio_handle.hpp"
#include "dstrain/io/shard_file.hpp"
#include "dstrain/io/swap_folder.hpp"
#include "dstrain/runtime/error.hpp"
#include "io_test_support.hpp"

using namespace ds::io;
using namespace ds::io::testing;

namespace {

struct stat stat_of(const std::string& path) {
  struct stat info {};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  return info;
}

int64_t allocated_bytes(const std::string& path) { return static_cast<int64_t>(stat_of(path).st_blocks) * 512; }

}  // namespace

TEST_CASE("a preallocated file has its blocks right after creation", "[io][preallocate]") {
  TempDir dir;
  const int64_t size = (8 << 20) + 12345;  // not a multiple of the block size

  const std::string sized = dir.file("sized.dat");
  const int fd = ::open(sized.c_str(), O_WRONLY | O_CREAT, 0644);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, size) == 0);
  ::close(fd);
  CHECK(allocated_bytes(sized) < size);  // a hole: what preallocation is there to avoid

  const std::string path = dir.file("preallocated.dat");
  REQUIRE(preallocate(path, size));
  CHECK(stat_of(path).st_size == size);
  CHECK(allocated_bytes(path) >= size);
  // Reserved blocks read as zeros.
  CHECK(plain_read_all(path) == Bytes(size, 0));
}

TEST_CASE("preallocating keeps the bytes already written and never shrinks", "[io][preallocate]") {
  TempDir dir;
  const std::string path = dir.file("data.dat");
  const Bytes head = random_bytes(10000, 3);
  plain_write(path, head);
  REQUIRE(preallocate(path, 1 << 20));
  CHECK(file_size(path) == 1 << 20);
  CHECK(allocated_bytes(path) >= 1 << 20);
  CHECK(plain_read(path, 0, head.size()) == head);
  CHECK(plain_read(path, head.size(), (1 << 20) - head.size()) == Bytes((1 << 20) - head.size(), 0));
  REQUIRE(preallocate(path, 4096));
  CHECK(file_size(path) == 1 << 20);
}

TEST_CASE("preallocating where the file cannot be made is a ds::Error naming it", "[io][preallocate]") {
  TempDir dir;
  const std::string path = dir.file("missing/data.dat");
  try {
    preallocate(path, 4096);
    FAIL("no error");
  } catch (const ds::Error& e) {
    CHECK(e.path() == path);
    CHECK(e.errnum() == ENOENT);
  }
}

TEST_CASE("swap files and checkpoint shards with a known size are preallocated", "[io][preallocate]") {
  TempDir dir;
  SECTION("a swap folder's new file has all its blocks once swap_out is queued") {
    RawAioHandle handle(AioSettings{1 << 20, 8, false, true, 1});
    SwapFolder swap(dir.file("swap"), handle);
    AlignedBuffer buffer(4 << 20);
    swap.swap_out("p", buffer.data(), 4 << 20);
    CHECK(allocated_bytes(swap.path_of("p")) >= 4 << 20);
    swap.wait();
  }
  SECTION("a shard writer given its size reserves it, and ends the file where the data ends") {
    const std::string path = dir.file("rank0.bin");
    ShardWriter out(path, 3 << 20);
    CHECK(allocated_bytes(path) >= 3 << 20);
    const Bytes data = random_bytes(1 << 20, 5);
    out.append(data.data(), static_cast<int64_t>(data.size()));
    out.finish();
    CHECK(plain_read_all(path) == data);
  }
}
