#include <torch/torch.h>

#include <algorithm>

#include "dstrain/engine/partition/model_weights.hpp"
#include "dstrain/runtime/log.hpp"
#include "placements.hpp"

namespace ds {

at::Tensor move_parameters_into_buffer(const PartitionContext& context) {
  // One fp32 buffer holds every parameter, each padded to partitions x chunk so that this rank's
  // chunk of it is one slice (with one partition the buffer is the shard itself). The parameters
  // become views of it and their former storage is freed: one fp32 copy of the weights remains,
  // and the optimizer steps this rank's slices of it in place. Before the optimizer's state: the
  // storage the parameters leave (kept by the allocator within its peak) is where that state then
  // goes, rather than the state adding to a peak of both copies of the weights.
  at::NoGradGuard no_grad;
  const zero::ShardLayout& layout = context.layout;
  const int64_t partitions = layout.partitions();
  at::Tensor flat = at::empty({partitions * layout.shard_numel()}, at::dtype(at::kFloat).device(context.device));
  for (size_t i = 0; i < context.params.size(); ++i) {
    const zero::ParamSlot& slot = layout.slot(i);
    at::Tensor padded = flat.narrow(0, partitions * slot.shard_offset, partitions * slot.chunk);
    padded.narrow(0, 0, slot.numel).copy_(context.params[i].detach().reshape({-1}));
    padded.narrow(0, slot.numel, padded.numel() - slot.numel).zero_();
    context.params[i].set_data(padded.narrow(0, 0, slot.numel).view(context.shapes[i]));
  }
  return flat;
}

ModelSlicesPartition::ModelSlicesPartition(const PartitionContext& context) : OptimizerPartition(context) {
  model_flat_ = move_parameters_into_buffer(context);
  make_optimizer(device_, layout_.shard_numel());
  if (context.gather_in_forward && device_.is_cpu()) {
    const int64_t partitions = layout_.partitions();
    std::vector<at::Tensor> storage;
    for (size_t i = 0; i < params_.size(); ++i) {
      const zero::ParamSlot& slot = layout_.slot(i);
      storage.push_back(model_flat_.narrow(0, partitions * slot.shard_offset, partitions * slot.chunk));
    }
    slice_gather_ = std::make_unique<zero::SliceGather>(group_, params_, std::move(storage));
    log::info("dstrain.gather_in_forward: each step's parameter all-gather runs during the next forward, every "
              "module waiting for its own parameters (docs/zero.md)");
  }
}

at::Tensor ModelSlicesPartition::master_chunk(size_t i) const {
  const zero::ParamSlot& slot = layout_.slot(i);
  return model_flat_.narrow(0, layout_.partitions() * slot.shard_offset + layout_.rank() * slot.chunk, slot.chunk);
}

void ModelSlicesPartition::step(const at::Tensor& grads, const StepArgs& args) {
  if (optimizer_->steps_ranges()) {
    // The fused kernel where each slice lies (on the CPU range by range, on a GPU one launch for
    // all): it touches element i alone, so stepping slice by slice gives the whole shard's result
    // bit for bit.
    std::vector<ShardRange> ranges;
    ranges.reserve(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) {
      const zero::ParamSlot& slot = layout_.slot(i);
      ranges.push_back({master_chunk(i).data_ptr<float>(), grads.data_ptr<float>() + slot.shard_offset,
                        slot.shard_offset, slot.chunk});
    }
    optimizer_->step_ranges(ranges, args.lr, args.step);
  } else {
    // An optimizer that takes the shard as one tensor (Lamb's per-parameter norms, the 1-bit
    // exchanges), or a device shard: the slices joined for the step's length and written back.
    const at::Tensor master = read(0, 0, layout_.shard_numel());
    optimizer_->step(master, grads, args.lr, args.step);
    write(0, 0, master);
  }
  refresh_model();
}

void ModelSlicesPartition::refresh_model() {
  // This rank's slices are new in place; the other ranks' come during the next forward
  // (SliceGather), or here a window at a time.
  if (slice_gather_) {
    slice_gather_->start();
  } else {
    const int64_t width = weights_->gather_width(), numel = layout_.shard_numel();
    for (int64_t at = 0; at < numel; at += width) weights_->refresh_range(read(0, at, std::min(width, numel - at)), at);
  }
  weights_->finish();
}

at::Tensor ModelSlicesPartition::read(size_t section, int64_t begin, int64_t count) {
  if (section != 0) return OptimizerPartition::read(section, begin, count);
  // The master's elements [begin, + count) joined from the slices they lie in.
  at::Tensor values = at::empty({count}, model_flat_.options());
  for (size_t i = 0; i < params_.size(); ++i) {
    const zero::ParamSlot& slot = layout_.slot(i);
    const int64_t lo = std::max(begin, slot.shard_offset), hi = std::min(begin + count, slot.shard_offset + slot.chunk);
    if (lo < hi) values.narrow(0, lo - begin, hi - lo).copy_(master_chunk(i).narrow(0, lo - slot.shard_offset, hi - lo));
  }
  return values;
}

void ModelSlicesPartition::write(size_t section, int64_t begin, const at::Tensor& values) {
  if (section != 0) return OptimizerPartition::write(section, begin, values);
  const int64_t count = values.numel();
  for (size_t i = 0; i < params_.size(); ++i) {
    const zero::ParamSlot& slot = layout_.slot(i);
    const int64_t lo = std::max(begin, slot.shard_offset), hi = std::min(begin + count, slot.shard_offset + slot.chunk);
    if (lo < hi) master_chunk(i).narrow(0, lo - slot.shard_offset, hi - lo).copy_(values.narrow(0, lo - begin, hi - lo));
  }
}

ModelStateBytes ModelSlicesPartition::bytes() const {
  ModelStateBytes bytes = OptimizerPartition::bytes();
  bytes.parameters = model_flat_.nbytes();  // the weights and the master: one buffer
  return bytes;
}

zero::ModuleHooks* ModelSlicesPartition::forward_hooks() { return slice_gather_.get(); }

void ModelSlicesPartition::wait_for_parameters() {
  if (slice_gather_) slice_gather_->finish();
}

}  // namespace ds
