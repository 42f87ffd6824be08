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
//             fp32 gradient shard while backward goes on; on_gradient_taken releases the packed
//             parameter (stage 3); on_gradient_reduced writes each reduced range to the gradient's
//             swap file (offload_optimizer on NVMe). Stages 0-1 reduce only at the accumulation
//             boundary, stages 2-3 every micro-step. (OneBitAdam after freeze_step keeps gradients
//             local and exchanges compressed momentum instead.)
//   step      at the boundary: unscale_and_norm (fp16: unscale, overflow vote; the global norm),
//             clip_coefficient, then the ShardOptimizer updates this rank's fp32 master shard with
//             the scheduled lr, and refresh_model_from_master refreshes the model's weights.
//             In fp32 the master is the model's own storage (MasterStorage): stepped in place,
//             nothing to refresh on one partition or at stage 3 (where it is the partition), the
//             other ranks' slices all-gathered at stages 1-2 (with dstrain.gather_in_forward by
//             zero::SliceGather during the next forward, each module's as it runs). A separate
//             fp32 master (fp16/bf16)
//             is copied into the model at stage 0, all-gathered at 1-2, kept as shards at 3.
//             With offload_optimizer on NVMe the master, optimizer state and gradient shard live
//             in swap files and step_offloaded runs the update sub-group by sub-group: swap in,
//             unscale and clip, fused kernel, swap out, refresh that range. With offload_param on
//             NVMe stage 3's parameter chunks live in a swap file (ParamSwapper). A model on a GPU
//             with offload_optimizer "cpu" (ZeRO-Offload, HostOffload) keeps master, optimizer
//             state and gradient shard on the host: each reduced bucket is copied there on a side
//             stream during backward, and step_on_host steps piece by piece with the CPU kernel
//             while the previous piece's weights copy back.
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
#include "dstrain/engine/optim/loss_scaler.hpp"
#include "dstrain/engine/optim/lr_schedule.hpp"
#include "dstrain/engine/optim/optimizer.hpp"
#include "dstrain/io/transfer_time.hpp"
#include "dstrain/zero/optimizer_swapper.hpp"
#include "dstrain/runtime/config.hpp"
#include "dstrain/runtime/timers.hpp"
#include "dstrain/zero/gradient_reducer.hpp"
#include "dstrain/zero/module_call.hpp"
#include "dstrain/zero/param_coordinator.hpp"
#include "dstrain/zero/shard_layout.hpp"

namespace ds {

class HostOffload;
namespace zero {
class SliceGather;
}  // namespace zero

// Per-rank bytes of model state, as the ZeRO paper counts it.
struct ModelStateBytes {
  int64_t parameters = 0;  // model weights held (whole, or shards under stage 3) + fp32 master shard
                           // (none of its own in fp32 with the master in memory: it is the model's storage)
  int64_t gradients = 0;   // param.grad() held + the fp32 gradient shard (or its swap buffers)
  int64_t optimizer = 0;   // optimizer state shards
  int64_t total() const { return parameters + gradients + optimizer; }
};

class EngineCore {
 public:
  // dp_group: the data-parallel group; the whole world when null.
  EngineCore(std::shared_ptr<torch::nn::Module> model, Config config, std::shared_ptr<comm::Backend> dp_group);
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
  const Config& config() const { return config_; }
  comm::Backend& dp_group() const { return *group_; }
  TimerRegistry& timers() { return timers_; }
  ModelStateBytes model_state_bytes() const;
  // NVMe offload of the optimizer state and of stage 3's parameters: the swap I/O of both since
  // the last call (zeros without offload). The seconds are the process's (io/transfer_time.hpp),
  // so they also count this process's own AioHandle transfers, if it makes any beside the engine.
  io::SwapStats take_swap_stats();
  const zero::OptimizerSwapper* optimizer_swapper() const { return swapper_.get(); }
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
  // Where this rank's fp32 master shard lives.
  enum class MasterStorage {
    Model,        // master_ is the model's own storage: on one partition every parameter views it;
                  // at stage 3 it is the coordinator's partition (taken once that is built)
    ModelSlices,  // stages 1-2 over several ranks: this rank's slices of model_flat_, the one fp32
                  // buffer every parameter views, each padded to a multiple of the ranks
    Copy,         // master_, a copy of its own: the model in fp16/bf16, stage 3's partition on
                  // NVMe, parameters sharing storage
    Swapped,      // swapper_'s file (offload_optimizer on NVMe)
  };
  MasterStorage choose_master_storage() const;
  // The fp32 master shard from the model's weights, where choose_master_storage() says.
  void build_master_shard(at::Device device);
  // This rank's master chunk of parameter i: a view, of master_ or of model_flat_ (not Swapped).
  at::Tensor master_chunk(size_t i) const;
  // Master shard elements [begin, begin + count): a view of master_, or a copy assembled from the
  // model's slices or read from the swap file.
  at::Tensor master_range(int64_t begin, int64_t count);
  // The optimizer update of a ModelSlices master, where the slices lie.
  void step_model_slices(const at::Tensor& grads);
  // ZeRO-Offload's update (a model on a GPU, offload_optimizer.device "cpu"): the fused CPU kernel
  // on the host master a piece at a time, each piece's new weights copied to the GPU while the next
  // one steps; grads: the host gradient shard, unscaled and clipped.
  void step_on_host(const at::Tensor& grads);
  // Whether the reduced gradient shard lives in the optimizer swapper's file (NVMe).
  bool gradients_on_nvme() const;
  // ZeRO-Offload's host gradient shard once its copies from the GPU are done (zeros when no
  // backward reduced since the last step).
  const at::Tensor& host_gradients();
  // Hooks the GradientReducer runs inside backward's autograd pass. on_gradient_taken: parameter
  // i's gradient was packed into its bucket, so stage 3 may release the whole parameter.
  void on_gradient_taken(size_t param_index);
  // on_gradient_reduced: a bucket's reduction completed with the gradient shard on NVMe; this
  // rank's reduced values of shard elements [shard_offset, + values.numel()) go to its swap file
  // (overwriting them after a step, else adding).
  void on_gradient_reduced(const at::Tensor& values, int64_t shard_offset, bool overwrite);
  // The step's first stage. fp16: unscales the gradient shard in memory and votes across the
  // group on an overflow (the loss scaler updates). Returns the global norm of the unscaled
  // gradient (grads undefined: from the sums of squares taken as the gradient's swap file was
  // written), or nothing when the step is to be skipped.
  std::optional<double> unscale_and_norm(const at::Tensor& grads, double loss_scale);
  // The configured optimizer, its state on `device`, over layout_ and group_; Adam's and SGD's
  // state holds state_numel elements (0 when it lives in swap files).
  std::unique_ptr<ShardOptimizer> make_optimizer(at::Device device, int64_t state_numel);
  // The optimizer update on NVMe-resident state: for each sub-group, swap in, fused kernel, swap
  // out. grads: the gradient shard in memory, unscaled and clipped; undefined when it is swapped
  // too, and then each swapped-in gradient sub-group is divided by `unscale` (fp16's loss scale, else
  // 1) and multiplied by `clip` (when < 1) first.
  void step_offloaded(const at::Tensor& grads, double unscale, double clip);
  // One sub-group of it: swap in, the kernel at optimizer step number `step`, swap out, refresh.
  void step_sub_group(int64_t i, const at::Tensor& grads, double unscale, double clip, int64_t step);
  // Refreshes the model's working copy from the whole master shard (in memory or swapped).
  void refresh_model_from_master();
  // Takes the new master values of shard elements [shard_offset, + values.numel()) into the model
  // (gathered across the partitions at stages 1-2); finish_refresh() once all were taken.
  void refresh_model_range(const at::Tensor& values, int64_t shard_offset);
  void finish_refresh();
  at::Tensor gather_full(size_t param_index, const at::Tensor& shard);
  double global_grad_norm(const at::Tensor& grads);
  bool any_overflow(const at::Tensor& grads);

  std::shared_ptr<torch::nn::Module> model_;
  Config config_;
  std::shared_ptr<comm::Backend> group_;
  std::vector<std::string> names_;
  std::vector<at::Tensor> params_;
  std::vector<std::vector<int64_t>> shapes_;  // whole shapes (stage 3 tensors hold none between uses)
  std::unique_ptr<zero::ShardLayout> layout_;
  MasterStorage master_storage_ = MasterStorage::Copy;
  at::Tensor master_;      // fp32, this rank's shard (Model, Copy)
  at::Tensor model_flat_;  // fp32, every parameter padded to partitions x chunk (ModelSlices)
  std::unique_ptr<zero::OptimizerSwapper> swapper_;  // offload_optimizer.device "nvme"
  double reading_seconds_taken_ = io::reading_seconds();  // by take_swap_stats
  double writing_seconds_taken_ = io::writing_seconds();
  std::unique_ptr<HostOffload> host_offload_;        // offload_optimizer.device "cpu", model on a GPU
  std::unique_ptr<zero::ParameterCoordinator> coordinator_;
  std::unique_ptr<zero::SliceGather> slice_gather_;  // ModelSlices with dstrain.gather_in_forward
  std::unique_ptr<zero::GradientReducer> reducer_;
  std::unique_ptr<ShardOptimizer> optimizer_;
  LrSchedule schedule_;
  LossScaler scaler_;
  TimerRegistry timers_;
  int64_t micro_steps_ = 0;
  int64_t global_steps_ = 0;
  int64_t optimizer_steps_ = 0;
  int64_t skipped_steps_ = 0;
  double lr_ = 0;
  double grad_norm_ = 0;
  // With the gradient on NVMe: the sum of squares of the last reducing backward's result.
  double swapped_grad_sum_of_squares_ = 0;
  // dstrain.step_in_backward where it can act; during the boundary backward, stepping_in_backward_,
  // and the sub-groups of the coming step stepped so far (step() does the rest).
  bool step_in_backward_ = false;
  bool stepping_in_backward_ = false;
  int64_t stepped_in_backward_ = 0;
};

template <class ModelHolder>
class Engine : public EngineCore {
 public:
  Engine(ModelHolder model, Config config, std::shared_ptr<comm::Backend> dp_group)
      : EngineCore(model.ptr(), std::move(config), std::move(dp_group)), model_(std::move(model)) {}

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
                                                std::shared_ptr<comm::Backend> dp_group = nullptr) {
  return std::make_shared<Engine<ModelHolder>>(std::move(model), std::move(config), std::move(dp_group));
}

}  // namespace ds
