#include "dstrain/io/aio_handle.hpp"

#include <torch/types.h>

#include "dstrain/runtime/error.hpp"

namespace ds::io {

namespace {

AioSettings settings_of(int64_t block_size, int queue_depth, bool single_submit, bool overlap_events,
                        int intra_op_parallelism) {
  return AioSettings{block_size, queue_depth, single_submit, overlap_events, intra_op_parallelism};
}

// Throws ds::Error unless the tensor's bytes form one span of host memory.
void check_buffer(const at::Tensor& buffer, const std::string& path, int64_t file_offset) {
  auto fail = [&](const std::string& why) {
    return Error("aio buffer " + why).with_path(path).with_offset(file_offset);
  };
  if (!buffer.defined()) throw fail("is an undefined tensor");
  if (!buffer.device().is_cpu()) throw fail("must be a CPU tensor, got one on " + buffer.device().str());
  if (!buffer.is_contiguous()) throw fail("must be contiguous");
}

}  // namespace

AioHandle::AioHandle(int64_t block_size, int queue_depth, bool single_submit, bool overlap_events,
                     int intra_op_parallelism)
    : raw_(settings_of(block_size, queue_depth, single_submit, overlap_events, intra_op_parallelism)) {}

int AioHandle::sync_pread(const at::Tensor& buffer, const std::string& path, int64_t file_offset) {
  check_buffer(buffer, path, file_offset);
  return raw_.sync_pread(buffer.data_ptr(), static_cast<int64_t>(buffer.nbytes()), path, file_offset);
}

int AioHandle::sync_pwrite(const at::Tensor& buffer, const std::string& path, int64_t file_offset) {
  check_buffer(buffer, path, file_offset);
  return raw_.sync_pwrite(buffer.data_ptr(), static_cast<int64_t>(buffer.nbytes()), path, file_offset);
}

int AioHandle::async_pread(const at::Tensor& buffer, const std::string& path, int64_t file_offset) {
  check_buffer(buffer, path, file_offset);
  raw_.async_pread(buffer.data_ptr(), static_cast<int64_t>(buffer.nbytes()), path, file_offset);
  queued_buffers_.push_back(buffer);
  return 0;
}

int AioHandle::async_pwrite(const at::Tensor& buffer, const std::string& path, int64_t file_offset) {
  check_buffer(buffer, path, file_offset);
  raw_.async_pwrite(buffer.data_ptr(), static_cast<int64_t>(buffer.nbytes()), path, file_offset);
  queued_buffers_.push_back(buffer);
  return 0;
}

int AioHandle::wait() {
  // The buffers are released whether or not the I/O succeeded: either way the kernel is done.
  std::vector<at::Tensor> finished;
  finished.swap(queued_buffers_);
  return raw_.wait();
}

at::Tensor AioHandle::new_cpu_locked_tensor(int64_t num_elements, const at::Tensor& example_tensor) {
  if (num_elements < 0)
    throw Error("new_cpu_locked_tensor: num_elements must not be negative, got " + std::to_string(num_elements));
  auto options = torch::TensorOptions().dtype(example_tensor.scalar_type()).device(torch::kCPU);
  void* memory = locked_.allocate(static_cast<size_t>(num_elements) * options.dtype().itemsize());
  return torch::from_blob(memory, {num_elements}, options);
}

void AioHandle::free_cpu_locked_tensor(const at::Tensor& tensor) {
  if (!tensor.defined()) throw Error("free_cpu_locked_tensor: undefined tensor");
  locked_.release(tensor.data_ptr());
}

bool AioHandle::is_locked(const at::Tensor& tensor) const {
  return tensor.defined() && locked_.is_locked(tensor.data_ptr());
}

}  // namespace ds::io
