#include "dstrain/engine/fit_check.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "dstrain/engine/memory_budget.hpp"
#include "dstrain/engine/memory_plan.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/rank_env.hpp"

namespace ds {
namespace {

std::string mb(double bytes) { return std::to_string(static_cast<int64_t>(bytes / 1e6)) + " MB"; }

struct Share {
  int64_t bytes;
  std::string key;   // the setting that sizes it
  std::string what;  // what it is, with the numbers behind it
};

}  // namespace

void refuse_unless_fits(const Config& given, const models::GPTConfig& gpt, int world) {
  Config config = given;
  if (!config.batch_resolved()) config.resolve_batch(world);
  const MemoryBudget budget = memory_budget(config, rank_env_from_environment().local_size);
  const MemoryPlan plan = plan_memory(config, gpt_shape(gpt), world, budget);  // names a user-set knob that cannot fit
  if (plan.budget <= 0 || plan.peak() <= plan.budget) return;
  const int64_t parameters = models::num_parameters(gpt);
  const std::vector<Share> shares = {
      {plan.model_state.total(), "dstrain.model",
       "the model state of " + std::to_string(parameters) + " parameters (" + std::to_string(gpt.n_layer) +
           " layers x " + std::to_string(gpt.n_embd) + " wide) at ZeRO stage " + std::to_string(plan.stage)},
      {plan.activations, "train_micro_batch_size_per_gpu, dstrain.model.block_size",
       "the activations of one micro-batch of " + std::to_string(config.train_micro_batch_size_per_gpu()) +
           " x block_size " + std::to_string(gpt.block_size)},
      {plan.buffers(), "zero_optimization.reduce_bucket_size", "the communication buffers"},
      {plan.swap_buffers(), "zero_optimization.offload_optimizer.buffer_count", "the swap buffers"}};
  const Share& largest = *std::max_element(shares.begin(), shares.end(),
                                           [](const Share& a, const Share& b) { return a.bytes < b.bytes; });
  throw Error("cannot fit: the predicted peak is " + mb(static_cast<double>(plan.peak())) + " per rank, over the budget of " +
              mb(static_cast<double>(plan.budget)) + " (" + plan.budget_source + "); the largest share is " + largest.what +
              ", " + mb(static_cast<double>(largest.bytes)) +
              " (a higher ZeRO stage, offload to NVMe, more ranks or a smaller setting hold less; `dstrain plan` shows it all)")
      .with_key(largest.key);
}

}  // namespace ds
