// Fused optimizer kernels: one pass over raw fp32 ranges of parameters, gradients and state.
//
// Each kernel reads and writes every element once, allocates nothing, and splits [0, n) over the
// intra-op threads. The ShardOptimizers run them on the whole flat shard; an offloaded step can run
// them on any sub-range (a swapped-in sub-group), since element i only touches index i.
//
// The arithmetic follows torch.optim's tensor ops step by step, in fp32 with each scalar rounded to
// fp32 as ATen rounds it, so results match torch::optim to rounding (fused_optimizer_test checks
// 100 steps against torch::optim::Adam, AdamW and SGD).
#pragma once

#include <cstdint>

namespace ds::fused {

// One Adam step's scalars.
struct AdamStep {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool decoupled = true;             // AdamW's decay of the weights, else L2 added to the gradient
  double bias_correction1 = 1;       // 1 - beta1^step, or 1 without bias correction
  double bias_correction2 = 1;       // 1 - beta2^step, or 1
};

// Adam / AdamW: m = b1·m + (1−b1)·g';  v = b2·v + (1−b2)·g'²;  p −= lr/bc1 · m / (√v/√bc2 + eps),
// with g' = g + wd·p (L2), or p *= 1 − lr·wd first (decoupled).
void adam(float* p, const float* g, float* m, float* v, int64_t n, const AdamStep& s);

// Adam's update from given moments, m and v untouched (OneBitAdam after its momentum exchange).
void adam_update(float* p, const float* m, const float* v, int64_t n, const AdamStep& s);

// m = beta1·m + (1−beta1)·g (OneBitAdam's local momentum).
void momentum(float* m, const float* g, int64_t n, double beta1);

// One SGD step's scalars (torch.optim.SGD).
struct SgdStep {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool first = false;  // the momentum buffer starts as the gradient
};

// g' = g + wd·p;  buf = g' (first) or momentum·buf + (1−dampening)·g';  p −= lr·(nesterov ? g' + momentum·buf : buf).
// `buf` may be null when momentum is 0.
void sgd(float* p, const float* g, float* buf, int64_t n, const SgdStep& s);

// Σ x², accumulated in double.
double sum_of_squares(const float* x, int64_t n);

}  // namespace ds::fused
