// DeepSpeed's tests/unit/ops/aio/test_aio.py on tensors, through ds::io::AioHandle, plus what the
// tensor adapter adds: dtypes, locked tensor ownership, and buffers the handle must refuse.
// (DeepSpeed's CUDA pin_memory variants have no counterpart in a CPU-only build.)
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <numeric>

#include "dstrain/io/aio_handle.hpp"
#include "dstrain/runtime/error.hpp"
#include "io_test_support.hpp"

namespace {

using ds::io::AioHandle;
using namespace ds::io::testing;

constexpr int64_t kBlockSize = 1024;
constexpr int kQueueDepth = 2;
constexpr int64_t kIoSize = 4 * kBlockSize;
constexpr int kIoParallel = 2;

void check_handle_state(const AioHandle& handle, bool single_submit, bool overlap_events) {
  REQUIRE(handle.get_single_submit() == single_submit);
  REQUIRE(handle.get_overlap_events() == overlap_events);
  REQUIRE(handle.get_intra_op_parallelism() == kIoParallel);
  REQUIRE(handle.get_block_size() == kBlockSize);
  REQUIRE(handle.get_queue_depth() == kQueueDepth);
}

Bytes tensor_bytes(const torch::Tensor& tensor) {
  const char* data = static_cast<const char*>(tensor.data_ptr());
  return Bytes(data, data + tensor.nbytes());
}

torch::Tensor byte_tensor(const Bytes& bytes) {
  return torch::from_blob(const_cast<char*>(bytes.data()), {static_cast<int64_t>(bytes.size())}, torch::kUInt8)
      .clone();
}

// DeepSpeed's use_unpinned_tensor: a plain torch::empty, or the handle's new_cpu_locked_tensor.
torch::Tensor make_buffer(AioHandle& handle, bool unpinned, int64_t size) {
  return unpinned ? torch::empty({size}, torch::kUInt8)
                  : handle.new_cpu_locked_tensor(size, torch::empty({0}, torch::kUInt8));
}

}  // namespace

TEST_CASE("AioHandle: parallel and async reads", "[io][deepspeed]") {
  const bool single_submit = GENERATE(true, false);
  const bool overlap_events = GENERATE(true, false);
  const bool unpinned = GENERATE(true, false);
  const bool async = GENERATE(false, true);
  CAPTURE(single_submit, overlap_events, unpinned, async);

  TempDir dir;
  const std::string ref_file = dir.file("_py_random_0_0.pt");
  plain_write(ref_file, random_bytes(kIoSize, 1));
  AioHandle handle(kBlockSize, kQueueDepth, single_submit, overlap_events, kIoParallel);
  torch::Tensor buffer = make_buffer(handle, unpinned, kIoSize);
  check_handle_state(handle, single_submit, overlap_events);

  if (async) {
    REQUIRE(handle.async_pread(buffer, ref_file, 0) == 0);
    REQUIRE(handle.wait() == 1);
  } else {
    REQUIRE(handle.sync_pread(buffer, ref_file, 0) == 1);
  }
  REQUIRE(tensor_bytes(buffer) == plain_read_all(ref_file));
  if (!unpinned) handle.free_cpu_locked_tensor(buffer);
}

TEST_CASE("AioHandle: parallel and async writes", "[io][deepspeed]") {
  const bool single_submit = GENERATE(true, false);
  const bool overlap_events = GENERATE(true, false);
  const bool unpinned = GENERATE(true, false);
  const bool async = GENERATE(false, true);
  CAPTURE(single_submit, overlap_events, unpinned, async);

  TempDir dir;
  const std::string ref_file = dir.file("_py_random_0_0.pt");
  const std::string aio_file = dir.file("_aio_write_random_0_0.pt");
  const Bytes reference = random_bytes(kIoSize, 2);
  plain_write(ref_file, reference);
  AioHandle handle(kBlockSize, kQueueDepth, single_submit, overlap_events, kIoParallel);
  torch::Tensor buffer = make_buffer(handle, unpinned, kIoSize);
  buffer.copy_(byte_tensor(reference));
  check_handle_state(handle, single_submit, overlap_events);

  if (async) {
    REQUIRE(handle.async_pwrite(buffer, aio_file, 0) == 0);
    REQUIRE(handle.wait() == 1);
  } else {
    REQUIRE(handle.sync_pwrite(buffer, aio_file, 0) == 1);
  }
  if (!unpinned) handle.free_cpu_locked_tensor(buffer);
  REQUIRE(plain_read_all(aio_file) == plain_read_all(ref_file));
}

TEST_CASE("AioHandle: async queues of reads and writes", "[io][deepspeed]") {
  const int async_queue = GENERATE(2, 3);
  const bool unpinned = GENERATE(true, false);
  CAPTURE(async_queue, unpinned);

  TempDir dir;
  AioHandle handle(kBlockSize, kQueueDepth, true, true, kIoParallel);
  check_handle_state(handle, true, true);
  std::vector<std::string> ref_files, aio_files;
  std::vector<torch::Tensor> read_buffers, write_buffers;
  for (int i = 0; i < async_queue; ++i) {
    const Bytes reference = random_bytes(kIoSize, 10 + i);
    ref_files.push_back(dir.file("_py_random_0_" + std::to_string(i) + ".pt"));
    aio_files.push_back(dir.file("_aio_write_random_0_" + std::to_string(i) + ".pt"));
    plain_write(ref_files.back(), reference);
    read_buffers.push_back(make_buffer(handle, unpinned, kIoSize));
    write_buffers.push_back(make_buffer(handle, unpinned, kIoSize));
    write_buffers.back().copy_(byte_tensor(reference));
  }

  for (int i = 0; i < async_queue; ++i) REQUIRE(handle.async_pread(read_buffers[i], ref_files[i], 0) == 0);
  REQUIRE(handle.wait() == async_queue);
  for (int i = 0; i < async_queue; ++i) REQUIRE(tensor_bytes(read_buffers[i]) == plain_read_all(ref_files[i]));

  for (int i = 0; i < async_queue; ++i) REQUIRE(handle.async_pwrite(write_buffers[i], aio_files[i], 0) == 0);
  REQUIRE(handle.wait() == async_queue);
  for (int i = 0; i < async_queue; ++i) REQUIRE(plain_read_all(aio_files[i]) == plain_read_all(ref_files[i]));
}

TEST_CASE("AioHandle: file offsets over partitions", "[io][deepspeed]") {
  const std::vector<int64_t> partitions =
      GENERATE(std::vector<int64_t>{1, 1, 1}, std::vector<int64_t>{1, 1, 2}, std::vector<int64_t>{1, 2, 1},
               std::vector<int64_t>{2, 1, 1});
  CAPTURE(partitions);
  TempDir dir;
  const std::string ref_file = dir.file("_py_random_0_0.pt");
  const std::string aio_file = dir.file("_aio_random_0_0.pt");
  const int64_t file_size_bytes = std::accumulate(partitions.begin(), partitions.end(), int64_t{0}) * kBlockSize;
  AioHandle handle(kBlockSize, kQueueDepth, true, true, kIoParallel);
  torch::Tensor data = handle.new_cpu_locked_tensor(file_size_bytes, torch::empty({0}, torch::kUInt8));
  data.copy_(byte_tensor(random_bytes(static_cast<size_t>(file_size_bytes), 3)));

  int64_t offset = 0;
  for (int64_t partition : partitions) {
    const int64_t length = partition * kBlockSize;
    torch::Tensor source = data.narrow(0, offset, length);
    plain_write(ref_file, tensor_bytes(source), offset);
    REQUIRE(handle.sync_pwrite(source, aio_file, offset) == 1);
    REQUIRE(plain_read_all(aio_file) == plain_read_all(ref_file));
    offset += length;
  }

  offset = 0;
  for (int64_t partition : partitions) {
    const int64_t length = partition * kBlockSize;
    torch::Tensor destination = data.narrow(0, 0, length);
    REQUIRE(handle.sync_pread(destination, ref_file, offset) == 1);
    REQUIRE(tensor_bytes(destination) == plain_read(ref_file, offset, length));
    offset += length;
  }
  handle.free_cpu_locked_tensor(data);
}

TEST_CASE("AioHandle: locked tensors take the example's dtype and round-trip", "[io]") {
  TempDir dir;
  AioHandle handle(64 * 1024, 8, false, true, 2);
  torch::Tensor values = handle.new_cpu_locked_tensor(10001, torch::empty({0}, torch::kFloat64));
  REQUIRE(values.scalar_type() == torch::kFloat64);
  REQUIRE(values.sizes() == torch::IntArrayRef{10001});
  REQUIRE(values.nbytes() == 10001 * sizeof(double));
  REQUIRE(reinterpret_cast<uintptr_t>(values.data_ptr()) % 4096 == 0);

  values.copy_(torch::randn({10001}, torch::kFloat64));
  REQUIRE(handle.sync_pwrite(values, dir.file("values.bin")) == 1);
  torch::Tensor back = torch::zeros({10001}, torch::kFloat64);
  REQUIRE(handle.sync_pread(back, dir.file("values.bin")) == 1);
  REQUIRE(torch::equal(back, values));
  handle.free_cpu_locked_tensor(values);
}

TEST_CASE("AioHandle: freeing a tensor the handle did not lock is an error", "[io]") {
  AioHandle handle(kBlockSize, kQueueDepth, false, true, 1);
  AioHandle other(kBlockSize, kQueueDepth, false, true, 1);
  torch::Tensor locked = handle.new_cpu_locked_tensor(kIoSize, torch::empty({0}, torch::kUInt8));
  REQUIRE_THROWS_AS(handle.free_cpu_locked_tensor(torch::empty({kIoSize}, torch::kUInt8)), ds::Error);
  REQUIRE_THROWS_AS(handle.free_cpu_locked_tensor(locked.narrow(0, 1024, 1024)), ds::Error);
  REQUIRE_THROWS_AS(other.free_cpu_locked_tensor(locked), ds::Error);
  handle.free_cpu_locked_tensor(locked);
  REQUIRE_THROWS_AS(handle.free_cpu_locked_tensor(locked), ds::Error);
}

TEST_CASE("AioHandle: non-contiguous and undefined buffers are refused", "[io]") {
  TempDir dir;
  AioHandle handle(kBlockSize, kQueueDepth, false, true, 1);
  torch::Tensor strided = torch::zeros({64, 64}, torch::kUInt8).t();
  REQUIRE_THROWS_AS(handle.sync_pwrite(strided, dir.file("x.bin")), ds::Error);
  REQUIRE_THROWS_AS(handle.async_pread(torch::Tensor(), dir.file("x.bin")), ds::Error);
  REQUIRE(handle.wait() == 0);
}

TEST_CASE("AioHandle: a queued write keeps a temporary tensor alive until wait", "[io]") {
  TempDir dir;
  const Bytes reference = random_bytes(256 * 1024, 4);
  AioHandle handle(4096, 4, false, true, 2);
  REQUIRE(handle.async_pwrite(byte_tensor(reference), dir.file("temporary.bin")) == 0);
  REQUIRE(handle.wait() == 1);
  REQUIRE(plain_read_all(dir.file("temporary.bin")) == reference);
}
