// GPT-2's causal self-attention core, from the fused q|k|v projection to the heads' outputs side by
// side: for each head, softmax(q k^T / sqrt(head_size)) v with position t attending to positions
// <= t only, and dropout on the attention weights.
//
// OpenBLAS runs the per-head products (T x head_size by head_size x T, a few hundred thousand
// multiply-adds each) at a quarter to a half of its large-matrix speed, and the masked upper
// triangle is computed and then thrown away. On contiguous fp32 CPU input with head_size a multiple
// of 16 and no dropout in force, this runs its own kernel: register-blocked products over the lower
// triangle only, the softmax fused into it, and q, k, v read and their gradients written in place
// in the [B, T, 3C] layout. Other input takes the tensor-op path.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace ds::models {

// qkv: [B, T, 3C] (q, k, v each [B, T, C], heads of C / n_head features side by side).
// Returns [B, T, C].
at::Tensor causal_attention(const at::Tensor& qkv, int64_t n_head, double dropout, bool training);

// The same through LibTorch's tensor ops (per-head matmul, masked softmax): what the kernel
// replaces, and what runs for input it does not take.
at::Tensor causal_attention_ops(const at::Tensor& qkv, int64_t n_head, double dropout, bool training);

}  // namespace ds::models
