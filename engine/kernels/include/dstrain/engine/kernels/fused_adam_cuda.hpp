// Fused Adam/AdamW on CUDA: the CPU kernel's update (fused_optimizer.hpp) over fp32 device ranges.
//
// Built only with DSTRAIN_WITH_CUDA. Each call is one kernel launch on the given stream (a
// cudaStream_t), asynchronous to the host; the ranges' memory must stay valid until it runs. The
// arithmetic is fused::adam's, operation for operation, with every multiply-add fused exactly where
// the CPU kernel calls std::fma, so both give the same bits (fused_adam_test checks).
#pragma once

#include <cstdint>

#include "dstrain/engine/kernels/fused_optimizer.hpp"

namespace ds::fused::cuda {

// n elements of parameters, gradients, first and second moments, all fp32 device memory. The four
// may lie at any alignment: where they share one modulo 16 bytes the kernel moves float4s.
struct AdamRange {
  float* params;
  const float* grads;
  float* exp_avg;
  float* exp_avg_sq;
  int64_t n;
};

// Most ranges one launch takes: their table travels in the kernel's arguments (CUDA 12.1+ allows
// 32 KiB of them). More ranges take one launch per this many.
inline constexpr int kMaxRangesPerLaunch = 512;

// One Adam/AdamW step of every range (multi-tensor: a model's slices, a list of tensors).
void adam(const AdamRange* ranges, int64_t count, const AdamStep& step, void* stream);

// One Adam/AdamW step of one flat range.
inline void adam(float* p, const float* g, float* m, float* v, int64_t n, const AdamStep& step, void* stream) {
  const AdamRange range{p, g, m, v, n};
  adam(&range, 1, step, stream);
}

}  // namespace ds::fused::cuda
