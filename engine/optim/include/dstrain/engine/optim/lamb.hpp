// LambShardOptimizer: DeepSpeed's "Lamb" (FusedLamb, deepspeed/ops/lamb/fused_lamb.py and
// csrc/lamb/fused_lamb_cuda_kernel.cu, https://arxiv.org/abs/1904.00962) on the flat fp32 shard.
//
//   m = b1·m + (1−b1)·g,  v = b2·v + (1−b2)·g²
//   update = m / (√v + eps) + weight_decay·p        (√(v + eps) with eps_inside_sqrt)
//   coeff  = ‖p‖ / ‖update‖ per parameter tensor, clamped to [min_coeff, max_coeff]; 1 where either
//            norm is 0
//   p     −= lr·√(1−b2^t)/(1−b1^t)·coeff·update      (lr·coeff·update without bias_correction)
// As FusedLamb the bias correction goes into the step size only: update and its norm use the raw
// moments, and ‖p‖ is taken before the step.
//
// The trust ratio is per parameter tensor, and the shard is one chunk of every parameter
// (zero::ShardLayout). Unpartitioned (stage 0) a chunk is the whole parameter; under ZeRO each rank
// sums its chunks' squares and one allreduce of the 2 × parameter-count sums gives every rank the
// whole tensors' norms, so every stage is supported.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dstrain/comm/backend.hpp"
#include "dstrain/engine/optim/optimizer.hpp"
#include "dstrain/runtime/config.hpp"
#include "dstrain/zero/shard_layout.hpp"

namespace ds {

class LambShardOptimizer : public ShardOptimizer {
 public:
  // layout: where each parameter's chunk lies in the shard; group: the ranks holding the other chunks
  // (only used when the layout is partitioned).
  LambShardOptimizer(const OptimizerConfig& config, const zero::ShardLayout& layout, at::Device device,
                     comm::Backend& group);
  void step(const at::Tensor& params, const at::Tensor& grads, double lr, int64_t step) override;
  std::vector<std::pair<std::string, at::Tensor>> state() override;

  // The trust ratios of the last step, one per parameter tensor (DeepSpeed's get_lamb_coeffs()).
  const std::vector<double>& coefficients() const { return coefficients_; }
  const at::Tensor& exp_avg() const { return exp_avg_; }
  const at::Tensor& exp_avg_sq() const { return exp_avg_sq_; }

  // One parameter's chunk in the shard: [offset, offset + numel).
  struct Segment {
    int64_t offset;
    int64_t numel;
  };
  const std::vector<Segment>& segments() const { return segments_; }

 private:
  // Sums of p² and update² per segment (interleaved), after updating the moments.
  std::vector<double> update_moments_and_norms(const at::Tensor& params, const at::Tensor& grads);
  void apply(const at::Tensor& params, double step_size);

  OptimizerConfig config_;
  std::vector<Segment> segments_;
  comm::Backend* partition_group_;  // null when the shard holds whole parameters
  at::Tensor exp_avg_;
  at::Tensor exp_avg_sq_;
  std::vector<double> coefficients_;
};

}  // namespace ds
