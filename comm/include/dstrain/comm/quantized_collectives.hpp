// ZeRO++'s quantized collectives, on any Backend: the bytes cross the wire as blockwise int8 or int4
// records (dstrain/comm/quantize.hpp: codes plus one fp32 scale per block) and every sum is taken
// in fp32 after dequantizing.
//
// quantized_all_gather (qwZ): each rank quantizes its shard, one all_gather_into moves the records,
// and every rank dequantizes all of them, its own included, so that all ranks hold the same values.
//
// quantized_reduce_scatter (qgZ): the reduce-scatter as the ZeRO++ paper's hierarchical all-to-all
// (DeepSpeed's all_to_all_quant_reduce). With L ranks per node and N nodes, node n holding world
// ranks n·L .. n·L+L−1 (the local group split by rank / L, ordered by rank):
//   1. within the node: each rank quantizes, for every other rank l of its node, the N slices bound
//      for the world ranks k·L + l, and exchanges them with it; it adds what it receives to its own
//      slices in fp32 (its own contribution never leaves it, so it is never quantized);
//   2. across nodes: each rank quantizes the N partial sums again and sends sum k to world rank
//      k·L + l; it adds the N − 1 sums it receives to its own in fp32.
// A rank sends (L−1)·N + (N−1) = W−1 records of the output's length: the W−1 slices of an fp32
// ring reduce-scatter at 1/4 (int8) or 1/8 (int4) of the bytes, plus one scale per block.
// The exchanges are pairwise send/recv on the group (a round-robin pairing, so any group size works
// without deadlock); the comms logger sees them as send and recv of the records' real bytes, and
// the whole call as quantized_all_gather or quantized_reduce_scatter, its message being the records
// of the whole gathered or reduced buffer (as all_gather_into and reduce_scatter_into count theirs).
// The tensors are CPU float32 (the kernels run on the CPU); the all-gather also takes bf16/fp16
// (quantized from, and dequantized back into, the tensors' own dtype through fp32).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>

#include "dstrain/comm/backend.hpp"
#include "dstrain/comm/quantize.hpp"

namespace ds::comm {

// output: world_size() * input.numel() values; rank r's shard lands at offset r * input.numel(), as
// all_gather_into. bits: 8 or 4.
void quantized_all_gather(Backend& group, const at::Tensor& output, const at::Tensor& input, int bits,
                          int64_t block = quant::kDefaultBlock);
// The same, posted: input is quantized before it returns (and may change after), the records travel
// while the caller goes on, and wait() dequantizes them into output, which must stay alive until then.
std::unique_ptr<Work> quantized_all_gather_async(Backend& group, at::Tensor output, const at::Tensor& input, int bits,
                                                 int64_t block = quant::kDefaultBlock);

// input: float32 of world.world_size() * output.numel() values; world rank r receives the reduction
// (Sum or Avg) of slice r over all ranks, as reduce_scatter_into. local_group: this rank's node (see
// above; a ds::Error if its size does not divide the world's or its ranks are not rank mod L).
void quantized_reduce_scatter(Backend& world, Backend& local_group, const at::Tensor& output, const at::Tensor& input,
                              int bits, ReduceOp op = ReduceOp::Sum, int64_t block = quant::kDefaultBlock);

}  // namespace ds::comm
