// OneBitAdamShardOptimizer: DeepSpeed's 1-bit Adam (deepspeed/runtime/fp16/onebit/adam.py,
// https://arxiv.org/abs/2102.02888) on the flat fp32 shard of ZeRO stages 0-2.
//
//   steps 1 .. freeze_step   Adam on the gradients the engine averaged with its full allreduce;
//   later steps              exp_avg_sq is frozen; exp_avg = b1·exp_avg + (1−b1)·(this rank's own
//                            gradient), then averaged across the group by compressed_allreduce
//                            (1-bit signs with error feedback), and the engine skips its allreduce.
// The update is DeepSpeed's: exp_avg / (√exp_avg_sq + eps), decoupled weight decay, and no bias
// correction (DeepSpeed's OnebitAdam accepts bias_correction and ignores it).
//
// The compression errors (worker_error, server_error) are kept per parameter group as DeepSpeed's
// fp16 path keeps them for its flattened groups; here the one group is the whole model in stage 0's
// flat order. They are this rank's own (local_state()), sized for the group's world size, and the
// same at every stage.
//
// Under ZeRO-1/2 (a partitioned layout) the warm-up is ordinary ZeRO: Adam on this rank's shard of
// the reduce-scattered gradients. After the freeze the engine hands this rank's whole gradients
// (GradientReducer::local_gradients()); the momentum update and the compressed allreduce run on the
// whole flat vector, as at stage 0, and only this rank's shard of the averaged momentum, of the
// frozen variance and of the master is stepped. Between steps the averaged momentum is kept as the
// allreduce leaves it, one sign bit per value (OneBitPartition); exp_avg holds its shard, for
// checkpoints. Memory per rank: docs/optimizers.md.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dstrain/comm/backend.hpp"
#include "dstrain/engine/optim/onebit_partition.hpp"
#include "dstrain/engine/optim/optimizer.hpp"
#include "dstrain/runtime/config.hpp"
#include "dstrain/zero/shard_layout.hpp"

namespace ds {

// DeepSpeed's 1-bit optimizers build a backend of their own from comm_backend_name and cuda_aware;
// here they communicate over the engine's data-parallel group, so a transport that group is not can
// only be noted: one warning naming `optimizer` when comm_backend_name differs from the group's.
void warn_on_transport_mismatch(const OptimizerConfig& config, comm::Backend& group, const char* optimizer);

class OneBitAdamShardOptimizer : public ShardOptimizer {
 public:
  // layout: the engine's (stage 0: one partition; 1-2: partitioned over `group`); group: the
  // data-parallel group the momentum is averaged over.
  OneBitAdamShardOptimizer(const OptimizerConfig& config, const zero::ShardLayout& layout, at::Device device,
                           comm::Backend& group);

  void step(const at::Tensor& params, const at::Tensor& grads, double lr, int64_t step) override;
  // exp_avg, exp_avg_sq: shard-shaped, averaged across the group (the same on every rank at stage 0).
  std::vector<std::pair<std::string, at::Tensor>> state() override;
  // worker_error (the whole model padded to a multiple of 8 × world), server_error (that / world).
  std::vector<std::pair<std::string, at::Tensor>> local_state() override;
  bool needs_reduced_gradients(int64_t step) const override { return step <= freeze_step_; }

 private:
  // After the freeze under partitions: `grads` is this rank's whole gradients (flat, padded).
  void partitioned_compressed_step(const at::Tensor& params, const at::Tensor& grads, double lr, int64_t step);
  // Whether every rank's exp_avg shard is the kept result (not so before the first compressed step
  // or after a checkpoint was loaded).
  bool kept_momentum_current();

  AdamShardOptimizer adam_;
  comm::Backend& group_;
  int64_t freeze_step_;
  double beta1_;
  int local_rank_;
  at::Tensor worker_error_;
  at::Tensor server_error_;
  bool partitioned_;
  OneBitPartition partition_;
};

}  // namespace ds
