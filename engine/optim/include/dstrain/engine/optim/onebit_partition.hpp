// OneBitPartition: ZeRO stages 1-2 for the 1-bit optimizers.
//
// Their compressed allreduce runs on stage 0's flat vector (every parameter whole, concatenated in
// parameter order, zero-padded as comm::onebit::layout_for pads it) at every stage, so that every
// stage compresses the same numbers in the same chunks and follows stage 0's trajectory. What is
// elementwise after that exchange (the frozen variance, the master weights, the update) lives on
// this rank's ZeRO shard. This maps between the two orders, and keeps the exchange's result between
// steps as the allreduce leaves it: every value is ±(its server chunk's scale), so one sign bit per
// value and one scale per chunk hold it exactly (padded / 8 bytes instead of 4 · padded).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "dstrain/comm/backend.hpp"
#include "dstrain/comm/onebit_kernels.hpp"
#include "dstrain/zero/shard_layout.hpp"

namespace ds {

class OneBitPartition {
 public:
  OneBitPartition(const zero::ShardLayout& layout, int world);

  // The flat vector's sizes: numel = every parameter's elements, padded = the allreduce's length.
  const comm::onebit::Layout& flat() const { return flat_; }

  // A run of this rank's shard and where the same values lie in the flat vector.
  struct Piece {
    int64_t shard;  // offset in the shard
    int64_t flat;   // offset in the flat vector
    int64_t count;  // values in both (a parameter's last chunk is shorter by its padding)
  };
  // This rank's pieces, in shard order (a rank whose chunk of a parameter is all padding has none).
  const std::vector<Piece>& pieces() const { return pieces_; }

  size_t size() const { return slots_.size(); }  // parameters
  // Parameter i's whole range in the flat vector: [offset, offset + numel).
  int64_t flat_offset(size_t i) const { return slots_[i].flat_offset; }
  int64_t numel(size_t i) const { return slots_[i].layout.numel; }
  // Which parameter each of pieces() belongs to.
  size_t param_of_piece(size_t piece) const { return piece_params_[piece]; }

  // This rank's values of `flat` (padded length) into `shard`, zeros where the shard pads.
  void to_shard(const float* flat, const at::Tensor& shard) const;
  // Every rank's `shard`, all-gathered a window at a time (16 MB per rank, so that
  // the whole vector is never a second time in memory): take(flat_offset, values, count) receives
  // each run of the flat vector once, in no particular order; the padding is never visited.
  using GatheredFn = std::function<void(int64_t flat_offset, const float* values, int64_t count)>;
  void gather(const at::Tensor& shard, comm::Backend& group, const GatheredFn& take) const;
  // The same, into a whole flat vector (padded length, zero padding).
  at::Tensor gather(const at::Tensor& shard, comm::Backend& group) const;

  // Keeps a compressed allreduce's result (`averaged`, padded length) as signs and chunk scales.
  void keep(const float* averaged);
  bool kept() const { return signs_.defined(); }
  // Value i of the kept result, bit for bit what the allreduce wrote.
  float kept_value(int64_t i) const {
    const bool positive = (signs_.data_ptr<uint8_t>()[i / 8] >> (7 - i % 8)) & 1;
    const float scale = scales_[i / flat_.chunk];
    return positive ? scale : -scale;
  }
  // Bytes held by the kept result.
  int64_t kept_bytes() const;

 private:
  struct Slot {
    zero::ParamSlot layout;
    int64_t flat_offset;  // where the parameter starts in the flat vector
  };
  static Piece piece_of(const Slot& slot, int rank);

  comm::onebit::Layout flat_;
  int64_t shard_numel_;
  std::vector<Slot> slots_;
  std::vector<Piece> pieces_;
  std::vector<size_t> piece_params_;
  at::Tensor signs_;            // uint8, padded / 8
  std::vector<float> scales_;   // one per server chunk
};

// Whether `local` holds on every rank of `group` (one small allreduce).
bool on_every_rank(bool local, comm::Backend& group);

}  // namespace ds
