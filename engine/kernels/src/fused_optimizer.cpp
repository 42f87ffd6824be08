#include "dstrain/engine/kernels/fused_optimizer.hpp"

#include <ATen/Parallel.h>

#include <cmath>

#include "adam_scalars.hpp"
#include "dstrain/engine/kernels/cpu_dispatch.hpp"

// Each loop body is written once (inline) and compiled twice (cpu_dispatch.hpp). The bodies use
// std::fma exactly where ATen's vectorized kernels fuse a multiply-add (add with alpha), so results
// round as torch's do.
namespace ds::fused {
namespace {

// Elements per task: large enough that a task streams far more than it costs to schedule.
constexpr int64_t kGrain = 1 << 16;

DS_BODY void adam_range_body(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                       float* __restrict__ v, int64_t n, const AdamScalars k) {
  for (int64_t i = 0; i < n; ++i) {
    const float grad = std::fma(k.l2, p[i], g[i]);
    const float param = p[i] * k.decay;
    const float mi = std::fma(k.one_minus_beta1, grad, m[i] * k.beta1);
    const float vi = std::fma(k.one_minus_beta2 * grad, grad, v[i] * k.beta2);
    m[i] = mi;
    v[i] = vi;
    p[i] = param + k.neg_step * mi / (std::sqrt(vi) / k.sqrt_bias2 + k.eps);
  }
}

DS_BODY void adam_update_range_body(float* __restrict__ p, const float* __restrict__ m, const float* __restrict__ v,
                              int64_t n, const AdamScalars k) {
  for (int64_t i = 0; i < n; ++i) p[i] = p[i] * k.decay + k.neg_step * m[i] / (std::sqrt(v[i]) / k.sqrt_bias2 + k.eps);
}

DS_BODY void momentum_range_body(float* __restrict__ m, const float* __restrict__ g, int64_t n, const float beta1,
                           const float one_minus_beta1) {
  for (int64_t i = 0; i < n; ++i) m[i] = std::fma(one_minus_beta1, g[i], m[i] * beta1);
}

struct SgdScalars {
  float wd, momentum, one_minus_dampening, neg_lr;
};

DS_BODY void sgd_plain_range_body(float* __restrict__ p, const float* __restrict__ g, int64_t n, const SgdScalars k) {
  for (int64_t i = 0; i < n; ++i) p[i] = std::fma(k.neg_lr, std::fma(k.wd, p[i], g[i]), p[i]);
}

DS_BODY void sgd_momentum_range_body(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ buf,
                               int64_t n, const SgdScalars k, const bool first, const bool nesterov) {
  for (int64_t i = 0; i < n; ++i) {
    const float grad = std::fma(k.wd, p[i], g[i]);
    const float b = first ? grad : std::fma(k.one_minus_dampening, grad, buf[i] * k.momentum);
    buf[i] = b;
    p[i] = std::fma(k.neg_lr, nesterov ? std::fma(k.momentum, b, grad) : b, p[i]);
  }
}

// Eight partial sums so that the loop vectorizes without reassociating one sum.
DS_BODY double sum_of_squares_range_body(const float* __restrict__ x, int64_t n) {
  constexpr int kLanes = 8;
  double partial[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const double xi = x[i + j];
      partial[j] += xi * xi;
    }
  double total = 0;
  for (; i < n; ++i) total += static_cast<double>(x[i]) * x[i];
  for (double s : partial) total += s;
  return total;
}

DS_DISPATCH(adam_range, (float* p, const float* g, float* m, float* v, int64_t n, const AdamScalars k),
            (p, g, m, v, n, k))
DS_DISPATCH(adam_update_range, (float* p, const float* m, const float* v, int64_t n, const AdamScalars k),
            (p, m, v, n, k))
DS_DISPATCH(momentum_range, (float* m, const float* g, int64_t n, const float beta1, const float one_minus_beta1),
            (m, g, n, beta1, one_minus_beta1))
DS_DISPATCH(sgd_plain_range, (float* p, const float* g, int64_t n, const SgdScalars k), (p, g, n, k))
DS_DISPATCH(sgd_momentum_range,
            (float* p, const float* g, float* buf, int64_t n, const SgdScalars k, const bool first, const bool nesterov),
            (p, g, buf, n, k, first, nesterov))
DS_DISPATCH(sum_of_squares_range, (const float* x, int64_t n), (x, n))

}  // namespace

void adam(float* p, const float* g, float* m, float* v, int64_t n, const AdamStep& s) {
  const AdamScalars k = scalars_of(s);
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    adam_range(p + begin, g + begin, m + begin, v + begin, end - begin, k);
  });
}

void adam_update(float* p, const float* m, const float* v, int64_t n, const AdamStep& s) {
  const AdamScalars k = scalars_of(s);
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    adam_update_range(p + begin, m + begin, v + begin, end - begin, k);
  });
}

void momentum(float* m, const float* g, int64_t n, double beta1) {
  const float b = static_cast<float>(beta1), one_minus_b = static_cast<float>(1 - beta1);
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    momentum_range(m + begin, g + begin, end - begin, b, one_minus_b);
  });
}

void sgd(float* p, const float* g, float* buf, int64_t n, const SgdStep& s) {
  const SgdScalars k{static_cast<float>(s.weight_decay), static_cast<float>(s.momentum),
                     static_cast<float>(1 - s.dampening), static_cast<float>(-s.lr)};
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    if (s.momentum == 0)
      sgd_plain_range(p + begin, g + begin, end - begin, k);
    else
      sgd_momentum_range(p + begin, g + begin, buf + begin, end - begin, k, s.first, s.nesterov);
  });
}

double sum_of_squares(const float* x, int64_t n) {
  return at::parallel_reduce(
      0, n, kGrain, 0.0,
      [&](int64_t begin, int64_t end, double partial) { return partial + sum_of_squares_range(x + begin, end - begin); },
      [](double a, double b) { return a + b; });
}

}  // namespace ds::fused
