// Activation checkpointing: DeepSpeed's deepspeed.checkpointing.checkpoint for LibTorch.
//
//   x = ds::checkpoint([&](const at::Tensor& in) { return block->forward(in); }, x);
//
// fn runs without recording autograd, so nothing it computes inside stays alive for backward but
// its inputs and outputs; when gradient reaches the outputs, fn runs again with autograd on (the
// CPU random generator restored to its state at the first run, so dropout draws the same masks)
// and the gradient flows back through that recomputation to the inputs and to every parameter fn
// used. Losses and gradients are those of calling fn directly. Under ZeRO stage 3 the recomputation
// gathers parameters through the same hooks as the forward did. Without grad mode (evaluation),
// fn is simply called. fn must be callable until backward has run.
//
// The config: DeepSpeed's "activation_checkpointing" block configures checkpointing that the model
// applies. The built-in GPT checkpoints segments of activation_checkpoint_interval(config) blocks.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

#include "dstrain/runtime/config.hpp"

namespace ds {

using CheckpointFn = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

std::vector<at::Tensor> checkpoint(const CheckpointFn& fn, const std::vector<at::Tensor>& inputs);
at::Tensor checkpoint(const std::function<at::Tensor(const at::Tensor&)>& fn, const at::Tensor& input);

// Blocks per recomputed segment: the pipeline block's activation_checkpoint_interval when positive,
// else 1 when an "activation_checkpointing" block is given, else 0 (off). Warns once (rank 0)
// about the block's keys that have no effect on this build: partition_activations (no model
// parallelism to partition across), cpu_checkpointing (checkpoints are in CPU memory already),
// contiguous_memory_optimization and number_checkpoints (a GPU allocator remedy), synchronize_
// checkpoint_boundary and profile (GPU streams).
int activation_checkpoint_interval(const Config& config);

}  // namespace ds
