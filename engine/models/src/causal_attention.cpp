#include "dstrain/engine/models/causal_attention.hpp"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "dstrain/runtime/error.hpp"

#include "dstrain/engine/kernels/cpu_dispatch.hpp"
#include "dstrain/engine/kernels/fast_exp.hpp"

namespace ds::models {
namespace {

// A product is computed in tiles of kRows rows by kCols columns: 12 accumulators of 8 floats,
// which with the two loaded vectors of B and the broadcast element of A fill AVX2's 16 registers.
constexpr int64_t kRows = 6;
constexpr int64_t kCols = 16;

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

typedef float Vec __attribute__((vector_size(32)));

DS_BODY Vec load(const float* p) {
  Vec v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

DS_BODY void store(float* p, const Vec& v) { __builtin_memcpy(p, &v, sizeof v); }

// C[r][0, kCols) = sum over k in [k0, k1) of A[r][k] B[k][0, kCols), for r in [0, R).
template <int R>
DS_BODY void tile(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t k0,
                  int64_t k1) {
  Vec acc[R][2] = {};
  for (int64_t k = k0; k < k1; ++k) {
    const Vec b0 = load(b + k * ldb);
    const Vec b1 = load(b + k * ldb + 8);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const float x = a[r * lda + k];
      acc[r][0] += x * b0;
      acc[r][1] += x * b1;
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    store(c + r * ldc, acc[r][0]);
    store(c + r * ldc + 8, acc[r][1]);
  }
}

DS_BODY void tile_rows(int64_t rows, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                       int64_t k0, int64_t k1) {
  static_assert(kRows == 6);
  switch (rows) {
    case 6: return tile<6>(a, lda, b, ldb, c, ldc, k0, k1);
    case 5: return tile<5>(a, lda, b, ldb, c, ldc, k0, k1);
    case 4: return tile<4>(a, lda, b, ldb, c, ldc, k0, k1);
    case 3: return tile<3>(a, lda, b, ldb, c, ldc, k0, k1);
    case 2: return tile<2>(a, lda, b, ldb, c, ldc, k0, k1);
    default: return tile<1>(a, lda, b, ldb, c, ldc, k0, k1);
  }
}

// Which part of C = A B (A: m x k, B: k x n, n a multiple of kCols) a product computes, given
// the causal structure of its operands. Row i of C is position i.
enum class Span {
  kLowerColumns,  // C[i][j] for j <= i (and the rest of j's tile): scores, q k^T or dy v^T
  kKUpToRow,      // k <= i only: A is lower triangular (zero above the diagonal): P v, dS k
  kKFromRow,      // k >= i only: A is upper triangular: P^T dy, dS^T q
};

DS_BODY void product(Span span, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                     int64_t m, int64_t n, int64_t k) {
  for (int64_t r = 0; r < m; r += kRows) {
    const int64_t rows = std::min(kRows, m - r);
    int64_t cols = n, k0 = 0, k1 = k;
    switch (span) {
      case Span::kLowerColumns: cols = std::min(n, round_up(r + rows, kCols)); break;
      case Span::kKUpToRow: k1 = std::min(k, r + rows); break;
      case Span::kKFromRow: k0 = r; break;
    }
    for (int64_t j = 0; j < cols; j += kCols) tile_rows(rows, a + r * lda, lda, b + j, ldb, c + r * ldc + j, ldc, k0, k1);
  }
}

// dst[j][i] = src[i][j] for i < rows, j < cols; dst's columns [rows, ld_dst) are zeroed.
DS_BODY void transpose(const float* src, int64_t ld_src, int64_t rows, int64_t cols, float* dst, int64_t ld_dst) {
  for (int64_t j = 0; j < cols; ++j) {
    float* out = dst + j * ld_dst;
    for (int64_t i = 0; i < rows; ++i) out[i] = src[i * ld_src + j];
    for (int64_t i = rows; i < ld_dst; ++i) out[i] = 0.0f;
  }
}

// The row of scores s[0, n) (position n - 1's) becomes softmax(scale * s); s[n, len) is zeroed.
DS_BODY void softmax_row(float* s, int64_t n, int64_t len, float scale) {
  float max = s[0];
  for (int64_t j = 1; j < n; ++j) max = s[j] > max ? s[j] : max;
  for (int64_t j = 0; j < n; ++j) s[j] = exp_clamped((s[j] - max) * scale);
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) sum += s[j];
  const float inverse = 1.0f / sum;
  for (int64_t j = 0; j < n; ++j) s[j] *= inverse;
  for (int64_t j = n; j < len; ++j) s[j] = 0.0f;
}

// d[0, n) holds dL/dP for the row of weights p; it becomes dL/d(scores):
// scale * p * (d - <p, d>). d[n, len) is zeroed.
DS_BODY void softmax_backward_row(const float* p, float* d, int64_t n, int64_t len, float scale) {
  float dot = 0.0f;
  for (int64_t j = 0; j < n; ++j) dot += p[j] * d[j];
  for (int64_t j = 0; j < n; ++j) d[j] = scale * p[j] * (d[j] - dot);
  for (int64_t j = n; j < len; ++j) d[j] = 0.0f;
}

// One head. q, k, v: T rows of D (ld apart). probs: T x padded, the attention weights (kept for
// backward). y: T rows of D (ld_y apart). kt: D x padded scratch.
DS_BODY void forward_head_body(const float* q, const float* k, const float* v, int64_t ld, int64_t T, int64_t D,
                               float scale, float* probs, float* y, int64_t ld_y, float* kt) {
  const int64_t padded = round_up(T, kCols);
  transpose(k, ld, T, D, kt, padded);
  product(Span::kLowerColumns, q, ld, kt, padded, probs, padded, T, padded, D);
  for (int64_t i = 0; i < T; ++i) softmax_row(probs + i * padded, i + 1, padded, scale);
  product(Span::kKUpToRow, probs, padded, v, ld, y, ld_y, T, D, T);
}

// One head's gradients, written into dq, dk, dv (ld apart, like q, k, v). vt: D x padded,
// ds and t: T x padded scratch.
DS_BODY void backward_head_body(const float* q, const float* k, const float* v, int64_t ld, const float* probs,
                                const float* dy, int64_t ld_y, int64_t T, int64_t D, float scale, float* dq,
                                float* dk, float* dv, float* vt, float* ds, float* t) {
  const int64_t padded = round_up(T, kCols);
  transpose(probs, padded, T, T, t, padded);
  product(Span::kKFromRow, t, padded, dy, ld_y, dv, ld, T, D, T);  // dv = P^T dy
  transpose(v, ld, T, D, vt, padded);
  product(Span::kLowerColumns, dy, ld_y, vt, padded, ds, padded, T, padded, D);  // dP = dy v^T
  for (int64_t i = 0; i < T; ++i) softmax_backward_row(probs + i * padded, ds + i * padded, i + 1, padded, scale);
  product(Span::kKUpToRow, ds, padded, k, ld, dq, ld, T, D, T);  // dq = dS k
  transpose(ds, padded, T, T, t, padded);
  product(Span::kKFromRow, t, padded, q, ld, dk, ld, T, D, T);  // dk = dS^T q
}

DS_DISPATCH(forward_head,
            (const float* q, const float* k, const float* v, int64_t ld, int64_t T, int64_t D, float scale,
             float* probs, float* y, int64_t ld_y, float* kt),
            (q, k, v, ld, T, D, scale, probs, y, ld_y, kt))
DS_DISPATCH(backward_head,
            (const float* q, const float* k, const float* v, int64_t ld, const float* probs, const float* dy,
             int64_t ld_y, int64_t T, int64_t D, float scale, float* dq, float* dk, float* dv, float* vt, float* ds,
             float* t),
            (q, k, v, ld, probs, dy, ld_y, T, D, scale, dq, dk, dv, vt, ds, t))

// The shapes of one call, from qkv [B, T, 3C].
struct Shape {
  Shape(const at::Tensor& qkv, int64_t n_head)
      : B(qkv.size(0)), T(qkv.size(1)), C(qkv.size(2) / 3), H(n_head), D(C / n_head), padded(round_up(T, kCols)) {}
  int64_t B, T, C, H, D, padded;
  float scale() const { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(D))); }
  // Head bh's q in a [B, T, 3C] tensor (k and v follow at + C and + 2C), or its output in [B, T, C].
  int64_t qkv_offset(int64_t bh) const { return (bh / H) * T * 3 * C + (bh % H) * D; }
  int64_t y_offset(int64_t bh) const { return (bh / H) * T * C + (bh % H) * D; }
};

class CausalAttention : public torch::autograd::Function<CausalAttention> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& qkv, int64_t n_head) {
    const Shape s(qkv, n_head);
    at::Tensor probs = at::empty({s.B, s.H, s.T, s.padded}, qkv.options());
    at::Tensor y = at::empty({s.B, s.T, s.C}, qkv.options());
    const float* in = qkv.data_ptr<float>();
    float* p = probs.data_ptr<float>();
    float* out = y.data_ptr<float>();
    at::parallel_for(0, s.B * s.H, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> kt(s.D * s.padded);
      for (int64_t bh = begin; bh < end; ++bh) {
        const float* q = in + s.qkv_offset(bh);
        forward_head(q, q + s.C, q + 2 * s.C, 3 * s.C, s.T, s.D, s.scale(), p + bh * s.T * s.padded,
                     out + s.y_offset(bh), s.C, kt.data());
      }
    });
    ctx->save_for_backward({qkv, probs});
    ctx->saved_data["n_head"] = n_head;
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const std::vector<at::Tensor> saved = ctx->get_saved_variables();
    const at::Tensor& qkv = saved[0];
    const Shape s(qkv, ctx->saved_data["n_head"].toInt());
    const at::Tensor dy = grads[0].contiguous();
    at::Tensor dqkv = at::empty_like(qkv);
    const float* in = qkv.data_ptr<float>();
    const float* p = saved[1].data_ptr<float>();
    const float* g = dy.data_ptr<float>();
    float* out = dqkv.data_ptr<float>();
    at::parallel_for(0, s.B * s.H, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> vt(s.D * s.padded), ds(s.T * s.padded), t(s.T * s.padded);
      for (int64_t bh = begin; bh < end; ++bh) {
        const float* q = in + s.qkv_offset(bh);
        float* dq = out + s.qkv_offset(bh);
        backward_head(q, q + s.C, q + 2 * s.C, 3 * s.C, p + bh * s.T * s.padded, g + s.y_offset(bh), s.C, s.T, s.D,
                      s.scale(), dq, dq + s.C, dq + 2 * s.C, vt.data(), ds.data(), t.data());
      }
    });
    return {dqkv, at::Tensor()};
  }
};

}  // namespace

at::Tensor causal_attention(const at::Tensor& qkv, int64_t n_head, double dropout, bool training) {
  if (qkv.dim() != 3 || n_head < 1 || qkv.size(2) % (3 * n_head) != 0) {
    std::ostringstream shape;
    shape << qkv.sizes();
    throw Error("causal_attention: q|k|v of shape " + shape.str() + " is not [B, T, 3 * " + std::to_string(n_head) +
                " heads * head size]");
  }
  const bool kernel = qkv.is_cpu() && qkv.scalar_type() == at::kFloat && qkv.is_contiguous() &&
                      (qkv.size(2) / 3 / n_head) % kCols == 0 && !(training && dropout > 0.0);
  return kernel ? CausalAttention::apply(qkv, n_head) : causal_attention_ops(qkv, n_head, dropout, training);
}

at::Tensor causal_attention_ops(const at::Tensor& qkv, int64_t n_head, double dropout, bool training) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, head_size = C / n_head;
  const std::vector<at::Tensor> parts = qkv.split(C, 2);
  auto heads = [&](const at::Tensor& t) { return t.view({B, T, n_head, head_size}).transpose(1, 2); };
  const at::Tensor q = heads(parts[0]), k = heads(parts[1]), v = heads(parts[2]);  // [B, nh, T, hs]

  // The mask is built per call rather than kept as a buffer, so that casting the model (to bf16,
  // say) never touches it.
  const at::Tensor future = torch::ones({T, T}, qkv.options().dtype(torch::kBool)).triu(1);
  at::Tensor att = q.matmul(k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(head_size)));
  att = att.masked_fill(future, -std::numeric_limits<double>::infinity()).softmax(-1);
  att = torch::dropout(att, dropout, training);
  return att.matmul(v).transpose(1, 2).contiguous().view({B, T, C});
}

}  // namespace ds::models
