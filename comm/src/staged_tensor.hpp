// StagedTensor: a contiguous tensor a transport can read and write in place of a caller's tensor that
// it cannot use directly (non-contiguous, or on a device the transport cannot reach: MPI stages CUDA
// tensors through host memory, NCCL CPU tensors through its GPU). Results are written back to the
// caller's tensor by copy_back().
#pragma once

#include <ATen/core/Tensor.h>

namespace ds::comm {

class StagedTensor {
 public:
  // On `device`, the one the transport uses.
  StagedTensor(const at::Tensor& user, at::Device device);
  // device_ok: the transport can use the tensor's device as it is (CPU, or CUDA with CUDA-aware MPI);
  // otherwise staged on the CPU.
  StagedTensor(const at::Tensor& user, bool device_ok);

  const at::Tensor& tensor() const { return work_; }
  void* data() const { return work_.data_ptr(); }
  void copy_back() const;

 private:
  at::Tensor user_;
  at::Tensor work_;
};

}  // namespace ds::comm
