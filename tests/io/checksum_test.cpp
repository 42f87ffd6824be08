// CRC-32C of pieces combined (crc32c_combine) against the one-shot value, and the handle's
// checksums of transfers against crc32c of the buffer, over the ways a request is cut: blocks,
// worker slices, O_DIRECT bulk and buffered tails, short reads.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <thread>

#include "dstrain/io/crc32c.hpp"
#include "dstrain/io/raw_aio_handle.hpp"
#include "dstrain/runtime/error.hpp"
#include "io_test_support.hpp"

using namespace ds::io;
using namespace ds::io::testing;

TEST_CASE("crc32c_combine of two pieces is the CRC of both", "[io][crc32c]") {
  const Bytes data = random_bytes(1 << 20, 17);
  const uint32_t whole = crc32c(0, data.data(), data.size());
  for (size_t split : {size_t{0}, size_t{1}, size_t{7}, size_t{4096}, size_t{500001}, data.size() - 1, data.size()}) {
    INFO("split at " << split);
    const uint32_t a = crc32c(0, data.data(), split);
    const uint32_t b = crc32c(0, data.data() + split, data.size() - split);
    REQUIRE(crc32c_combine(a, b, static_cast<int64_t>(data.size() - split)) == whole);
  }
  // A long run of zeros: the exponent's high bits.
  const Bytes zeros(3 << 20, 0);
  const uint32_t tail = crc32c(0, zeros.data(), zeros.size());
  Bytes joined(data.begin(), data.begin() + 100);
  joined.insert(joined.end(), zeros.begin(), zeros.end());
  REQUIRE(crc32c_combine(crc32c(0, data.data(), 100), tail, static_cast<int64_t>(zeros.size())) ==
          crc32c(0, joined.data(), joined.size()));
}

TEST_CASE("crc32c_of_zeros is the CRC-32C of a zero buffer", "[io][crc32c]") {
  const Bytes zeros(5 << 20, 0);
  for (int64_t size : {int64_t{0}, int64_t{1}, int64_t{4096}, int64_t{1000003}, int64_t{5} << 20})
    REQUIRE(crc32c_of_zeros(size) == crc32c(0, zeros.data(), static_cast<size_t>(size)));
}

TEST_CASE("the handle's checksum of a transfer is the CRC-32C of its bytes", "[io][crc32c]") {
  TempDir dir;
  const std::string path = dir.file("data.bin");
  for (int parallelism : {1, 3}) {
    for (int64_t block : {int64_t{4096}, int64_t{128 << 10}, int64_t{1} << 20}) {
      // Aligned (all O_DIRECT), an unaligned tail, and all buffered (an odd size and offset).
      for (auto [size, offset] : {std::pair<int64_t, int64_t>{3 << 20, 0}, {(3 << 20) + 1000, 8192}, {777777, 13}}) {
        INFO("parallelism " << parallelism << ", block " << block << ", size " << size << ", offset " << offset);
        RawAioHandle handle(AioSettings{block, 4, false, true, parallelism});
        AlignedBuffer out(static_cast<size_t>(size)), in(static_cast<size_t>(size));
        const Bytes bytes = random_bytes(static_cast<size_t>(size), static_cast<uint64_t>(size + parallelism));
        std::copy(bytes.begin(), bytes.end(), out.data());
        const uint32_t expected = crc32c(0, bytes.data(), bytes.size());
        uint32_t written = 0, read = 1;
        handle.async_pwrite(out.data(), size, path, offset, &written);
        handle.wait();
        REQUIRE(written == expected);
        REQUIRE(plain_read(path, offset, size) == bytes);
        handle.sync_pread(in.data(), size, path, offset, &read);
        REQUIRE(read == expected);
      }
    }
  }
  RawAioHandle handle(AioSettings{4096, 4, false, true, 2});
  uint32_t none = 1;
  handle.sync_pread(nullptr, 0, path, 0, &none);
  CHECK(none == 0);  // no bytes: the CRC of nothing
}

TEST_CASE("the checksum of reads resubmitted after short transfers covers every byte", "[io][crc32c]") {
  // A FIFO returns at most 64 KiB per read: every piece of a larger block comes back short.
  TempDir dir;
  const std::string fifo = dir.file("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const Bytes bytes = random_bytes(300000, 23);
  bool written = false;
  std::thread writer([&] {
    const int fd = ::open(fifo.c_str(), O_WRONLY);
    size_t done = 0;
    for (ssize_t n = 0; fd >= 0 && done < bytes.size() && n >= 0; done += static_cast<size_t>(n))
      n = ::write(fd, bytes.data() + done, bytes.size() - done);
    written = fd >= 0 && done == bytes.size();
    if (fd >= 0) ::close(fd);
  });
  RawAioHandle handle(AioSettings{1 << 20, 1, false, true, 1});
  Bytes in(bytes.size());
  uint32_t crc = 0;
  handle.sync_pread(in.data(), static_cast<int64_t>(in.size()), fifo, 0, &crc);
  writer.join();
  REQUIRE(written);
  REQUIRE(in == bytes);
  CHECK(crc == crc32c(0, bytes.data(), bytes.size()));
}
