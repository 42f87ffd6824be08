// ds::OptimizerPartition: where this rank's partition of the optimizer lives. ZeRO cuts the fp32
// master weights, the optimizer's state and the reduced gradient into one shard per rank (ZeRO's
// P_os and P_g; at stage 0 one "shard" of everything), each ShardLayout-shaped: shard_numel fp32
// elements. Where those shards live is one of five placements, a class each (src/), chosen by
// choose_partition() from the config and the model:
//
//   ModelStorage  fp32 in memory, one partition or stage 3: the master is the model's own storage
//                 (stage 3: the coordinator's partition), stepped in place; nothing to refresh
//   ModelSlices   fp32 in memory, stages 1-2 over several ranks: the master is this rank's slices
//                 of the one fp32 buffer every parameter views; the other ranks' slices are
//                 all-gathered after the step (or during the next forward: dstrain.gather_in_forward)
//   Copy          a master of its own beside the model: a bf16/fp16 model, stage 3's partition on
//                 NVMe, or parameters sharing storage
//   Host          ZeRO-Offload (a model on a GPU, offload_optimizer "cpu"): master, state and
//                 gradient shard in host memory; each reduced bucket comes over during backward,
//                 the CPU steps piece by piece while the previous piece's weights go back
//   Nvme          ZeRO-Infinity (offload_optimizer "nvme"): master, state and (outside the pipeline
//                 engine) the gradient shard in swap files, stepped sub-group by sub-group; with
//                 dstrain.step_in_backward the step begins inside the boundary backward
//
// The optimizer's per-rank and replicated state (the 1-bit family's errors, Lamb's coefficients)
// stays the optimizer's wherever the partition lives. EngineCore's step reads gradients() ->
// unscale, norm, clip -> step(), which also refreshes the model's weights (ModelWeights); backward
// hands each reduced range to gradient_sink(). partition_sizes() states the same placements' bytes
// for the memory plan, without an engine.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dstrain/comm/backend.hpp"
#include "dstrain/engine/partition/model_state_bytes.hpp"
#include "dstrain/engine/optim/optimizer.hpp"
#include "dstrain/io/swap_stats.hpp"
#include "dstrain/runtime/config.hpp"
#include "dstrain/runtime/timers.hpp"
#include "dstrain/zero/gradient_reducer.hpp"
#include "dstrain/zero/shard_layout.hpp"

namespace ds {

class ModelWeights;
namespace zero {
class ModuleHooks;
class OptimizerSwapper;
}  // namespace zero

enum class PartitionKind { ModelStorage, ModelSlices, Copy, Host, Nvme };
const char* to_string(PartitionKind kind);

// What the placement depends on besides the ZeRO block.
struct PartitionFacts {
  int partitions = 1;    // ranks the shard is cut over: the data-parallel world at stages 1-3, else 1
  bool fp32 = true;      // the model's dtype
  bool on_gpu = false;   // the model's device
  bool aliased = false;  // one storage behind two parameters (it cannot be two places of one buffer)
};
PartitionKind choose_partition(const ZeroConfig& zero, const PartitionFacts& facts);

// One rank's bytes of a placement, as the classes allocate them (docs/zero.md, "The memory
// planner"): the memory plan's model state and swap buffers come from here.
struct PartitionSizes {
  PartitionKind kind = PartitionKind::ModelStorage;
  int64_t shard = 0;  // this rank's shard, elements
  int partitions = 1;
  int64_t state_tensors = 0;      // the optimizer's shard-shaped state tensors (optimizer_state_tensors)
  bool gradients_on_nvme = false;  // Nvme outside the pipeline engine

  // The model's weights (model_weight_bytes, as held: whole, or stage 3's partition) and the master
  // together: ModelStorage's master is the weights; ModelSlices' weights are its buffer, every
  // parameter padded to partitions x chunk; Copy and Host add a master of 4 x shard; Nvme's is on disk.
  int64_t parameters(int64_t model_weight_bytes) const;
  int64_t gradients() const;  // the fp32 gradient shard in memory (host memory for Host)
  int64_t optimizer() const;  // the optimizer's state shards in memory
  // Nvme: the swap files per rank (the master, each state tensor, the gradient), and the locked
  // buffers of `slots` sub-groups of `sub_group` elements for them, the gradient's pages apart.
  int swap_files() const;
  int64_t optimizer_swap_buffers(int64_t slots, int64_t sub_group) const;
  int64_t gradient_swap_buffers(int64_t slots, int64_t sub_group) const;
};
// The optimizer's shard-shaped state tensors: SGD's momentum; Adam's (and the others') two moments;
// OneBitLamb's fresh variance and ZeroOneAdam's momentum accumulator beside them.
int64_t optimizer_state_tensors(const OptimizerConfig& optimizer);
PartitionSizes partition_sizes(PartitionKind kind, const Config& config, int64_t shard, int partitions);

// The optimizer of a partition, its state on `device` with `state_numel` elements (0: the state
// lives in swap files and the optimizer steps the ranges it is handed).
using OptimizerFactory = std::function<std::unique_ptr<ShardOptimizer>(at::Device device, int64_t state_numel)>;

// What a partition is built from. `params` are the model's trainable parameters, whole; the
// ModelStorage and ModelSlices placements move them into their buffer (set_data).
struct PartitionContext {
  const Config& config;
  const ZeroConfig& zero;  // the knobs in force (MemoryPlan::zero)
  std::vector<at::Tensor>& params;
  const std::vector<std::vector<int64_t>>& shapes;
  const zero::ShardLayout& layout;
  comm::Backend& group;
  at::Device device;        // the model's
  bool gather_in_forward;   // dstrain.gather_in_forward may act (ModelSlices on the CPU)
  TimerRegistry* timers;    // wall_clock_breakdown's, or null
  OptimizerFactory make_optimizer;
};

// The optimizer's arguments for one step.
struct StepArgs {
  double lr = 0;
  int64_t step = 0;    // the optimizer's step number, from 1
  double unscale = 1;  // fp16's loss scale, still in a gradient the engine did not hold (swapped)
  double clip = 1;     // the clipping coefficient, likewise
};

class OptimizerPartition {
 public:
  virtual ~OptimizerPartition();
  OptimizerPartition(const OptimizerPartition&) = delete;
  OptimizerPartition& operator=(const OptimizerPartition&) = delete;

  virtual PartitionKind kind() const = 0;
  ShardOptimizer& optimizer() { return *optimizer_; }
  const ShardOptimizer& optimizer() const { return *optimizer_; }

  // Once the reducer and the model's side exist (stage 3's coordinator is built after the
  // partition, which it may read its parameters from): the partition keeps both.
  virtual void bind(zero::GradientReducer& reducer, ModelWeights& weights);

  // --- backward
  // Where the reducer sends each reduced range (values of shard elements [offset, + numel), to
  // overwrite or to add); empty when they stay in the reducer's grad_shard().
  virtual zero::GradientReducer::ShardSink gradient_sink() { return {}; }
  // Before a backward's autograd pass; `boundary`: the step follows it, with `next`'s lr and step.
  virtual void begin_backward(bool boundary, const StepArgs& next) {}
  // After it; `reduced`: the reducer reduced in it (and has waited for its last bucket).
  virtual void finish_backward(bool reduced) {}

  // --- step
  // The reduced gradient shard, which the engine unscales, norms and clips in place; undefined
  // where it lives in a swap file (gradient_sum_of_squares() then gives its norm).
  virtual at::Tensor gradients();
  virtual double gradient_sum_of_squares() const { return 0; }
  // The optimizer's update of the master, and the model's weights refreshed from it. grads:
  // gradients(), unscaled and clipped; undefined when swapped (args.unscale and args.clip then
  // apply to each range as it is swapped in).
  virtual void step(const at::Tensor& grads, const StepArgs& args) = 0;
  // The model's weights from the whole master (after a checkpoint's load).
  virtual void refresh_model() = 0;

  // --- the state, read and written (checkpoints, the pipeline's tied weights, tests)
  // Section 0 is the master ("master"), section k the optimizer's state()[k - 1] ("optim/<name>").
  std::vector<std::string> sections() const;
  // Elements [begin, + count) of a section: a view where they lie together in memory, else a copy.
  virtual at::Tensor read(size_t section, int64_t begin, int64_t count);
  // Sets elements [begin, + values.numel()) of a section (values: fp32 on the CPU).
  virtual void write(size_t section, int64_t begin, const at::Tensor& values);
  // Parameter i's master chunk: a writable view; undefined where the master is swapped.
  virtual at::Tensor master_chunk(size_t i) const;
  // Parameter i's chunk of the reduced gradient, flat and writable (a copy where swapped).
  virtual at::Tensor reduced_gradient_chunk(size_t i);

  // The model's weights and master (ModelWeights::bytes() included), the gradient shard the
  // partition holds beyond the reducer's, and the optimizer's state shards (swap buffers count as
  // state, as ZeRO-Infinity's accounting does).
  virtual ModelStateBytes bytes() const;
  // The hooks of engine forwards, where the partition's refresh runs in them (gather_in_forward).
  virtual zero::ModuleHooks* forward_hooks() { return nullptr; }
  // Waits for a refresh still running (gather_in_forward) before the model is read.
  virtual void wait_for_parameters() {}
  // The optimizer's swapper (Nvme), null elsewhere.
  virtual zero::OptimizerSwapper* swapper() { return nullptr; }
  virtual io::SwapStats take_swap_stats() { return {}; }

 protected:
  explicit OptimizerPartition(const PartitionContext& context);

  // The state tensor of section k > 0, in memory.
  at::Tensor state_tensor(size_t section) const;
  // The optimizer built with its state in memory beside the master.
  void make_optimizer(at::Device device, int64_t state_numel);

  const Config& config_;
  const ZeroConfig& zero_;
  std::vector<at::Tensor>& params_;
  const std::vector<std::vector<int64_t>>& shapes_;
  const zero::ShardLayout& layout_;
  comm::Backend& group_;
  const at::Device device_;
  TimerRegistry* const timers_;
  const OptimizerFactory make_optimizer_;
  std::unique_ptr<ShardOptimizer> optimizer_;
  at::Tensor master_;  // fp32, this rank's shard, where it is one tensor (ModelStorage, Copy, Host)
  zero::GradientReducer* reducer_ = nullptr;  // from bind()
  ModelWeights* weights_ = nullptr;
};

// The partition of `kind` (choose_partition), its master built from the parameters' values.
std::unique_ptr<OptimizerPartition> make_partition(PartitionKind kind, const PartitionContext& context);

}  // namespace ds
