// ds::Engine: one training step, wired from a DeepSpeed config.
//
//   auto engine = ds::initialize(model, config);
//   for each micro-batch:  loss = f(engine->forward(x)); engine->backward(loss); engine->step();
//
// The step, whatever the ZeRO stage (engine.cpp's backward() and step() read in this order):
//   forward   ds::zero::call(model, ...) under a ForwardScope; at stage 3 the ParameterCoordinator
//             gathers each submodule's parameters just before its forward (pre_forward), prefetches
//             the next, and releases them after it (post_forward).
//   backward  autograd on loss / accumulation steps (x loss scale under fp16), whose hooks do the
//             data-parallel work as backward reaches them: ParameterCoordinator::pre_backward
//             gathers a module's parameters again when gradient reaches its outputs (stage 3);
//             GradientReducer::on_gradient_ready packs each finished gradient into its bucket and
//             all-reduces (stage 0) or reduce-scatters (stages 1-3) full buckets into this rank's
//             fp32 gradient shard while backward goes on; ParameterCoordinator::gradient_taken
//             releases the packed parameter (stage 3); the OptimizerPartition's gradient sink takes
//             each reduced range where it keeps the gradient (host memory, a swap file). Stages 0-1
//             reduce only at the accumulation boundary, stages 2-3 every micro-step. (OneBitAdam
//             after freeze_step keeps gradients local and exchanges compressed momentum instead.)
//   step      at the boundary: the partition's gradients(), unscale_and_norm (fp16: unscale,
//             overflow vote; the global norm), clip_coefficient, then the partition's step(): the
//             ShardOptimizer updates this rank's fp32 master shard with the scheduled lr and the
//             model's weights are refreshed from it (ModelWeights). Where the master, the
//             optimizer state and the gradient shard live is the partition's placement
//             (dstrain/engine/partition/optimizer_partition.hpp): the model's own storage (fp32,
//             one partition or stage 3), its slices (fp32, stages 1-2), a copy (bf16/fp16), host
//             memory (ZeRO-Offload) or swap files (ZeRO-Infinity, stepped sub-group by sub-group,
//             begun inside backward with dstrain.step_in_backward). With offload_param on NVMe
//             stage 3's parameter chunks live in a swap file (ParamSwapper).
// Every piece of model state is a ShardLayout-shaped tensor, so offload can move any of them.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dstrain/comm/backend.hpp"
#include "dstrain/engine/memory_plan.hpp"
#include "dstrain/engine/partition/model_state_bytes.hpp"
#include "dstrain/engine/optim/loss_scaler.hpp"
#include "dstrain/engine/optim/lr_schedule.hpp"
#include "dstrain/engine/optim/optimizer.hpp"
#include "dstrain/engine/partition/optimizer_partition.hpp"
#include "dstrain/io/transfer_time.hpp"
#include "dstrain/zero/optimizer_swapper.hpp"
#include "dstrain/runtime/config.hpp"
#include "dstrain/runtime/timers.hpp"
#include "dstrain/zero/gradient_reducer.hpp"
#include "dstrain/zero/module_call.hpp"
#include "dstrain/zero/param_coordinator.hpp"
#include "dstrain/zero/shard_layout.hpp"

namespace ds {

class ModelWeights;

// What a caller that runs the engine inside a larger step asks of it (the pipeline engine's
// stages). The config stays the user's; these only narrow what the engine does with it.
struct EngineOptions {
  // step() clips by gradient_clipping. The pipeline engine clips by the whole model's norm before
  // it calls step(), so its stages' engines must not clip again by their own stage's norm.
  bool clip_gradients = true;
  // dstrain.gather_in_forward may act. The pipeline's schedule interleaves forwards and backwards of
  // several micro-batches, so a stage's parameters are gathered at the step instead.
  bool gather_in_forward = true;
};

class EngineCore {
 public:
  // dp_group: the data-parallel group; the whole world when null.
  EngineCore(std::shared_ptr<torch::nn::Module> model, Config config, std::shared_ptr<comm::Backend> dp_group,
             EngineOptions options = {});
  virtual ~EngineCore();
  EngineCore(const EngineCore&) = delete;
  EngineCore& operator=(const EngineCore&) = delete;

  void backward(const at::Tensor& loss);
  // Backward from explicit output gradients, not scaled (a pipeline stage that received them).
  void backward(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& gradients);
  // After a reducing backward: this rank's chunk of the reduced (data-parallel averaged) gradient of
  // `param`, flat and writable (the whole gradient under ZeRO 0), e.g. to sum a tied weight's
  // gradient across pipeline stages: every stage cuts a parameter into the same chunks. With the
  // gradient on NVMe (offload_optimizer outside the pipeline engine) a copy read from its file.
  at::Tensor reduced_gradient_chunk(const at::Tensor& param);
  // This rank's chunk of the fp32 master weights of `param`, flat: a view of wherever the master
  // lies (in fp32, inside the model's own storage), undefined with the master on NVMe.
  at::Tensor master_weights_chunk(const at::Tensor& param) const;
  // Counts a micro-step; at the accumulation boundary updates the model.
  void step();
  bool is_gradient_accumulation_boundary() const;

  int64_t global_steps() const { return global_steps_; }
  int64_t skipped_steps() const { return skipped_steps_; }
  double get_lr() const { return lr_; }
  double loss_scale() const { return scaler_.scale(); }
  double last_grad_norm() const { return grad_norm_; }
  int train_batch_size() const { return config_.train_batch_size(); }
  int train_micro_batch_size_per_gpu() const { return config_.train_micro_batch_size_per_gpu(); }
  int gradient_accumulation_steps() const { return config_.gradient_accumulation_steps(); }
  int zero_stage() const { return config_.zero_optimization().stage; }
  // The config as given (its batch resolved for the data-parallel group).
  const Config& config() const { return config_; }
  // The ZeRO knobs in force: the config's, with those the memory planner chose where the user left
  // them unset or "auto" (memory_plan.hpp).
  const ZeroConfig& zero_optimization() const { return plan_.zero; }
  comm::Backend& dp_group() const { return *group_; }
  TimerRegistry& timers() { return timers_; }
  ModelStateBytes model_state_bytes() const;
  // NVMe offload of the optimizer state and of stage 3's parameters: the swap I/O of both since
  // the last call (zeros without offload). The seconds are the process's (io/transfer_time.hpp),
  // so they also count this process's own AioHandle transfers, if it makes any beside the engine.
  io::SwapStats take_swap_stats();
  const zero::OptimizerSwapper* optimizer_swapper() const { return partition_->swapper(); }
  zero::ParamStatus param_status(const at::Tensor& param) const;
  // Stage 3's parameter coordinator (null below stage 3), e.g. for zero::GatheredParameters.
  zero::ParameterCoordinator* parameter_coordinator() const { return coordinator_.get(); }

  // Writes the sharded checkpoint <dir>/<tag> (each rank its own shard file, one index.json;
  // docs/checkpoints.md) atomically, then <dir>/latest. An empty tag means "global_step<N>".
  // Refuses (ds::Error) to save non-finite master weights. Collective.
  void save_checkpoint(const std::string& dir, std::string tag = "");
  // Loads <dir>/<tag>, written under any stage and world size, after checking every shard's
  // checksum and that the model and optimizer match. An empty tag: the one <dir>/latest names (see
  // ckpt::checkpoint_folder). Every failure is a ds::Error naming the file. Collective.
  void load_checkpoint(const std::string& dir, std::string tag = "");
  // The I/O buffer of checkpoints: one reduce bucket of fp32 (at most 64 MiB). Saving and loading
  // stream through it, so no rank's memory grows by more than this.
  int64_t checkpoint_bucket_bytes() const;
  // Full fp32 weights by parameter name (every rank gets them; collective).
  std::map<std::string, at::Tensor> consolidated_weights();
  // With dstrain.gather_in_forward the parameters' other slices arrive during the next forward;
  // code that reads the model outside engine forwards waits for them here first. Every EngineCore
  // call that reads parameters does so itself.
  void wait_for_parameters();

 protected:
  // Guards one forward: activates the module hooks around every ds::zero::call (stage 3's
  // coordinator, or stages 1-2's SliceGather) and times it.
  class ForwardScope {
   public:
    explicit ForwardScope(EngineCore& engine);
    ~ForwardScope();

   private:
    zero::ActiveHooks hooks_;
    ScopedTimer timer_;
  };

 private:
  // The registry that wall_clock_breakdown fills; null when it is off.
  TimerRegistry* breakdown_timers() { return config_.training().wall_clock_breakdown ? &timers_ : nullptr; }
  void broadcast_parameters();
  // The checks of offload against the model's device (offload_param on NVMe needs a CPU model,
  // offload_optimizer on a GPU needs stage 1-3; "cpu" is logged).
  void check_offload_devices(at::Device device) const;
  // The configured optimizer, its state on `device`, over layout_ and group_; Adam's and SGD's
  // state holds state_numel elements (0 when it lives in swap files).
  std::unique_ptr<ShardOptimizer> make_optimizer(at::Device device, int64_t state_numel);
  // The step's first stage. fp16: unscales the gradient shard in memory and votes across the
  // group on an overflow (the loss scaler updates). Returns the global norm of the unscaled
  // gradient (grads undefined: from the partition's sum of squares, taken as the gradient's swap
  // file was written), or nothing when the step is to be skipped.
  std::optional<double> unscale_and_norm(const at::Tensor& grads, double loss_scale);
  at::Tensor gather_full(size_t param_index, const at::Tensor& shard);
  double global_grad_norm(const at::Tensor& grads);
  bool any_overflow(const at::Tensor& grads);
  size_t index_of(const at::Tensor& param, const char* caller) const;

  std::shared_ptr<torch::nn::Module> model_;
  Config config_;
  EngineOptions options_;
  std::shared_ptr<comm::Backend> group_;
  MemoryPlan plan_;  // every buffer's size, within the budget; plan_.zero the knobs in force
  std::vector<std::string> names_;
  std::vector<at::Tensor> params_;
  std::vector<std::vector<int64_t>> shapes_;  // whole shapes (stage 3 tensors hold none between uses)
  std::unique_ptr<zero::ShardLayout> layout_;
  // Where this rank's master, optimizer state and gradient shard live, and the optimizer on them.
  std::unique_ptr<OptimizerPartition> partition_;
  double reading_seconds_taken_ = io::reading_seconds();  // by take_swap_stats
  double writing_seconds_taken_ = io::writing_seconds();
  std::unique_ptr<zero::ParameterCoordinator> coordinator_;
  std::unique_ptr<ModelWeights> weights_;
  std::unique_ptr<zero::GradientReducer> reducer_;
  LrSchedule schedule_;
  LossScaler scaler_;
  TimerRegistry timers_;
  int64_t micro_steps_ = 0;
  int64_t global_steps_ = 0;
  int64_t optimizer_steps_ = 0;
  int64_t skipped_steps_ = 0;
  double lr_ = 0;
  double grad_norm_ = 0;
};

template <class ModelHolder>
class Engine : public EngineCore {
 public:
  Engine(ModelHolder model, Config config, std::shared_ptr<comm::Backend> dp_group, EngineOptions options = {})
      : EngineCore(model.ptr(), std::move(config), std::move(dp_group), options), model_(std::move(model)) {}

  template <class... Args>
  decltype(auto) forward(Args&&... args) {
    ForwardScope scope(*this);
    return zero::call(model_, std::forward<Args>(args)...);
  }
  ModelHolder& module() {
    wait_for_parameters();
    return model_;
  }

 private:
  ModelHolder model_;
};

// DeepSpeed's deepspeed.initialize: the engine for `model` (a LibTorch module holder) and `config`.
template <class ModelHolder>
std::shared_ptr<Engine<ModelHolder>> initialize(ModelHolder model, Config config,
                                                std::shared_ptr<comm::Backend> dp_group = nullptr,
                                                EngineOptions options = {}) {
  return std::make_shared<Engine<ModelHolder>>(std::move(model), std::move(config), std::move(dp_group), options);
}

}  // namespace ds
