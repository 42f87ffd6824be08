#include "pipeline_train.hpp"

#include <chrono>

#include "dstrain/engine/models/activation_checkpointing.hpp"
#include "dstrain/engine/checkpoint_schedule.hpp"
#include "dstrain/engine/data/token_source.hpp"
#include "dstrain/engine/pipeline_engine.hpp"
#include "dstrain/runtime/log.hpp"
#include "dstrain/runtime/memory.hpp"
#include "train_command.hpp"
#include "train_report.hpp"

namespace ds::app {

int run_pipeline_training(const Config& config, const TrainOptions& options, std::shared_ptr<comm::Backend> world) {
  const nlohmann::json& block = config.dstrain_block();
  const int64_t steps = options.steps >= 0 ? options.steps : block.value("steps", int64_t{100});
  auto model_config = models::GPTConfig::from_json(block.value("model", nlohmann::json::object()));
  model_config.activation_checkpoint_interval = activation_checkpoint_interval(config);
  auto source = data::make_token_source(block.value("data", nlohmann::json()), model_config.vocab_size,
                                        model_config.block_size);
  const int64_t baseline_rss = process_memory().rss_bytes;
  PipelineEngine engine(model_config, config, world);
  if (options.resume) {
    engine.load_checkpoint(options.save_dir);
    check_resumed_steps(engine.global_steps(), steps);
  }
  EngineCore& core = engine.core();
  // Each stage saves its own checkpoints (PipelineEngine::checkpoint_dir), on the same steps.
  CheckpointSchedule checkpoints(
      {options.save_dir.empty() ? "" : engine.checkpoint_dir(options.save_dir), options.save_interval, options.keep_last});

  TrainReport report(*world, baseline_rss, options.metrics_path, steps, config.training().steps_per_print,
                     model_config.block_size);
  log::info("model: GPT with ", model_config.n_layer, " layers, ", model_config.n_embd, " wide, in ",
            engine.grid().stages(), " pipeline stages x ", engine.grid().replicas(), " replicas, ",
            core.gradient_accumulation_steps(), " micro-batches of ", core.train_micro_batch_size_per_gpu(),
            "; training ", steps, " steps");

  while (engine.global_steps() < steps) {
    const auto start = std::chrono::steady_clock::now();
    StepFigures figures;
    figures.loss = engine.train_batch(*source);
    figures.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    figures.step = engine.global_steps();
    figures.lr = core.get_lr();
    figures.grad_norm = engine.last_grad_norm();
    figures.train_batch_size = core.train_batch_size();
    figures.bytes = core.model_state_bytes();
    figures.swap = core.take_swap_stats();
    if (config.training().wall_clock_breakdown) {
      // Rank 0's engine timers, and every stage's time per pipeline instruction.
      figures.breakdown_ms = core.timers().elapsed_all_ms();
      core.timers().reset();
      for (const auto& [name, ms] : engine.stage_timers_ms()) (*figures.breakdown_ms)[name] = ms;
    }
    report.step(figures);
    check_finite_loss(figures.loss, figures.step, config.fp16().enabled);
    if (!options.save_dir.empty()) checkpoints.after_step(core);
  }
  if (!options.save_dir.empty()) checkpoints.finish(core);
  return 0;
}

}  // namespace ds::app
