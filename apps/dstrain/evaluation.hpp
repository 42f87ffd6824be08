// Held-out evaluation: the mean loss of a model over validation batches, gradients off.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <functional>

#include "dstrain/engine/data/token_source.hpp"

namespace ds::app {

// This rank's mean cross entropy over validation batches 0 .. iters - 1 of `source` (rank `rank` of
// `world_size`, `micro_batch` samples each: TokenSource's layout, so that the ranks' equal means
// average to the loss of the whole held-out batch). `forward` maps tokens to logits (the engine's
// forward, or the plain model's); `model` is put in eval mode for it and returned to its mode.
double validation_loss(const std::function<at::Tensor(const at::Tensor&)>& forward, torch::nn::Module& model,
                       const data::TokenSource& source, int64_t iters, int rank, int world_size,
                       int64_t micro_batch, at::Device device);

}  // namespace ds::app
