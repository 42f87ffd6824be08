#include "eval_command.hpp"

#include <torch/torch.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "dstrain/engine/checkpoint/export.hpp"
#include "dstrain/engine/data/token_source.hpp"
#include "dstrain/runtime/config.hpp"
#include "dstrain/runtime/error.hpp"
#include "evaluation.hpp"
#include "model_checkpoint.hpp"
#include "model_choice.hpp"
#include "trainer_block.hpp"

namespace ds::app {
namespace {

struct EvalOptions {
  std::string dir;
  std::string tag;
  std::string config_path;
  int64_t iters = 0;       // 0: dstrain.eval_iters
  int64_t batch_size = 0;  // 0: train_micro_batch_size_per_gpu
};

int64_t micro_batch_of(const nlohmann::json& config, const std::string& origin) {
  const auto micro = config.find("train_micro_batch_size_per_gpu");
  if (micro == config.end() || !micro->is_number_integer() || micro->get<int64_t>() < 1)
    throw Error("no train_micro_batch_size_per_gpu to take the batch size from: pass --batch-size")
        .with_path(origin)
        .with_key("train_micro_batch_size_per_gpu");
  return micro->get<int64_t>();
}

void evaluate_checkpoint(const EvalOptions& options) {
  const std::vector<std::string> folders = model_checkpoint_folders(options.dir, options.tag);
  const nlohmann::json config =
      options.config_path.empty() ? checkpoint_config(folders[0]) : Config::parse_file(options.config_path);
  const std::string origin = options.config_path.empty() ? folders[0] : options.config_path;
  const TrainerBlock trainer = read_trainer_block(config.value("dstrain", nlohmann::json::object()));
  const ModelChoice choice = choose_model(trainer.model);
  const auto source = data::make_validation_source(trainer.data, choice.vocab_size(), choice.max_sequence_length());
  if (!source) throw Error("no held-out data to evaluate on: set dstrain.data.valid").with_key("dstrain.data.valid");
  const CausalLM model = choice.build();
  load_checkpoint_weights(folders, *model);
  const int64_t iters = options.iters > 0 ? options.iters : trainer.eval_iters;
  const int64_t batch = options.batch_size > 0 ? options.batch_size : micro_batch_of(config, origin);
  const double loss = validation_loss([&](const at::Tensor& x) { return model->forward(x); }, *model, *source, iters,
                                      0, 1, batch, torch::kCPU);
  std::printf("%.6f\n", loss);
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto* command =
      app.add_subcommand("eval", "print a checkpoint's mean loss on the held-out data (dstrain.data.valid)");
  auto options = std::make_shared<EvalOptions>();
  command->add_option("--checkpoint", options->dir, "checkpoint directory (as given to --save-dir; a pipeline's too)")->required();
  command->add_option("--tag", options->tag, "checkpoint tag (default: the directory's latest)");
  command->add_option("-c,--config", options->config_path, "take the model and data.valid from this config")
      ->check(CLI::ExistingFile);
  command->add_option("--iters", options->iters, "validation batches (default: dstrain.eval_iters)")
      ->check(CLI::PositiveNumber);
  command->add_option("--batch-size", options->batch_size,
                      "samples per batch (default: train_micro_batch_size_per_gpu)")
      ->check(CLI::PositiveNumber);
  command->callback([options] { evaluate_checkpoint(*options); });
}

}  // namespace ds::app
