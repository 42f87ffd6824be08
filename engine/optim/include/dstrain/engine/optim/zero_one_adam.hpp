// ZeroOneAdamShardOptimizer: DeepSpeed's 0/1 Adam (deepspeed/runtime/fp16/onebit/zoadam.py,
// https://arxiv.org/abs/2202.06009) on the flat fp32 shard of ZeRO stage 0 (the whole model), and of
// stages 1-2 until var_freeze_step.
//
// Steps 1 .. var_freeze_step (variance still learning):
//   at steps t with t % var_interval == 0 the engine averages the gradients in full precision and
//   both moments take them; at the other steps the engine leaves each rank its own gradient, the
//   gradient is averaged by compressed_allreduce and only the momentum takes it. var_interval starts
//   at 1 and doubles after every var_update_scaler variance updates.
// Later steps (variance frozen, local steps):
//   the momentum takes this rank's own gradient and the weights move locally, the moves summed in a
//   momentum accumulator; at steps t with t % local_step_interval == 0 the local moves are undone, the
//   accumulator (times √v + eps) is averaged by compressed_allreduce, the momentum becomes
//   −accumulator / Σlr and the weights take the averaged move. local_step_interval starts at 1 and
//   doubles, up to local_step_clipper, after every local_step_scaler frozen steps. The compression
//   errors are zeroed when the freeze starts (they then measure a different quantity).
// Every update is p −= lr·(m / (√v + eps) + weight_decay·p), without bias correction (DeepSpeed's
// ZeroOneAdam accepts bias_correction and ignores it).
//
// Differences from DeepSpeed, deliberate: its first step() only sets up buffers and leaves the
// weights unchanged, and its step counter counts that call, so its intervals are shifted by one
// against the steps counted here (real steps from 1); its compression is per parameter tensor, here
// one compressed allreduce of the flat shard, as OneBitAdam's momentum. var_interval and
// local_step_interval are functions of the step number, so a resumed run continues them exactly.
//
// Under ZeRO-1/2 (a partitioned layout) the variance steps are ordinary ZeRO (the shard of the
// reduce-scattered gradients); at the others the engine hands this rank's whole gradients
// (GradientReducer::local_gradients()), compressed_allreduce averages them in stage 0's flat order,
// and this rank's shard of the result steps the shard, as stage 0 steps the whole. The local steps
// after var_freeze_step are refused there: each rank's whole model moves on its own gradients
// between syncs, which is state a shard does not hold (docs/optimizers.md).
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

class ZeroOneAdamShardOptimizer : public ShardOptimizer {
 public:
  // layout: the engine's (stage 0: one partition; 1-2: partitioned over `group`); group: the
  // data-parallel group gradients and accumulated moves are averaged over.
  ZeroOneAdamShardOptimizer(const OptimizerConfig& config, const zero::ShardLayout& layout, at::Device device,
                            comm::Backend& group);

  void step(const at::Tensor& params, const at::Tensor& grads, double lr, int64_t step) override;
  // exp_avg, exp_avg_sq, momentum_accumulator: shard-shaped (exp_avg and the accumulator differ
  // across ranks between local-step syncs; a checkpoint keeps rank 0's, as it keeps its weights, so
  // that every rank resumes from one consistent point).
  std::vector<std::pair<std::string, at::Tensor>> state() override;
  // worker_error, server_error.
  std::vector<std::pair<std::string, at::Tensor>> local_state() override;
  // lrs: Σlr since the last sync, one value, the same on every rank.
  std::vector<std::pair<std::string, at::Tensor>> replicated_state() override;
  bool needs_reduced_gradients(int64_t step) const override;

  // The interval schedule in force at a step.
  struct Intervals {
    int64_t var_interval = 1, var_counter = 0;
    int64_t local_step_interval = 1, local_step_counter = 0;
  };
  Intervals intervals_at(int64_t step) const;

 private:
  void advance(Intervals& intervals, int64_t step) const;
  bool frozen(int64_t step) const { return step > config_.var_freeze_step; }

  OptimizerConfig config_;
  comm::Backend& group_;
  int local_rank_;
  at::Tensor exp_avg_;
  at::Tensor exp_avg_sq_;
  at::Tensor momentum_accumulator_;
  at::Tensor lrs_;  // double, one value
  at::Tensor worker_error_;
  at::Tensor server_error_;
  bool partitioned_;
  OneBitPartition partition_;
  at::Tensor averaged_shard_;  // under partitions: this rank's shard of the compressed gradients
  // intervals_at(cached_step_ + 1), so that consecutive steps advance in O(1).
  mutable Intervals cached_;
  mutable int64_t cached_step_ = 0;
};

}  // namespace ds
