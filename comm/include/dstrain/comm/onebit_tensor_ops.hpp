// The 1-bit arithmetic of onebit_kernels.hpp expressed as ATen operations, so that it runs on the
// tensors' own device (the GPU for NcclBackend) with the same definitions: sign(0) = +1, 8 signs per
// byte with the first value in the most significant bit, scale = ‖x‖₂/√n accumulated in double.
#pragma once

#include <ATen/core/Tensor.h>

namespace ds::comm::onebit {

// x: float32 of n values, n a multiple of 8 → uint8 of n / 8 bytes.
at::Tensor pack_signs(const at::Tensor& x);
// packed: uint8 [rows, bytes]; scales: float32 [rows] → float32 [rows, 8 * bytes] of ±scales[row].
at::Tensor unpack_signs(const at::Tensor& packed, const at::Tensor& scales);
// v = x + error; scale = ‖v‖₂/√n; error = v − scale·sign(v) (in place). Returns {scale (a
// 1-element float32 tensor on x's device), the packed signs of v}. x and error: float32, same length.
std::pair<at::Tensor, at::Tensor> compress_with_feedback(const at::Tensor& x, const at::Tensor& error);

}  // namespace ds::comm::onebit
