#include "dstrain/pipe/tensor_meta.hpp"

#include <ATen/ATen.h>

#include "dstrain/runtime/error.hpp"

namespace ds::pipe {

TensorMeta TensorMeta::of(const at::Tensor& tensor) {
  if (tensor.dim() > kMaxDims) {
    throw Error("a pipeline activation has " + std::to_string(tensor.dim()) + " dimensions, at most " +
                std::to_string(kMaxDims) + " can cross between stages");
  }
  return {tensor.scalar_type(), tensor.sizes().vec()};
}

at::Tensor TensorMeta::encode() const {
  at::Tensor header = at::zeros({kHeaderLength}, at::kLong);
  int64_t* fields = header.data_ptr<int64_t>();
  fields[0] = static_cast<int64_t>(dtype);
  fields[1] = static_cast<int64_t>(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) fields[2 + i] = sizes[i];
  return header;
}

TensorMeta TensorMeta::decode(const at::Tensor& header) {
  if (header.scalar_type() != at::kLong || header.numel() != kHeaderLength)
    throw Error("a pipeline tensor header must be " + std::to_string(kHeaderLength) + " int64 values");
  const at::Tensor contiguous = header.contiguous();
  const int64_t* fields = contiguous.data_ptr<int64_t>();
  const int64_t dtype = fields[0];
  const int64_t dims = fields[1];
  if (dtype < 0 || dtype >= static_cast<int64_t>(at::ScalarType::NumOptions) || dims < 0 || dims > kMaxDims) {
    throw Error("malformed pipeline tensor header: dtype " + std::to_string(dtype) + ", " + std::to_string(dims) +
                " dimensions");
  }
  TensorMeta meta{static_cast<at::ScalarType>(dtype), std::vector<int64_t>(fields + 2, fields + 2 + dims)};
  for (int64_t size : meta.sizes)
    if (size < 0) throw Error("malformed pipeline tensor header: size " + std::to_string(size));
  return meta;
}

at::Tensor TensorMeta::empty(at::Device device) const {
  return at::empty(sizes, at::TensorOptions().dtype(dtype).device(device));
}

void TensorMeta::check(const at::Tensor& tensor, const std::string& what) const {
  if (tensor.scalar_type() == dtype && tensor.sizes().vec() == sizes) return;
  throw Error(what + " is " + TensorMeta::of(tensor).to_string() + ", but the stages agreed on " + to_string() +
              " with the first activation (shapes and dtypes must stay the same for the whole run)");
}

std::string TensorMeta::to_string() const {
  std::string text = "[";
  for (size_t i = 0; i < sizes.size(); ++i) text += (i ? ", " : "") + std::to_string(sizes[i]);
  return text + "] " + c10::toString(dtype);
}

bool operator==(const TensorMeta& a, const TensorMeta& b) { return a.dtype == b.dtype && a.sizes == b.sizes; }

}  // namespace ds::pipe
