#include "model_commands.hpp"

#include <torch/torch.h>

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/engine/checkpoint/index.hpp"
#include "dstrain/engine/estimate.hpp"
#include "dstrain/engine/memory_budget.hpp"
#include "dstrain/engine/memory_plan.hpp"
#include "dstrain/engine/checkpoint/export.hpp"
#include "dstrain/engine/checkpoint/folder.hpp"
#include "dstrain/engine/checkpoint/hf_format.hpp"
#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/engine/models/gpt_config.hpp"
#include "dstrain/io/shard_file.hpp"
#include "dstrain/pipe/partition.hpp"
#include "dstrain/runtime/config.hpp"
#include "dstrain/runtime/error.hpp"
#include "config_overrides.hpp"
#include "init_from.hpp"
#include "model_choice.hpp"
#include "progress.hpp"
#include "trainer_block.hpp"

namespace ds::app {
namespace {

// The config at `path` with the trainer's overrides and dstrain.model.init_from's sizes filled in,
// as the trainer reads it.
Config config_from_file(const std::string& path, const ConfigOverrides& overrides) {
  nlohmann::json json = config_with_overrides(path, overrides);
  take_init_from(json);
  apply_trainer_defaults(json);
  try {
    return Config::from_json(json);
  } catch (Error& e) {
    e.with_path(path);
    throw;
  }
}

ModelChoice model_of(const Config& config) {
  return choose_model(config.dstrain_block().value("model", nlohmann::json::object()));
}

int64_t total_of(const std::vector<int64_t>& numels) {
  int64_t total = 0;
  for (int64_t numel : numels) total += numel;
  return total;
}

void print_estimate(const std::string& config_path, const ConfigOverrides& overrides, int world) {
  Config config = config_from_file(config_path, overrides);
  const ModelChoice model = model_of(config);
  const std::vector<int64_t> numels = model.shape().numels;
  const auto estimates = estimate_model_state(numels, config, world);
  std::printf("model: %s, %lld parameters in %zu tensors; %d ranks; %s; optimizer %s\n", model.name().c_str(),
              static_cast<long long>(total_of(numels)), numels.size(), world,
              config.bf16().enabled ? "bf16" : config.fp16().enabled ? "fp16" : "fp32",
              to_string(config.optimizer().type));
  std::printf("per-rank model-state bytes right after a step (MB) and the gradient peak during backward:\n");
  std::printf("%-6s %12s %12s %12s %12s %10s %14s\n", "stage", "params", "grads", "optimizer", "total", "vs stage0",
              "grad peak");
  const double base = static_cast<double>(estimates.front().after_step.total());
  for (const StageEstimate& e : estimates)
    std::printf("%-6d %12.2f %12.2f %12.2f %12.2f %10.3f %14.2f\n", e.stage, e.after_step.parameters / 1e6,
                e.after_step.gradients / 1e6, e.after_step.optimizer / 1e6, e.after_step.total() / 1e6,
                e.after_step.total() / base, e.peak_gradient_bytes / 1e6);
}

void print_plan(const std::string& config_path, const ConfigOverrides& overrides, int world, int ranks_per_node) {
  Config config = config_from_file(config_path, overrides);
  const ModelChoice model = model_of(config);
  ModelShape shape = model.shape();
  const MemoryBudget budget = memory_budget(config, ranks_per_node);
  // A pipeline: each stage plans its own layers over its replicas, as PipelineEngine's stages do;
  // the stage with the largest peak is shown in full.
  const int stages = config.pipeline().stages.value_or(1);
  const auto* gpt = std::get_if<models::GPTConfig>(&model.config);
  if (stages > 1 && world % stages != 0)
    throw Error("--world " + std::to_string(world) + " is not a multiple of pipeline.stages " + std::to_string(stages))
        .with_key("pipeline.stages");
  const int replicas = stages > 1 ? world / stages : world;
  config.resolve_batch(replicas);
  MemoryPlan plan;
  if (stages > 1 && gpt) {
    const pipe::StageBounds bounds = pipe::partition_layers(
        config.pipeline().partition, models::layer_parameter_counts(*gpt), models::layer_types(*gpt), stages);
    int shown = 0;
    for (int s = 0; s < stages; ++s) {
      const ModelShape stage = gpt_stage_shape(*gpt, bounds[s], bounds[s + 1]);
      const MemoryPlan stage_plan = plan_memory(config, stage, replicas, budget);
      std::printf("pipeline stage %d: layers [%d, %d), %lld parameters, %d replicas: predicted peak %.1f MB per rank\n",
                  s, bounds[s], bounds[s + 1], static_cast<long long>(total_of(stage.numels)), replicas,
                  stage_plan.peak() / 1e6);
      if (s == 0 || stage_plan.peak() > plan.peak()) plan = stage_plan, shape = stage, shown = s;
    }
    std::printf("stage %d, the largest (activations not estimated for a stage):\n", shown);
  } else {
    if (stages > 1) std::printf("pipeline.stages %d: planned as the whole model (stages are planned for the GPT)\n", stages);
    plan = plan_memory(config, shape, replicas, budget);
  }
  std::printf("model: %s, %lld parameters in %zu tensors, d = %lld; %d ranks, %d on this node; ZeRO stage %d; %s; "
              "optimizer %s; micro-batch %d\n",
              model.name().c_str(), static_cast<long long>(total_of(shape.numels)), shape.numels.size(),
              static_cast<long long>(shape.hidden),
              world, ranks_per_node, plan.stage, config.bf16().enabled ? "bf16" : config.fp16().enabled ? "fp16" : "fp32",
              to_string(config.optimizer().type), config.train_micro_batch_size_per_gpu());
  for (const ChosenKnob& knob : plan.chosen)
    std::printf("chosen: %s = %lld (%s)\n", knob.key.c_str(), static_cast<long long>(knob.value), knob.why.c_str());
  if (plan.chosen.empty()) std::printf("chosen: nothing (every knob as configured)\n");
  std::printf("per rank, MB:\n");
  auto row = [](const char* what, int64_t bytes) { std::printf("  %-50s %10.1f\n", what, bytes / 1e6); };
  row("model states: parameters (weights + fp32 master)", plan.model_state.parameters);
  row("model states: gradients (fp32 shard)", plan.model_state.gradients);
  row("model states: optimizer state", plan.model_state.optimizer);
  row("buffers: whole gradients during backward", plan.backward_gradients);
  row("buffers: reduce buckets", plan.reduce_buckets);
  row("buffers: gathered parameters (stage 3)", plan.gathered_parameters);
  row("buffers: refresh all-gather (stages 1-2)", plan.refresh_gather);
  row("buffers: 1-bit momentum bits and backend scratch", plan.compression_buffers);
  row("swap buffers: optimizer state (NVMe)", plan.optimizer_swap_buffers);
  row("swap buffers: gradients (NVMe)", plan.gradient_swap_buffers);
  row("swap buffers: parameters and max_in_cpu (NVMe)", plan.param_swap_memory);
  row("activations (one micro-batch)", plan.activations);
  row("process before the model", plan.baseline);
  row("predicted peak", plan.peak());
  row("checkpoint bucket (while saving, not in the peak)", plan.checkpoint_bucket);
  if (plan.budget > 0)
    std::printf("  %-50s %10.1f  (%s / %d ranks)\n", "budget", plan.budget / 1e6, plan.budget_source.c_str(),
                budget.ranks_per_node);
  else
    std::printf("  %-50s %10s\n", "budget", "none known");
}

constexpr double kPlainLineSeconds = 10;
constexpr double kRedrawSeconds = 0.1;

// What the user sees while a checkpoint is read and written: the bar on a terminal, else a plain
// line every kPlainLineSeconds. The bar's line ends with the report.
class ExportReport {
 public:
  explicit ExportReport(ProgressMode mode) : drawing_(draws_progress(mode)) {}
  ~ExportReport() {
    if (bar_) bar_->finish();
  }
  ExportReport(const ExportReport&) = delete;
  ExportReport& operator=(const ExportReport&) = delete;

  CheckpointProgress callback() {
    return [this](int64_t done, int64_t total) { update(done / 1e6, total / 1e6); };
  }

 private:
  void update(double done_mb, double total_mb) {
    if (!bar_) bar_ = std::make_unique<ProgressBar>(0, total_mb, "MB");
    const auto now = std::chrono::steady_clock::now();
    const double since = std::chrono::duration<double>(now - last_).count();
    if (drawing_ && (since >= kRedrawSeconds || done_mb >= total_mb)) {
      bar_->draw(done_mb, "shards verified, then weights");
      last_ = now;
    } else if (!drawing_ && since >= kPlainLineSeconds) {
      std::printf("export: %.1f/%.1f MB (shards verified, then weights), %.2f MB/s, ETA %s\n", done_mb, total_mb,
                  bar_->rate(done_mb), bar_->time_left(done_mb).c_str());
      std::fflush(stdout);
      last_ = now;
    }
  }

  bool drawing_;
  std::unique_ptr<ProgressBar> bar_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

Error write_error(const std::string& out, const Error& cause) {
  Error error("cannot write the exported weights: " + cause.message());
  error.with_path(out);
  if (cause.errnum()) error.with_errno(*cause.errnum());
  return error;
}

// torch::save of `model` to `out` through a temporary name and a rename, handed to the file a piece
// at a time as torch serializes it (the weights are in memory once, their serialized copy never
// whole): a full disk is an error naming `out`, and leaves no truncated file.
void save_model_file(const CausalLM& model, const std::string& out) {
  const std::string temporary = out + ".tmp." + owner_id();
  // The first failed write is kept and thrown once torch is done: torch's writer, told of a short
  // write, throws, and then throws again from its destructor (which ends the process).
  std::optional<Error> failure;
  try {
    io::ShardWriter file(temporary);
    const std::function<size_t(const void*, size_t)> write = [&](const void* data, size_t size) -> size_t {
      if (!failure) try {
          file.append(data, static_cast<int64_t>(size));
        } catch (const Error& e) {
          failure = e;
        }
      return size;
    };
    torch::save(model.ptr(), write);
    if (failure) throw *failure;
    file.finish();
    if (std::rename(temporary.c_str(), out.c_str()) != 0) throw Error("rename failed").with_path(out).with_errno(errno);
  } catch (const Error& e) {
    ::unlink(temporary.c_str());
    throw write_error(out, e);
  } catch (...) {
    ::unlink(temporary.c_str());
    throw;
  }
}

std::string stages_text(const std::vector<std::string>& folders) {
  return folders[0] + (folders.size() > 1 ? " and " + std::to_string(folders.size() - 1) + " more stages" : "");
}

void export_checkpoint(const std::string& dir, const std::string& tag, const std::string& out, ProgressMode progress) {
  const std::vector<std::string> folders = checkpoint_folders(dir, tag);
  const nlohmann::json config = checkpoint_config(folders[0]);
  const nlohmann::json block = config.value("dstrain", nlohmann::json::object());
  check_model_type(block.value("model", nlohmann::json::object()));
  const CausalLM model = choose_model(block.value("model", nlohmann::json::object())).build();
  {
    ExportReport report(progress);
    load_checkpoint_weights(folders, *model, report.callback());
  }
  save_model_file(model, out);
  std::printf("exported %s -> %s (%zu fp32 tensors; load with torch::load(model, \"%s\"))\n", stages_text(folders).c_str(),
              out.c_str(), model.ptr()->parameters().size(), out.c_str());
}

void export_safetensors(const std::string& dir, const std::string& tag, const std::string& out, int64_t max_shard_bytes,
                        ProgressMode progress) {
  const std::vector<std::string> folders = checkpoint_folders(dir, tag);
  const nlohmann::json model = checkpoint_config(folders[0]).value("dstrain", nlohmann::json::object()).value("model", nlohmann::json::object());
  check_model_type(model);
  HfExport exported;
  try {
    ExportReport report(progress);
    exported = export_hf(folders, out, max_shard_bytes, report.callback());
  } catch (const Error& e) {
    if (!e.path() || e.path()->compare(0, out.size(), out) != 0) throw;
    throw write_error(*e.path(), e);
  }
  const std::string weights = exported.files.size() == 1
                                  ? out + "/" + exported.files[0]
                                  : std::to_string(exported.files.size()) + " files " + out + "/" + exported.files[0] +
                                        " ... and " + out + "/model.safetensors.index.json";
  std::printf("exported %s -> %s (%lld fp32 tensors, %.1f MB) and %s/config.json (%s)\n", stages_text(folders).c_str(),
              weights.c_str(), static_cast<long long>(exported.tensors), exported.bytes / 1e6, out.c_str(),
              ckpt::model_type(model) == "llama" ? "LlamaForCausalLM" : "GPT2LMHeadModel");
}

}  // namespace

void add_estimate_command(CLI::App& app) {
  auto* command = app.add_subcommand("estimate", "print the per-rank model-state bytes of each ZeRO stage");
  auto config = std::make_shared<std::string>();
  auto world = std::make_shared<int>(1);
  command->add_option("-c,--config", *config, "config with a dstrain.model block")->required()->check(CLI::ExistingFile);
  command->add_option("--world", *world, "data-parallel ranks")->check(CLI::PositiveNumber);
  auto overrides = std::make_shared<ConfigOverrides>();
  add_override_options(*command, *overrides);
  command->callback([config, overrides, world] { print_estimate(*config, *overrides, *world); });
}

void add_plan_command(CLI::App& app) {
  auto* command = app.add_subcommand("plan", "print the memory plan per rank: every buffer, the predicted peak, the budget");
  auto config = std::make_shared<std::string>();
  auto world = std::make_shared<int>(1);
  auto per_node = std::make_shared<int>(0);
  command->add_option("-c,--config", *config, "config with a dstrain.model block")->required()->check(CLI::ExistingFile);
  command->add_option("--world", *world, "data-parallel ranks")->check(CLI::PositiveNumber);
  command->add_option("--ranks-per-node", *per_node, "ranks sharing this node's memory (default: all of --world)")
      ->check(CLI::PositiveNumber);
  auto overrides = std::make_shared<ConfigOverrides>();
  add_override_options(*command, *overrides);
  command->callback([config, overrides, world, per_node] {
    print_plan(*config, *overrides, *world, *per_node > 0 ? *per_node : *world);
  });
}

void add_export_command(CLI::App& app) {
  auto* command = app.add_subcommand(
      "export", "write a checkpoint's full fp32 weights as a LibTorch file, or as Hugging Face's safetensors and config.json");
  auto dir = std::make_shared<std::string>();
  auto tag = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto format = std::make_shared<std::string>("torch");
  auto max_shard_size = std::make_shared<std::string>("5GB");
  auto progress = std::make_shared<ProgressMode>(ProgressMode::Auto);
  command->add_option("--checkpoint", *dir, "checkpoint directory (as given to --save-dir; a pipeline's too)")->required();
  command->add_option("--tag", *tag, "checkpoint tag (default: the directory's latest)");
  command->add_option("--out", *out, "output: a file (torch, e.g. model.pt) or a folder (safetensors)")->required();
  command->add_option("--format", *format, "torch (default) or safetensors (model.safetensors + config.json)")
      ->check(CLI::IsMember({"torch", "safetensors"}));
  command->add_option("--max-shard-size", *max_shard_size,
                      "safetensors: the largest weights file, as transformers' max_shard_size (default 5GB; "
                      "KB/MB/GB are powers of 1000, KiB/MiB/GiB of 1024); more weights: model-00001-of-0000N.safetensors "
                      "and model.safetensors.index.json");
  add_progress_option(*command, *progress);
  command->callback([dir, tag, out, format, max_shard_size, progress] {
    if (*format == "safetensors")
      export_safetensors(*dir, *tag, *out, ckpt::parse_shard_size(*max_shard_size), *progress);
    else
      export_checkpoint(*dir, *tag, *out, *progress);
  });
}

}  // namespace ds::app
