#include "pipeline_train.hpp"

#include <chrono>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>

#include "dstrain/engine/models/activation_checkpointing.hpp"
#include "dstrain/engine/checkpoint/index.hpp"
#include "dstrain/engine/checkpoint_schedule.hpp"
#include "dstrain/engine/data/token_source.hpp"
#include "dstrain/engine/model_pipelines.hpp"
#include "dstrain/engine/pipeline_engine.hpp"
#include "dstrain/engine/profiler/flops_profiler.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"
#include "dstrain/runtime/memory.hpp"
#include "model_choice.hpp"
#include "placement.hpp"
#include "train_command.hpp"
#include "train_report.hpp"

namespace ds::app {

namespace {

// The tag every stage resumes from: --tag, or the newest complete in every stage's folder. A tag
// whose stages stand at different steps is an error before any state is read.
std::string resume_tag(const PipelineEngine& engine, const std::string& save_dir, const std::string& tag) {
  std::vector<std::string> dirs;
  for (int s = 0; s < engine.grid().stages(); ++s) dirs.push_back(save_dir + "/stage" + std::to_string(s));
  const std::string chosen = tag.empty() ? ckpt::newest_common_tag(dirs) : tag;
  const int64_t step = ckpt::CheckpointIndex::read(ckpt::checkpoint_folder(dirs[0], chosen)).global_steps();
  for (size_t s = 1; s < dirs.size(); ++s)
    if (const int64_t other = ckpt::CheckpointIndex::read(ckpt::checkpoint_folder(dirs[s], chosen)).global_steps();
        other != step)
      throw Error("checkpoint '" + chosen + "' is at step " + std::to_string(step) + " in stage 0 and at step " +
                  std::to_string(other) + " in stage " + std::to_string(s) + ": the stages must resume together")
          .with_path(dirs[s] + "/" + chosen);
  return chosen;
}

// The model's own layers, as the model builds its slices (model_pipelines.hpp).
PipelineModule pipeline_module(const ModelChoice& choice, const std::string& partition_method) {
  return std::visit(
      [&](const auto& model) {
        if constexpr (std::is_same_v<std::decay_t<decltype(model)>, models::GPTConfig>)
          return gpt_pipeline_module(model, partition_method);
        else
          return llama_pipeline_module(model, partition_method);
      },
      choice.config);
}

}  // namespace

int run_pipeline_training(const Config& config, const TrainOptions& options, const TrainerBlock& trainer, int64_t steps,
                          std::shared_ptr<comm::Backend> world, Preemption& preemption) {
  const ModelChoice choice = choose_model(trainer.model, activation_checkpoint_interval(config));
  auto source = data::make_token_source(trainer.data, choice.vocab_size(), choice.max_sequence_length());
  const int64_t baseline_rss = process_memory().rss_bytes;
  // Each stage on this rank's device (dstrain.device), built on the CPU first: a seed gives the same
  // weights on any device.
  PipelineEngine engine(pipeline_module(choice, config.pipeline().partition), config, world,
                        placement_from(config.dstrain_block()).device);
  if (options.resume) {
    const std::string tag = resume_tag(engine, options.save_dir, options.tag);
    log::info("checkpoint: resuming every stage from ", tag);
    engine.core().load_checkpoint(engine.checkpoint_dir(options.save_dir), tag);
    check_resumed_steps(engine.global_steps(), steps);
  }
  EngineCore& core = engine.core();
  // Each stage saves its own checkpoints (PipelineEngine::checkpoint_dir), on the same steps.
  CheckpointSchedule checkpoints(
      {options.save_dir.empty() ? "" : engine.checkpoint_dir(options.save_dir), options.save_interval, options.keep_last});

  TrainReport report(*world, baseline_rss, options.metrics_path, options.progress, steps, config.training().steps_per_print,
                     choice.max_sequence_length(), config.untyped());
  log::info("model: ", choice.summary(), ", in ",
            engine.grid().stages(), " pipeline stages x ", engine.grid().replicas(), " replicas, ",
            core.gradient_accumulation_steps(), " micro-batches of ", core.train_micro_batch_size_per_gpu(),
            "; training ", steps, " steps");
  // Each stage profiles its own slice; the stages' FLOPs sum over the world into the pipeline's MFU.
  std::optional<profiler::FlopsProfiler> flops;
  if (auto settings = profiler::FlopsProfilerSettings::from_json(config.untyped().value("flops_profiler", nlohmann::json()));
      settings.enabled) {
    const int stage = engine.grid().stage();
    profiler::PipelinePlace place{stage, engine.grid().stages(), engine.grid().replica(),
                                  "layers " + std::to_string(engine.bounds()[stage]) + ".." +
                                      std::to_string(engine.bounds()[stage + 1] - 1)};
    flops.emplace(std::move(settings), *engine.stage_module(), *world, core.train_micro_batch_size_per_gpu(),
                  core.gradient_accumulation_steps(), choice.max_sequence_length(), std::move(place));
  }

  while (engine.global_steps() < steps) {
    const int64_t steps_done = engine.global_steps();
    const auto start = std::chrono::steady_clock::now();
    StepFigures figures;
    figures.loss = engine.train_batch(*source);
    figures.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    figures.step = engine.global_steps();
    figures.lr = core.get_lr();
    if (flops) {
      const auto rate = flops->rate(figures.seconds);
      figures.tflops = rate.tflops;
      figures.mfu = rate.mfu;
      if (flops->is_profile_step(steps_done)) {
        profiler::StepProfile times;  // the pipeline's forwards and backwards interleave: only the whole is timed
        times.step = figures.step;
        times.iteration_seconds = figures.seconds;
        flops->print_profile(times);
      }
    }
    figures.grad_norm = engine.last_grad_norm();
    figures.train_batch_size = core.train_batch_size();
    figures.bytes = core.model_state_bytes();
    figures.swap = core.take_swap_stats();
    if (config.fp16().enabled) figures.loss_scale = core.loss_scale();
    if (config.training().wall_clock_breakdown) {
      // Rank 0's engine timers, and every stage's time per pipeline instruction.
      figures.breakdown_ms = core.timers().elapsed_all_ms();
      core.timers().reset();
      for (const auto& [name, ms] : engine.stage_timers_ms()) (*figures.breakdown_ms)[name] = ms;
    }
    report.step(figures);
    check_finite_loss(figures.loss, figures.step, config.fp16().enabled);
    if (!options.save_dir.empty()) checkpoints.after_step(core);
    if (stop_if_preempted(preemption, *world, options, checkpoints, core)) return kPreemptedExitCode;
  }
  if (!options.save_dir.empty()) checkpoints.finish(core);
  return 0;
}

}  // namespace ds::app
