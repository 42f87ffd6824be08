#include "dstrain/engine/partition/optimizer_partition.hpp"

#include <torch/torch.h>

#include "dstrain/engine/partition/model_weights.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/zero/buffer_sizes.hpp"
#include "placements.hpp"

namespace ds {

const char* to_string(PartitionKind kind) {
  switch (kind) {
    case PartitionKind::ModelStorage: return "the model's storage";
    case PartitionKind::ModelSlices: return "the model's slices";
    case PartitionKind::Copy: return "a copy in memory";
    case PartitionKind::Host: return "host memory (ZeRO-Offload)";
    case PartitionKind::Nvme: return "NVMe (ZeRO-Infinity)";
  }
  return "?";
}

PartitionKind choose_partition(const ZeroConfig& zero, const PartitionFacts& facts) {
  if (zero.offload_optimizer.device == OffloadDevice::Nvme && zero.stage >= 1) return PartitionKind::Nvme;
  if (zero.offload_optimizer.device == OffloadDevice::Cpu && facts.on_gpu) return PartitionKind::Host;
  // The master of a model in fp16/bf16 is its fp32 shadow.
  if (!facts.fp32) return PartitionKind::Copy;
  // Stage 3's partition on NVMe is read for each use; the master stays in memory beside it.
  if (zero.stage == 3)
    return zero.offload_param.device == OffloadDevice::Nvme ? PartitionKind::Copy : PartitionKind::ModelStorage;
  if (facts.aliased) return PartitionKind::Copy;
  return facts.partitions > 1 ? PartitionKind::ModelSlices : PartitionKind::ModelStorage;
}

int64_t optimizer_state_tensors(const OptimizerConfig& optimizer) {
  if (optimizer.type == OptimizerType::SGD) return 1;
  if (optimizer.type == OptimizerType::OneBitLamb || optimizer.type == OptimizerType::ZeroOneAdam) return 3;
  return 2;
}

PartitionSizes partition_sizes(PartitionKind kind, const Config& config, int64_t shard, int partitions) {
  PartitionSizes sizes;
  sizes.kind = kind;
  sizes.shard = shard;
  sizes.partitions = partitions;
  sizes.state_tensors = optimizer_state_tensors(config.optimizer());
  // The pipeline engine changes reduced gradients in place (the tied weight's sum, clipping by the
  // whole pipeline's norm): under it the gradient shard stays in memory.
  sizes.gradients_on_nvme = kind == PartitionKind::Nvme && !config.pipeline().stages;
  return sizes;
}

int64_t PartitionSizes::parameters(int64_t model_weight_bytes) const {
  switch (kind) {
    case PartitionKind::ModelStorage: return model_weight_bytes;
    case PartitionKind::ModelSlices: return 4 * int64_t{partitions} * shard;
    case PartitionKind::Copy:
    case PartitionKind::Host: return 4 * shard + model_weight_bytes;
    case PartitionKind::Nvme: return model_weight_bytes;
  }
  return model_weight_bytes;
}

int64_t PartitionSizes::gradients() const { return gradients_on_nvme ? 0 : 4 * shard; }

int64_t PartitionSizes::optimizer() const { return kind == PartitionKind::Nvme ? 0 : 4 * shard * state_tensors; }

int PartitionSizes::swap_files() const {
  if (kind != PartitionKind::Nvme) return 0;
  return 1 + static_cast<int>(state_tensors) + (gradients_on_nvme ? 1 : 0);
}

int64_t PartitionSizes::optimizer_swap_buffers(int64_t slots, int64_t sub_group) const {
  return kind == PartitionKind::Nvme ? 4 * slots * sub_group * (1 + state_tensors) : 0;
}

int64_t PartitionSizes::gradient_swap_buffers(int64_t slots, int64_t sub_group) const {
  return gradients_on_nvme ? 4 * (slots * sub_group + zero::kGradientPages * zero::gradient_page_numel(shard)) : 0;
}

OptimizerPartition::OptimizerPartition(const PartitionContext& context)
    : config_(context.config),
      zero_(context.zero),
      params_(context.params),
      shapes_(context.shapes),
      layout_(context.layout),
      group_(context.group),
      device_(context.device),
      timers_(context.timers),
      make_optimizer_(context.make_optimizer) {}

OptimizerPartition::~OptimizerPartition() = default;

void OptimizerPartition::make_optimizer(at::Device device, int64_t state_numel) {
  optimizer_ = make_optimizer_(device, state_numel);
}

void OptimizerPartition::bind(zero::GradientReducer& reducer, ModelWeights& weights) {
  reducer_ = &reducer;
  weights_ = &weights;
}

at::Tensor OptimizerPartition::gradients() {
  // Left local under partitions (the 1-bit family after its freeze), they are this rank's whole
  // gradients.
  if (reducer_->local_only() && layout_.partitions() > 1) return reducer_->local_gradients();
  return reducer_->grad_shard();
}

std::vector<std::string> OptimizerPartition::sections() const {
  std::vector<std::string> names = {"master"};
  for (const auto& [name, tensor] : optimizer_->state()) names.push_back("optim/" + name);
  return names;
}

at::Tensor OptimizerPartition::state_tensor(size_t section) const {
  const auto state = optimizer_->state();
  if (section == 0 || section > state.size()) throw Error("optimizer partition: no state section " + std::to_string(section));
  return state[section - 1].second;
}

at::Tensor OptimizerPartition::read(size_t section, int64_t begin, int64_t count) {
  return (section == 0 ? master_ : state_tensor(section)).narrow(0, begin, count);
}

void OptimizerPartition::write(size_t section, int64_t begin, const at::Tensor& values) {
  read(section, begin, values.numel()).copy_(values);
}

at::Tensor OptimizerPartition::master_chunk(size_t i) const { return layout_.chunk_view(i, master_); }

at::Tensor OptimizerPartition::reduced_gradient_chunk(size_t i) { return layout_.chunk_view(i, gradients()); }

ModelStateBytes OptimizerPartition::bytes() const {
  ModelStateBytes bytes;
  bytes.parameters = (master_.defined() ? master_.nbytes() : 0) + weights_->bytes();
  for (const auto& [name, state] : optimizer_->state()) bytes.optimizer += state.nbytes();
  return bytes;
}

std::unique_ptr<OptimizerPartition> make_partition(PartitionKind kind, const PartitionContext& context) {
  switch (kind) {
    case PartitionKind::ModelStorage: return std::make_unique<ModelStoragePartition>(context);
    case PartitionKind::ModelSlices: return std::make_unique<ModelSlicesPartition>(context);
    case PartitionKind::Copy: return std::make_unique<CopyPartition>(context);
    case PartitionKind::Host: return std::make_unique<HostPartition>(context);
    case PartitionKind::Nvme: return std::make_unique<NvmePartition>(context);
  }
  throw Error("unknown optimizer partition kind");
}

}  // namespace ds
