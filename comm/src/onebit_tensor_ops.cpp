#include "dstrain/comm/onebit_tensor_ops.hpp"

#include <ATen/ATen.h>

#include <cmath>
#include <utility>

namespace ds::comm::onebit {
namespace {

at::Tensor positive_signs(const at::Tensor& x) { return at::logical_not(x.lt(0)); }

}  // namespace

at::Tensor pack_signs(const at::Tensor& x) {
  const at::Tensor place_values = at::tensor({128, 64, 32, 16, 8, 4, 2, 1}, x.options().dtype(at::kByte));
  return positive_signs(x).to(at::kByte).view({-1, 8}).mul(place_values).sum(1, /*keepdim=*/false, at::kByte);
}

at::Tensor unpack_signs(const at::Tensor& packed, const at::Tensor& scales) {
  const at::Tensor shifts = at::tensor({7, 6, 5, 4, 3, 2, 1, 0}, packed.options());
  const at::Tensor bits = packed.unsqueeze(-1).bitwise_right_shift(shifts).bitwise_and(1);  // [rows, bytes, 8]
  const at::Tensor signs = bits.reshape({packed.size(0), -1}).to(at::kFloat).mul_(2).sub_(1);
  return signs.mul_(scales.view({-1, 1}));
}

std::pair<at::Tensor, at::Tensor> compress_with_feedback(const at::Tensor& x, const at::Tensor& error) {
  const at::Tensor v = x + error;
  const at::Tensor scale =
      (at::linalg_vector_norm(v, 2, c10::nullopt, false, at::kDouble) / std::sqrt(double(v.numel()))).to(at::kFloat);
  error.copy_(v - at::where(positive_signs(v), scale, -scale));
  return {scale.view({1}), pack_signs(v)};
}

}  // namespace ds::comm::onebit
