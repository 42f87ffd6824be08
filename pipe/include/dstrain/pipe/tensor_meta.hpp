// The shape and dtype of the tensors that cross between two neighbouring pipeline stages. They are
// agreed once per run: before its first activation a stage sends its TensorMeta as a fixed-size
// int64 header, the neighbour sizes its receive buffers from it, and every later activation and
// gradient is checked against it (DeepSpeed sends the same header once, but checks nothing after).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ds::pipe {

struct TensorMeta {
  static constexpr int kMaxDims = 8;
  static constexpr int kHeaderLength = kMaxDims + 2;  // dtype, rank, sizes padded with zeros

  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> sizes;

  static TensorMeta of(const at::Tensor& tensor);  // ds::Error beyond kMaxDims dimensions
  // A CPU int64 tensor of kHeaderLength elements, and back (ds::Error on a malformed header).
  at::Tensor encode() const;
  static TensorMeta decode(const at::Tensor& header);

  // A new tensor of this shape and dtype on `device`, e.g. a receive buffer.
  at::Tensor empty(at::Device device = at::kCPU) const;
  // ds::Error naming `what`, the tensor's shape and dtype and the agreed ones when they differ.
  void check(const at::Tensor& tensor, const std::string& what) const;

  std::string to_string() const;  // "[4, 16, 32] Float"
};

bool operator==(const TensorMeta& a, const TensorMeta& b);

}  // namespace ds::pipe
