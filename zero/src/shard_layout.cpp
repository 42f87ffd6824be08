#include "dstrain/zero/shard_layout.hpp"

#include <ATen/ATen.h>

#include <algorithm>

#include "dstrain/runtime/error.hpp"
#include "dstrain/zero/init.hpp"

namespace ds::zero {

ShardLayout::ShardLayout(const std::vector<at::Tensor>& params, int partitions, int rank)
    : partitions_(partitions), rank_(rank) {
  if (partitions < 1 || rank < 0 || rank >= partitions)
    throw Error("invalid shard layout: rank " + std::to_string(rank) + " of " + std::to_string(partitions));
  slots_.reserve(params.size());
  for (const at::Tensor& param : params) {
    const int64_t numel = param.numel();
    const int64_t chunk = (numel + partitions - 1) / partitions;
    slots_.push_back({numel, chunk, shard_numel_});
    shard_numel_ += chunk;
  }
}

void ShardLayout::copy_chunk(size_t i, const at::Tensor& full, int part, const at::Tensor& chunk_out) const {
  const ParamSlot& s = slots_[i];
  const int64_t begin = std::min<int64_t>(part * s.chunk, s.numel);
  const int64_t valid = std::min<int64_t>(s.chunk, s.numel - begin);
  at::Tensor flat = full.reshape({-1});
  if (valid > 0) chunk_out.narrow(0, 0, valid).copy_(flat.narrow(0, begin, valid));
  if (valid < s.chunk) chunk_out.narrow(0, valid, s.chunk - valid).zero_();
}

void ShardLayout::copy_rank_chunk(size_t i, const at::Tensor& param, const at::Tensor& chunk_out) const {
  if (!is_partitioned(param)) return copy_chunk(i, param, rank_, chunk_out);
  at::Tensor chunk = partition_chunk(param);
  if (chunk.numel() != slots_[i].chunk)
    throw Error("parameter " + std::to_string(i) + " was built partitioned into chunks of " +
                std::to_string(chunk.numel()) + " elements, this engine's " + std::to_string(partitions_) +
                " ranks need " + std::to_string(slots_[i].chunk) + ": build it under the engine's group");
  chunk_out.copy_(chunk);
}

void ShardLayout::copy_gathered(size_t i, const at::Tensor& gathered, const at::Tensor& full) const {
  const ParamSlot& s = slots_[i];
  full.view({-1}).copy_(gathered.narrow(0, 0, s.numel));
}

at::Tensor ShardLayout::chunk_view(size_t i, const at::Tensor& shard) const {
  return shard.narrow(0, slots_[i].shard_offset, slots_[i].chunk);
}

}  // namespace ds::zero
