#include "dstrain/engine/partition/model_weights.hpp"

#include <torch/torch.h>

#include <algorithm>

#include "dstrain/engine/partition/host_offload.hpp"

namespace ds {

int64_t refresh_gather_width(int64_t allgather_bucket_size, int partitions) {
  constexpr int64_t kMostNumel = int64_t{4} << 20;
  return std::max<int64_t>(1, std::min(allgather_bucket_size, kMostNumel) / partitions);
}

ModelWeights::ModelWeights(std::vector<at::Tensor>& params, const zero::ShardLayout& layout, comm::Backend& group,
                           zero::ParameterCoordinator* coordinator, int64_t allgather_bucket_size)
    : params_(params),
      layout_(layout),
      group_(group),
      coordinator_(coordinator),
      width_(refresh_gather_width(allgather_bucket_size, layout.partitions())) {}

void ModelWeights::refresh_range(const at::Tensor& values, int64_t shard_offset) {
  at::NoGradGuard no_grad;
  if (coordinator_) {
    coordinator_->load_shard_range(values, shard_offset);
    return;
  }
  // Stages 0-2 hold every parameter whole. The shard range is gathered from every partition a
  // few elements at a time (refresh_gather_width). Each rank's piece of the range then lands in
  // the parameters it belongs to.
  const int partitions = layout_.partitions();
  const auto dtype = params_.front().scalar_type();
  for (int64_t at = 0; at < values.numel(); at += width_) {
    const int64_t begin = shard_offset + at;
    const int64_t end = begin + std::min(width_, values.numel() - at);
    // With ZeRO-Offload the range goes to the GPU from a (pinned) staging copy in the model's dtype.
    at::Tensor mine;
    if (host_) {
      mine = host_->host_empty(end - begin, dtype);
      mine.copy_(values.narrow(0, at, end - begin));
    } else {
      mine = values.narrow(0, at, end - begin).to(dtype);
    }
    at::Tensor by_rank = mine.view({1, end - begin});
    if (partitions > 1) {
      at::Tensor all = host_ ? host_->host_empty(partitions * (end - begin), dtype)
                             : at::empty({partitions * (end - begin)}, mine.options());
      group_.all_gather_into(all, mine);
      by_rank = all.view({partitions, end - begin});
    }
    for (size_t i = 0; i < params_.size(); ++i) {
      const zero::ParamSlot& slot = layout_.slot(i);
      const int64_t lo = std::max(begin, slot.shard_offset), hi = std::min(end, slot.shard_offset + slot.chunk);
      if (lo >= hi) continue;
      at::Tensor flat = params_[i].detach().view({-1});
      for (int p = 0; p < partitions; ++p) {
        // Partition p's chunk covers elements [p * chunk, (p + 1) * chunk) of the parameter; the
        // last one ends in padding.
        const int64_t first = p * slot.chunk + (lo - slot.shard_offset);
        const int64_t count = std::min(hi - lo, slot.numel - first);
        if (count <= 0) continue;
        if (host_)
          host_->copy_to_device(flat.narrow(0, first, count), by_rank[p].narrow(0, lo - begin, count));
        else
          flat.narrow(0, first, count).copy_(by_rank[p].narrow(0, lo - begin, count));
      }
    }
  }
}

void ModelWeights::finish() {
  if (host_) host_->finish_copies_to_device();  // before the next forward reads them
  if (coordinator_) coordinator_->regather_persistent();
}

int64_t ModelWeights::bytes() const {
  if (coordinator_) return coordinator_->bytes();
  int64_t bytes = 0;
  for (const at::Tensor& param : params_) bytes += param.nbytes();
  return bytes;
}

}  // namespace ds
