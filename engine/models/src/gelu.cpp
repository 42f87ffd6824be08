#include "dstrain/engine/models/gelu.hpp"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <cstdint>

#include "dstrain/engine/kernels/cpu_dispatch.hpp"
#include "dstrain/engine/kernels/fast_exp.hpp"

namespace ds::models {
namespace {

constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kKappa = 0.044715f;
constexpr int64_t kGrain = 1 << 14;

// e^(-2u) for u = kBeta (x + kKappa x^3): then 0.5 (1 + tanh u) = 1 / (1 + e^(-2u)).
DS_BODY float exp_minus_2u(float x) { return exp_clamped(-2.0f * kBeta * (x + kKappa * x * x * x)); }

DS_BODY void forward_range_body(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * (1.0f / (1.0f + exp_minus_2u(x[i])));
}

// d/dx [x s] with s = 0.5 (1 + tanh u) = 1 / (1 + e): s + x * 2 s (1 - s) * du/dx, where
// 1 - s = e s (not 1 - s, which loses s's digits where s is near 1).
DS_BODY void backward_range_body(const float* __restrict__ dy, const float* __restrict__ x, float* __restrict__ dx,
                                 int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float e = exp_minus_2u(v);
    const float s = 1.0f / (1.0f + e);
    const float du = kBeta * (1.0f + 3.0f * kKappa * v * v);
    dx[i] = dy[i] * (s + 2.0f * v * (s * s * e) * du);
  }
}

DS_DISPATCH(forward_range, (const float* x, float* y, int64_t n), (x, y, n))
DS_DISPATCH(backward_range, (const float* dy, const float* x, float* dx, int64_t n), (dy, x, dx, n))

bool fused(const at::Tensor& x) { return x.is_cpu() && x.scalar_type() == at::kFloat && x.is_contiguous(); }

class GeluTanh : public torch::autograd::Function<GeluTanh> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x) {
    ctx->save_for_backward({x});
    at::Tensor y = at::empty_like(x);
    const float* in = x.data_ptr<float>();
    float* out = y.data_ptr<float>();
    at::parallel_for(0, x.numel(), kGrain, [&](int64_t begin, int64_t end) {
      forward_range(in + begin, out + begin, end - begin);
    });
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    const at::Tensor dy = grads[0].contiguous();
    at::Tensor dx = at::empty_like(x);
    const float* g = dy.data_ptr<float>();
    const float* in = x.data_ptr<float>();
    float* out = dx.data_ptr<float>();
    at::parallel_for(0, x.numel(), kGrain, [&](int64_t begin, int64_t end) {
      backward_range(g + begin, in + begin, out + begin, end - begin);
    });
    return {dx};
  }
};

}  // namespace

at::Tensor gelu_tanh(const at::Tensor& x) {
  if (!fused(x)) return torch::gelu(x, "tanh");
  return GeluTanh::apply(x);
}

}  // namespace ds::models
