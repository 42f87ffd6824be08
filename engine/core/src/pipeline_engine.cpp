#include "dstrain/engine/pipeline_engine.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "dstrain/engine/model_pipelines.hpp"
#include "dstrain/engine/optim/gradient_clipping.hpp"
#include "dstrain/pipe/instruction.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"

namespace ds {
namespace {

constexpr pipe::Op kOps[] = {pipe::Op::LoadMicroBatch, pipe::Op::ForwardPass,    pipe::Op::BackwardPass,
                             pipe::Op::SendActivation, pipe::Op::RecvActivation, pipe::Op::SendGrad,
                             pipe::Op::RecvGrad,       pipe::Op::ReduceTiedGrads, pipe::Op::ReduceGrads,
                             pipe::Op::OptimizerStep};

int pipeline_stages(const Config& config) {
  if (!config.pipeline().stages) throw Error("the pipeline engine needs pipeline.stages").with_key("pipeline.stages");
  return *config.pipeline().stages;
}

// The stage's EngineCore does not clip: it would clip by this stage's norm alone, and the pipeline
// clips by the whole model's before calling step(). Nor does it gather parameters during forwards
// (dstrain.gather_in_forward): the schedule runs the stage's module outside EngineCore's.
constexpr EngineOptions kStageEngineOptions{/*clip_gradients=*/false, /*gather_in_forward=*/false};

}  // namespace

class PipelineEngine::ModuleStage final : public pipe::Stage {
 public:
  // tied: for each tied parameter this stage holds, the group of the stages holding its key
  // (null when no other stage does) and whether this stage counts it in the gradient norm.
  struct Tied {
    at::Tensor weight;
    std::shared_ptr<comm::Backend> group;
    bool counted;
  };

  ModuleStage(const pipe::PipelineGrid& grid, at::Device device, const Config& config, const PipelineModule& module,
              PipelineStage built, std::shared_ptr<comm::Backend> dp_group, comm::Backend& pipe_group,
              std::vector<Tied> tied)
      : grid_(grid),
        device_(device),
        module_(module),
        engine_(ds::initialize(std::move(built), config, std::move(dp_group), kStageEngineOptions)),
        pipe_group_(pipe_group),
        tied_(std::move(tied)),
        max_norm_(config.training().gradient_clipping),
        fp16_(config.fp16().enabled),
        hold_parameters_(parameters_fit_whole()) {}

  Engine<PipelineStage>& engine() { return *engine_; }
  double grad_norm() const { return grad_norm_; }
  bool holds_parameters() const { return hold_parameters_; }

  // At ZeRO 3, when the memory plan allows, the stage's parameters are gathered once here and kept
  // whole until the batch's optimizer step (or its end, evaluating): the schedule interleaves the
  // forwards and backwards of several micro-batches, and gathering per module would gather each
  // twice per micro-batch.
  void begin_batch(const MicroBatches& micro_batches) {
    micro_batches_ = &micro_batches;
    if (hold_parameters_) engine_->parameter_coordinator()->hold_all();
  }
  void end_batch() { release_held_parameters(); }

  at::Tensor load_inputs(int micro_batch) override { return (*micro_batches_)(micro_batch).inputs.to(device_); }
  at::Tensor load_labels(int micro_batch) override { return (*micro_batches_)(micro_batch).targets.to(device_); }

  at::Tensor forward(const at::Tensor& input) override { return engine_->forward(input); }

  at::Tensor loss(const at::Tensor& output, const at::Tensor& labels) override { return module_.loss(output, labels); }

  void backward(const at::Tensor& loss) override {
    engine_->backward(loss);
    close_micro_step();
  }

  void backward(const at::Tensor& output, const at::Tensor& output_grad) override {
    engine_->backward({output}, {output_grad});
    close_micro_step();
  }

  void reduce_tied_grads() override {
    for (const Tied& tied : tied_)
      if (tied.group) tied.group->all_reduce(engine_->reduced_gradient_chunk(tied.weight), comm::ReduceOp::Sum);
  }

  void reduce_grads() override {
    if (!engine_->is_gradient_accumulation_boundary()) {
      throw Error("ReduceGrads on pipeline stage " + std::to_string(grid_.stage()) +
                  " before the batch's last backward: the schedule and gradient_accumulation_steps disagree");
    }
  }

  void optimizer_step() override {
    release_held_parameters();  // the step changes the partition the whole copies came from
    clip_gradients();
    engine_->step();
  }

 private:
  void release_held_parameters() {
    if (hold_parameters_) engine_->parameter_coordinator()->release_held();
  }

  // Whether all of the stage's parameters fit whole within stage3_max_live_parameters, as the
  // memory plan set it (under the pipeline engine it chooses that when the budget allows).
  bool parameters_fit_whole() const {
    const zero::ParameterCoordinator* coordinator = engine_->parameter_coordinator();
    return coordinator &&
           coordinator->partitioned_numel() <= engine_->zero_optimization().stage3_max_live_parameters;
  }

  // The batch's last backward must stay open (it is the accumulation boundary) until OptimizerStep.
  void close_micro_step() {
    if (!engine_->is_gradient_accumulation_boundary()) engine_->step();
  }

  bool counted_in_norm(const at::Tensor& param) const {
    for (const Tied& tied : tied_)
      if (param.is_same(tied.weight)) return tied.counted;
    return true;
  }

  // Clips by the norm of the whole model's gradient, as a single process would: the sum of squares
  // over this pipeline's stages, each tied parameter counted on the first stage holding it only.
  // Under ZeRO 1-3 each replica holds a chunk of every gradient, so the replicas' sums add up too;
  // under ZeRO 0 they hold equal whole gradients and all reach the same norm alone.
  void clip_gradients() {
    std::vector<at::Tensor> grads;
    at::Tensor sum_sq = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(device_));
    for (const at::Tensor& param : engine_->module().ptr()->parameters()) {
      if (!param.requires_grad()) continue;
      grads.push_back(engine_->reduced_gradient_chunk(param));
      if (counted_in_norm(param)) sum_sq += grads.back().to(at::kDouble).pow(2).sum();
    }
    if (engine_->zero_stage() >= 1) engine_->dp_group().all_reduce(sum_sq, comm::ReduceOp::Sum);
    pipe_group_.all_reduce(sum_sq, comm::ReduceOp::Sum);
    grad_norm_ = std::sqrt(sum_sq.item<double>()) / (fp16_ ? engine_->loss_scale() : 1.0);
    if (!std::isfinite(grad_norm_)) {
      // An fp16 overflow on any stage: every stage must skip this step, or their loss scales part.
      if (fp16_) grads.front().view({-1})[0].fill_(std::numeric_limits<float>::infinity());
      return;
    }
    const double coefficient = clip_coefficient(grad_norm_, max_norm_);
    if (coefficient < 1) {
      at::NoGradGuard no_grad;
      for (at::Tensor& grad : grads) grad.mul_(coefficient);
    }
  }

  const pipe::PipelineGrid& grid_;
  at::Device device_;
  PipelineModule module_;
  std::shared_ptr<Engine<PipelineStage>> engine_;
  comm::Backend& pipe_group_;
  std::vector<Tied> tied_;
  double max_norm_;
  bool fp16_;
  bool hold_parameters_;
  double grad_norm_ = 0;
  const MicroBatches* micro_batches_ = nullptr;
};

PipelineEngine::PipelineEngine(const models::GPTConfig& model, const Config& config,
                               std::shared_ptr<comm::Backend> world, at::Device device)
    : PipelineEngine(gpt_pipeline_module(model, config.pipeline().partition), config, std::move(world), device) {}

PipelineEngine::PipelineEngine(const PipelineModule& module, const Config& config,
                               std::shared_ptr<comm::Backend> world, at::Device device)
    : grid_(world->world_size(), pipeline_stages(config), world->rank()), device_(device), world_(std::move(world)) {
  bounds_ = module.partition(grid_.stages());
  const int first = bounds_[grid_.stage()];
  const int last = bounds_[grid_.stage() + 1];
  auto stage_of_layer = [&](int layer) {
    return static_cast<int>(std::upper_bound(bounds_.begin(), bounds_.end(), layer) - bounds_.begin()) - 1;
  };

  // Every rank takes part in every split, in the same order.
  auto dp_group = world_->split(grid_.stage(), grid_.replica());
  pipe_group_ = world_->split(grid_.replica(), grid_.stage());
  PipelineStage built = module.build(first, last, config.training().seed);
  // Built on the CPU, so that a seed gives the same weights on any device. Module::to keeps each
  // parameter's tensor (set_data), so the tied parameters below are the ones that moved.
  built.ptr()->to(device_);
  std::vector<ModuleStage::Tied> tied;
  for (const auto& [key, layers] : module.tied_layers()) {
    std::set<int> stages;
    for (int layer : layers) stages.insert(stage_of_layer(layer));
    const bool holds = stages.count(grid_.stage()) > 0;
    auto group = world_->split(holds && stages.size() > 1 ? grid_.replica() : -1, grid_.stage());
    if (holds) tied.push_back({built.tied().at(key), std::move(group), *stages.begin() == grid_.stage()});
  }
  stage_ = std::make_unique<ModuleStage>(grid_, device_, config, module, std::move(built), std::move(dp_group), *pipe_group_,
                                         std::move(tied));
  executor_ = std::make_unique<pipe::PipelineExecutor>(*stage_, *pipe_group_, device_);
  log::info_all("pipeline stage ", grid_.stage(), " of ", grid_.stages(), ", replica ", grid_.replica(), " of ",
                grid_.replicas(), ": layers [", first, ", ", last, ") of ", module.num_layers(), " on ", device_.str(), ", ",
                core().gradient_accumulation_steps(), " micro-batches, ZeRO stage ", core().zero_stage(),
                core().zero_stage() == 3 ? (stage_->holds_parameters() ? " (parameters gathered once per batch)"
                                                                       : " (parameters gathered per module)")
                                         : "");
}

PipelineEngine::~PipelineEngine() = default;

EngineCore& PipelineEngine::core() { return stage_->engine(); }
PipelineStage& PipelineEngine::stage_module() { return stage_->engine().module(); }
int64_t PipelineEngine::global_steps() const { return stage_->engine().global_steps(); }
double PipelineEngine::last_grad_norm() const { return stage_->grad_norm(); }

double PipelineEngine::run_batch(const MicroBatches& micro_batches, bool training) {
  stage_->begin_batch(micro_batches);
  const int micro = core().gradient_accumulation_steps();
  double mean = 0;
  if (training) {
    mean = executor_->train_batch(micro);
  } else {
    stage_module().ptr()->eval();
    mean = executor_->eval_batch(micro);
    stage_module().ptr()->train();
  }
  stage_->end_batch();
  at::Tensor loss = at::full({1}, mean, at::kDouble);
  core().dp_group().all_reduce(loss, comm::ReduceOp::Avg);
  return loss.item<double>();
}

double PipelineEngine::train_batch(const MicroBatches& micro_batches) { return run_batch(micro_batches, true); }
double PipelineEngine::eval_batch(const MicroBatches& micro_batches) { return run_batch(micro_batches, false); }

double PipelineEngine::train_batch(const data::TokenSource& source) {
  const int64_t step = global_steps();
  return train_batch([&, step](int k) {
    return source.batch(step, k, grid_.replica(), grid_.replicas(), core().train_micro_batch_size_per_gpu());
  });
}

double PipelineEngine::eval_batch(const data::TokenSource& source, int64_t step) {
  return eval_batch([&, step](int k) {
    return source.batch(step, k, grid_.replica(), grid_.replicas(), core().train_micro_batch_size_per_gpu());
  });
}

std::map<std::string, double> PipelineEngine::stage_timers_ms() {
  constexpr int64_t kCount = sizeof(kOps) / sizeof(kOps[0]);
  at::Tensor mine = at::empty({kCount}, at::kDouble);
  for (int64_t i = 0; i < kCount; ++i) mine[i] = executor_->timers().elapsed_ms(pipe::to_string(kOps[i]));
  executor_->timers().reset();
  at::Tensor all = at::empty({world_->world_size() * kCount}, at::kDouble);
  world_->all_gather_into(all, mine);
  std::map<std::string, double> times;
  for (int s = 0; s < grid_.stages(); ++s) {
    for (int64_t i = 0; i < kCount; ++i) {
      times["stage" + std::to_string(s) + "." + pipe::to_string(kOps[i])] =
          all[grid_.rank_of(s, 0) * kCount + i].item<double>();
    }
  }
  return times;
}

std::string PipelineEngine::checkpoint_dir(const std::string& dir) const {
  return dir + "/stage" + std::to_string(grid_.stage());
}

void PipelineEngine::save_checkpoint(const std::string& dir) { core().save_checkpoint(checkpoint_dir(dir)); }

void PipelineEngine::load_checkpoint(const std::string& dir) {
  core().load_checkpoint(checkpoint_dir(dir));
  at::Tensor steps = at::full({2}, static_cast<double>(global_steps()), at::kDouble);
  steps[1].mul_(-1);  // max of the steps and of their negation: the max and the min in one reduction
  world_->all_reduce(steps, comm::ReduceOp::Max);
  if (steps[0].item<double>() != -steps[1].item<double>())
    throw Error("pipeline stages resumed at different steps (" + std::to_string(int64_t(-steps[1].item<double>())) +
                " to " + std::to_string(int64_t(steps[0].item<double>())) + "): pick one tag present in every stage")
        .with_path(dir);
}

}  // namespace ds
