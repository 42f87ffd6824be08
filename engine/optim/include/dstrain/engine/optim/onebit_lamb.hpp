// OneBitLambShardOptimizer: DeepSpeed's 1-bit LAMB (deepspeed/runtime/fp16/onebit/lamb.py,
// https://arxiv.org/abs/2104.06069) on the flat fp32 shard of ZeRO stages 0-2.
//
//   steps 1 .. freeze_step   LAMB (as LambShardOptimizer, without bias correction, eps outside the
//                            root) on the gradients the engine averaged; each parameter's running
//                            coefficient lamb_coeff_freeze = coeff_beta·it + (1−coeff_beta)·coeff
//                            (skipped where coeff is exactly 1); at freeze_step exp_avg_sq_fresh = v.
//   later steps              v stays frozen. Each parameter's momentum is updated with this rank's own
//                            gradient and multiplied by scaling_coeff (the mean over parameters of
//                            ‖m‖/√n, divided by this parameter's, fixed at the first such step), then
//                            the whole momentum is averaged by compressed_allreduce and unscaled. The
//                            gradient it implies, (m − b1·m_prev)/(1−b1), feeds exp_avg_sq_fresh; the
//                            coefficient is lamb_coeff_freeze · factor, factor = max(denom/denom_fresh)
//                            (mixed with 1 by ‖m/denom‖/‖update‖ under weight decay), clamped to
//                            [factor_min, factor_max] and to ±factor_threshold of the last factor.
//
// Differences from DeepSpeed, both deliberate: DeepSpeed's first step() only sets up its cupy
// buffers and leaves the weights unchanged, so it runs freeze_step − 1 LAMB steps; here step 1 is a
// LAMB step and freeze_step of them run. A parameter whose momentum is exactly zero at the freeze gets
// scaling_coeff 1 (DeepSpeed divides by its zero scale). The compression errors are one pair for the
// flat shard, as DeepSpeed's flattened momentum.
//
// The per-parameter scalars (lamb_coeff_freeze, last_factor, scaling_coeff) are the same on every
// rank: replicated_state(), restored at any world size; only the compression errors are per rank.
//
// Under ZeRO-1/2 (a partitioned layout) the warm-up is LambShardOptimizer's ZeRO; after the freeze
// the engine hands this rank's whole gradients, the scaled momentum is compressed on the whole flat
// vector as at stage 0 (OneBitPartition keeps the result between steps, one bit per value), and the
// fresh variance, the per-parameter sums (combined across the group) and the update run on this
// rank's shard.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dstrain/comm/backend.hpp"
#include "dstrain/engine/optim/lamb.hpp"
#include "dstrain/engine/optim/onebit_partition.hpp"
#include "dstrain/engine/optim/optimizer.hpp"
#include "dstrain/runtime/config.hpp"
#include "dstrain/zero/shard_layout.hpp"

namespace ds {

class OneBitLambShardOptimizer : public ShardOptimizer {
 public:
  // layout: the engine's (stage 0: one partition; 1-2: partitioned over `group`); group: the
  // data-parallel group the momentum is averaged over.
  OneBitLambShardOptimizer(const OptimizerConfig& config, const zero::ShardLayout& layout, at::Device device,
                           comm::Backend& group);

  void step(const at::Tensor& params, const at::Tensor& grads, double lr, int64_t step) override;
  // exp_avg, exp_avg_sq, exp_avg_sq_fresh: shard-shaped, the same on every rank.
  std::vector<std::pair<std::string, at::Tensor>> state() override;
  // worker_error, server_error.
  std::vector<std::pair<std::string, at::Tensor>> local_state() override;
  // lamb_coeff_freeze, last_factor, scaling_coeff: one value per parameter each.
  std::vector<std::pair<std::string, at::Tensor>> replicated_state() override;
  bool needs_reduced_gradients(int64_t step) const override { return step <= config_.freeze_step; }

 private:
  struct Arithmetic;
  // Per parameter: Σ update², Σ (m/denom)², max(denom / denom_fresh).
  using Stats = std::array<double, 3>;

  bool compression_started() const;
  // Fixes scaling_coeff from the whole momentum `m` (stage 0's flat order).
  void start_compression(const at::Tensor& m);
  void compressed_step(const at::Tensor& params, const at::Tensor& grads, double lr);
  void partitioned_compressed_step(const at::Tensor& params, const at::Tensor& grads, double lr);
  std::vector<double> coefficients_from(const std::vector<Stats>& stats);
  // Whether every rank's exp_avg shard is the kept result, unscaled.
  bool kept_momentum_current();

  OptimizerConfig config_;
  LambShardOptimizer lamb_;
  comm::Backend& group_;
  int local_rank_;
  at::Tensor exp_avg_sq_fresh_;
  at::Tensor exp_avg_last_;  // the momentum before this step's update (compression stage only)
  at::Tensor worker_error_;
  at::Tensor server_error_;
  at::Tensor coeff_freeze_;   // double, one per parameter
  at::Tensor last_factor_;    // double, one per parameter
  at::Tensor scaling_coeff_;  // double, one per parameter; 0 until the compression stage starts
  bool partitioned_ = false;
  OneBitPartition partition_;
};

}  // namespace ds
