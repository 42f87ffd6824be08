#include <torch/torch.h>

#include "dstrain/engine/partition/model_weights.hpp"
#include "placements.hpp"

namespace ds {

ModelStoragePartition::ModelStoragePartition(const PartitionContext& context) : OptimizerPartition(context) {
  // Stage 3's master is the coordinator's partition, taken in bind(); on one partition the
  // parameters move into one buffer, which is the whole shard.
  if (zero_.stage != 3) master_ = move_parameters_into_buffer(context);
  make_optimizer(device_, layout_.shard_numel());
}

void ModelStoragePartition::bind(zero::GradientReducer& reducer, ModelWeights& weights) {
  OptimizerPartition::bind(reducer, weights);
  if (weights.coordinator()) master_ = weights.coordinator()->shard();
}

void ModelStoragePartition::step(const at::Tensor& grads, const StepArgs& args) {
  optimizer_->step(master_, grads, args.lr, args.step);
  refresh_model();
}

// The optimizer stepped the model's own storage (stage 3: its partition).
void ModelStoragePartition::refresh_model() { weights_->finish(); }

ModelStateBytes ModelStoragePartition::bytes() const {
  ModelStateBytes bytes = OptimizerPartition::bytes();
  bytes.parameters = weights_->bytes();  // the master is the weights' storage
  return bytes;
}

}  // namespace ds
