#include <torch/torch.h>

#include <algorithm>

#include "dstrain/engine/kernels/fused_optimizer.hpp"
#include "dstrain/engine/partition/model_weights.hpp"
#include "dstrain/engine/partition/step_in_backward.hpp"
#include "dstrain/io/aio_settings.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"
#include "dstrain/zero/buffer_sizes.hpp"
#include "placements.hpp"

namespace ds {
namespace {

// Why the step cannot start inside the boundary backward where the config allows it
// (step_in_backward_config_obstacle), or "".
std::string step_in_backward_obstacle(const Config& config, const ZeroConfig& zero, const ShardOptimizer& optimizer,
                                      at::Device device, int64_t shard_numel) {
  const std::string in_config = step_in_backward_config_obstacle(config);
  if (!in_config.empty()) return in_config;
  if (!zero.offload_optimizer.pipeline_read) return "offload_optimizer.pipeline_read is off";
  if (!device.is_cpu()) return "the model is on a GPU";
  if (!optimizer.steps_ranges()) return "the optimizer steps the whole shard at once";
  // Kept in the slots between steps, the whole shard then moves nothing.
  const int64_t sub_group = zero::optimizer_sub_group_numel(shard_numel, zero.sub_group_size);
  const int slots = zero::optimizer_swap_slots(zero.offload_optimizer.pipeline_read, zero.offload_optimizer.pipeline_write);
  if ((shard_numel + sub_group - 1) / sub_group <= slots) return "every sub-group stays in memory between steps";
  return "";
}

}  // namespace

NvmePartition::NvmePartition(const PartitionContext& context) : OptimizerPartition(context) {
  // The optimizer holds no state of its own: it steps the swapped-in sub-groups.
  make_optimizer(at::kCPU, 0);
  const int64_t shard = layout_.shard_numel();
  if (asks_step_in_backward(config_)) {
    const std::string obstacle = step_in_backward_obstacle(config_, zero_, *optimizer_, device_, shard);
    step_in_backward_ = obstacle.empty();
    log::info("dstrain.step_in_backward: ",
              step_in_backward_ ? "each sub-group is stepped as soon as backward has reduced its gradient"
                                : "off, since " + obstacle +
                                      "; the step runs after backward (docs/offload.md, \"The step begun in backward\")");
  }
  // The master, each of the optimizer's state tensors and (outside the pipeline engine) the
  // gradient shard in a swap file of their own (partition_sizes: swap_files()).
  zero::OptimizerSwapper::Options options;
  options.nvme_path = zero_.offload_optimizer.nvme_path;
  options.rank = group_.rank();
  options.names = {"master"};
  for (const auto& [name, tensor] : optimizer_->state()) options.names.push_back(name);
  options.shard_numel = shard;
  options.sub_group_size = zero_.sub_group_size;
  options.buffer_count = zero_.offload_optimizer.buffer_count;
  options.pipeline_read = zero_.offload_optimizer.pipeline_read;
  options.pipeline_write = zero_.offload_optimizer.pipeline_write;
  options.gradients = partition_sizes(kind(), config_, shard, layout_.partitions()).gradients_on_nvme;
  options.step_in_backward = step_in_backward_;
  options.sum_of_squares = fused::sum_of_squares;
  options.aio = io::aio_settings(config_.aio());
  swapper_ = std::make_unique<zero::OptimizerSwapper>(std::move(options));
  // The master shard goes to its file a sub-group at a time, never whole in memory: each parameter
  // chunk that overlaps the sub-group is copied in (one straddling two, twice).
  swapper_->fill(0, [&](int64_t begin, int64_t count, float* dst) {
    at::NoGradGuard no_grad;
    const at::Tensor group = at::from_blob(dst, {count}, at::kFloat);
    for (size_t i = 0; i < params_.size(); ++i) {
      const zero::ParamSlot& slot = layout_.slot(i);
      const int64_t lo = std::max(begin, slot.shard_offset), hi = std::min(begin + count, slot.shard_offset + slot.chunk);
      if (lo >= hi) continue;
      at::Tensor chunk = at::empty({slot.chunk}, at::kFloat);
      layout_.copy_rank_chunk(i, params_[i].detach(), chunk);
      group.narrow(0, lo - begin, hi - lo).copy_(chunk.narrow(0, lo - slot.shard_offset, hi - lo));
    }
  });
}

zero::GradientReducer::ShardSink NvmePartition::gradient_sink() {
  if (!gradients_on_nvme()) return {};
  return [this](const at::Tensor& values, int64_t shard_offset, bool overwrite) {
    take_gradients(values, shard_offset, overwrite);
  };
}

void NvmePartition::begin_backward(bool boundary, const StepArgs& next) {
  stepping_in_backward_ = step_in_backward_ && boundary;
  if (!stepping_in_backward_) return;
  next_ = next;
  // The last step's final sub-groups served this forward from memory; their slots are this step's
  // first (no gather is in flight between forward and backward).
  swapper_->release_kept();
}

void NvmePartition::finish_backward(bool reduced) {
  if (reduced && gradients_on_nvme()) swapped_sum_of_squares_ = swapper_->finish_gradients();
  stepping_in_backward_ = false;
}

void NvmePartition::take_gradients(const at::Tensor& values, int64_t shard_offset, bool overwrite) {
  // A model on a GPU: the bucket's result comes to the host first (the swapper writes host pages).
  const at::Tensor host = values.is_cpu() ? values : values.to(at::kCPU);
  const float* data = host.data_ptr<float>();
  if (!stepping_in_backward_) {
    swapper_->write_gradients(data, shard_offset, host.numel(), overwrite);
    return;
  }
  // The range a sub-group at a time from its top down, the step's order: each sub-group it
  // completes is stepped before the next piece needs a slot, so a range longer than the slots
  // hold (a parameter larger than several sub-groups) is stepped through as it is staged.
  ScopedTimer timer(timers_, "step_in_backward");
  at::NoGradGuard no_grad;
  const int64_t group = swapper_->sub_group_numel();
  for (int64_t end = shard_offset + host.numel(); end > shard_offset;) {
    const int64_t begin = std::max(shard_offset, (end - 1) / group * group);
    swapper_->write_gradients(data + (begin - shard_offset), begin, end - begin, overwrite);
    end = begin;
    // The sub-groups whose whole gradient is staged, in the step's order: the same kernel on the
    // same values as step() would run, one step early.
    while (stepped_in_backward_ < swapper_->sub_groups()) {
      const int64_t i = swapper_->step_order(stepped_in_backward_);
      if (!swapper_->gradient_complete(i)) break;
      step_sub_group(i, at::Tensor(), StepArgs{next_.lr, next_.step, 1, 1});
      ++stepped_in_backward_;
    }
  }
}

at::Tensor NvmePartition::gradients() { return gradients_on_nvme() ? at::Tensor() : OptimizerPartition::gradients(); }

double NvmePartition::gradient_sum_of_squares() const {
  return reducer_->has_gradients() ? swapped_sum_of_squares_ : 0.0;
}

void NvmePartition::step(const at::Tensor& grads, const StepArgs& args) {
  ScopedTimer timer(timers_, "step_offloaded");
  // Up and down the shard on alternate steps: each step starts with the sub-groups the last one
  // left in memory. With dstrain.step_in_backward the first ones were stepped during backward.
  for (int64_t k = stepped_in_backward_; k < swapper_->sub_groups(); ++k)
    step_sub_group(swapper_->step_order(k), grads, args);
  stepped_in_backward_ = 0;
  swapper_->finish_step();
  weights_->finish();
}

void NvmePartition::step_sub_group(int64_t i, const at::Tensor& grads, const StepArgs& args) {
  // state[0] is the master sub-group, state[1..] the optimizer's state (pipeline_read: the next
  // sub-group is being read meanwhile).
  const zero::OptimizerSwapper::SubGroup& group = swapper_->swap_in(i);
  const float* g = nullptr;
  if (grads.defined()) {
    g = grads.data_ptr<float>() + group.offset;
  } else {
    // The swapped-in gradient, unscaled and clipped as the engine does a shard in memory.
    at::Tensor values = at::from_blob(group.gradients, {group.numel}, at::kFloat);
    if (!stepping_in_backward_ && !reducer_->has_gradients()) values.zero_();  // no backward reduced since the last step
    if (args.unscale != 1) values.div_(args.unscale);
    if (args.clip < 1) values.mul_(args.clip);
    g = group.gradients;
  }
  optimizer_->step_range(group.state[0], g, group.state.data() + 1, group.numel, args.lr, args.step);
  swapper_->swap_out(i);  // pipeline_write: written while the next sub-group steps
  // The buffers stay valid until the slot's next swap_in, so the model takes the new master
  // values from them while they are written.
  weights_->refresh_range(at::from_blob(group.state[0], {group.numel}, at::kFloat), group.offset);
}

void NvmePartition::refresh_model() {
  at::Tensor values = at::empty({swapper_->sub_group_numel()}, at::kFloat);
  for (int64_t i = 0; i < swapper_->sub_groups(); ++i) {
    const zero::OptimizerSwapper::SubGroup& group = swapper_->sub_group(i);
    swapper_->read(0, group.offset, values.data_ptr<float>(), group.numel);
    weights_->refresh_range(values.narrow(0, 0, group.numel), group.offset);
  }
  weights_->finish();
}

at::Tensor NvmePartition::read(size_t section, int64_t begin, int64_t count) {
  at::Tensor values = at::empty({count}, at::kFloat);
  swapper_->read(section, begin, values.data_ptr<float>(), count);
  return values;
}

void NvmePartition::write(size_t section, int64_t begin, const at::Tensor& values) {
  const at::Tensor contiguous = values.contiguous();
  swapper_->write(section, begin, contiguous.data_ptr<float>(), contiguous.numel());
}

at::Tensor NvmePartition::reduced_gradient_chunk(size_t i) {
  if (!gradients_on_nvme()) return OptimizerPartition::reduced_gradient_chunk(i);
  if (stepped_in_backward_ > 0)
    throw Error("the reduced gradient was consumed by the step begun in backward; set dstrain.step_in_backward "
                "false to read it between backward and step")
        .with_key("dstrain.step_in_backward");
  const zero::ParamSlot& slot = layout_.slot(i);
  at::Tensor chunk = at::zeros({slot.chunk}, at::kFloat);
  if (reducer_->has_gradients()) swapper_->read_gradients(slot.shard_offset, chunk.data_ptr<float>(), slot.chunk);
  return chunk;
}

ModelStateBytes NvmePartition::bytes() const {
  ModelStateBytes bytes = OptimizerPartition::bytes();
  bytes.gradients += swapper_->gradient_buffer_bytes();
  bytes.optimizer += swapper_->buffer_bytes();
  return bytes;
}

}  // namespace ds
