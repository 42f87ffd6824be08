// What DeepSpeed's tests leave out: sizes that are multiples of neither the block size nor 4096,
// empty files, reads past the end, missing directories, uneven parallelism, writes that must not
// truncate, which bytes go through O_DIRECT, and how failures surface.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "dstrain/io/locked_buffers.hpp"
#include "dstrain/io/raw_aio_handle.hpp"
#include "dstrain/io/transfer_time.hpp"
#include "dstrain/runtime/error.hpp"
#include "io_test_support.hpp"

namespace {

using ds::io::AioSettings;
using ds::io::LockedBuffers;
using ds::io::RawAioHandle;
using namespace ds::io::testing;

constexpr int64_t kPage = ds::io::kDirectIoAlignment;

Bytes bytes_at(const char* data, int64_t length) { return Bytes(data, data + length); }

}  // namespace

TEST_CASE("sizes that are multiples of neither the block size nor 4096 round-trip", "[io]") {
  const int64_t size = GENERATE(int64_t{1}, int64_t{100}, kPage - 1, kPage + 1, 3 * kPage + 100,
                                (int64_t{1} << 20) + 12345);
  const int64_t block_size = GENERATE(int64_t{kPage}, int64_t{64 * 1024}, int64_t{1} << 20);
  const int parallelism = GENERATE(1, 3);
  CAPTURE(size, block_size, parallelism);

  TempDir dir;
  const std::string path = dir.file("data.bin");
  const Bytes reference = random_bytes(static_cast<size_t>(size), static_cast<uint64_t>(size));
  LockedBuffers locked;
  char* buffer = static_cast<char*>(locked.allocate(static_cast<size_t>(size)));
  std::memcpy(buffer, reference.data(), reference.size());

  RawAioHandle handle(AioSettings{block_size, 4, false, true, parallelism});
  REQUIRE(handle.sync_pwrite(buffer, size, path) == 1);
  REQUIRE(plain_read_all(path) == reference);

  std::memset(buffer, 0, static_cast<size_t>(size));
  REQUIRE(handle.sync_pread(buffer, size, path) == 1);
  REQUIRE(bytes_at(buffer, size) == reference);
}

TEST_CASE("the 4096-aligned bulk goes through O_DIRECT and the rest through the page cache", "[io]") {
  TempDir dir;
  const std::string path = dir.file("data.bin");
  const bool direct = supports_o_direct(dir.path());
  const int64_t bulk = 5 * kPage;
  const int64_t size = bulk + 100;
  LockedBuffers locked;
  char* aligned = static_cast<char*>(locked.allocate(static_cast<size_t>(size + kPage)));
  const Bytes reference = random_bytes(static_cast<size_t>(size), 7);

  SECTION("aligned buffer and offset: only the 100-byte tail is buffered") {
    std::memcpy(aligned, reference.data(), reference.size());
    RawAioHandle handle(AioSettings{2 * kPage, 4, false, true, 2});
    handle.sync_pwrite(aligned, size, path);
    REQUIRE(handle.direct_bytes() == (direct ? bulk : 0));
    REQUIRE(handle.buffered_bytes() == size - handle.direct_bytes());
    REQUIRE(plain_read_all(path) == reference);
  }
  SECTION("a block size that is not a multiple of 4096 still sends the aligned bulk direct") {
    std::memcpy(aligned, reference.data(), reference.size());
    // Blocks of 6 KiB starting aligned are cut to their 4 KiB aligned part, so every piece but
    // the tail starts aligned again.
    RawAioHandle handle(AioSettings{6 * 1024, 4, false, true, 1});
    handle.sync_pwrite(aligned, size, path);
    REQUIRE(handle.direct_bytes() == (direct ? bulk : 0));
    REQUIRE(plain_read_all(path) == reference);
  }
  SECTION("an unaligned buffer goes through the page cache entirely") {
    char* unaligned = aligned + 1;
    std::memcpy(unaligned, reference.data(), reference.size());
    RawAioHandle handle(AioSettings{2 * kPage, 4, false, true, 2});
    handle.sync_pwrite(unaligned, size, path);
    REQUIRE(handle.direct_bytes() == 0);
    REQUIRE(handle.buffered_bytes() == size);
    REQUIRE(plain_read_all(path) == reference);
  }
  SECTION("an unaligned file offset goes through the page cache entirely") {
    plain_write(path, reference);
    RawAioHandle handle(AioSettings{2 * kPage, 4, false, true, 2});
    handle.sync_pread(aligned, size - 10, path, 10);
    REQUIRE(handle.direct_bytes() == 0);
    REQUIRE(bytes_at(aligned, size - 10) == plain_read(path, 10, size - 10));
  }
}

TEST_CASE("short reads are resubmitted until the piece is complete", "[io]") {
  // A FIFO holds at most 64 KiB, so one 256 KiB piece must come back in several short reads.
  TempDir dir;
  const std::string fifo = dir.file("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const Bytes reference = random_bytes(256 * 1024, 13);
  pid_t writer = ::fork();
  REQUIRE(writer >= 0);
  if (writer == 0) {
    int fd = ::open(fifo.c_str(), O_WRONLY);
    size_t done = 0;
    while (fd >= 0 && done < reference.size()) {
      ssize_t n = ::write(fd, reference.data() + done, reference.size() - done);
      if (n <= 0) ::_exit(1);
      done += static_cast<size_t>(n);
    }
    ::_exit(fd >= 0 ? 0 : 1);
  }
  LockedBuffers locked;
  char* buffer = static_cast<char*>(locked.allocate(reference.size()));
  RawAioHandle handle(AioSettings{1 << 20, 2, false, true, 1});
  REQUIRE(handle.sync_pread(buffer, static_cast<int64_t>(reference.size()), fifo) == 1);
  int status = 0;
  REQUIRE(::waitpid(writer, &status, 0) == writer);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  REQUIRE(bytes_at(buffer, static_cast<int64_t>(reference.size())) == reference);
}

TEST_CASE("zero-byte transfers create and read empty files", "[io]") {
  TempDir dir;
  const std::string path = dir.file("empty.bin");
  char byte = 'x';
  RawAioHandle handle(AioSettings{kPage, 2, false, true, 2});

  REQUIRE(handle.sync_pwrite(&byte, 0, path) == 1);
  REQUIRE(file_size(path) == 0);
  REQUIRE(handle.sync_pread(&byte, 0, path) == 1);
  REQUIRE(byte == 'x');

  const std::string async_path = dir.file("async_empty.bin");
  REQUIRE(handle.async_pwrite(nullptr, 0, async_path) == 0);
  REQUIRE(handle.async_pread(nullptr, 0, path) == 0);
  REQUIRE(handle.wait() == 2);
  REQUIRE(file_size(async_path) == 0);
}

TEST_CASE("reading past the end of the file is an error", "[io]") {
  const int64_t file_bytes = GENERATE(int64_t{kPage}, kPage + 10, int64_t{100});
  const int64_t buffer_shift = GENERATE(int64_t{0}, int64_t{1});
  CAPTURE(file_bytes, buffer_shift);

  TempDir dir;
  const std::string path = dir.file("short.bin");
  plain_write(path, random_bytes(static_cast<size_t>(file_bytes), 3));
  LockedBuffers locked;
  char* buffer = static_cast<char*>(locked.allocate(4 * kPage)) + buffer_shift;
  RawAioHandle handle(AioSettings{kPage, 4, false, true, 2});

  try {
    handle.sync_pread(buffer, 2 * kPage, path);
    FAIL("reading " << 2 * kPage << " bytes from a " << file_bytes << "-byte file succeeded");
  } catch (const ds::Error& error) {
    CAPTURE(error.what());
    REQUIRE(error.path() == path);
    REQUIRE(std::string(error.what()).find("end of file") != std::string::npos);
    REQUIRE(error.offset().has_value());
    REQUIRE(*error.offset() >= file_bytes);
  }
  // The part that exists was read.
  REQUIRE(bytes_at(buffer, file_bytes) == plain_read_all(path));
}

TEST_CASE("a missing directory or file is an error naming the path", "[io]") {
  TempDir dir;
  const std::string in_missing_dir = dir.file("no/such/dir/data.bin");
  char buffer[16] = {};
  RawAioHandle handle(AioSettings{kPage, 2, false, true, 1});

  try {
    handle.sync_pwrite(buffer, sizeof buffer, in_missing_dir);
    FAIL("writing into a missing directory succeeded");
  } catch (const ds::Error& error) {
    REQUIRE(error.path() == in_missing_dir);
    REQUIRE(error.errnum() == ENOENT);
    REQUIRE(std::string(error.what()).find(in_missing_dir) != std::string::npos);
  }
  const std::string missing_file = dir.file("missing.bin");
  try {
    handle.async_pread(buffer, sizeof buffer, missing_file);
    FAIL("queueing a read of a missing file succeeded");
  } catch (const ds::Error& error) {
    REQUIRE(error.path() == missing_file);
    REQUIRE(error.errnum() == ENOENT);
  }
  REQUIRE(handle.wait() == 0);
}

TEST_CASE("an intra_op_parallelism that does not divide the size splits unevenly", "[io]") {
  // 11 blocks over 3 workers, 2 blocks over 4 workers, and a size whose last block is partial.
  const int64_t size = GENERATE(11 * kPage, 2 * kPage, 10 * kPage + 1);
  const int parallelism = GENERATE(3, 4);
  CAPTURE(size, parallelism);
  TempDir dir;
  const std::string path = dir.file("data.bin");
  const Bytes reference = random_bytes(static_cast<size_t>(size), 11);
  LockedBuffers locked;
  char* buffer = static_cast<char*>(locked.allocate(static_cast<size_t>(size)));
  std::memcpy(buffer, reference.data(), reference.size());

  RawAioHandle handle(AioSettings{kPage, 2, false, true, parallelism});
  REQUIRE(handle.sync_pwrite(buffer, size, path) == 1);
  REQUIRE(plain_read_all(path) == reference);
  std::memset(buffer, 0, static_cast<size_t>(size));
  REQUIRE(handle.sync_pread(buffer, size, path) == 1);
  REQUIRE(bytes_at(buffer, size) == reference);
}

TEST_CASE("writes keep the bytes outside their range and extend files with a hole", "[io]") {
  TempDir dir;
  const std::string path = dir.file("data.bin");
  Bytes expected = random_bytes(64 * 1024, 5);
  plain_write(path, expected);
  LockedBuffers locked;
  char* buffer = static_cast<char*>(locked.allocate(8 * 1024));
  RawAioHandle handle(AioSettings{kPage, 2, false, true, 2});

  const Bytes middle = random_bytes(8 * 1024, 6);
  std::memcpy(buffer, middle.data(), middle.size());
  REQUIRE(handle.sync_pwrite(buffer, 8 * 1024, path, 16 * 1024) == 1);
  std::copy(middle.begin(), middle.end(), expected.begin() + 16 * 1024);
  REQUIRE(plain_read_all(path) == expected);

  REQUIRE(handle.sync_pwrite(buffer, 4 * 1024, path, 100 * 1024) == 1);
  expected.resize(100 * 1024, 0);
  expected.insert(expected.end(), middle.begin(), middle.begin() + 4 * 1024);
  REQUIRE(plain_read_all(path) == expected);
}

TEST_CASE("a failing request in an async queue fails wait after the others finished", "[io]") {
  TempDir dir;
  const std::string good = dir.file("good.bin");
  const std::string short_file = dir.file("short.bin");
  plain_write(short_file, random_bytes(100, 8));
  const Bytes reference = random_bytes(64 * 1024, 9);
  LockedBuffers locked;
  char* source = static_cast<char*>(locked.allocate(reference.size()));
  char* sink = static_cast<char*>(locked.allocate(reference.size()));
  std::memcpy(source, reference.data(), reference.size());
  RawAioHandle handle(AioSettings{kPage, 4, false, true, 2});

  REQUIRE(handle.async_pread(sink, kPage, short_file) == 0);
  REQUIRE(handle.async_pwrite(source, static_cast<int64_t>(reference.size()), good) == 0);
  REQUIRE_THROWS_AS(handle.wait(), ds::Error);
  REQUIRE(plain_read_all(good) == reference);
  REQUIRE(handle.wait() == 0);
}

TEST_CASE("sync transfers leave queued async requests to wait", "[io]") {
  TempDir dir;
  const Bytes reference = random_bytes(3 * kPage, 12);
  LockedBuffers locked;
  char* buffer = static_cast<char*>(locked.allocate(reference.size()));
  std::memcpy(buffer, reference.data(), reference.size());
  RawAioHandle handle(AioSettings{kPage, 2, true, false, 1});

  REQUIRE(handle.async_pwrite(buffer, kPage, dir.file("a.bin")) == 0);
  REQUIRE(handle.async_pwrite(buffer + kPage, kPage, dir.file("b.bin")) == 0);
  REQUIRE(handle.sync_pwrite(buffer + 2 * kPage, kPage, dir.file("c.bin")) == 1);
  REQUIRE(handle.wait() == 2);
  REQUIRE(handle.wait() == 0);
  REQUIRE(plain_read_all(dir.file("a.bin")) == Bytes(reference.begin(), reference.begin() + kPage));
  REQUIRE(plain_read_all(dir.file("b.bin")) == Bytes(reference.begin() + kPage, reference.begin() + 2 * kPage));
  REQUIRE(plain_read_all(dir.file("c.bin")) == Bytes(reference.begin() + 2 * kPage, reference.end()));
}

TEST_CASE("settings and requests out of range are refused", "[io]") {
  auto refused_key = [](AioSettings settings) {
    try {
      RawAioHandle handle(settings);
    } catch (const ds::Error& error) {
      return error.key().value_or("");
    }
    return std::string("accepted");
  };
  REQUIRE(refused_key(AioSettings{0, 8, false, true, 1}) == "aio.block_size");
  REQUIRE(refused_key(AioSettings{ds::io::kMaxBlockSize + 1, 8, false, true, 1}) == "aio.block_size");
  REQUIRE(refused_key(AioSettings{kPage, 0, false, true, 1}) == "aio.queue_depth");
  REQUIRE(refused_key(AioSettings{kPage, 8, false, true, 0}) == "aio.intra_op_parallelism");

  TempDir dir;
  char buffer[8] = {};
  RawAioHandle handle(AioSettings{kPage, 2, false, true, 1});
  REQUIRE_THROWS_AS(handle.sync_pwrite(buffer, sizeof buffer, dir.file("x.bin"), -1), ds::Error);
  REQUIRE_THROWS_AS(handle.sync_pwrite(buffer, -1, dir.file("x.bin")), ds::Error);
  REQUIRE_THROWS_AS(handle.sync_pread(nullptr, 8, dir.file("x.bin")), ds::Error);
}

TEST_CASE("busy_seconds counts the time requests were in flight, not the caller's time before waiting", "[io]") {
  TempDir dir;
  const int64_t size = 4 * kPage;
  LockedBuffers locked;
  char* first = static_cast<char*>(locked.allocate(size));
  char* second = static_cast<char*>(locked.allocate(size));
  std::memset(first, 1, size);
  std::memset(second, 2, size);
  RawAioHandle handle(AioSettings{kPage, 4, false, true, 1});

  // One request queued, then a second spent elsewhere, then a second request: the handle was idle
  // between the first's completion and the second's queueing, and that gap is not busy time (the
  // margin allows the first 16 KiB write half a second on a loaded disk).
  const auto start = std::chrono::steady_clock::now();
  handle.async_pwrite(first, size, dir.file("a.bin"));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  handle.async_pwrite(second, size, dir.file("b.bin"));
  REQUIRE(handle.wait() == 2);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(handle.busy_seconds() > 0);
  CHECK(handle.busy_seconds() < wall - 0.5);
  CHECK(plain_read_all(dir.file("b.bin")) == Bytes(second, second + size));

  // Alone, a request is busy from its queueing to its completion: within the wall time around it.
  const auto before = std::chrono::steady_clock::now();
  handle.async_pread(first, size, dir.file("b.bin"));
  REQUIRE(handle.wait() == 1);
  CHECK(handle.busy_seconds() > 0);
  CHECK(handle.busy_seconds() <= std::chrono::duration<double>(std::chrono::steady_clock::now() - before).count());
  CHECK(Bytes(first, first + size) == Bytes(second, second + size));
}

TEST_CASE("wait_for waits for the requests queued before a number and leaves the later ones queued", "[io]") {
  TempDir dir;
  const int64_t size = 8 * kPage;
  const Bytes content = random_bytes(size, 7);
  plain_write(dir.file("data.bin"), content);
  plain_write(dir.file("short.bin"), Bytes(kPage, 'x'));
  LockedBuffers locked;
  char* first = static_cast<char*>(locked.allocate(size));
  char* second = static_cast<char*>(locked.allocate(size));
  char* third = static_cast<char*>(locked.allocate(size));
  RawAioHandle handle(AioSettings{kPage, 2, false, true, GENERATE(1, 2)});

  const auto start = std::chrono::steady_clock::now();
  CHECK(handle.queued_count() == 0);
  handle.async_pread(first, size, dir.file("data.bin"));
  handle.async_pread(second, size / 2, dir.file("data.bin"), size / 2);
  handle.async_pread(third, size, dir.file("short.bin"));  // fails: the file has one page
  CHECK(handle.queued_count() == 3);

  REQUIRE(handle.wait_for(1) == 1);
  CHECK(bytes_at(first, size) == content);
  double busy = handle.busy_seconds();
  REQUIRE(handle.wait_for(2) == 1);
  CHECK(bytes_at(second, size / 2) == Bytes(content.begin() + size / 2, content.end()));
  busy += handle.busy_seconds();
  CHECK(handle.wait_for(2) == 0);  // nothing left before number 2
  // The failure belongs to request 2: only the wait that covers it throws it.
  REQUIRE_THROWS_AS(handle.wait(), ds::Error);
  busy += handle.busy_seconds();
  CHECK(handle.queued_count() == 3);
  CHECK(handle.wait() == 0);
  // The waits' busy figures add up to the union of the requests' times in flight, within the wall time.
  CHECK(busy > 0);
  CHECK(busy <= std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

TEST_CASE("a request queued behind one that is still in flight on the same worker goes to the device", "[io]") {
  TempDir dir;
  const std::string fifo = dir.file("blocked.fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // Opened for reading and writing so that neither this open nor the handle's blocks; the read
  // from it stays in flight until the test writes.
  const int fifo_fd = ::open(fifo.c_str(), O_RDWR);
  REQUIRE(fifo_fd >= 0);
  const Bytes content = random_bytes(8 * kPage, 21);
  plain_write(dir.file("data.bin"), content);
  LockedBuffers locked;
  char* from_fifo = static_cast<char*>(locked.allocate(kPage));
  char* from_file = static_cast<char*>(locked.allocate(content.size()));
  RawAioHandle handle(AioSettings{kPage, 4, false, true, 1});  // one worker

  handle.async_pread(from_fifo, kPage, fifo);
  handle.async_pread(from_file, static_cast<int64_t>(content.size()), dir.file("data.bin"));
  // The second request's bytes are counted once its slice is done, while the first still waits.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (handle.direct_bytes() + handle.buffered_bytes() < static_cast<int64_t>(content.size()) &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(handle.direct_bytes() + handle.buffered_bytes() == static_cast<int64_t>(content.size()));

  const Bytes fifo_bytes = random_bytes(kPage, 22);
  REQUIRE(::write(fifo_fd, fifo_bytes.data(), fifo_bytes.size()) == kPage);
  REQUIRE(handle.wait() == 2);
  ::close(fifo_fd);
  CHECK(bytes_at(from_fifo, kPage) == fifo_bytes);
  CHECK(bytes_at(from_file, static_cast<int64_t>(content.size())) == content);
}

TEST_CASE("the process's reading seconds count two handles' reads in flight at once once", "[io]") {
  // Two handles, each with a read from its own FIFO that stays in flight until the test writes:
  // each handle's busy time is the whole hold, and the process's the same hold, not twice it.
  TempDir dir;
  constexpr auto kHold = std::chrono::milliseconds(600);
  LockedBuffers locked;
  std::vector<int> fifos;
  std::vector<std::unique_ptr<RawAioHandle>> handles;
  const double reading_before = ds::io::reading_seconds(), writing_before = ds::io::writing_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(ds::io::reading_seconds() == reading_before);  // nothing in flight: the clock stands still

  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 2; ++i) {
    const std::string fifo = dir.file("held" + std::to_string(i) + ".fifo");
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    fifos.push_back(::open(fifo.c_str(), O_RDWR));  // as above: no open blocks
    REQUIRE(fifos.back() >= 0);
    handles.push_back(std::make_unique<RawAioHandle>(AioSettings{kPage, 4, false, true, 1}));
    handles.back()->async_pread(locked.allocate(kPage), kPage, fifo);
  }
  std::this_thread::sleep_for(kHold);
  const Bytes bytes = random_bytes(kPage, 23);
  for (int fd : fifos) REQUIRE(::write(fd, bytes.data(), bytes.size()) == kPage);
  double summed = 0;
  for (auto& handle : handles) {
    REQUIRE(handle->wait() == 1);
    summed += handle->busy_seconds();
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int fd : fifos) ::close(fd);

  const double reading = ds::io::reading_seconds() - reading_before;
  CHECK(reading >= std::chrono::duration<double>(kHold).count());
  CHECK(reading <= wall);
  CHECK(summed >= 2 * std::chrono::duration<double>(kHold).count());  // what summing the handles gave
  CHECK(ds::io::writing_seconds() == writing_before);
}
