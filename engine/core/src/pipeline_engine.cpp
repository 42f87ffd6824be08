#include "dstrain/engine/pipeline_engine.hpp"

#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "dstrain/engine/models/loss.hpp"
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

// The stage's EngineCore gets the config without gradient clipping: it would clip by this stage's
// norm alone, and the pipeline clips by the whole model's before calling step().
Config without_clipping(const Config& config) {
  nlohmann::json json = config.to_json();
  json["gradient_clipping"] = 0.0;
  return Config::from_json(json);
}

}  // namespace

class PipelineEngine::GptStage final : public pipe::Stage {
 public:
  GptStage(const pipe::PipelineGrid& grid, const Config& config, models::GPT slice,
           std::shared_ptr<comm::Backend> dp_group, comm::Backend& pipe_group,
           std::shared_ptr<comm::Backend> tied_group)
      : grid_(grid),
        engine_(ds::initialize(slice, without_clipping(config), std::move(dp_group))),
        pipe_group_(pipe_group),
        tied_group_(std::move(tied_group)),
        max_norm_(config.training().gradient_clipping),
        fp16_(config.fp16().enabled) {}

  Engine<models::GPT>& engine() { return *engine_; }
  double grad_norm() const { return grad_norm_; }

  void begin_batch(const data::TokenSource& source, int64_t step) {
    source_ = &source;
    step_ = step;
  }

  at::Tensor load_inputs(int micro_batch) override { return batch(micro_batch).inputs; }
  at::Tensor load_labels(int micro_batch) override { return batch(micro_batch).targets; }

  at::Tensor forward(const at::Tensor& input) override { return engine_->forward(input); }

  at::Tensor loss(const at::Tensor& output, const at::Tensor& labels) override {
    return models::cross_entropy_loss(output.to(at::kFloat), labels);
  }

  void backward(const at::Tensor& loss) override {
    engine_->backward(loss);
    close_micro_step();
  }

  void backward(const at::Tensor& output, const at::Tensor& output_grad) override {
    engine_->backward({output}, {output_grad});
    close_micro_step();
  }

  void reduce_tied_grads() override {
    if (!tied_group_) return;
    tied_group_->all_reduce(engine_->reduced_gradient_chunk(engine_->module()->tied_weight()), comm::ReduceOp::Sum);
  }

  void reduce_grads() override {
    if (!engine_->is_gradient_accumulation_boundary()) {
      throw Error("ReduceGrads on pipeline stage " + std::to_string(grid_.stage()) +
                  " before the batch's last backward: the schedule and gradient_accumulation_steps disagree");
    }
  }

  void optimizer_step() override {
    clip_gradients();
    engine_->step();
  }

 private:
  data::Batch batch(int micro_batch) const {
    return source_->batch(step_, micro_batch, grid_.replica(), grid_.replicas(),
                          engine_->train_micro_batch_size_per_gpu());
  }

  // The batch's last backward must stay open (it is the accumulation boundary) until OptimizerStep.
  void close_micro_step() {
    if (!engine_->is_gradient_accumulation_boundary()) engine_->step();
  }

  // Clips by the norm of the whole model's gradient, as a single process would: the sum of squares
  // over this pipeline's stages, the tied weight counted on the first stage only. Under ZeRO 1 each
  // replica holds a chunk of every gradient, so the replicas' sums add up too; under ZeRO 0 they
  // hold equal whole gradients and all reach the same norm alone.
  void clip_gradients() {
    const at::Tensor tied = engine_->module()->tied_weight();
    std::vector<at::Tensor> grads;
    at::Tensor sum_sq = at::zeros({1}, at::kDouble);
    for (const at::Tensor& param : engine_->module()->parameters()) {
      if (!param.requires_grad()) continue;
      grads.push_back(engine_->reduced_gradient_chunk(param));
      if (!grid_.is_first_stage() && tied.defined() && param.is_same(tied)) continue;
      sum_sq += grads.back().to(at::kDouble).pow(2).sum();
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
  std::shared_ptr<Engine<models::GPT>> engine_;
  comm::Backend& pipe_group_;
  std::shared_ptr<comm::Backend> tied_group_;  // first and last stage of this replica; null elsewhere
  double max_norm_;
  bool fp16_;
  double grad_norm_ = 0;
  const data::TokenSource* source_ = nullptr;
  int64_t step_ = 0;
};

PipelineEngine::PipelineEngine(const models::GPTConfig& model, const Config& config,
                               std::shared_ptr<comm::Backend> world)
    : grid_(world->world_size(), pipeline_stages(config), world->rank()), world_(std::move(world)) {
  const int zero_stage = config.zero_optimization().stage;
  if (zero_stage >= 2) {
    throw Error("pipeline parallelism is not supported with ZeRO stage " + std::to_string(zero_stage) +
                " (as in DeepSpeed); use zero_optimization.stage 0 or 1")
        .with_key("zero_optimization.stage");
  }
  bounds_ = pipe::partition_layers(config.pipeline().partition, models::layer_parameter_counts(model),
                                   models::layer_types(model), grid_.stages());

  // Every rank takes part in every split, in the same order.
  auto dp_group = world_->split(grid_.stage(), grid_.replica());
  pipe_group_ = world_->split(grid_.replica(), grid_.stage());
  const bool holds_tied = grid_.stages() > 1 && (grid_.is_first_stage() || grid_.is_last_stage());
  auto tied_group = world_->split(holds_tied ? grid_.replica() : -1, grid_.stage());

  torch::manual_seed(config.training().seed);
  models::GPT slice(model, bounds_[grid_.stage()], bounds_[grid_.stage() + 1]);
  stage_ = std::make_unique<GptStage>(grid_, config, slice, std::move(dp_group), *pipe_group_, std::move(tied_group));
  executor_ = std::make_unique<pipe::PipelineExecutor>(*stage_, *pipe_group_);
  log::info_all("pipeline stage ", grid_.stage(), " of ", grid_.stages(), ", replica ", grid_.replica(), " of ",
                grid_.replicas(), ": GPT layers [", bounds_[grid_.stage()], ", ", bounds_[grid_.stage() + 1], ") of ",
                model.num_layers(), ", ", core().gradient_accumulation_steps(), " micro-batches");
}

PipelineEngine::~PipelineEngine() = default;

EngineCore& PipelineEngine::core() { return stage_->engine(); }
models::GPT& PipelineEngine::module() { return stage_->engine().module(); }
int64_t PipelineEngine::global_steps() const { return stage_->engine().global_steps(); }
double PipelineEngine::last_grad_norm() const { return stage_->grad_norm(); }

double PipelineEngine::train_batch(const data::TokenSource& source) {
  stage_->begin_batch(source, global_steps());
  at::Tensor loss = at::full({1}, executor_->train_batch(core().gradient_accumulation_steps()), at::kDouble);
  core().dp_group().all_reduce(loss, comm::ReduceOp::Avg);
  return loss.item<double>();
}

double PipelineEngine::eval_batch(const data::TokenSource& source, int64_t step) {
  stage_->begin_batch(source, step);
  module()->eval();
  at::Tensor loss = at::full({1}, executor_->eval_batch(core().gradient_accumulation_steps()), at::kDouble);
  module()->train();
  core().dp_group().all_reduce(loss, comm::ReduceOp::Avg);
  return loss.item<double>();
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
