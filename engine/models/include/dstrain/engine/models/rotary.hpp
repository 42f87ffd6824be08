// Rotary position embeddings (RoPE, Su et al. 2021) in Hugging Face Llama's rotate_half convention:
// a head of D features is two halves, and feature pair (i, i + D/2) at position p is rotated by the
// angle p * theta^(-2i/D):
//   y = x * cos + rotate_half(x) * sin,   rotate_half([x1, x2]) = [-x2, x1]
// with cos and sin [positions, D] (each half of a row repeats the other, as HF's tables do).
//
// The tensor-op version allocates the halves, their concatenation and two products. On contiguous
// fp32 CPU input apply_rotary_ instead rotates x where it lies, one pass, and its backward rotates
// the gradient back (by the opposite angle) in one pass.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace ds::models {

struct RotaryTables {
  at::Tensor cos;  // [positions, head_dim], fp32
  at::Tensor sin;
  // Rows [first, first + count): the tables of those positions.
  RotaryTables rows(int64_t first, int64_t count) const;
};

// The tables of positions 0 .. positions - 1; angles computed in double, stored in fp32.
RotaryTables rotary_tables(int64_t head_dim, double theta, int64_t positions);

// x: [B, T, heads * head_dim] (a projection's output, heads side by side); tables: T rows.
// Rotates x in place and returns it (autograd sees an in-place op on x); input the kernel does not
// take is rotated by apply_rotary_ops and the result returned, x left as it was.
at::Tensor apply_rotary_(at::Tensor x, int64_t heads, const RotaryTables& tables);

// The same through LibTorch's tensor ops (HF's apply_rotary_pos_emb), returning a new tensor.
at::Tensor apply_rotary_ops(const at::Tensor& x, int64_t heads, const RotaryTables& tables);

}  // namespace ds::models
