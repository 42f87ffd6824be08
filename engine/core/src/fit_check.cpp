#include "dstrain/engine/fit_check.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <string>
#include <vector>

#include "dstrain/engine/memory_budget.hpp"
#include "dstrain/engine/memory_plan.hpp"
#include "dstrain/engine/partition/optimizer_partition.hpp"
#include "dstrain/io/swap_preflight.hpp"
#include "dstrain/io/swap_units.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/rank_env.hpp"
#include "dstrain/zero/buffer_sizes.hpp"

namespace ds {
namespace {

std::string mb(double bytes) { return std::to_string(static_cast<int64_t>(bytes / 1e6)) + " MB"; }

struct Share {
  int64_t bytes;
  std::string key;   // the setting that sizes it
  std::string what;  // what it is, with the numbers behind it
};

void refuse_unless_memory_fits(const Config& config, const models::GPTConfig& gpt, const MemoryPlan& plan,
                               const MemoryBudget& budget) {
  if (plan.budget <= 0 || plan.peak() <= plan.budget) return;
  const int64_t parameters = models::num_parameters(gpt);
  const std::vector<Share> shares = {
      {plan.model_state.total(), "dstrain.model",
       "the model state of " + std::to_string(parameters) + " parameters (" + std::to_string(gpt.n_layer) +
           " layers x " + std::to_string(gpt.n_embd) + " wide) at ZeRO stage " + std::to_string(plan.stage)},
      {plan.activations, "train_micro_batch_size_per_gpu, dstrain.model.block_size",
       "the activations of one micro-batch of " + std::to_string(config.train_micro_batch_size_per_gpu()) +
           " x block_size " + std::to_string(gpt.block_size)},
      {plan.gathered_parameters, "dstrain.model.n_embd",
       "one layer's largest parameters gathered whole, with the prefetch (ZeRO-3's least working set)"},
      {plan.buffers() - plan.gathered_parameters, "zero_optimization.reduce_bucket_size", "the communication buffers"},
      {plan.swap_buffers(), "zero_optimization.offload_optimizer.buffer_count", "the swap buffers"}};
  const Share& largest = *std::max_element(shares.begin(), shares.end(),
                                           [](const Share& a, const Share& b) { return a.bytes < b.bytes; });
  Error error("cannot fit: the predicted peak is " + mb(static_cast<double>(plan.peak())) + " per rank, over the budget of " +
              mb(static_cast<double>(plan.budget)) + " (" + plan.budget_source + "): this rank needs " +
              std::to_string(plan.peak()) + " bytes with every knob left unset as small as helps (the process " +
              mb(static_cast<double>(plan.baseline)) + ", model state " + mb(static_cast<double>(plan.model_state.total())) +
              ", buffers " + mb(static_cast<double>(plan.buffers())) + ", swap buffers " +
              mb(static_cast<double>(plan.swap_buffers())) + ", activations " + mb(static_cast<double>(plan.activations)) +
              "), " + std::to_string(plan.budget) + " are available; the largest share is " + largest.what + ", " +
              mb(static_cast<double>(largest.bytes)) +
              " (a higher ZeRO stage, offload to NVMe, more ranks or a smaller setting hold less; `dstrain plan` shows it all)");
  error.with_key(largest.key);
  if (budget.node && !budget.node->path.empty()) error.with_path(budget.node->path);
  throw error;
}

// Bytes of swap files one rank writes under one nvme_path.
struct SwapFiles {
  std::string key;   // e.g. "zero_optimization.offload_optimizer.nvme_path"
  std::string path;
  std::string what;  // e.g. "optimizer state and gradients"
  int64_t bytes = 0;
};

// Each rank's swap files (every rank writes as many) for a model of trainable parameter sizes
// `numels` at `world` data-parallel ranks, padded as the swappers pad them: the optimizer's files,
// the parameter file and, at stage 3 on several ranks, Init's build file (on disk with the others
// until the engine has taken its chunks over). `planned`: the knobs the engine runs with
// (MemoryPlan::zero); Init builds with `given`'s persistence threshold. Empty without NVMe offload.
std::vector<SwapFiles> swap_files_per_rank(const Config& given, const ZeroConfig& planned,
                                           const std::vector<int64_t>& numels, int world) {
  std::vector<SwapFiles> files;
  const int64_t partitions = planned.stage >= 1 ? world : 1;
  std::vector<int64_t> chunks;
  int64_t shard = 0;
  for (int64_t numel : numels) {
    chunks.push_back((numel + partitions - 1) / partitions);
    shard += chunks.back();
  }
  if (planned.offload_optimizer.device == OffloadDevice::Nvme && planned.stage >= 1) {
    // The master, the optimizer's state tensors and, outside the pipeline engine, the gradient.
    const int64_t count = partition_sizes(PartitionKind::Nvme, given, shard, static_cast<int>(partitions)).swap_files();
    files.push_back({"zero_optimization.offload_optimizer.nvme_path", planned.offload_optimizer.nvme_path,
                     "optimizer state and gradients", count * io::round_up(shard, io::kAlignElements) * 4});
  }
  if (planned.offload_param.device == OffloadDevice::Nvme && planned.stage == 3) {
    const std::string key = "zero_optimization.offload_param.nvme_path";
    const int64_t resident = zero::param_swap_sizes(chunks, planned.offload_param.max_in_cpu).resident_numel;
    int64_t bytes = 0, kept = 0;
    for (int64_t chunk : chunks) {
      if (kept < resident) {
        kept += chunk;
        continue;
      }
      bytes += io::round_up(chunk, io::kAlignElements) * 4;
    }
    files.push_back({key, planned.offload_param.nvme_path, "parameters", bytes});
    if (world > 1) {
      // zero::Init: each partitioned parameter's fp32 chunk, padded to 4 KiB.
      int64_t build = 0;
      for (size_t i = 0; i < numels.size(); ++i)
        if (numels[i] > given.zero_optimization().stage3_param_persistence_threshold && chunks[i] != numels[i])
          build += io::round_up(chunks[i] * 4, io::kDirectIoAlignment);
      files.push_back({key, planned.offload_param.nvme_path, "the model's build file", build});
    }
  }
  return files;
}

// The file system a path is on, to add up the swap files of paths that share one; the path itself
// where it cannot be read (its check then says why).
std::string file_system_of(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 ? "device " + std::to_string(info.st_dev) : path;
}

void refuse_unless_disk_fits(const Config& given, const ZeroConfig& planned, const std::vector<int64_t>& numels,
                             int world, int ranks_per_node) {
  const std::vector<SwapFiles> files = swap_files_per_rank(given, planned, numels, world);
  std::vector<std::string> checked;
  for (const SwapFiles& first : files) {
    const std::string device = file_system_of(first.path);
    if (std::find(checked.begin(), checked.end(), device) != checked.end()) continue;
    checked.push_back(device);
    int64_t per_rank = 0;
    std::string parts;
    for (const SwapFiles& f : files)
      if (file_system_of(f.path) == device && f.bytes > 0) {
        per_rank += f.bytes;
        parts += (parts.empty() ? "" : ", ") + f.what + " " + std::to_string(f.bytes) + " bytes";
      }
    const std::string who = ranks_per_node == 1 ? "this rank (" + parts + ")"
                                                : "this node (" + std::to_string(ranks_per_node) + " ranks, each " + parts + ")";
    io::check_swap_path(first.path, first.key, who, per_rank * ranks_per_node);
  }
}

}  // namespace

void refuse_unless_fits(const Config& given, const models::GPTConfig& gpt, int world) {
  Config config = given;
  if (!config.batch_resolved()) config.resolve_batch(world);
  const int ranks_per_node = rank_env_from_environment().local_size;
  const MemoryBudget budget = memory_budget(config, ranks_per_node);
  const ModelShape shape = gpt_shape(gpt);
  const MemoryPlan plan = plan_memory(config, shape, world, budget);  // names a user-set knob that cannot fit
  refuse_unless_memory_fits(config, gpt, plan, budget);
  refuse_unless_disk_fits(given, plan.zero, shape.numels, world, ranks_per_node);
}

}  // namespace ds
