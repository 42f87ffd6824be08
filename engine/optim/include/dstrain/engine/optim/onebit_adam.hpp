// OneBitAdamShardOptimizer: DeepSpeed's 1-bit Adam (deepspeed/runtime/fp16/onebit/adam.py,
// https://arxiv.org/abs/2102.02888) on the flat fp32 shard of ZeRO stage 0 (the whole model).
//
//   steps 1 .. freeze_step   Adam on the gradients the engine averaged with its full allreduce;
//   later steps              exp_avg_sq is frozen; exp_avg = b1·exp_avg + (1−b1)·(this rank's own
//                            gradient), then averaged across the group by compressed_allreduce
//                            (1-bit signs with error feedback), and the engine skips its allreduce.
// The update is DeepSpeed's: exp_avg / (√exp_avg_sq + eps), decoupled weight decay, and no bias
// correction (DeepSpeed's OnebitAdam accepts bias_correction and ignores it).
//
// The compression errors (worker_error, server_error) are kept per parameter group as DeepSpeed's
// fp16 path keeps them for its flattened groups; here the one group is the shard. They are this
// rank's own (local_state()), sized for the group's world size.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dstrain/comm/backend.hpp"
#include "dstrain/engine/optim/optimizer.hpp"
#include "dstrain/runtime/config.hpp"

namespace ds {

// DeepSpeed's 1-bit optimizers build a backend of their own from comm_backend_name and cuda_aware;
// here they communicate over the engine's data-parallel group, so a transport that group is not can
// only be noted: one warning naming `optimizer` when comm_backend_name differs from the group's.
void warn_on_transport_mismatch(const OptimizerConfig& config, comm::Backend& group, const char* optimizer);

class OneBitAdamShardOptimizer : public ShardOptimizer {
 public:
  // group: the data-parallel group the momentum is averaged over (the engine's).
  OneBitAdamShardOptimizer(const OptimizerConfig& config, int64_t shard_numel, at::Device device, comm::Backend& group);

  void step(const at::Tensor& params, const at::Tensor& grads, double lr, int64_t step) override;
  // exp_avg, exp_avg_sq: shard-shaped, averaged across the group, the same on every rank.
  std::vector<std::pair<std::string, at::Tensor>> state() override;
  // worker_error (the shard padded to a multiple of 8 × world), server_error (that / world).
  std::vector<std::pair<std::string, at::Tensor>> local_state() override;
  bool needs_reduced_gradients(int64_t step) const override { return step <= freeze_step_; }

 private:
  AdamShardOptimizer adam_;
  comm::Backend& group_;
  int64_t freeze_step_;
  double beta1_;
  int local_rank_;
  at::Tensor worker_error_;
  at::Tensor server_error_;
};

}  // namespace ds
