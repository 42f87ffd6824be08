// ds::io::AioHandle: DeepSpeed's aio_handle for LibTorch tensors. The buffers are CPU tensors,
// contiguous, locked (new_cpu_locked_tensor) or not; the I/O itself is ds::io::RawAioHandle's.
//
//   ds::io::AioHandle handle(1 << 20, 8, false, true, 1);
//   torch::Tensor buffer = handle.new_cpu_locked_tensor(n, torch::empty({0}, torch::kFloat));
//   handle.async_pwrite(buffer, "/nvme/swap/param.bin");
//   handle.wait();  // 1
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dstrain/io/locked_buffers.hpp"
#include "dstrain/io/raw_aio_handle.hpp"

namespace ds::io {

class AioHandle {
 public:
  // Defaults are those of DeepSpeed's "aio" config block.
  explicit AioHandle(int64_t block_size = 1 << 20, int queue_depth = 8, bool single_submit = false,
                     bool overlap_events = true, int intra_op_parallelism = 1);

  int64_t get_block_size() const { return raw_.settings().block_size; }
  int get_queue_depth() const { return raw_.settings().queue_depth; }
  bool get_single_submit() const { return raw_.settings().single_submit; }
  bool get_overlap_events() const { return raw_.settings().overlap_events; }
  int get_intra_op_parallelism() const { return raw_.settings().intra_op_parallelism; }

  // All of the tensor's bytes from or to the file at file_offset; 1 on success, ds::Error on failure.
  int sync_pread(const at::Tensor& buffer, const std::string& path, int64_t file_offset = 0);
  int sync_pwrite(const at::Tensor& buffer, const std::string& path, int64_t file_offset = 0);
  // 0 once queued. The handle keeps the tensor alive until wait(); do not touch it before then.
  int async_pread(const at::Tensor& buffer, const std::string& path, int64_t file_offset = 0);
  int async_pwrite(const at::Tensor& buffer, const std::string& path, int64_t file_offset = 0);
  // How many queued requests completed; throws the first failure once all have finished.
  int wait();

  // A 1-D tensor of num_elements elements of example_tensor's dtype, in page-aligned mlock'ed memory
  // (pageable, with a warning, when RLIMIT_MEMLOCK refuses). It lives until free_cpu_locked_tensor
  // or the handle's end, whichever comes first.
  at::Tensor new_cpu_locked_tensor(int64_t num_elements, const at::Tensor& example_tensor);
  // Throws ds::Error for a tensor that new_cpu_locked_tensor of this handle did not return.
  void free_cpu_locked_tensor(const at::Tensor& tensor);
  bool is_locked(const at::Tensor& tensor) const;

 private:
  // Declared before raw_: raw_'s destructor waits for the I/O still using these buffers.
  LockedBuffers locked_;
  std::vector<at::Tensor> queued_buffers_;
  RawAioHandle raw_;
};

}  // namespace ds::io
