// ParameterCoordinator: ZeRO stage 3's parameter life cycle, driven by ds::zero::call.
//
// Each rank keeps only its chunk of every parameter (ShardLayout, in the model's dtype). A module's
// parameters are gathered whole just before its forward and released after it; gathered again when
// gradient reaches the module's outputs in backward (pre_backward, an autograd hook on each output),
// and released once their gradient is taken.
// Status per parameter: NotAvailable -> Inflight (gather posted) -> Available -> NotAvailable.
//
// A module's own parameters are those of its subtree, down to (not into) children deriving from
// ds::zero::Module: such children are expected to be called through ds::zero::call and manage
// their own. Parameters of at most stage3_param_persistence_threshold elements stay whole. The first
// forward records the order modules run in; later forwards prefetch the next modules' parameters
// (up to stage3_prefetch_bucket_size elements ahead, never more than stage3_max_live_parameters
// whole at once); in backward, gradient reaching a module's outputs prefetches the modules that ran
// before it, in reverse order, within the same limits. A parameter whose next use in the recorded
// forward order comes within stage3_max_reuse_distance elements of other gathers stays whole until
// then. A parameter a child returns from its forward becomes an external parameter of the caller
// (kept whole until the caller is done), as DeepSpeed does. Module calls made during backward
// (activation checkpointing recomputing a block) gather and release as in forward but leave the
// recorded order alone.
//
// ZeRO++ (docs/zero.md): with zero_quantized_weights (qwZ) the gathers of the parameters that are
// not persistent move int8 blocks (comm::quantized_all_gather), and the gathered weights are the
// dequantized ones while this rank's chunks stay exact. With zero_hpz_partition_size H (hpZ; 1 < H
// < the group, dividing it) each forward gather also leaves this rank the slice of the whole
// parameter its place in its group of H consecutive ranks (a node) owns, 1/H of it, and backward's
// gathers (and recomputations in backward) gather those slices within the H ranks instead, until
// the next optimizer step (load_shard_range) makes them stale.
//
// With a ParamSwapper (offload_param.device "nvme") the chunks live in its swap file instead of a
// shard in memory: a gather takes its input from the swapper's buffer and gives it back once the
// gather is done; beyond the prefetch window, the chunks of the next parameters in the recorded
// order (forward, then reversed in backward) are read ahead while buffers are free. For a model on
// a GPU the swapper still works on host buffers: a chunk goes up through pinned memory on a side
// stream (DeviceStaging) and its buffer is free again at once, and new values come down to the host
// before the swapper stores them.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include "dstrain/runtime/config.hpp"
#include "dstrain/zero/module_call.hpp"
#include "dstrain/zero/param_status.hpp"
#include "dstrain/zero/shard_layout.hpp"

namespace ds::comm {
class Backend;
class Work;
}  // namespace ds::comm

namespace ds::zero {

class ParamSwapper;
class DeviceStaging;

class ParameterCoordinator : public ModuleHooks {
 public:
  // Partitions `params` (the model's, in order): keeps this rank's chunks, in memory or, given a
  // swapper (fp32 parameters only), in its file; frees the rest.
  ParameterCoordinator(std::vector<at::Tensor> params, const ShardLayout& layout, comm::Backend& group,
                       const ZeroConfig& config, std::unique_ptr<ParamSwapper> swapper = nullptr);
  ~ParameterCoordinator() override;

  // Just before a module's forward (ds::zero::call): gathers its parameters, prefetches the next.
  void pre_forward(torch::nn::Module& module) override;
  // Just after it returns: hooks its outputs for backward (pre_backward), takes parameters it
  // returned as the caller's external parameters, releases what it no longer needs.
  void post_forward(torch::nn::Module& module, const std::vector<at::Tensor*>& outputs) override;

  ParamStatus status(size_t param_index) const { return params_[param_index].status; }
  ParamStatus status(const at::Tensor& param) const override;
  bool persistent(size_t param_index) const { return params_[param_index].persistent; }
  // External parameters found for `module` (returned to it by a child, or registered explicitly).
  size_t external_parameter_count(const torch::nn::Module& module) const override;

  // Where this rank's chunks live with offload_param on NVMe; null when they are in memory.
  ParamSwapper* swapper() const { return swapper_.get(); }
  // This rank's chunks, shard-shaped; undefined with a swapper. In fp32 the engine's master: its
  // optimizer steps them in place, and regather_persistent() then refreshes the whole copies.
  const at::Tensor& shard() const { return model_shard_; }
  // Start of an engine forward: the recorded module order is complete once a second forward starts.
  void begin_forward();
  // Start of an engine backward.
  void begin_backward() { in_backward_ = true; }
  // After an optimizer step, piece by piece: takes the new fp32 master values of shard elements
  // [shard_offset, shard_offset + values.numel()) (a bucket, or an offloaded sub-group).
  void load_shard_range(const at::Tensor& values, int64_t shard_offset);
  // Once the whole shard is loaded: gathers the persistent parameters whole again.
  void regather_persistent();
  // During backward, once the GradientReducer has packed parameter i's gradient (through
  // EngineCore::on_gradient_taken): it is no longer needed whole.
  void gradient_taken(size_t param_index);
  // End of backward (or of an evaluation forward): release everything not persistent.
  void release_all();
  // Bytes of parameter data held now: the shard (or the swapper's memory), every whole parameter and
  // hpZ's secondary slices.
  int64_t bytes() const;
  // Every parameter whole (acquire_all) and back (release_acquired_all): GatheredParameters.
  void acquire_all();
  void release_acquired_all();
  // Every parameter whole until release_held(), whatever the hooks and release_all() release
  // meanwhile: a pipeline stage gathers its parameters once per batch and keeps them across the
  // batch's micro-batches (whose forwards and backwards its schedule interleaves) instead of
  // gathering each module twice per micro-batch. The gathers are all posted before the first wait.
  void hold_all();
  void release_held();
  bool holding() const { return holding_; }
  // Elements of all the parameters that are not persistent, gathered whole (padded): what
  // hold_all() adds, against stage3_max_live_parameters.
  int64_t partitioned_numel() const;

 private:
  struct Param {
    at::Tensor tensor;
    std::vector<int64_t> shape;
    ParamStatus status = ParamStatus::NotAvailable;
    bool persistent = false;
    int users = 0;             // forward frames holding it whole
    at::Tensor gather_buffer;  // [partitions * chunk] while Inflight or Available
    at::Tensor gather_input;   // what the gather posted reads, kept until it is done
    std::unique_ptr<comm::Work> work;
    bool from_secondary = false;     // the gather posted is hpZ's, within the secondary group
    at::Tensor secondary;            // hpZ: [partitions * chunk / H], this rank's slice of the whole
    bool secondary_current = false;  // holds the weights of the last forward since the last step
  };
  struct Frame {
    torch::nn::Module* module;
    std::vector<size_t> held;
    size_t trace_index;  // where module stands in the recorded order (meaningful once complete)
  };

  // The hook post_forward registers on each of a module's outputs: autograd runs it when gradient
  // reaches that output, so the module's backward comes next. Gathers the module's parameters
  // (`needed`, those it held in forward) and prefetches those of the modules recorded before
  // trace_index, in reverse order.
  void pre_backward(const std::vector<size_t>& needed, size_t trace_index);
  const std::vector<size_t>& own_params(torch::nn::Module& module);
  void post_gather(size_t i);
  // Waits for parameter i's posted gather and gives its swap buffer back.
  void finish_gather(size_t i);
  void wait_available(size_t i);
  // hpZ: copies this rank's secondary slice out of parameter i's finished gather.
  void keep_secondary(size_t i);
  void acquire(size_t i);
  void release(size_t i);
  void free_whole(size_t i);
  void prefetch_after(torch::nn::Module& module);
  void prefetch_before(size_t trace_index);
  // Posts the gather of parameter i if it is not whole and the limits allow; false once they do not.
  bool prefetch(size_t i, int64_t& budget, int64_t& live);
  bool reused_soon(size_t i);
  // Queues swap reads of the parameters the recorded order needs next, from trace position `from`
  // on (forward) or before it (backward), while the swapper has free buffers.
  void read_ahead(size_t from, bool forward);
  int64_t live_numel() const;

  const ShardLayout& layout_;
  comm::Backend& group_;
  ZeroConfig config_;
  std::shared_ptr<comm::Backend> secondary_group_;  // hpZ's group; null without hpZ
  std::vector<Param> params_;
  std::unordered_map<const void*, size_t> index_of_;  // TensorImpl* -> parameter index
  at::TensorOptions options_;   // the parameters' dtype and device
  at::Tensor model_shard_;       // this rank's chunks, shard-shaped; undefined with a swapper
  std::unique_ptr<ParamSwapper> swapper_;
  std::unique_ptr<DeviceStaging> staging_;  // a model on a GPU with a swapper: chunks cross the link
  std::deque<size_t> gathering_; // swapped parameters whose gathers hold a swap buffer, oldest first
  std::unordered_map<const torch::nn::Module*, std::vector<size_t>> own_params_;
  std::unordered_map<const torch::nn::Module*, std::vector<size_t>> external_;
  std::vector<Frame> stack_;
  std::vector<torch::nn::Module*> trace_;  // forward order of modules, recorded once
  bool trace_complete_ = false;
  bool in_backward_ = false;
  bool holding_ = false;  // hold_all() until release_held()
  size_t trace_position_ = 0;
};

}  // namespace ds::zero
