// DeepSpeed's tests/unit/ops/aio/test_aio.py, ported to the raw-pointer handle: sync ("parallel")
// and async reads and writes over single_submit x overlap_events x locked/plain buffer, queues of
// 2 and 3 async requests closed by one wait(), and file offsets over partitions of the file.
#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <numeric>

#include "dstrain/io/aio_settings.hpp"
#include "dstrain/io/locked_buffers.hpp"
#include "dstrain/io/raw_aio_handle.hpp"
#include "dstrain/runtime/config.hpp"
#include "io_test_support.hpp"

namespace {

using ds::io::AioSettings;
using ds::io::LockedBuffers;
using ds::io::RawAioHandle;
using namespace ds::io::testing;

// DeepSpeed's constants.
constexpr int64_t kBlockSize = 1024;
constexpr int kQueueDepth = 2;
constexpr int64_t kIoSize = 4 * kBlockSize;
constexpr int kIoParallel = 2;

AioSettings deepspeed_settings(bool single_submit, bool overlap_events) {
  return AioSettings{kBlockSize, kQueueDepth, single_submit, overlap_events, kIoParallel};
}

void check_handle_state(const RawAioHandle& handle, bool single_submit, bool overlap_events) {
  REQUIRE(handle.settings().single_submit == single_submit);
  REQUIRE(handle.settings().overlap_events == overlap_events);
  REQUIRE(handle.settings().intra_op_parallelism == kIoParallel);
  REQUIRE(handle.settings().block_size == kBlockSize);
  REQUIRE(handle.settings().queue_depth == kQueueDepth);
}

// DeepSpeed's two host buffer kinds: new_cpu_locked_tensor memory, or ordinary (unpinned) memory.
class TestBuffer {
 public:
  TestBuffer(LockedBuffers& locked, bool use_locked, int64_t size)
      : plain_(use_locked ? 0 : static_cast<size_t>(size)),
        data_(use_locked ? static_cast<char*>(locked.allocate(static_cast<size_t>(size))) : plain_.data()),
        size_(size) {}
  char* data() const { return data_; }
  Bytes bytes() const { return Bytes(data_, data_ + size_); }
  void fill(const Bytes& bytes) { std::memcpy(data_, bytes.data(), bytes.size()); }

 private:
  Bytes plain_;
  char* data_;
  int64_t size_;
};

}  // namespace

TEST_CASE("a config's aio block gives the handle its settings, field by field", "[io][deepspeed]") {
  ds::AioConfig aio;  // every field away from its default, each to a different value
  aio.block_size = 8192;
  aio.queue_depth = 3;
  aio.intra_op_parallelism = 2;
  aio.single_submit = true;
  aio.overlap_events = false;
  const ds::io::AioSettings settings = ds::io::aio_settings(aio);
  CHECK(settings.block_size == 8192);
  CHECK(settings.queue_depth == 3);
  CHECK(settings.intra_op_parallelism == 2);
  CHECK(settings.single_submit);
  CHECK_FALSE(settings.overlap_events);
}

TEST_CASE("a swapper's reader keeps 4 times the queue depth in flight, up to 4096", "[io]") {
  ds::io::AioSettings aio;
  aio.block_size = 8192;
  aio.queue_depth = 8;
  aio.intra_op_parallelism = 2;
  const ds::io::AioSettings reader = ds::io::for_swap_reads(aio);
  CHECK(reader.queue_depth == 32);
  CHECK(reader.block_size == 8192);
  CHECK(reader.intra_op_parallelism == 2);
  aio.queue_depth = 2000;
  CHECK(ds::io::for_swap_reads(aio).queue_depth == 4096);
  aio.queue_depth = 5000;  // deeper than the cap already: as set
  CHECK(ds::io::for_swap_reads(aio).queue_depth == 5000);
}

TEST_CASE("sync and async reads fill the buffer with the file", "[io][deepspeed]") {
  const bool single_submit = GENERATE(true, false);
  const bool overlap_events = GENERATE(true, false);
  const bool locked = GENERATE(true, false);
  const bool async = GENERATE(false, true);
  CAPTURE(single_submit, overlap_events, locked, async);

  TempDir dir;
  const std::string ref_file = dir.file("_py_random_0_0.pt");
  const Bytes reference = random_bytes(kIoSize, 1);
  plain_write(ref_file, reference);

  LockedBuffers locked_buffers;
  TestBuffer buffer(locked_buffers, locked, kIoSize);
  RawAioHandle handle(deepspeed_settings(single_submit, overlap_events));
  check_handle_state(handle, single_submit, overlap_events);

  if (async) {
    REQUIRE(handle.async_pread(buffer.data(), kIoSize, ref_file, 0) == 0);
    REQUIRE(handle.wait() == 1);
  } else {
    REQUIRE(handle.sync_pread(buffer.data(), kIoSize, ref_file, 0) == 1);
  }
  REQUIRE(buffer.bytes() == plain_read_all(ref_file));
}

TEST_CASE("sync and async writes produce the reference file", "[io][deepspeed]") {
  const bool single_submit = GENERATE(true, false);
  const bool overlap_events = GENERATE(true, false);
  const bool locked = GENERATE(true, false);
  const bool async = GENERATE(false, true);
  CAPTURE(single_submit, overlap_events, locked, async);

  TempDir dir;
  const std::string ref_file = dir.file("_py_random_0_0.pt");
  const std::string aio_file = dir.file("_aio_write_random_0_0.pt");
  const Bytes reference = random_bytes(kIoSize, 2);
  plain_write(ref_file, reference);

  LockedBuffers locked_buffers;
  TestBuffer buffer(locked_buffers, locked, kIoSize);
  buffer.fill(reference);
  RawAioHandle handle(deepspeed_settings(single_submit, overlap_events));
  check_handle_state(handle, single_submit, overlap_events);

  if (async) {
    REQUIRE(handle.async_pwrite(buffer.data(), kIoSize, aio_file, 0) == 0);
    REQUIRE(handle.wait() == 1);
  } else {
    REQUIRE(handle.sync_pwrite(buffer.data(), kIoSize, aio_file, 0) == 1);
  }
  REQUIRE(file_size(aio_file) == kIoSize);
  REQUIRE(plain_read_all(aio_file) == plain_read_all(ref_file));
}

TEST_CASE("a queue of async reads completes with one wait", "[io][deepspeed]") {
  const int async_queue = GENERATE(2, 3);
  const bool locked = GENERATE(true, false);
  CAPTURE(async_queue, locked);

  TempDir dir;
  LockedBuffers locked_buffers;
  RawAioHandle handle(deepspeed_settings(true, true));
  check_handle_state(handle, true, true);
  std::vector<std::string> ref_files;
  std::vector<std::unique_ptr<TestBuffer>> buffers;
  for (int i = 0; i < async_queue; ++i) {
    ref_files.push_back(dir.file("_py_random_0_" + std::to_string(i) + ".pt"));
    plain_write(ref_files.back(), random_bytes(kIoSize, 10 + i));
    buffers.push_back(std::make_unique<TestBuffer>(locked_buffers, locked, kIoSize));
  }

  for (int i = 0; i < async_queue; ++i)
    REQUIRE(handle.async_pread(buffers[i]->data(), kIoSize, ref_files[i], 0) == 0);
  REQUIRE(handle.wait() == async_queue);
  for (int i = 0; i < async_queue; ++i) REQUIRE(buffers[i]->bytes() == plain_read_all(ref_files[i]));
}

TEST_CASE("a queue of async writes completes with one wait", "[io][deepspeed]") {
  const int async_queue = GENERATE(2, 3);
  const bool locked = GENERATE(true, false);
  CAPTURE(async_queue, locked);

  TempDir dir;
  LockedBuffers locked_buffers;
  RawAioHandle handle(deepspeed_settings(true, true));
  check_handle_state(handle, true, true);
  std::vector<std::string> ref_files, aio_files;
  std::vector<std::unique_ptr<TestBuffer>> buffers;
  for (int i = 0; i < async_queue; ++i) {
    Bytes reference = random_bytes(kIoSize, 20 + i);
    ref_files.push_back(dir.file("_py_random_0_" + std::to_string(i) + ".pt"));
    aio_files.push_back(dir.file("_aio_write_random_0_" + std::to_string(i) + ".pt"));
    plain_write(ref_files.back(), reference);
    buffers.push_back(std::make_unique<TestBuffer>(locked_buffers, locked, kIoSize));
    buffers.back()->fill(reference);
  }

  for (int i = 0; i < async_queue; ++i)
    REQUIRE(handle.async_pwrite(buffers[i]->data(), kIoSize, aio_files[i], 0) == 0);
  REQUIRE(handle.wait() == async_queue);
  for (int i = 0; i < async_queue; ++i) REQUIRE(plain_read_all(aio_files[i]) == plain_read_all(ref_files[i]));
}

namespace {

// The partitions of DeepSpeed's TestAsyncFileOffset, in units of the block size.
std::vector<int64_t> partition_offsets(const std::vector<int64_t>& partitions) {
  std::vector<int64_t> offsets(partitions.size());
  std::exclusive_scan(partitions.begin(), partitions.end(), offsets.begin(), int64_t{0});
  for (int64_t& offset : offsets) offset *= kBlockSize;
  return offsets;
}

}  // namespace

TEST_CASE("writes at file offsets assemble the file partition by partition", "[io][deepspeed]") {
  const std::vector<int64_t> partitions =
      GENERATE(std::vector<int64_t>{1, 1, 1}, std::vector<int64_t>{1, 1, 2}, std::vector<int64_t>{1, 2, 1},
               std::vector<int64_t>{2, 1, 1});
  const bool locked = GENERATE(true, false);
  CAPTURE(partitions, locked);

  TempDir dir;
  const std::string ref_file = dir.file("_py_random_0_0.pt");
  const std::string aio_file = dir.file("_aio_random_0_0.pt");
  const int64_t file_size_bytes = std::accumulate(partitions.begin(), partitions.end(), int64_t{0}) * kBlockSize;
  const std::vector<int64_t> offsets = partition_offsets(partitions);

  LockedBuffers locked_buffers;
  TestBuffer data(locked_buffers, locked, file_size_bytes);
  data.fill(random_bytes(static_cast<size_t>(file_size_bytes), 30));
  RawAioHandle handle(deepspeed_settings(true, true));

  for (size_t i = 0; i < partitions.size(); ++i) {
    const int64_t length = partitions[i] * kBlockSize;
    const Bytes source(data.data() + offsets[i], data.data() + offsets[i] + length);
    plain_write(ref_file, source, offsets[i]);
    REQUIRE(handle.sync_pwrite(data.data() + offsets[i], length, aio_file, offsets[i]) == 1);
    REQUIRE(plain_read_all(aio_file) == plain_read_all(ref_file));
  }
}

TEST_CASE("reads at file offsets return each partition", "[io][deepspeed]") {
  const std::vector<int64_t> partitions =
      GENERATE(std::vector<int64_t>{1, 1, 1}, std::vector<int64_t>{1, 1, 2}, std::vector<int64_t>{1, 2, 1},
               std::vector<int64_t>{2, 1, 1});
  const bool locked = GENERATE(true, false);
  CAPTURE(partitions, locked);

  TempDir dir;
  const std::string ref_file = dir.file("_py_random_0_0.pt");
  const int64_t file_size_bytes = std::accumulate(partitions.begin(), partitions.end(), int64_t{0}) * kBlockSize;
  plain_write(ref_file, random_bytes(static_cast<size_t>(file_size_bytes), 40));
  const std::vector<int64_t> offsets = partition_offsets(partitions);

  LockedBuffers locked_buffers;
  TestBuffer data(locked_buffers, locked, file_size_bytes);
  RawAioHandle handle(deepspeed_settings(true, true));

  for (size_t i = 0; i < partitions.size(); ++i) {
    const int64_t length = partitions[i] * kBlockSize;
    REQUIRE(handle.sync_pread(data.data(), length, ref_file, offsets[i]) == 1);
    REQUIRE(Bytes(data.data(), data.data() + length) == plain_read(ref_file, offsets[i], length));
  }
}
