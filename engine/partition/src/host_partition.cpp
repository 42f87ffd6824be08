#include <torch/torch.h>

#include <algorithm>

#include "dstrain/engine/partition/model_weights.hpp"
#include "placements.hpp"

namespace ds {
namespace {

// The step on the host goes in this many pieces, so that the copy of one piece's new weights to the
// GPU hides behind the CPU's step of the next; at least kMinHostStepPiece elements each, so that
// every copy is large enough to run at the link's speed.
constexpr int64_t kHostStepPieces = 8;
constexpr int64_t kMinHostStepPiece = int64_t{1} << 20;

}  // namespace

HostPartition::HostPartition(const PartitionContext& context) : OptimizerPartition(context) {
  host_ = std::make_unique<HostOffload>(layout_.shard_numel(), device_, zero_.offload_optimizer.pin_memory);
  master_ = copy_rank_chunks(context, host_->host_empty(layout_.shard_numel(), at::kFloat));
  make_optimizer(at::kCPU, layout_.shard_numel());
}

void HostPartition::bind(zero::GradientReducer& reducer, ModelWeights& weights) {
  OptimizerPartition::bind(reducer, weights);
  weights.stage_through(host_.get());
}

zero::GradientReducer::ShardSink HostPartition::gradient_sink() {
  return [this](const at::Tensor& values, int64_t shard_offset, bool overwrite) {
    host_->take_gradients(values, shard_offset, overwrite);
  };
}

at::Tensor HostPartition::gradients() {
  ScopedTimer timer(timers_, "gradients_to_host");  // the rest of backward's copies
  const at::Tensor& grads = host_->gradients();
  if (!reducer_->has_gradients()) grads.zero_();  // no backward reduced since the last step
  return grads;
}

void HostPartition::step(const at::Tensor& grads, const StepArgs& args) {
  ScopedTimer timer(timers_, "step_on_host");
  if (optimizer_->steps_ranges()) {
    // The fused CPU kernel touches element i alone, so piece by piece gives the whole shard's
    // result; each piece's weights go to the GPU (non-blocking, on HostOffload's side stream) while
    // the CPU steps the next.
    const int64_t numel = layout_.shard_numel();
    const int64_t piece = std::max(kMinHostStepPiece, (numel + kHostStepPieces - 1) / kHostStepPieces);
    for (int64_t begin = 0; begin < numel; begin += piece) {
      const int64_t count = std::min(piece, numel - begin);
      optimizer_->step_ranges({{master_.data_ptr<float>() + begin, grads.data_ptr<float>() + begin, begin, count}},
                              args.lr, args.step);
      weights_->refresh_range(master_.narrow(0, begin, count), begin);
    }
  } else {
    // An optimizer that takes the shard as one tensor (Lamb's per-parameter norms).
    optimizer_->step(master_, grads, args.lr, args.step);
    weights_->refresh_range(master_, 0);
  }
  finish_refresh();
}

void HostPartition::refresh_model() {
  weights_->refresh_range(master_, 0);
  finish_refresh();
}

void HostPartition::finish_refresh() {
  ScopedTimer timer(timers_, "weights_to_device");
  weights_->finish();
}

ModelStateBytes HostPartition::bytes() const {
  ModelStateBytes bytes = OptimizerPartition::bytes();
  bytes.gradients += host_->bytes();
  return bytes;
}

}  // namespace ds
