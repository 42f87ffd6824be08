#include "train_command.hpp"

#include "config_overrides.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/engine/models/activation_checkpointing.hpp"
#include "dstrain/engine/checkpoint/folder.hpp"
#include "dstrain/engine/checkpoint_schedule.hpp"
#include "dstrain/engine/data/token_source.hpp"
#include "dstrain/engine/engine.hpp"
#include "dstrain/engine/fit_check.hpp"
#include "dstrain/engine/host_policy.hpp"
#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/engine/models/gpt_config.hpp"
#include "dstrain/engine/models/loss.hpp"
#include "dstrain/engine/profiler/flops_profiler.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"
#include "dstrain/runtime/memory.hpp"
#include "dstrain/runtime/rank_env.hpp"
#include "dstrain/zero/init.hpp"
#include "consistency_check.hpp"
#include "hostfile_ranks_check.hpp"
#include "evaluation.hpp"
#include "model_choice.hpp"
#include "pipeline_train.hpp"
#include "gpu_memory_limit.hpp"
#include "placement.hpp"
#include "preemption.hpp"
#include "trainer_block.hpp"
#include "init_from.hpp"
#include "train_report.hpp"

namespace ds::app {
namespace {

// A CLI11 check that the value is at least `minimum` (above it when `strict`), whose message says
// so with the value given: "--steps: must be >= 1, got 0".
CLI::Validator at_least(int64_t minimum, bool strict = false) {
  const std::string bound = std::string(strict ? "> " : ">= ") + std::to_string(minimum);
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value)) return "must be a number " + bound + ", got '" + text + "'";
        if (strict ? value > minimum : value >= minimum) return "";
        return "must be " + bound + ", got " + text;
      },
      bound);
}

}  // namespace

void check_resumed_steps(int64_t checkpoint_step, int64_t steps) {
  if (checkpoint_step >= steps)
    throw Error("the checkpoint is at step " + std::to_string(checkpoint_step) + " and --steps is " +
                std::to_string(steps) + ": nothing to train (ask for more steps than the checkpoint has)")
        .with_key("--steps");
}

void check_finite_loss(double loss, int64_t step, bool fp16) {
  // fp16 skips overflowing steps itself; in fp32 and bf16 a non-finite loss means divergence, and
  // stopping here keeps the diverged state from ever becoming `latest`.
  if (!fp16 && !std::isfinite(loss))
    throw Error("the loss is not finite (" + std::to_string(loss) + ") at step " + std::to_string(step) +
                ": training diverged; stopping without saving (the last good checkpoint stays latest)");
}

void add_train_options(CLI::App& app, TrainOptions& options) {
  app.add_option("-c,--config", options.config_path, "DeepSpeed-style JSON config (with a \"dstrain\" block)")
      ->check(CLI::ExistingFile);
  app.add_option("--steps", options.steps, "optimizer steps to train (default: dstrain.steps of the config)")
      ->check(at_least(1));
  app.add_option("--save-dir", options.save_dir, "write checkpoints here (at the end, and every --save-interval)");
  app.add_option("--save-interval", options.save_interval, "also save every N steps (needs --save-dir)")
      ->check(at_least(0));
  app.add_option("--keep-last", options.keep_last, "keep only the newest K global_step checkpoints (0: all)")
      ->check(at_least(0));
  app.add_flag("--resume", options.resume,
               "continue from the newest checkpoint in --save-dir complete in every stage and rank");
  app.add_option("--tag", options.tag, "with --resume: continue from this checkpoint tag (e.g. global_step200)");
  app.add_option("--metrics", options.metrics_path, "append one JSON line per step to this file (rank 0)");
  app.add_option("--comm-timeout", options.comm_timeout_seconds,
                 "seconds any collective or point-to-point wait may last before the job is ended, naming the "
                 "call and the ranks that never arrived (default 1800, as DeepSpeed)")
      ->check(at_least(0, /*strict=*/true));
  app.add_option("--preempt-signals", options.preempt_signals,
                 "on these signals finish the step, save to --save-dir and exit with 75 (default TERM,USR1; none)")
      ->capture_default_str();
  app.add_option("--preempt-timeout", options.preempt_timeout_seconds,
                 "seconds the step and the save may take after such a signal before the rank is ended (0: no limit)")
      ->capture_default_str();
  app.add_option("--set", options.overrides,
                 "override a config key: --set dstrain.model.n_layer=4 --set zero_optimization.stage=2");
}

namespace {

// Seconds since `mark`, which moves to now.
double lap(std::chrono::steady_clock::time_point& mark) {
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - mark).count();
  mark = now;
  return seconds;
}

}  // namespace

bool stop_if_preempted(Preemption& preemption, comm::Backend& world, const TrainOptions& options,
                       CheckpointSchedule& checkpoints, EngineCore& engine) {
  if (!preemption.requested(world)) return false;
  if (!options.save_dir.empty()) checkpoints.finish(engine);
  log::warn("asked to stop (", preemption.signal() != 0 ? std::string("SIG") + ::sigabbrev_np(preemption.signal())
                                                         : std::string("a signal to another rank"),
            ") at step ", engine.global_steps(), ": ",
            options.save_dir.empty() ? std::string("no --save-dir, nothing saved")
                                     : "saved to " + options.save_dir + "; continue with --resume",
            "; exiting with ", kPreemptedExitCode);
  return true;
}

int run_training(const TrainOptions& options) {
  if (options.config_path.empty()) throw Error("no config: pass --config FILE (see configs/)");
  if (options.resume && options.save_dir.empty()) throw Error("--resume needs --save-dir");
  if (!options.tag.empty() && !options.resume) throw Error("--tag picks the checkpoint to resume: it needs --resume");
  if ((options.save_interval > 0 || options.keep_last > 0) && options.save_dir.empty())
    throw Error("--save-interval and --keep-last need --save-dir");
  // Before anything slow: a signal while the model is built still stops the run at step 1.
  Preemption preemption(parse_signal_list(options.preempt_signals), options.preempt_timeout_seconds);
  // The file as written, so that --set (and --steps, for "auto" total steps) land before any
  // "auto" is resolved.
  nlohmann::json json = config_with_overrides(options.config_path, {options.overrides, options.steps});
  const std::string init_from = take_init_from(json);
  apply_trainer_defaults(json);
  Config config = Config::from_json(json);

  const nlohmann::json& block = config.dstrain_block();
  const TrainerBlock trainer = read_trainer_block(block);
  const int64_t steps = options.steps > 0 ? options.steps : trainer.steps;
  const Placement placement = placement_from(block);
  apply_gpu_memory_limit(block, placement.device);
  auto world = comm::init_distributed(
      placement.backend, std::chrono::milliseconds(static_cast<int64_t>(std::ceil(options.comm_timeout_seconds * 1000))));
  world->comms_logger().configure(
      comm::CommsLoggerSettings::from_json(config.untyped().value("comms_logger", nlohmann::json())));
  // Before anything slow or node-specific: a node with another build or config ends the job here.
  check_same_build_and_config(*world, config.to_json().dump() + "\ninit_from=" + init_from, placement.device);
  check_ranks_fit_batch(*world, config, placement.device);
  // One job at a time in a save folder: rank 0 holds the lock until the run ends (with node-local
  // storage, each node's first rank its node's). A bad --save-dir fails here, before step 1.
  std::optional<SaveDirLock> lock;
  if (!options.save_dir.empty()) {
    if (world->rank() == 0 || (config.checkpoint().use_node_local_storage && rank_env_from_environment().local_rank == 0))
      lock.emplace(options.save_dir);
    prepare_save_dir(options.save_dir);
    world->barrier();
  }
  if (config.pipeline().stages.value_or(1) > 1) {
    if (!init_from.empty()) throw Error("the pipeline trainer cannot start from init_from yet").with_key("dstrain.model.init_from");
    return run_pipeline_training(config, options, trainer, steps, world, preemption);
  }
  apply_host_policy();  // before the model exists, so that building it uses the policy's allocator
  const int64_t baseline_rss = process_memory().rss_bytes;
  torch::manual_seed(config.training().seed);
  const ModelChoice choice = choose_model(trainer.model, activation_checkpoint_interval(config));
  // The memory planner knows the GPT's activations; a Llama goes without the check.
  if (const auto* gpt = std::get_if<models::GPTConfig>(&choice.config); gpt && !placement.device.is_cuda())
    refuse_unless_fits(config, *gpt, world->world_size());
  // Stage 3 builds it partitioned on the CPU: no rank ever holds the whole model. On a GPU the model
  // is built whole and moved (moving partitioned parameters would make them whole again).
  // From init_from's weights (not when resuming: the checkpoint's replace them) the model is whole
  // until loaded, then partitioned.
  CausalLM model = !init_from.empty() && !options.resume
                       ? model_from_hf(init_from, choice, config, !placement.device.is_cuda(), world)
                   : placement.device.is_cuda() ? choice.build()
                                                : zero::build(config, [&] { return choice.build(); }, world);
  if (!init_from.empty() && !options.resume) log::info("model: weights from ", init_from);
  if (placement.device.is_cuda()) model.ptr()->to(placement.device);
  auto source = data::make_token_source(trainer.data, choice.vocab_size(), choice.max_sequence_length());
  auto validation = data::make_validation_source(trainer.data, choice.vocab_size(), choice.max_sequence_length());
  auto engine = ds::initialize(model, config, world);
  if (options.resume) {
    engine->load_checkpoint(options.save_dir, options.tag);
    check_resumed_steps(engine->global_steps(), steps);
  }
  CheckpointSchedule checkpoints({options.save_dir, options.save_interval, options.keep_last});

  const int rank = world->rank();
  const int world_size = world->world_size();
  const int gas = engine->gradient_accumulation_steps();
  const int micro = engine->train_micro_batch_size_per_gpu();
  TrainReport report(*world, baseline_rss, options.metrics_path, options.progress, steps, config.training().steps_per_print,
                     choice.max_sequence_length(), config.untyped());
  log::info("model: ", choice.summary(), ", ", model.ptr()->parameters().size(), " tensors; training ", steps,
            " steps");
  std::optional<profiler::FlopsProfiler> flops;
  if (auto settings = profiler::FlopsProfilerSettings::from_json(config.untyped().value("flops_profiler", nlohmann::json()));
      settings.enabled)
    flops.emplace(std::move(settings), *model, *world, micro, gas, choice.max_sequence_length());

  while (engine->global_steps() < steps) {
    const int64_t step = engine->global_steps();
    const auto start = std::chrono::steady_clock::now();
    double loss_sum = 0;
    int64_t activation_bytes = 0;
    profiler::StepProfile times;  // for the flops profiler
    for (int a = 0; a < gas; ++a) {
      data::Batch batch = source->batch(step, a, rank, world_size, micro);
      const int64_t before_forward = allocated_bytes();
      auto mark = std::chrono::steady_clock::now();
      at::Tensor logits = engine->forward(batch.inputs.to(placement.device));
      at::Tensor loss = models::cross_entropy_loss(logits.to(at::kFloat), batch.targets.to(placement.device));
      times.forward_seconds += lap(mark);
      activation_bytes = std::max(activation_bytes, allocated_bytes() - before_forward);
      engine->backward(loss);
      times.backward_seconds += lap(mark);
      engine->step();
      times.step_seconds += lap(mark);
      loss_sum += loss.item<double>();
    }
    at::Tensor loss = torch::tensor({loss_sum / gas}, torch::kDouble);
    world->all_reduce(loss, comm::ReduceOp::Avg);
    StepFigures figures;
    figures.step = engine->global_steps();
    figures.loss = loss.item<double>();
    figures.lr = engine->get_lr();
    figures.grad_norm = engine->last_grad_norm();
    figures.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    figures.train_batch_size = engine->train_batch_size();
    figures.bytes = engine->model_state_bytes();
    figures.swap = engine->take_swap_stats();
    figures.activation_bytes = activation_bytes;
    figures.gpu_max_allocated = gpu_max_allocated(placement.device);
    if (config.fp16().enabled) figures.loss_scale = engine->loss_scale();
    if (config.training().wall_clock_breakdown) {
      figures.breakdown_ms = engine->timers().elapsed_all_ms();
      engine->timers().reset();
    }
    if (flops) {
      const auto rate = flops->rate(figures.seconds);
      figures.tflops = rate.tflops;
      figures.mfu = rate.mfu;
      if (flops->is_profile_step(step)) {
        times.step = figures.step;
        times.iteration_seconds = figures.seconds;
        flops->print_profile(times);
      }
    }
    const bool eval_due = trainer.eval_interval > 0 && figures.step % trainer.eval_interval == 0;
    if (validation && (eval_due || figures.step == steps)) {
      at::Tensor val = torch::tensor(
          {validation_loss([&](const at::Tensor& x) { return engine->forward(x); }, *model, *validation,
                           trainer.eval_iters, rank, world_size, micro, placement.device)},
          torch::kDouble);
      world->all_reduce(val, comm::ReduceOp::Avg);
      figures.val_loss = val.item<double>();
    }
    report.step(figures);
    check_finite_loss(figures.loss, figures.step, config.fp16().enabled);
    if (!options.save_dir.empty()) checkpoints.after_step(*engine);
    if (stop_if_preempted(preemption, *world, options, checkpoints, *engine)) return kPreemptedExitCode;
  }
  if (!options.save_dir.empty()) checkpoints.finish(*engine);
  return 0;
}

}  // namespace ds::app
