// The training loss of the built-in models.
#pragma once

#include <ATen/core/Tensor.h>

namespace ds::models {

// Mean cross entropy of logits [..., K] against int64 class indices [...] (next tokens for the GPT,
// labels for the MLP), computed in fp32 whatever the logits' dtype, as mixed precision wants.
at::Tensor cross_entropy_loss(const at::Tensor& logits, const at::Tensor& targets);

}  // namespace ds::models
