// The scalars of one Adam step as the fused kernels use them, shared by the CPU kernel
// (fused_optimizer.cpp) and the CUDA one (fused_adam_cuda.cu) so that both compute the same bits:
// ATen rounds each scalar of a tensor op on fp32 tensors to fp32 before using it; so do these.
#pragma once

#include <cmath>

#include "dstrain/engine/kernels/fused_optimizer.hpp"

namespace ds::fused {

struct AdamScalars {
  float decay;  // p *= decay (decoupled), 1 otherwise
  float l2;     // g += l2 * p (coupled), 0 otherwise
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float sqrt_bias2, eps, neg_step;
};

inline AdamScalars scalars_of(const AdamStep& s) {
  AdamScalars k{};
  k.decay = s.decoupled && s.weight_decay != 0 ? static_cast<float>(1 - s.lr * s.weight_decay) : 1.0f;
  k.l2 = !s.decoupled ? static_cast<float>(s.weight_decay) : 0.0f;
  k.beta1 = static_cast<float>(s.beta1);
  k.one_minus_beta1 = static_cast<float>(1 - s.beta1);
  k.beta2 = static_cast<float>(s.beta2);
  k.one_minus_beta2 = static_cast<float>(1 - s.beta2);
  k.sqrt_bias2 = static_cast<float>(std::sqrt(s.bias_correction2));
  k.eps = static_cast<float>(s.eps);
  k.neg_step = static_cast<float>(-s.lr / s.bias_correction1);
  return k;
}

}  // namespace ds::fused
