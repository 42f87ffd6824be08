#include "dstrain/engine/models/rms_norm.hpp"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "dstrain/engine/kernels/cpu_dispatch.hpp"

namespace ds::models {
namespace {

// Rows per task: each task also sums its own share of dweight, so a task should be a few hundred
// kilobytes of rows at least.
constexpr int64_t kRowGrain = 64;

// sum of x[i]^2 in eight lanes, so the loop vectorizes without reassociating one accumulator.
DS_BODY float sum_of_squares(const float* __restrict__ x, int64_t n) {
  float lanes[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) lanes[j] += x[i + j] * x[i + j];
  float sum = 0;
  for (; i < n; ++i) sum += x[i] * x[i];
  for (float lane : lanes) sum += lane;
  return sum;
}

DS_BODY float dot(const float* __restrict__ a, const float* __restrict__ b, const float* __restrict__ c, int64_t n) {
  float lanes[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) lanes[j] += a[i + j] * b[i + j] * c[i + j];
  float sum = 0;
  for (; i < n; ++i) sum += a[i] * b[i] * c[i];
  for (float lane : lanes) sum += lane;
  return sum;
}

DS_BODY void forward_rows_body(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                               float* __restrict__ rstd, int64_t rows, int64_t n, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    const float s = 1.0f / std::sqrt(sum_of_squares(xr, n) / static_cast<float>(n) + eps);
    rstd[r] = s;
    for (int64_t i = 0; i < n; ++i) yr[i] = w[i] * (xr[i] * s);
  }
}

// y = w * x * s with s = (mean(x^2) + eps)^(-1/2): dx = s (g - x s^2 mean(g x)) for g = dy * w, and
// dw accumulates dy * x * s over the rows.
DS_BODY void backward_rows_body(const float* __restrict__ dy, const float* __restrict__ x,
                                const float* __restrict__ w, const float* __restrict__ rstd,
                                float* __restrict__ dx, float* __restrict__ dw, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* dyr = dy + r * n;
    const float* xr = x + r * n;
    float* dxr = dx + r * n;
    const float s = rstd[r];
    const float c = s * s * s * dot(dyr, w, xr, n) / static_cast<float>(n);
    for (int64_t i = 0; i < n; ++i) {
      dxr[i] = s * dyr[i] * w[i] - c * xr[i];
      dw[i] += dyr[i] * xr[i] * s;
    }
  }
}

DS_DISPATCH(forward_rows, (const float* x, const float* w, float* y, float* rstd, int64_t rows, int64_t n, float eps),
            (x, w, y, rstd, rows, n, eps))
DS_DISPATCH(backward_rows,
            (const float* dy, const float* x, const float* w, const float* rstd, float* dx, float* dw, int64_t rows,
             int64_t n),
            (dy, x, w, rstd, dx, dw, rows, n))

bool fused(const at::Tensor& x, const at::Tensor& weight) {
  return x.is_cpu() && x.scalar_type() == at::kFloat && x.is_contiguous() && weight.scalar_type() == at::kFloat &&
         weight.is_contiguous() && x.dim() > 0 && x.size(-1) == weight.numel() && x.numel() > 0;
}

class RMSNormFunction : public torch::autograd::Function<RMSNormFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            double eps) {
    const int64_t n = weight.numel(), rows = x.numel() / n;
    at::Tensor y = at::empty_like(x);
    at::Tensor rstd = at::empty({rows}, x.options());
    const float* in = x.data_ptr<float>();
    const float* w = weight.data_ptr<float>();
    float* out = y.data_ptr<float>();
    float* s = rstd.data_ptr<float>();
    at::parallel_for(0, rows, kRowGrain, [&](int64_t begin, int64_t end) {
      forward_rows(in + begin * n, w, out + begin * n, s + begin, end - begin, n, static_cast<float>(eps));
    });
    // The weight parameter itself, not a copy: under ZeRO-3 its data is gathered again for backward.
    ctx->save_for_backward({x, weight, rstd});
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor weight = saved[1].contiguous();
    const at::Tensor& rstd = saved[2];
    const at::Tensor dy = grads[0].contiguous();
    const int64_t n = weight.numel(), rows = x.numel() / n;
    at::Tensor dx = at::empty_like(x);
    // Each task sums its rows' dweight into a row of its own; the rows are added at the end.
    const int64_t tasks = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), rows / kRowGrain));
    at::Tensor dw_parts = at::zeros({tasks, n}, x.options());
    const float* g = dy.data_ptr<float>();
    const float* in = x.data_ptr<float>();
    const float* w = weight.data_ptr<float>();
    const float* s = rstd.data_ptr<float>();
    float* out = dx.data_ptr<float>();
    float* parts = dw_parts.data_ptr<float>();
    at::parallel_for(0, tasks, 1, [&](int64_t first, int64_t last) {
      for (int64_t t = first; t < last; ++t) {
        const int64_t begin = rows * t / tasks, end = rows * (t + 1) / tasks;
        backward_rows(g + begin * n, in + begin * n, w, s + begin, out + begin * n, parts + t * n, end - begin, n);
      }
    });
    return {dx, dw_parts.sum(0).view(weight.sizes()), at::Tensor()};
  }
};

}  // namespace

at::Tensor rms_norm_ops(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor x32 = x.to(at::kFloat);
  const at::Tensor normalized = x32 * torch::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * normalized.to(x.scalar_type());
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (!fused(x, weight)) return rms_norm_ops(x, weight, eps);
  return RMSNormFunction::apply(x, weight, eps);
}

RMSNormImpl::RMSNormImpl(int64_t features, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({features}));
}

at::Tensor RMSNormImpl::forward(const at::Tensor& x) { return rms_norm(x, weight, eps_); }

}  // namespace ds::models
