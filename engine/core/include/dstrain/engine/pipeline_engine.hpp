// ds::PipelineEngine: pipeline-parallel training of a PipelineModule, DeepSpeed's PipelineEngine.
//
//   ds::PipelineEngine engine(ds::PipelineModule(layers, loss), config, ds::comm::init_distributed("mpi"));
//   while (...) loss = engine.train_batch([&](int k) { return my_micro_batch(k); });  // one optimizer step
//   ds::PipelineEngine gpt(model_config, config, world);   // the built-in GPT (gpt_pipeline_module)
//   while (...) loss = gpt.train_batch(token_source);
//   ds::PipelineEngine on_gpu(model_config, config, world, at::Device(at::kCUDA, local_rank % gpus));
//
// The world is config.pipeline().stages deep and world / stages replicas wide, stage-major
// (pipe::PipelineGrid: rank = stage * replicas + replica). Each rank builds its stage's contiguous
// slice of the module's layers (PipelineModule::partition), seeded with config.training().seed, so
// the stages together hold the model that seed builds whole, moves it to the stage's device (the
// CPU, or a GPU: then its engine's state, its micro-batches and the activations and gradients it
// receives are all there), and wraps it in an EngineCore whose
// data-parallel group is that stage's replicas; gradient_accumulation_steps is the number of
// micro-batches per batch, as in DeepSpeed. A pipe::PipelineExecutor runs TrainSchedule:
//   LoadMicroBatch   the first stage reads inputs, the last stage labels, of this replica's
//                    micro-batch
//   BackwardPass     EngineCore::backward (the last stage from loss / micro-batches). Every
//                    backward but the batch's last closes its micro-step at once (EngineCore::step
//                    only counts it), so EngineCore's accumulation boundary is the batch's last
//                    backward, whatever forwards the schedule ran in between. ZeRO 0-1 reduce
//                    there: the reducer averages the accumulated gradients over the replicas,
//                    bucket by bucket, as that backward runs; ZeRO 2-3 reduce-scatter every
//                    backward into this rank's gradient shard, which sums the micro-batches
//   ReduceTiedGrads  for each tied key, the stages of this replica holding it sum their reduced
//                    gradients of the tied parameter (this rank's chunk of it under ZeRO 1-3: the
//                    stages holding a key have as many replicas, so they cut it alike) over a
//                    group of exactly those stages. By linearity a sum of replica averages is the
//                    replica average of the sums, so running it after the averaging, not before
//                    it as DeepSpeed's order says, changes nothing
//   ReduceGrads      the averaging already ran inside the backwards: the engine only checks that
//                    the core is at its accumulation boundary
//   OptimizerStep    the gradient norm of the whole model (every stage, each tied parameter once)
//                    for clipping and for fp16 overflow, which every stage must see alike to keep
//                    their loss scales equal; then EngineCore::step
// Every ZeRO stage, with offload_optimizer (cpu, nvme: the gradient shard then stays in memory, as
// the tied sum and the clipping change it in place) and offload_param; DeepSpeed refuses stages 2
// and 3 here. At stage 3 a stage whose parameters fit whole within
// zero_optimization.stage3_max_live_parameters gathers them once per batch and keeps them until
// the optimizer step (ParameterCoordinator::hold_all); otherwise the coordinator's hooks gather
// each module for its forward and again for its backward, micro-batch by micro-batch.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "dstrain/comm/backend.hpp"
#include "dstrain/engine/data/token_source.hpp"
#include "dstrain/engine/engine.hpp"
#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/engine/models/gpt_config.hpp"
#include "dstrain/engine/pipeline_module.hpp"
#include "dstrain/pipe/executor.hpp"
#include "dstrain/pipe/grid.hpp"
#include "dstrain/pipe/partition.hpp"
#include "dstrain/runtime/config.hpp"
#include "dstrain/runtime/error.hpp"

namespace ds {

class PipelineEngine {
 public:
  // This rank's micro-batch `micro_batch` of the batch being run: its inputs (read by the first
  // stage) and labels (read by the last), of any shape and dtype the module takes.
  using MicroBatches = std::function<data::Batch(int micro_batch)>;

  // Collective over `world`. Throws ds::Error naming the key for a missing or indivisible
  // pipeline.stages or more stages than layers.
  // device: where this rank's stage runs.
  PipelineEngine(const PipelineModule& module, const Config& config, std::shared_ptr<comm::Backend> world,
                 at::Device device = at::kCPU);
  // The built-in GPT: gpt_pipeline_module(model, config.pipeline().partition).
  PipelineEngine(const models::GPTConfig& model, const Config& config, std::shared_ptr<comm::Backend> world,
                 at::Device device = at::kCPU);
  ~PipelineEngine();
  PipelineEngine(const PipelineEngine&) = delete;
  PipelineEngine& operator=(const PipelineEngine&) = delete;

  // One optimizer step on the global batch of step global_steps(). Returns its mean loss, on
  // every rank.
  double train_batch(const MicroBatches& micro_batches);
  double train_batch(const data::TokenSource& source);
  // The mean loss of a global batch, forward only; the model is left unchanged.
  double eval_batch(const MicroBatches& micro_batches);
  double eval_batch(const data::TokenSource& source, int64_t step);

  const pipe::PipelineGrid& grid() const { return grid_; }
  at::Device device() const { return device_; }
  // Stage s holds the module's layers [bounds()[s], bounds()[s + 1]).
  const pipe::StageBounds& bounds() const { return bounds_; }
  // This stage's engine: steps, lr, timers, model-state bytes, its data-parallel group.
  EngineCore& core();
  // This stage's module as built: its holder, and as the holder type it was built as (the
  // default, models::GPT, for gpt_pipeline_module's stages); a ds::Error for another type.
  PipelineStage& stage_module();
  template <class Holder = models::GPT>
  Holder module() {
    auto impl = std::dynamic_pointer_cast<typename Holder::ContainedType>(stage_module().ptr());
    if (!impl) throw Error("this pipeline stage's module is not of the holder type asked for");
    return Holder(std::move(impl));
  }
  int64_t global_steps() const;
  // The last step's gradient norm over the whole model, before clipping.
  double last_grad_norm() const;

  // Collective: milliseconds per executor op and stage, "stage<s>.<Op>" (replica 0's ranks), since
  // the last call; resets every rank's op timers.
  std::map<std::string, double> stage_timers_ms();

  // Each stage keeps its own EngineCore checkpoints in checkpoint_dir(dir) = <dir>/stage<s>; a
  // pipeline resumes with the same stage count and partition, every stage at the same step (a
  // ds::Error otherwise, e.g. after a crash between two stages' saves).
  std::string checkpoint_dir(const std::string& dir) const;
  void save_checkpoint(const std::string& dir);
  void load_checkpoint(const std::string& dir);

 private:
  class ModuleStage;

  double run_batch(const MicroBatches& micro_batches, bool training);

  pipe::PipelineGrid grid_;
  at::Device device_;
  pipe::StageBounds bounds_;
  std::shared_ptr<comm::Backend> world_;
  std::shared_ptr<comm::Backend> pipe_group_;
  std::unique_ptr<ModuleStage> stage_;
  std::unique_ptr<pipe::PipelineExecutor> executor_;
};

}  // namespace ds
