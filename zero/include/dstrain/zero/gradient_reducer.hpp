// GradientReducer: the one path by which gradients leave backward, for every ZeRO stage.
//
// A hook on each parameter's gradient accumulator (on_gradient_ready) hands the gradient over as
// soon as autograd has finished it. Gradients are packed into buckets of consecutive parameters
// (about bucket_numel elements, the first one smaller with `overlap` (zero/buffer_sizes.hpp), filled
// in reverse parameter order, as backward produces them); a full bucket is reduced at once,
// overlapping the rest of backward when `overlap` is set (at most two reductions in flight, their
// buffers reused, so gradient buckets hold two buckets' memory, not a whole model's):
//   one partition (ZeRO 0):   all-reduce (average), every rank keeps every gradient;
//   N partitions (ZeRO 1-3):  reduce-scatter (average), each rank keeps its shard's gradients.
// The result is added into grad_shard() (fp32, ShardLayout-shaped), so micro-steps accumulate; the
// first reduction after zero_grad_shard() writes its results straight into the shard instead (under
// one partition the bucket is the shard's own slice, reduced in place), so the usual step (one
// reduction per step) needs neither bucket memory, an add pass, nor a zeroing pass.
// With a shard sink (ZeRO-Infinity's gradient on NVMe) no shard is held at all: each bucket's result
// goes to the sink as it completes, to overwrite or add to that range of the shard wherever it is.
// In local-only mode no collective runs: for an optimizer that exchanges its state itself (the 1-bit
// family). On one partition the buckets skip the collective and grad_shard() receives this rank's own
// gradients; under partitions each gradient is summed whole into local_gradients() instead (ZeRO-1/2's
// 1-bit optimizers compress this rank's whole momentum, and only their state is sharded).
// With quantized gradients (ZeRO++'s qgZ) a reduce-scatter is comm::quantized_reduce_scatter over
// the node group instead: int4 or int8 blocks within the node, then across, summed in fp32; it runs
// when its bucket launches, so it overlaps nothing.
// Between reductions (gradient accumulation under ZeRO 0 and 1) autograd keeps accumulating into
// param.grad() as usual; a reduction takes param.grad() and frees it.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "dstrain/runtime/timers.hpp"
#include "dstrain/zero/shard_layout.hpp"

namespace torch::autograd {
struct Node;
}

namespace ds::comm {
class Backend;
class Work;
}  // namespace ds::comm

namespace ds::zero {

class GradientReducer {
 public:
  // Called with a parameter's index once its gradient has been packed and freed: from
  // on_gradient_ready during backward, or from finish_backward for a parameter backward never
  // reached (ZeRO-3 releases the parameter then).
  using TakenFn = std::function<void(size_t param_index)>;
  // Called as each bucket's reduction completes (during backward, or in finish_backward) with this
  // rank's reduced values of shard elements [shard_offset, shard_offset + values.numel())
  // (contiguous fp32, valid during the call): they replace the range's values when `overwrite` (the
  // first reduction after zero_grad_shard()), else add to them. Ranges of one backward never overlap
  // and arrive in descending shard order; together they cover the whole shard. A sink that copies
  // them asynchronously on a GPU must keep their memory from reuse (CUDA's recordStream): the
  // reducer hands such a bucket back to the allocator instead of reusing it.
  using ShardSink = std::function<void(const at::Tensor& values, int64_t shard_offset, bool overwrite)>;

  GradientReducer(std::vector<at::Tensor> params, const ShardLayout& layout, comm::Backend& group,
                  int64_t bucket_numel, bool overlap, TakenFn on_taken = {});
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Whether the coming backward reduces (true) or only accumulates into param.grad() (false).
  void set_reducing(bool reducing) { reducing_ = reducing; }
  bool reducing() const { return reducing_; }
  // Whether a reducing backward takes this rank's own gradients without averaging them across the
  // group: into grad_shard() on one partition, into local_gradients() under partitions. Under
  // partitions a change frees the other mode's buffer (call it between steps only).
  void set_local_only(bool local_only);
  bool local_only() const { return local_only_; }
  // Under partitions, after a local-only backward: this rank's own gradients of every parameter,
  // whole and concatenated in parameter order (stage 0's flat order), zero-padded to the length the
  // compressed allreduce pads them to (comm::onebit::layout_for), so that it runs in place. Zeros a
  // buffer zero_grad_shard() left stale before handing it out.
  const at::Tensor& local_gradients();

  // Reduce-scatters as ZeRO++'s qgZ from now on: blocks of `bits` (4 or 8), `node_group` being this
  // rank's node (zero/node_group.hpp). Needs more than one partition.
  void set_quantized(std::shared_ptr<comm::Backend> node_group, int bits);

  // Hands every reduced range to `sink` instead of a shard in memory (before the first backward).
  void set_shard_sink(ShardSink sink) { sink_ = std::move(sink); }
  bool has_shard_sink() const { return static_cast<bool>(sink_); }

  // Where to time the collectives (their calls and waits) as "reduce_wait"; null times nothing.
  void set_timers(TimerRegistry* timers) { timers_ = timers; }

  // After a reducing backward: reduces what no hook delivered (unused parameters count as zero
  // gradients), waits for every reduction and adds the results into grad_shard() (or has handed
  // them to the sink).
  void finish_backward();

  // Zeros a shard that zero_grad_shard() left stale before handing it out. Not with a sink.
  const at::Tensor& grad_shard();
  // Marks the shard as holding nothing; the next reduction overwrites it.
  void zero_grad_shard() { shard_stale_ = true; }
  // Whether a reduction reached the shard (or the sink) since zero_grad_shard(): if not, the
  // gradient is all zeros.
  bool has_gradients() const { return !shard_stale_; }
  // Bytes this reducer holds now (the gradient shard plus buckets in flight).
  int64_t bytes() const;

 private:
  struct Bucket {
    size_t first_param;  // parameters [first_param, last_param], consecutive
    size_t last_param;
    int64_t shard_begin;  // their chunks' range in a shard
    int64_t shard_end;
    size_t pending = 0;   // parameters still to arrive in this backward
    at::Tensor buffer;    // [partitions * (shard_end - shard_begin)] while filling or in flight
    at::Tensor storage;   // what buffer views unless it is the grad shard's own slice
    at::Tensor result;    // this rank's reduced slice
    bool direct = false;  // result is the grad shard's own slice (written, not added)
    std::unique_ptr<comm::Work> work;
  };

  // The hook: autograd runs it after the last use of parameter i in backward, once its gradient
  // accumulator has summed the gradient into param.grad(). Packs that gradient into its bucket,
  // frees it, reports it taken, and launches every bucket that is now full, in bucket order.
  void on_gradient_ready(size_t param_index);
  void pack(size_t param_index, const at::Tensor& grad);
  // Local-only under partitions: sums parameter i's gradient (zeros if undefined) into local_gradients().
  void take_local(size_t param_index, const at::Tensor& grad);
  // The first delivery of a backward: whether its results overwrite what the stale buffers hold.
  void start_backward();
  void launch(Bucket& bucket);
  void complete(Bucket& bucket);
  void reset_buckets();
  // The gradient shard, allocated on the first call; stale until written.
  at::Tensor& shard();
  // A buffer of at least numel elements: a spare one if any is large enough.
  at::Tensor spare_buffer(int64_t numel);

  std::vector<at::Tensor> params_;
  const ShardLayout& layout_;
  comm::Backend& group_;
  bool overlap_;
  TakenFn on_taken_;
  ShardSink sink_;
  TimerRegistry* timers_ = nullptr;
  bool reducing_ = true;
  bool local_only_ = false;
  std::shared_ptr<comm::Backend> node_group_;  // set: qgZ's quantized reduce-scatter
  int quantized_bits_ = 0;
  at::TensorOptions options_;  // fp32 on the parameters' device
  at::Tensor grad_shard_;      // allocated by shard() on first use
  at::Tensor local_;           // local_gradients(), allocated on first use
  std::vector<int64_t> local_offsets_;  // parameter index -> its offset in local_
  int64_t local_numel_ = 0;    // local_'s padded length
  bool shard_stale_ = true;    // zero_grad_shard() was called (or nothing was ever written) since
  bool direct_ = false;        // this backward's buckets write straight into the shard
  bool backward_started_ = false;
  std::vector<Bucket> buckets_;
  size_t next_launch_ = 0;         // buckets before it are launched in this backward
  size_t next_complete_ = 0;       // buckets before it are complete in this backward
  std::vector<size_t> bucket_of_;  // parameter index -> bucket index
  std::vector<bool> delivered_;    // parameter index -> delivered in this backward
  std::vector<at::Tensor> spares_; // buffers of this backward's completed reductions, for the next buckets
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> hook_keys_;
};

}  // namespace ds::zero
