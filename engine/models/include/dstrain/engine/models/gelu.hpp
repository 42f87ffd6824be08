// GPT-2's GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as
// torch::gelu(x, "tanh") computes it, with its gradient.
//
// Debian's LibTorch evaluates tanh one element at a time (no SLEEF): its GELU forward and backward
// took ~6 ms per million elements, about a tenth of a small GPT's step. On contiguous fp32 CPU
// tensors this one runs a vectorized kernel (0.5 (1 + tanh u) = 1 / (1 + exp(-2u)), exp by range
// reduction and a polynomial, within 1e-6 relative of torch's); other tensors take torch's.
#pragma once

#include <ATen/core/Tensor.h>

namespace ds::models {

at::Tensor gelu_tanh(const at::Tensor& x);

}  // namespace ds::models
