// ds::MemoryPlan: every buffer one rank holds, sized in one place, and the peak they add up to.
//
// From the config, the model's parameter sizes (and its hidden size d when known), the
// data-parallel world size and the ZeRO stage, the plan says what each rank holds:
//   model state      ZeRO's accounting (the figures EngineCore::model_state_bytes() reports after
//                    a step, swap buffers apart)
//   buffers          the reducer's buckets, stage 3's gathered parameters (the module in use and
//                    the prefetch), stage 1-2's refresh all-gather, the whole gradient autograd
//                    holds before the reducer packs it, the checkpoint bucket, the 1-bit
//                    optimizers' kept momentum bits and compressed-allreduce scratch
//   swap buffers     offload_optimizer's sub-group buffers and gradient pages, offload_param's
//                    buffers and resident chunks (zero/buffer_sizes.hpp, as the swappers allocate)
//   activations      what the built-in GPT's forward keeps for backward, and the gradients going
//                    back through one block, from its config
// and predicts the peak: the process before any model (LibTorch, MPI) and what a built engine holds
// beyond its model state, plus all of these.
//
// plan_memory() first chooses the knobs the user left unset (docs/zero.md, "The memory planner"):
// Hugging Face's sizes from d at stage 3, sub-groups and buffer counts the pipelined swap needs,
// then halves whichever shrinks the peak most until it is within the budget less a margin. The
// engine takes the plan once at start (plan_engine_memory) and sizes everything by plan.zero, never
// rewriting the config; `dstrain estimate` and `dstrain plan` print it without building the model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dstrain/engine/memory_budget.hpp"
#include "dstrain/engine/partition/model_state_bytes.hpp"
#include "dstrain/engine/models/gpt_config.hpp"
#include "dstrain/runtime/config.hpp"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace ds {
namespace comm {
class Backend;
}  // namespace comm

struct ModelShape {
  std::vector<int64_t> numels;  // trainable parameters, in the model's order
  int64_t hidden = 0;           // d; 0 when not known
  std::optional<models::GPTConfig> gpt;  // the built-in GPT: its activations are estimated
  bool on_gpu = false;          // the model is on a GPU (the step cannot begin in backward there)
  bool aliased = false;         // two parameters share one storage (the master is then a copy)
};

// The built-in GPT's parameters in its order, from its config alone (the model is never built).
ModelShape gpt_shape(const models::GPTConfig& gpt);
// Those of its pipeline layers [first, last) (0 the embeddings, 1..n_layer the blocks, n_layer + 1
// the head), as gpt_pipeline_module builds a stage: the tied wte on the last stage too. No
// activations are estimated for a stage (gpt unset).
ModelShape gpt_stage_shape(const models::GPTConfig& gpt, int first, int last);

// A knob the planner set because the user left it unset (or "auto").
struct ChosenKnob {
  std::string key;  // e.g. "zero_optimization.reduce_bucket_size"
  int64_t value = 0;
  std::string why;  // e.g. "d*d (Hugging Face), d = 1024"
};

struct MemoryPlan {
  int stage = 0;
  int world = 1;
  ZeroConfig zero;  // the knobs the sizes follow: the config's, with the chosen ones
  std::vector<ChosenKnob> chosen;

  ModelStateBytes model_state;       // resident after a step; swap buffers not included
  int64_t backward_gradients = 0;    // whole gradients in the model dtype held during backward
  int64_t reduce_buckets = 0;        // the reducer's bucket buffers and MPI's temporaries
  int64_t gathered_parameters = 0;   // stage 3: whole parameters of the module in use + prefetch
  int64_t refresh_gather = 0;        // stages 1-2: the all-gather temporary of the weights' refresh
  int64_t optimizer_swap_buffers = 0;  // offload_optimizer: the master's and the state's sub-group buffers
  int64_t gradient_swap_buffers = 0;   // offload_optimizer: the gradient's sub-group buffers and pages
  int64_t param_swap_memory = 0;       // offload_param: buffers and resident chunks (max_in_cpu)
  int64_t compression_buffers = 0;   // the 1-bit optimizers: the kept momentum bits, or stage 0's padded copy
  int64_t activations = 0;           // one micro-batch's forward, kept for backward (GPT only)
  int64_t checkpoint_bucket = 0;     // saving and loading; not live during a step
  int64_t baseline = 0;              // the process before any model, and the engine's residue
  int64_t budget = 0;                // per rank; 0: no limit known
  std::string budget_source;

  int64_t buffers() const {
    return backward_gradients + reduce_buckets + gathered_parameters + refresh_gather + compression_buffers;
  }
  int64_t swap_buffers() const { return optimizer_swap_buffers + gradient_swap_buffers + param_swap_memory; }
  // What a rank holds at the peak of a step.
  int64_t peak() const { return baseline + model_state.total() + buffers() + swap_buffers() + activations; }
};

// The process before any model: LibTorch, OpenMPI and the program (measured: docs/zero.md).
inline constexpr int64_t kProcessBaselineBytes = 170'000'000;
// What a built engine holds beyond its model state: its own structures, the heap that building and
// sharding the model leaves after the engine's malloc_trim. Measured (bench/engine/memory_phases:
// RSS after ds::initialize less the RSS before the model and less model_state_bytes()): 12.2-12.6 MB
// for the 25M GPT at ZeRO-3 -np 2 and -np 4 and the 100M GPT at -np 4.
inline constexpr int64_t kEngineResidueBytes = 12'000'000;
// The planner keeps the predicted peak within this share of the budget.
inline constexpr double kBudgetShare = 0.9;

// Sizes every buffer for `config` as it is, nothing chosen (`dstrain estimate`'s figures); at
// `stage` instead of the config's when given.
MemoryPlan size_memory(const Config& config, const ModelShape& shape, int world, std::optional<int> stage = {});
// Chooses the knobs the user left unset so the peak stays within budget.per_rank() *
// kBudgetShare, and sizes every buffer. Throws ds::Error naming the key when a value the user set
// alone keeps the peak above the budget (what it costs, and the budget). When the ranks span
// `several_nodes`, overlap_comm left unset is turned on and, with it on, reduce_bucket_size left
// unset is link_bucket_numel() (docs/multi-node.md), before the budget's search.
MemoryPlan plan_memory(const Config& config, const ModelShape& shape, int world, const MemoryBudget& budget,
                       bool several_nodes = false);

// The gradient bucket for a link between nodes: 5e6 elements (measured), or a quarter of a model
// smaller than four of those (at least 2^16).
int64_t link_bucket_numel(int64_t model_numel);
// `config` with the plan's chosen knobs set: the config as a run used it, which its checkpoints
// record (the engine itself takes plan.zero).
Config apply_memory_plan(const Config& config, const MemoryPlan& plan);

// The checkpoint I/O buffer: one reduce bucket of fp32, at least 4 KiB, at most 64 MiB. Saving and
// loading stream through it, so no rank's memory grows by more.
int64_t checkpoint_bucket_bytes(int64_t reduce_bucket_size);

// EngineCore's one call at start: plans for `model`'s trainable parameters (d and activations from
// the config's dstrain.model block when it is a GPT, else d guessed from the parameters), with the
// smallest budget of any rank in `group` so every rank chooses the same; logs the chosen knobs on
// rank 0 and returns the plan, whose `zero` the engine uses in place of the config's block.
// Collective over `group`.
MemoryPlan plan_engine_memory(const Config& config, const torch::nn::Module& model, comm::Backend& group);

}  // namespace ds
