// ShardOptimizer: updates a flat fp32 shard of master weights from the matching gradient shard.
//
// Every ZeRO stage hands the optimizer the same thing: the slice of the model this rank owns, as
// one flat tensor (see ds::zero::ShardLayout). The state is a list of named tensors of that same
// shape, so partitioning, checkpoints and offload handle it without knowing the algorithm.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dstrain/engine/kernels/fused_optimizer.hpp"
#include "dstrain/runtime/config.hpp"

namespace ds {

// `n` elements of the shard that begin `shard_offset` elements into it: the parameters and gradients
// wherever they lie (a model's slice of master weights, say), the state at that offset of state().
struct ShardRange {
  float* params;
  const float* grads;
  int64_t shard_offset;
  int64_t n;
};

class ShardOptimizer {
 public:
  virtual ~ShardOptimizer() = default;
  // One update of `params` in place; `step` counts from 1 (Adam's bias correction).
  virtual void step(const at::Tensor& params, const at::Tensor& grads, double lr, int64_t step) = 0;
  // The same update on `n` elements of fp32 CPU memory whose state the caller holds (a sub-group
  // swapped in from NVMe): state[k] holds the values of state()[k]. Element i touches only index i,
  // so any split of a shard into ranges gives the whole-shard result bit for bit.
  virtual void step_range(float* params, const float* grads, float* const* state, int64_t n, double lr,
                          int64_t step) const;
  // Whether step_ranges can step this optimizer's state where it lies: on the CPU for the fused
  // kernels of every optimizer with a step_range, on CUDA for Adam and AdamW in a CUDA build.
  virtual bool steps_ranges() const { return false; }
  // One update of several ranges of the shard, the state held by this optimizer: on the CPU
  // step_range for each, on CUDA one launch of the fused CUDA Adam for them all. Equal bit for bit
  // to stepping the joined shard, as step_range.
  virtual void step_ranges(const std::vector<ShardRange>& ranges, double lr, int64_t step);
  // Named state tensors, each shaped like the shard (empty when the state is offloaded).
  virtual std::vector<std::pair<std::string, at::Tensor>> state() = 0;
  // Named state that is this rank's own and not shard-shaped (OneBitAdam's compression errors): each
  // starts at zero, checkpoints keep it per rank and restore it only into the same world size.
  virtual std::vector<std::pair<std::string, at::Tensor>> local_state() { return {}; }
  // Named state that is the same on every rank and not shard-shaped (OneBitLamb's per-parameter
  // coefficients, ZeroOneAdam's sum of learning rates): checkpoints keep rank 0's copy and every rank
  // restores it at any world size and stage.
  virtual std::vector<std::pair<std::string, at::Tensor>> replicated_state() { return {}; }
  // Whether step `step` (counting from 1) needs the gradients averaged across the data-parallel
  // group. An optimizer that communicates itself (OneBitAdam after freeze_step) says no, and the
  // engine then hands it this rank's own gradients, sparing the full allreduce.
  virtual bool needs_reduced_gradients(int64_t /*step*/) const { return true; }
};

// Throws ds::Error unless every tensor is a contiguous fp32 CPU tensor of `numel` elements: what the
// fused kernels (fused_optimizer.hpp) that every ShardOptimizer runs on a CPU shard take as raw pointers.
void check_flat_shards(std::initializer_list<const at::Tensor*> tensors, int64_t numel);

// Adam, AdamW or SGD from the config, its state on `device` (the master shard's); OneBitAdam is built
// by the engine (it needs the group).
std::unique_ptr<ShardOptimizer> make_shard_optimizer(const OptimizerConfig& config, int64_t shard_numel,
                                                     at::Device device);

// Adam as torch.optim.Adam/AdamW: decoupled weight decay when `decoupled` (AdamW, and DeepSpeed's
// "Adam" with adam_w_mode), L2 added to the gradient otherwise. One fused pass (fused::adam) on a
// CPU shard; on a CUDA shard one launch of fused::cuda::adam in a CUDA build (contiguous fp32), tensor
// ops otherwise.
class AdamShardOptimizer : public ShardOptimizer {
 public:
  AdamShardOptimizer(const OptimizerConfig& config, int64_t shard_numel, at::Device device, bool decoupled);
  void step(const at::Tensor& params, const at::Tensor& grads, double lr, int64_t step) override;
  void step_range(float* params, const float* grads, float* const* state, int64_t n, double lr,
                  int64_t step) const override;
  bool steps_ranges() const override;
  void step_ranges(const std::vector<ShardRange>& ranges, double lr, int64_t step) override;
  std::vector<std::pair<std::string, at::Tensor>> state() override;
  // Adam's update with the given first and second moments, shared with OneBitAdam.
  void apply(const at::Tensor& params, const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq, double lr,
             int64_t step) const;
  const at::Tensor& exp_avg() const { return exp_avg_; }
  const at::Tensor& exp_avg_sq() const { return exp_avg_sq_; }

 private:
  fused::AdamStep step_scalars(double lr, int64_t step) const;

  OptimizerConfig config_;
  bool decoupled_;
  at::Tensor exp_avg_;
  at::Tensor exp_avg_sq_;
};

// torch.optim.SGD (fused::sgd on a CPU shard, tensor ops on a device shard): momentum, dampening, nesterov, L2 weight decay.
class SgdShardOptimizer : public ShardOptimizer {
 public:
  SgdShardOptimizer(const OptimizerConfig& config, int64_t shard_numel, at::Device device);
  void step(const at::Tensor& params, const at::Tensor& grads, double lr, int64_t step) override;
  void step_range(float* params, const float* grads, float* const* state, int64_t n, double lr,
                  int64_t step) const override;
  bool steps_ranges() const override;
  std::vector<std::pair<std::string, at::Tensor>> state() override;

 private:
  OptimizerConfig config_;
  at::Tensor momentum_buffer_;
};

}  // namespace ds
