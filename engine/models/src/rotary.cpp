#include "dstrain/engine/models/rotary.hpp"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <cstdint>

#include "dstrain/engine/kernels/cpu_dispatch.hpp"

namespace ds::models {
namespace {

// Positions per task: a position is B-strided rows of heads * head_dim floats.
constexpr int64_t kGrain = 16;

// One position's heads: each pair (a, b) = (x[i], x[i + half]) becomes
// (a cos - b sin, b cos + a sin); sign -1 rotates by the opposite angle (backward).
DS_BODY void rotate_position_body(float* __restrict__ x, const float* __restrict__ cos, const float* __restrict__ sin,
                                  int64_t heads, int64_t head_dim, float sign) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < heads; ++h) {
    float* a = x + h * head_dim;
    float* b = a + half;
    for (int64_t i = 0; i < half; ++i) {
      const float c = cos[i], s = sign * sin[i];
      const float ai = a[i], bi = b[i];
      a[i] = ai * c - bi * s;
      b[i] = bi * c + ai * s;
    }
  }
}

DS_DISPATCH(rotate_position, (float* x, const float* cos, const float* sin, int64_t heads, int64_t head_dim, float sign),
            (x, cos, sin, heads, head_dim, sign))

// x [B, T, heads * head_dim] in place; tables of T positions.
void rotate(at::Tensor& x, int64_t heads, const RotaryTables& tables, float sign) {
  const int64_t B = x.size(0), T = x.size(1), width = x.size(2), head_dim = width / heads;
  float* data = x.data_ptr<float>();
  const float* cos = tables.cos.data_ptr<float>();
  const float* sin = tables.sin.data_ptr<float>();
  at::parallel_for(0, B * T, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t t = row % T;
      rotate_position(data + row * width, cos + t * head_dim, sin + t * head_dim, heads, head_dim, sign);
    }
  });
}

bool fused(const at::Tensor& x, const RotaryTables& tables) {
  return x.is_cpu() && x.scalar_type() == at::kFloat && x.is_contiguous() && x.dim() == 3 &&
         tables.cos.is_cpu() && tables.cos.scalar_type() == at::kFloat && tables.cos.is_contiguous() &&
         tables.sin.is_contiguous() && tables.cos.size(0) == x.size(1);
}

class RotaryFunction : public torch::autograd::Function<RotaryFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor x, int64_t heads, at::Tensor cos,
                            at::Tensor sin) {
    const RotaryTables tables{cos, sin};
    rotate(x, heads, tables, 1.0f);
    ctx->mark_dirty({x});
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["cos"] = cos;
    ctx->saved_data["sin"] = sin;
    return x;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    at::Tensor dx = grads[0].contiguous().clone();
    const RotaryTables tables{ctx->saved_data["cos"].toTensor(), ctx->saved_data["sin"].toTensor()};
    rotate(dx, ctx->saved_data["heads"].toInt(), tables, -1.0f);
    return {dx, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

RotaryTables RotaryTables::rows(int64_t first, int64_t count) const {
  return {cos.narrow(0, first, count), sin.narrow(0, first, count)};
}

RotaryTables rotary_tables(int64_t head_dim, double theta, int64_t positions) {
  const auto options = torch::TensorOptions().dtype(torch::kDouble);
  const at::Tensor inverse_frequency =
      torch::pow(theta, -torch::arange(0, head_dim, 2, options) / static_cast<double>(head_dim));
  const at::Tensor angles = torch::outer(torch::arange(positions, options), inverse_frequency);
  const at::Tensor both_halves = torch::cat({angles, angles}, 1);
  return {both_halves.cos().to(torch::kFloat), both_halves.sin().to(torch::kFloat)};
}

at::Tensor apply_rotary_ops(const at::Tensor& x, int64_t heads, const RotaryTables& tables) {
  const int64_t B = x.size(0), T = x.size(1), head_dim = x.size(2) / heads;
  const at::Tensor h = x.view({B, T, heads, head_dim});
  const at::Tensor cos = tables.cos.to(x.device(), x.scalar_type()).view({1, T, 1, head_dim});
  const at::Tensor sin = tables.sin.to(x.device(), x.scalar_type()).view({1, T, 1, head_dim});
  const at::Tensor first = h.narrow(-1, 0, head_dim / 2), second = h.narrow(-1, head_dim / 2, head_dim / 2);
  const at::Tensor rotated_half = torch::cat({-second, first}, -1);
  return (h * cos + rotated_half * sin).view({B, T, heads * head_dim});
}

at::Tensor apply_rotary_(at::Tensor x, int64_t heads, const RotaryTables& tables) {
  if (!fused(x, tables)) return apply_rotary_ops(x, heads, tables);
  if (!x.requires_grad()) {
    rotate(x, heads, tables, 1.0f);
    return x;
  }
  return RotaryFunction::apply(x, heads, tables.cos, tables.sin);
}

}  // namespace ds::models
