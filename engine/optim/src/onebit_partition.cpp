#include "dstrain/engine/optim/onebit_partition.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>

namespace ds {
namespace {

// Values per rank in one all-gather of OneBitPartition::gather (16 MB of fp32).
constexpr int64_t kGatherWindow = int64_t{1} << 22;

}  // namespace

OneBitPartition::OneBitPartition(const zero::ShardLayout& layout, int world) : shard_numel_(layout.shard_numel()) {
  int64_t flat_offset = 0;
  for (size_t i = 0; i < layout.size(); ++i) {
    const zero::ParamSlot& slot = layout.slot(i);
    slots_.push_back({slot, flat_offset});
    if (const Piece piece = piece_of(slots_.back(), layout.rank()); piece.count > 0) {
      pieces_.push_back(piece);
      piece_params_.push_back(i);
    }
    flat_offset += slot.numel;
  }
  flat_ = comm::onebit::layout_for(flat_offset, world);
}

OneBitPartition::Piece OneBitPartition::piece_of(const Slot& slot, int rank) {
  const int64_t first = std::min<int64_t>(int64_t{rank} * slot.layout.chunk, slot.layout.numel);
  return {slot.layout.shard_offset, slot.flat_offset + first, std::min(slot.layout.chunk, slot.layout.numel - first)};
}

void OneBitPartition::to_shard(const float* flat, const at::Tensor& shard) const {
  float* out = shard.data_ptr<float>();
  shard.zero_();
  for (const Piece& piece : pieces_) std::copy_n(flat + piece.flat, piece.count, out + piece.shard);
}

void OneBitPartition::gather(const at::Tensor& shard, comm::Backend& group, const GatheredFn& take) const {
  const int world = group.world_size();
  const int64_t width = std::min(kGatherWindow, shard_numel_);
  at::Tensor all = at::empty({world * width}, shard.options());
  for (int64_t begin = 0; begin < shard_numel_; begin += width) {
    const int64_t n = std::min(width, shard_numel_ - begin);
    group.all_gather_into(all.narrow(0, 0, world * n), shard.narrow(0, begin, n));
    // Rank r's values of shard elements [begin, begin + n) are all[r * n, (r + 1) * n).
    for (int rank = 0; rank < world; ++rank)
      for (const Slot& slot : slots_) {
        const Piece piece = piece_of(slot, rank);
        const int64_t lo = std::max(begin, piece.shard), hi = std::min(begin + n, piece.shard + piece.count);
        if (lo < hi) take(piece.flat + (lo - piece.shard), all.data_ptr<float>() + rank * n + (lo - begin), hi - lo);
      }
  }
}

at::Tensor OneBitPartition::gather(const at::Tensor& shard, comm::Backend& group) const {
  at::Tensor flat = at::zeros({flat_.padded}, shard.options());
  float* to = flat.data_ptr<float>();
  gather(shard, group, [&](int64_t offset, const float* values, int64_t count) { std::copy_n(values, count, to + offset); });
  return flat;
}

void OneBitPartition::keep(const float* averaged) {
  if (!signs_.defined()) signs_ = at::empty({flat_.padded / 8}, at::kByte);
  comm::onebit::pack_signs(averaged, flat_.padded, signs_.data_ptr<uint8_t>());
  scales_.resize(flat_.world);
  for (int j = 0; j < flat_.world; ++j) scales_[j] = std::abs(averaged[j * flat_.chunk]);
}

int64_t OneBitPartition::kept_bytes() const {
  return signs_.defined() ? signs_.nbytes() + static_cast<int64_t>(scales_.size() * sizeof(float)) : 0;
}

bool on_every_rank(bool local, comm::Backend& group) {
  at::Tensor flag = at::full({1}, local ? 1.0f : 0.0f, at::kFloat);
  group.all_reduce(flag, comm::ReduceOp::Min);
  return flag.item<float>() > 0;
}

}  // namespace ds
