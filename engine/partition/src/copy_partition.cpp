#include <torch/torch.h>

#include "dstrain/engine/partition/model_weights.hpp"
#include "placements.hpp"

namespace ds {

at::Tensor copy_rank_chunks(const PartitionContext& context, at::Tensor master) {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < context.params.size(); ++i)
    context.layout.copy_rank_chunk(i, context.params[i].detach(), context.layout.chunk_view(i, master));
  return master;
}

CopyPartition::CopyPartition(const PartitionContext& context) : OptimizerPartition(context) {
  master_ = copy_rank_chunks(context, at::empty({layout_.shard_numel()}, at::dtype(at::kFloat).device(device_)));
  make_optimizer(device_, layout_.shard_numel());
}

void CopyPartition::step(const at::Tensor& grads, const StepArgs& args) {
  optimizer_->step(master_, grads, args.lr, args.step);
  refresh_model();
}

void CopyPartition::refresh_model() {
  weights_->refresh_range(master_, 0);
  weights_->finish();
}

}  // namespace ds
