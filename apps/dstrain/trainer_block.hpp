// The config's "dstrain" block as the trainer reads it:
//   "model":   the built-in model: "type" "gpt" (the default; GPTConfig's keys) or "llama"
//              (LlamaConfig's keys, HF's names); model_choice.hpp reads it
//   "data":    the token source (data::make_token_source checks it)
//   "steps":   optimizer steps to train, > 0 (default 100; --steps overrides)
//   "eval_interval": evaluate on data.valid every N steps, and always after the last (default 0:
//              only after the last); "eval_iters": validation batches per rank (default 20)
//   "device", "backend": where it runs (placement.hpp)
//   "memory_limit": the memory planner's budget (engine/memory_budget.hpp reads it)
//   "gpu_memory_limit": a cap on the CUDA allocator (gpu_memory_limit.hpp applies it)
//   "gather_in_forward": stages 1-2 gather parameters during the next forward (the engine reads
//              it; the trainer makes it true unless set, since it runs the model only through the engine)
//   "step_in_backward": with the optimizer on NVMe, the step starts inside the boundary backward
//              (the engine reads it; the trainer makes it true unless set: it reads no gradient
//              between backward and step)
//   HF's TrainingArguments names ("learning_rate", ...): what "auto" values become (ds::Config reads them)
// Any other key is an error naming it and, when one is close, the key it probably meant.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace ds::app {

struct TrainerBlock {
  nlohmann::json model;
  nlohmann::json data;
  int64_t steps = 100;
  int64_t eval_interval = 0;
  int64_t eval_iters = 20;
};

TrainerBlock read_trainer_block(const nlohmann::json& block);
// The engine keys the trainer sets where the config does not: dstrain.gather_in_forward true,
// since the trainer reads the model only through the engine, and dstrain.step_in_backward true,
// since it reads no gradient between backward and step (docs/config.md).
void apply_trainer_defaults(nlohmann::json& config);

// A "dstrain.model" block naming a model type this build does not have is a ds::Error naming the
// type and the supported ones (a missing type means "gpt").
void check_model_type(const nlohmann::json& model);

}  // namespace ds::app
