#include "dstrain/zero/param_coordinator.hpp"

#include <ATen/ATen.h>

#include <algorithm>

#include "dstrain/comm/backend.hpp"
#include "dstrain/comm/quantized_collectives.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/zero/init.hpp"
#include "dstrain/zero/module.hpp"
#include "dstrain/zero/param_swapper.hpp"
#include "device_staging.hpp"

namespace ds::zero {
namespace {

// qwZ's width: int8, as ZeRO++ and DeepSpeed quantize weights (int4 weights lose too much).
constexpr int kQuantizedWeightBits = 8;

// hpZ's secondary group: zero_hpz_partition_size consecutive ranks (a node when it is the ranks per
// node and ranks are numbered node by node); null when off (1, or the whole group).
std::shared_ptr<comm::Backend> secondary_group(comm::Backend& group, int hpz) {
  const int world = group.world_size();
  if (hpz <= 1 || hpz == world) return nullptr;
  if (world % hpz != 0)
    throw Error("zero_hpz_partition_size " + std::to_string(hpz) + " must divide the data-parallel world of " +
                std::to_string(world) + " ranks (it is the ranks of one node)")
        .with_key("zero_optimization.zero_hpz_partition_size")
        .with_rank(group.rank());
  return group.split(group.rank() / hpz, group.rank());
}

}  // namespace

ParameterCoordinator::ParameterCoordinator(std::vector<at::Tensor> params, const ShardLayout& layout,
                                           comm::Backend& group, const ZeroConfig& config,
                                           std::unique_ptr<ParamSwapper> swapper)
    : layout_(layout),
      group_(group),
      config_(config),
      secondary_group_(secondary_group(group, config.zero_hpz_partition_size)),
      swapper_(std::move(swapper)) {
  if (params.empty()) throw Error("ZeRO stage 3: the model has no trainable parameters");
  options_ = params.front().options().requires_grad(false);
  if (swapper_ && options_.dtype() != at::kFloat)
    throw Error("offload_param.device \"nvme\" swaps fp32 parameters; this model's are " +
                std::string(c10::toString(options_.dtype().toScalarType())))
        .with_key("zero_optimization.offload_param.device");
  if (!swapper_) model_shard_ = at::empty({layout_.shard_numel()}, options_);
  if (swapper_ && !options_.device().is_cpu()) staging_ = std::make_unique<DeviceStaging>(options_.device());
  params_.resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    Param& p = params_[i];
    p.tensor = params[i];
    p.shape = params[i].sizes().vec();
    p.persistent = params[i].numel() <= config_.stage3_param_persistence_threshold;
    index_of_[params[i].unsafeGetTensorImpl()] = i;
    at::NoGradGuard no_grad;
    if (swapper_) {
      // One chunk at a time through memory: the whole partition never is (a model built onto NVMe
      // by Init is read back from its build file here, chunk by chunk).
      const at::Tensor chunk = at::empty({layout_.slot(i).chunk}, options_.device(at::kCPU));
      layout_.copy_rank_chunk(i, params[i].detach(), chunk);
      swapper_->store_range(chunk.data_ptr<float>(), layout_.slot(i).shard_offset, chunk.numel());
    } else {
      layout_.copy_rank_chunk(i, params[i].detach(), layout_.chunk_view(i, model_shard_));
    }
    if (p.persistent && is_partitioned(params[i]))
      wait_available(i);  // built partitioned under another persistence threshold: gather it once
    else if (p.persistent)
      p.status = ParamStatus::Available;
    else
      free_whole(i);
  }
  if (swapper_) swapper_->finish_writes();  // the file whole on disk before step 1
}

ParameterCoordinator::~ParameterCoordinator() {
  // Before the swapper goes: a gather in flight may still read one of its buffers.
  for (Param& p : params_)
    if (p.work) p.work->wait();
}

ParamStatus ParameterCoordinator::status(const at::Tensor& param) const {
  auto it = index_of_.find(param.unsafeGetTensorImpl());
  return it == index_of_.end() ? ParamStatus::Available : params_[it->second].status;
}

size_t ParameterCoordinator::external_parameter_count(const torch::nn::Module& module) const {
  size_t count = 0;
  if (auto it = external_.find(&module); it != external_.end()) count += it->second.size();
  if (auto* zero_module = dynamic_cast<const Module*>(&module)) count += zero_module->external_parameters().size();
  return count;
}

const std::vector<size_t>& ParameterCoordinator::own_params(torch::nn::Module& module) {
  auto it = own_params_.find(&module);
  if (it != own_params_.end()) return it->second;
  std::vector<size_t> own;
  for (const at::Tensor& param : own_parameters(module))
    if (auto found = index_of_.find(param.unsafeGetTensorImpl()); found != index_of_.end()) own.push_back(found->second);
  return own_params_.emplace(&module, std::move(own)).first->second;
}

void ParameterCoordinator::post_gather(size_t i) {
  Param& p = params_[i];
  const ParamSlot& slot = layout_.slot(i);
  p.gather_buffer = at::empty({slot.chunk * layout_.partitions()}, options_);
  p.status = ParamStatus::Inflight;
  p.from_secondary = in_backward_ && p.secondary_current;
  if (p.from_secondary) {
    // hpZ: the node's ranks hold the whole parameter between them since the forward's gather.
    p.work = secondary_group_->all_gather_into_async(p.gather_buffer, p.secondary);
    return;
  }
  at::Tensor input;
  if (swapper_) {
    // Every buffer held by a gather in flight: the oldest finishes first (every rank posts the
    // same gathers in the same order, so waiting for an earlier one cannot deadlock).
    while (!swapper_->can_acquire(i)) wait_available(gathering_.front());
    const float* chunk = swapper_->acquire(i);
    if (staging_) {
      // On a GPU the gather reads a device copy: the swap buffer is free again at once.
      input = staging_->to_device(chunk, slot.chunk);
      swapper_->release(i);
    } else {
      input = at::from_blob(const_cast<float*>(chunk), {slot.chunk}, options_);
      if (swapper_->swapped(i)) gathering_.push_back(i);
    }
  } else {
    input = layout_.chunk_view(i, model_shard_);
  }
  // qwZ quantizes the gathers that repeat every step; a persistent parameter's (once per step, and
  // small: biases, norms) stays exact.
  if (config_.zero_quantized_weights && !p.persistent)
    p.work = comm::quantized_all_gather_async(group_, p.gather_buffer, input, kQuantizedWeightBits);
  else
    p.work = group_.all_gather_into_async(p.gather_buffer, input);
  p.gather_input = input;
}

void ParameterCoordinator::finish_gather(size_t i) {
  Param& p = params_[i];
  p.work->wait();
  p.work.reset();
  p.gather_input = at::Tensor();
  if (!swapper_ || staging_ || p.from_secondary) return;
  swapper_->release(i);
  gathering_.erase(std::remove(gathering_.begin(), gathering_.end(), i), gathering_.end());
}

void ParameterCoordinator::wait_available(size_t i) {
  Param& p = params_[i];
  if (p.status == ParamStatus::Available) return;
  if (p.status == ParamStatus::NotAvailable) post_gather(i);
  finish_gather(i);
  if (secondary_group_ && !p.persistent && !p.from_secondary) keep_secondary(i);
  p.tensor.set_data(p.gather_buffer.narrow(0, 0, layout_.slot(i).numel).view(p.shape));
  p.status = ParamStatus::Available;
}

void ParameterCoordinator::keep_secondary(size_t i) {
  Param& p = params_[i];
  const int64_t piece = p.gather_buffer.numel() / secondary_group_->world_size();
  if (!p.secondary.defined()) p.secondary = at::empty({piece}, options_);
  p.secondary.copy_(p.gather_buffer.narrow(0, secondary_group_->rank() * piece, piece));
  p.secondary_current = true;
}

void ParameterCoordinator::free_whole(size_t i) {
  Param& p = params_[i];
  if (p.work) finish_gather(i);
  p.tensor.set_data(at::empty({0}, options_));
  p.gather_buffer = at::Tensor();
  p.status = ParamStatus::NotAvailable;
}

void ParameterCoordinator::acquire(size_t i) {
  wait_available(i);
  ++params_[i].users;
}

void ParameterCoordinator::release(size_t i) {
  Param& p = params_[i];
  if (--p.users == 0 && !p.persistent && !reused_soon(i)) free_whole(i);
}

bool ParameterCoordinator::reused_soon(size_t i) {
  if (!trace_complete_ || in_backward_) return false;
  int64_t distance = 0;
  for (size_t pos = trace_position_; pos < trace_.size(); ++pos) {
    const std::vector<size_t>& own = own_params(*trace_[pos]);
    if (std::find(own.begin(), own.end(), i) != own.end()) return distance <= config_.stage3_max_reuse_distance;
    for (size_t j : own)
      if (!params_[j].persistent) distance += layout_.slot(j).numel;
    if (distance > config_.stage3_max_reuse_distance) return false;
  }
  return false;
}

void ParameterCoordinator::pre_forward(torch::nn::Module& module) {
  const size_t trace_index = trace_position_;
  if (in_backward_) {
    // A recomputation (activation checkpointing): gather what the module needs, record nothing.
  } else if (!trace_complete_) {
    trace_.push_back(&module);
  } else if (trace_position_ >= trace_.size() || trace_[trace_position_] != &module) {
    // The model took another path than the recorded one: record it afresh, prefetch nothing.
    trace_.assign(1, &module);
    trace_complete_ = false;
  }
  if (!in_backward_) ++trace_position_;

  Frame frame{&module, own_params(module), trace_index};
  if (auto it = external_.find(&module); it != external_.end())
    frame.held.insert(frame.held.end(), it->second.begin(), it->second.end());
  if (auto* zero_module = dynamic_cast<Module*>(&module))
    for (const at::Tensor& param : zero_module->external_parameters())
      if (auto found = index_of_.find(param.unsafeGetTensorImpl()); found != index_of_.end()) frame.held.push_back(found->second);
  for (size_t i : frame.held) acquire(i);
  stack_.push_back(std::move(frame));
  if (!in_backward_) prefetch_after(module);
}

void ParameterCoordinator::post_forward(torch::nn::Module& module, const std::vector<at::Tensor*>& outputs) {
  if (stack_.empty() || stack_.back().module != &module) throw Error("ZeRO-3: module calls are not nested properly");
  Frame frame = std::move(stack_.back());
  stack_.pop_back();

  for (at::Tensor* output : outputs) {
    auto found = index_of_.find(output->unsafeGetTensorImpl());
    if (found == index_of_.end()) continue;
    // A parameter returned to the caller: it becomes the caller's external parameter, moving from
    // this module if it was this module's (DeepSpeed registers it on the innermost running module
    // that does not hold it yet).
    const size_t i = found->second;
    auto& mine = external_[&module];
    mine.erase(std::remove(mine.begin(), mine.end(), i), mine.end());
    if (stack_.empty()) continue;
    Frame& caller = stack_.back();
    auto& theirs = external_[caller.module];
    if (std::find(theirs.begin(), theirs.end(), i) == theirs.end()) theirs.push_back(i);
    acquire(i);
    caller.held.push_back(i);
  }

  // Gradient reaching an output means this module's backward is next (pre_backward).
  std::vector<size_t> needed;
  for (size_t i : frame.held)
    if (!params_[i].persistent) needed.push_back(i);
  if (!needed.empty()) {
    const size_t trace_index = in_backward_ ? trace_.size() : frame.trace_index;
    for (at::Tensor* output : outputs) {
      if (!output->requires_grad() || output->is_leaf()) continue;
      output->register_hook([this, needed, trace_index](const at::Tensor&) { pre_backward(needed, trace_index); });
    }
  }
  for (size_t i : frame.held) release(i);
}

void ParameterCoordinator::pre_backward(const std::vector<size_t>& needed, size_t trace_index) {
  for (size_t i : needed) wait_available(i);
  prefetch_before(trace_index);
}

bool ParameterCoordinator::prefetch(size_t i, int64_t& budget, int64_t& live) {
  const Param& p = params_[i];
  if (p.persistent || p.status != ParamStatus::NotAvailable) return true;
  const int64_t numel = layout_.slot(i).chunk * layout_.partitions();
  if (numel > budget || live + numel > config_.stage3_max_live_parameters) return false;
  post_gather(i);
  budget -= numel;
  live += numel;
  return true;
}

void ParameterCoordinator::prefetch_after(torch::nn::Module& module) {
  if (!trace_complete_) return;
  int64_t budget = config_.stage3_prefetch_bucket_size;
  int64_t live = live_numel();
  if (swapper_) read_ahead(trace_position_, true);
  for (size_t pos = trace_position_; pos < trace_.size() && budget > 0; ++pos)
    for (size_t i : own_params(*trace_[pos]))
      if (!prefetch(i, budget, live)) return;
}

void ParameterCoordinator::prefetch_before(size_t trace_index) {
  // Only from a complete order: a module whose recorded place is unknown (a recomputation) has
  // trace_index past the end and prefetches nothing.
  if (!trace_complete_ || trace_index >= trace_.size()) return;
  int64_t budget = config_.stage3_prefetch_bucket_size;
  int64_t live = live_numel();
  if (swapper_ && !secondary_group_) read_ahead(trace_index, false);  // with hpZ backward reads no chunk
  for (size_t pos = trace_index; pos-- > 0 && budget > 0;)
    for (size_t i : own_params(*trace_[pos]))
      if (!prefetch(i, budget, live)) return;
}

void ParameterCoordinator::read_ahead(size_t from, bool forward) {
  // Before the prefetch: the reads of the chunks it is about to gather go first, then those of the
  // parameters after them, as far as the buffers go.
  auto visit = [&](size_t pos) {
    for (size_t i : own_params(*trace_[pos]))
      if (!params_[i].persistent && params_[i].status == ParamStatus::NotAvailable && !swapper_->read_ahead(i))
        return false;
    return true;
  };
  if (forward) {
    for (size_t pos = from; pos < trace_.size(); ++pos)
      if (!visit(pos)) return;
  } else {
    for (size_t pos = from; pos-- > 0;)
      if (!visit(pos)) return;
  }
}

int64_t ParameterCoordinator::live_numel() const {
  int64_t live = 0;
  for (const Param& p : params_)
    if (!p.persistent && p.status != ParamStatus::NotAvailable) live += p.gather_buffer.numel();
  return live;
}

void ParameterCoordinator::begin_forward() {
  if (!trace_.empty()) trace_complete_ = true;
  trace_position_ = 0;
  in_backward_ = false;
}

void ParameterCoordinator::gradient_taken(size_t i) {
  if (!params_[i].persistent && params_[i].users == 0) free_whole(i);
}

void ParameterCoordinator::release_all() {
  for (size_t i = 0; i < params_.size(); ++i) {
    params_[i].users = holding_ ? 1 : 0;  // the hold's own use stays
    if (!params_[i].persistent && !holding_) free_whole(i);
  }
  stack_.clear();
  if (swapper_) swapper_->drop_read_ahead();
}

void ParameterCoordinator::acquire_all() {
  for (size_t i = 0; i < params_.size(); ++i) acquire(i);
}

void ParameterCoordinator::release_acquired_all() {
  for (size_t i = 0; i < params_.size(); ++i) release(i);
}

void ParameterCoordinator::hold_all() {
  if (holding_) return;
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].status == ParamStatus::NotAvailable) post_gather(i);
  acquire_all();
  holding_ = true;
}

int64_t ParameterCoordinator::partitioned_numel() const {
  int64_t numel = 0;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!params_[i].persistent) numel += layout_.slot(i).chunk * layout_.partitions();
  return numel;
}

void ParameterCoordinator::release_held() {
  if (!holding_) return;
  holding_ = false;
  release_all();
}

void ParameterCoordinator::load_shard_range(const at::Tensor& values, int64_t shard_offset) {
  at::NoGradGuard no_grad;
  for (Param& p : params_) p.secondary_current = false;  // the next forward's gathers refresh them
  if (staging_) {
    staging_->to_host(values, [&](const float* host, int64_t offset, int64_t count) {
      swapper_->store_range(host, shard_offset + offset, count);
    });
    return;
  }
  if (swapper_) {
    const at::Tensor fp32 = values.to(at::kFloat).contiguous();
    swapper_->store_range(fp32.data_ptr<float>(), shard_offset, fp32.numel());
    return;
  }
  model_shard_.narrow(0, shard_offset, values.numel()).copy_(values);
}

void ParameterCoordinator::regather_persistent() {
  at::NoGradGuard no_grad;
  if (swapper_) swapper_->finish_writes();
  std::vector<size_t> persistent;
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].persistent) persistent.push_back(i);
  for (size_t k = 0; k < persistent.size(); ++k) {
    // Their chunks are a few KB each: the reads of the next ones are queued while this one is
    // gathered, so that they share the disk's round trips rather than wait for one each.
    for (size_t j = k; swapper_ && j < persistent.size(); ++j)
      if (!swapper_->read_ahead(persistent[j])) break;  // no buffer free
    post_gather(persistent[k]);
    wait_available(persistent[k]);
  }
}

int64_t ParameterCoordinator::bytes() const {
  int64_t total = swapper_ ? swapper_->memory_bytes() : model_shard_.nbytes();
  for (const Param& p : params_) {
    if (p.gather_buffer.defined())
      total += p.gather_buffer.nbytes();
    else if (p.persistent)
      total += p.tensor.nbytes();
    if (p.secondary.defined()) total += p.secondary.nbytes();
  }
  return total;
}

}  // namespace ds::zero
