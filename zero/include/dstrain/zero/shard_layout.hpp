// ShardLayout: how model parameters are cut into per-rank shards. Every parameter is padded to a
// multiple of the partition count and split into equal chunks ("each rank holds 1/N of every
// parameter", as DeepSpeed's stage 3); rank r's shard is its chunk of each parameter, concatenated
// in parameter order. One partition means no partitioning: the shard is every parameter, whole.
//
// Every ZeRO stage uses this one layout: the fp32 master weights, the optimizer state and the
// reduced gradients are all shard-shaped tensors of shard_numel() elements.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace ds::zero {

struct ParamSlot {
  int64_t numel;         // the parameter's element count
  int64_t chunk;         // ceil(numel / partitions): this parameter's share on every rank
  int64_t shard_offset;  // where that share starts in a shard
};

class ShardLayout {
 public:
  ShardLayout(const std::vector<at::Tensor>& params, int partitions, int rank);

  int partitions() const { return partitions_; }
  int rank() const { return rank_; }
  int64_t shard_numel() const { return shard_numel_; }
  size_t size() const { return slots_.size(); }
  const ParamSlot& slot(size_t i) const { return slots_[i]; }

  // Copies partition `part`'s chunk of `full` (parameter i, any shape and dtype) into `chunk_out`
  // (chunk elements), zero-filling the padding past the parameter's end.
  void copy_chunk(size_t i, const at::Tensor& full, int part, const at::Tensor& chunk_out) const;
  // Copies this rank's chunk of parameter i into chunk_out, from the whole parameter or from one
  // built partitioned by ds::zero::Init (ds::Error if that was for another number of ranks).
  void copy_rank_chunk(size_t i, const at::Tensor& param, const at::Tensor& chunk_out) const;
  // Copies `gathered` ([partitions * chunk], rank-major) into `full` (parameter i), dropping padding.
  void copy_gathered(size_t i, const at::Tensor& gathered, const at::Tensor& full) const;
  // This rank's chunk of parameter i inside a shard-shaped tensor.
  at::Tensor chunk_view(size_t i, const at::Tensor& shard) const;

 private:
  int partitions_;
  int rank_;
  int64_t shard_numel_ = 0;
  std::vector<ParamSlot> slots_;
};

}  // namespace ds::zero
