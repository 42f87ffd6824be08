#include "dstrain/zero/gradient_reducer.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include "dstrain/comm/backend.hpp"
#include "dstrain/comm/quantized_collectives.hpp"
#include "dstrain/comm/onebit_kernels.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/zero/buffer_sizes.hpp"

namespace ds::zero {
namespace {

// Reductions in flight at once when overlapping: enough to keep one reducing while the next fills
// (DeepSpeed's double-buffered buckets). More would only hold more gradient memory.
constexpr size_t kMaxInFlight = 2;

class GradientReadyHook : public torch::autograd::FunctionPostHook {
 public:
  explicit GradientReadyHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    fn_();
    return outputs;
  }

 private:
  std::function<void()> fn_;
};

}  // namespace

GradientReducer::GradientReducer(std::vector<at::Tensor> params, const ShardLayout& layout, comm::Backend& group,
                                 int64_t bucket_numel, bool overlap, TakenFn on_taken)
    : params_(std::move(params)), layout_(layout), group_(group), overlap_(overlap), on_taken_(std::move(on_taken)) {
  options_ = at::dtype(at::kFloat).device(params_.front().device());
  bucket_of_.resize(params_.size());
  delivered_.assign(params_.size(), false);

  // Buckets of consecutive parameters, the last parameters' first (zero/buffer_sizes.hpp).
  std::vector<int64_t> packed_numels;
  for (size_t i = 0; i < params_.size(); ++i) packed_numels.push_back(layout_.slot(i).chunk * layout_.partitions());
  for (const BucketRange& range : reduce_buckets(packed_numels, bucket_numel, overlap_)) {
    Bucket bucket;
    bucket.first_param = range.first;
    bucket.last_param = range.last;
    bucket.shard_begin = layout_.slot(range.first).shard_offset;
    bucket.shard_end = layout_.slot(range.last).shard_offset + layout_.slot(range.last).chunk;
    for (size_t i = range.first; i <= range.last; ++i) bucket_of_[i] = buckets_.size();
    buckets_.push_back(std::move(bucket));
  }
  reset_buckets();
  for (size_t i = 0; i < params_.size(); ++i) {
    local_offsets_.push_back(local_numel_);
    local_numel_ += layout_.slot(i).numel;
  }
  local_numel_ = comm::onebit::layout_for(local_numel_, group_.world_size()).padded;

  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].requires_grad()) throw Error("GradientReducer: parameter " + std::to_string(i) + " does not require grad");
    std::shared_ptr<torch::autograd::Node> accumulator = torch::autograd::impl::grad_accumulator(params_[i]);
    hook_keys_.push_back(accumulator->add_post_hook(std::make_unique<GradientReadyHook>([this, i] { on_gradient_ready(i); })));
    accumulators_.push_back(std::move(accumulator));
  }
}

GradientReducer::~GradientReducer() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
}

void GradientReducer::reset_buckets() {
  for (Bucket& bucket : buckets_) bucket.pending = bucket.last_param - bucket.first_param + 1;
  next_launch_ = 0;
  next_complete_ = 0;
  spares_.clear();  // reused within a backward only: between steps the memory is the model's
  backward_started_ = false;
  std::fill(delivered_.begin(), delivered_.end(), false);
}

void GradientReducer::on_gradient_ready(size_t i) {
  if (!reducing_) return;
  if (delivered_[i]) throw Error("GradientReducer: gradient of parameter " + std::to_string(i) + " delivered twice in one backward");
  at::Tensor& grad = params_[i].mutable_grad();
  if (local_only_ && layout_.partitions() > 1) {
    take_local(i, grad);
    grad.reset();
    delivered_[i] = true;
    if (on_taken_) on_taken_(i);
    return;
  }
  pack(i, grad);
  grad.reset();
  delivered_[i] = true;
  if (on_taken_) on_taken_(i);
  --buckets_[bucket_of_[i]].pending;
  // Open MPI advances a nonblocking collective only inside MPI calls: polled from every hook, the
  // reductions in flight go on during backward instead of waiting for the next launch. Those done
  // complete now, oldest first as in launch, and their buffers serve the next buckets.
  while (next_complete_ < next_launch_ && buckets_[next_complete_].work && buckets_[next_complete_].work->test())
    complete(buckets_[next_complete_++]);
  // Buckets go out strictly in order, so every rank issues the same collectives in the same order
  // even if its backward finishes parameters in another order.
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) launch(buckets_[next_launch_++]);
}

void GradientReducer::start_backward() {
  // Every bucket of this backward is written whole (missing gradients as zeros), so a stale
  // shard can take the results directly.
  backward_started_ = true;
  direct_ = shard_stale_;
  shard_stale_ = false;
}

void GradientReducer::pack(size_t i, const at::Tensor& grad) {
  if (!backward_started_) start_backward();
  Bucket& bucket = buckets_[bucket_of_[i]];
  const int64_t width = bucket.shard_end - bucket.shard_begin;
  if (!bucket.buffer.defined()) {
    bucket.direct = direct_ && !sink_;
    at::Tensor slice = bucket.direct ? shard().narrow(0, bucket.shard_begin, width) : at::Tensor();
    if (bucket.direct && layout_.partitions() == 1) {
      bucket.buffer = slice;
    } else {
      bucket.storage = spare_buffer(layout_.partitions() * width);
      bucket.buffer = bucket.storage.narrow(0, 0, layout_.partitions() * width);
    }
    bucket.result = slice;
  }
  const ParamSlot& slot = layout_.slot(i);
  const int64_t offset = slot.shard_offset - bucket.shard_begin;
  for (int part = 0; part < layout_.partitions(); ++part) {
    at::Tensor chunk = bucket.buffer.narrow(0, part * width + offset, slot.chunk);
    if (grad.defined())
      layout_.copy_chunk(i, grad, part, chunk);
    else
      chunk.zero_();  // an unused parameter contributes zeros
  }
}

void GradientReducer::set_local_only(bool local_only) {
  // Under partitions each mode has a buffer of its own: the reduced shard, the whole local
  // gradients. Called before a step's first backward, when the last step has consumed the other
  // mode's buffer, so a change (the 1-bit family's freeze) frees it.
  if (local_only != local_only_ && layout_.partitions() > 1) {
    if (local_only)
      grad_shard_ = at::Tensor();
    else
      local_ = at::Tensor();
    shard_stale_ = true;
  }
  local_only_ = local_only;
}

void GradientReducer::take_local(size_t i, const at::Tensor& grad) {
  if (!backward_started_) {
    start_backward();
    if (!local_.defined()) local_ = at::zeros({local_numel_}, options_);
    // The padding is zero for the compressed allreduce, which leaves values there in place.
    const int64_t used = local_offsets_.back() + layout_.slot(params_.size() - 1).numel;
    if (direct_) local_.narrow(0, used, local_numel_ - used).zero_();
  }
  at::Tensor range = local_.narrow(0, local_offsets_[i], layout_.slot(i).numel);
  if (!grad.defined()) {
    if (direct_) range.zero_();  // an unused parameter contributes zeros
  } else if (direct_) {
    range.copy_(grad.reshape({-1}));
  } else {
    range.add_(grad.reshape({-1}));
  }
}

const at::Tensor& GradientReducer::local_gradients() {
  if (!local_.defined()) local_ = at::zeros({local_numel_}, options_);
  if (shard_stale_) {
    local_.zero_();
    shard_stale_ = false;
  }
  return local_;
}

void GradientReducer::set_quantized(std::shared_ptr<comm::Backend> node_group, int bits) {
  if (layout_.partitions() == 1)
    throw Error("GradientReducer: quantized gradients reduce-scatter; one partition (ZeRO stage 0) all-reduces");
  node_group_ = std::move(node_group);
  quantized_bits_ = bits;
}

void GradientReducer::launch(Bucket& bucket) {
  if (!bucket.result.defined())
    bucket.result = layout_.partitions() == 1
                        ? bucket.buffer
                        : at::empty({bucket.shard_end - bucket.shard_begin}, options_);
  if (local_only_) {
    complete(bucket);
    return;
  }
  {
    ScopedTimer timer(timers_, "reduce_wait");
    if (layout_.partitions() == 1)
      bucket.work = group_.all_reduce_async(bucket.buffer, comm::ReduceOp::Avg);
    else if (node_group_)
      comm::quantized_reduce_scatter(group_, *node_group_, bucket.result, bucket.buffer, quantized_bits_,
                                     comm::ReduceOp::Avg);
    else
      bucket.work = group_.reduce_scatter_into_async(bucket.result, bucket.buffer, comm::ReduceOp::Avg);
  }
  if (!overlap_) {
    complete(bucket);
    return;
  }
  // Buckets launch in order, so the oldest in flight are the first to complete.
  const size_t launched = static_cast<size_t>(&bucket - buckets_.data()) + 1;
  while (launched - next_complete_ > kMaxInFlight) complete(buckets_[next_complete_++]);
}

void GradientReducer::complete(Bucket& bucket) {
  if (bucket.work) {
    ScopedTimer timer(timers_, "reduce_wait");
    bucket.work->wait();
  }
  if (sink_)
    sink_(bucket.result, bucket.shard_begin, direct_);
  else if (!bucket.direct)
    shard().narrow(0, bucket.shard_begin, bucket.shard_end - bucket.shard_begin).add_(bucket.result);
  bucket.work.reset();
  // A sink on a GPU may still be copying the result on a stream of its own (HostOffload's
  // device-to-host copy): on one partition the result is the bucket's storage, which then goes back
  // to the allocator (told by the sink to wait for that stream) rather than to the next bucket.
  const bool sink_may_read = sink_ && layout_.partitions() == 1 && !options_.device().is_cpu();
  if (bucket.storage.defined() && !sink_may_read) spares_.push_back(std::move(bucket.storage));
  bucket.storage = at::Tensor();
  bucket.buffer = at::Tensor();
  bucket.result = at::Tensor();
  bucket.direct = false;
}

void GradientReducer::finish_backward() {
  if (local_only_ && layout_.partitions() > 1) {
    for (size_t i = 0; i < params_.size(); ++i) {
      if (delivered_[i]) continue;
      take_local(i, params_[i].grad());
      params_[i].mutable_grad().reset();
      if (on_taken_) on_taken_(i);
    }
    reset_buckets();
    return;
  }
  // Buckets that never filled get zeros for their missing parameters, then go out in order.
  for (; next_launch_ < buckets_.size(); ++next_launch_) {
    Bucket& bucket = buckets_[next_launch_];
    for (size_t i = bucket.first_param; i <= bucket.last_param; ++i) {
      if (delivered_[i]) continue;
      pack(i, params_[i].grad());
      params_[i].mutable_grad().reset();
      if (on_taken_) on_taken_(i);
    }
    launch(bucket);
  }
  for (Bucket& bucket : buckets_)
    if (bucket.work) complete(bucket);
  reset_buckets();
}

at::Tensor GradientReducer::spare_buffer(int64_t numel) {
  for (auto it = spares_.begin(); it != spares_.end(); ++it) {
    if (it->numel() < numel) continue;
    at::Tensor buffer = std::move(*it);
    spares_.erase(it);
    return buffer;
  }
  return at::empty({numel}, options_);
}

at::Tensor& GradientReducer::shard() {
  // Allocated when first used (the first backward writes it directly), not at construction: at
  // stage 3 the model's partitioned parameters are freed by then, so the allocator can reuse or
  // unmap their memory instead of the shard landing on top of it.
  if (!grad_shard_.defined()) grad_shard_ = at::empty({layout_.shard_numel()}, options_);
  return grad_shard_;
}

const at::Tensor& GradientReducer::grad_shard() {
  if (sink_) throw Error("GradientReducer: the gradient shard is not in memory (its reductions go to a sink)");
  shard();
  if (shard_stale_) {
    grad_shard_.zero_();
    shard_stale_ = false;
  }
  return grad_shard_;
}

int64_t GradientReducer::bytes() const {
  int64_t total = (grad_shard_.defined() ? grad_shard_.nbytes() : 0) + (local_.defined() ? local_.nbytes() : 0);
  for (const Bucket& bucket : buckets_)
    if (bucket.storage.defined()) total += bucket.storage.nbytes();
  for (const at::Tensor& spare : spares_) total += spare.nbytes();
  return total;
}

}  // namespace ds::zero
