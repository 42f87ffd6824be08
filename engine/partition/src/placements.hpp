// The five placements of an optimizer partition (optimizer_partition.hpp), one file each.
#pragma once

#include <memory>

#include "dstrain/engine/partition/host_offload.hpp"
#include "dstrain/engine/partition/optimizer_partition.hpp"
#include "dstrain/zero/optimizer_swapper.hpp"
#include "dstrain/zero/slice_gather.hpp"

namespace ds {

// The parameters moved into one fp32 buffer, each padded to partitions x chunk, which they then
// view; returns the buffer (with one partition: the shard).
at::Tensor move_parameters_into_buffer(const PartitionContext& context);
// `master` (shard_numel fp32) filled with this rank's chunk of every parameter; returns it.
at::Tensor copy_rank_chunks(const PartitionContext& context, at::Tensor master);

// fp32 in memory on one partition, or at stage 3: the master is the model's own storage.
class ModelStoragePartition final : public OptimizerPartition {
 public:
  explicit ModelStoragePartition(const PartitionContext& context);
  PartitionKind kind() const override { return PartitionKind::ModelStorage; }
  void bind(zero::GradientReducer& reducer, ModelWeights& weights) override;
  void step(const at::Tensor& grads, const StepArgs& args) override;
  void refresh_model() override;
  ModelStateBytes bytes() const override;
};

// fp32 in memory at stages 1-2 over several ranks: this rank's slices of the buffer every parameter
// views, each parameter padded to partitions x chunk so that this rank's chunk is one slice.
class ModelSlicesPartition final : public OptimizerPartition {
 public:
  explicit ModelSlicesPartition(const PartitionContext& context);
  PartitionKind kind() const override { return PartitionKind::ModelSlices; }
  void step(const at::Tensor& grads, const StepArgs& args) override;
  void refresh_model() override;
  at::Tensor read(size_t section, int64_t begin, int64_t count) override;
  void write(size_t section, int64_t begin, const at::Tensor& values) override;
  at::Tensor master_chunk(size_t i) const override;
  ModelStateBytes bytes() const override;
  zero::ModuleHooks* forward_hooks() override;
  void wait_for_parameters() override;

 private:
  at::Tensor model_flat_;  // fp32, every parameter padded to partitions x chunk
  std::unique_ptr<zero::SliceGather> slice_gather_;  // with dstrain.gather_in_forward
};

// A master of its own in the model's memory.
class CopyPartition final : public OptimizerPartition {
 public:
  explicit CopyPartition(const PartitionContext& context);
  PartitionKind kind() const override { return PartitionKind::Copy; }
  void step(const at::Tensor& grads, const StepArgs& args) override;
  void refresh_model() override;
};

// ZeRO-Offload: master, state and gradient shard in host memory for a model on a GPU.
class HostPartition final : public OptimizerPartition {
 public:
  explicit HostPartition(const PartitionContext& context);
  PartitionKind kind() const override { return PartitionKind::Host; }
  void bind(zero::GradientReducer& reducer, ModelWeights& weights) override;
  zero::GradientReducer::ShardSink gradient_sink() override;
  at::Tensor gradients() override;
  void step(const at::Tensor& grads, const StepArgs& args) override;
  void refresh_model() override;
  ModelStateBytes bytes() const override;

 private:
  void finish_refresh();

  std::unique_ptr<HostOffload> host_;
};

// ZeRO-Infinity: master, state and (outside the pipeline engine) gradient shard in swap files.
class NvmePartition final : public OptimizerPartition {
 public:
  explicit NvmePartition(const PartitionContext& context);
  PartitionKind kind() const override { return PartitionKind::Nvme; }
  zero::GradientReducer::ShardSink gradient_sink() override;
  void begin_backward(bool boundary, const StepArgs& next) override;
  void finish_backward(bool reduced) override;
  at::Tensor gradients() override;
  double gradient_sum_of_squares() const override;
  void step(const at::Tensor& grads, const StepArgs& args) override;
  void refresh_model() override;
  at::Tensor read(size_t section, int64_t begin, int64_t count) override;
  void write(size_t section, int64_t begin, const at::Tensor& values) override;
  at::Tensor master_chunk(size_t i) const override { return {}; }
  at::Tensor reduced_gradient_chunk(size_t i) override;
  ModelStateBytes bytes() const override;
  zero::OptimizerSwapper* swapper() override { return swapper_.get(); }
  io::SwapStats take_swap_stats() override { return swapper_->take_stats(); }

 private:
  bool gradients_on_nvme() const { return swapper_->swaps_gradients(); }
  // A reducer's range with the gradient on NVMe: to its swap file, or (the step begun in backward)
  // staged in its sub-group's slot, and each sub-group whose whole gradient is staged stepped.
  void take_gradients(const at::Tensor& values, int64_t shard_offset, bool overwrite);
  // One sub-group: swap in, unscale and clip a swapped-in gradient, the kernel, swap out, refresh.
  void step_sub_group(int64_t i, const at::Tensor& grads, const StepArgs& args);

  std::unique_ptr<zero::OptimizerSwapper> swapper_;
  // dstrain.step_in_backward where it can act; during the boundary backward, stepping_in_backward_,
  // the step it begins (next_) and the sub-groups stepped so far (step() does the rest).
  bool step_in_backward_ = false;
  bool stepping_in_backward_ = false;
  StepArgs next_;
  int64_t stepped_in_backward_ = 0;
  // The sum of squares of the last reducing backward's gradient, taken as its file was written.
  double swapped_sum_of_squares_ = 0;
};

}  // namespace ds
