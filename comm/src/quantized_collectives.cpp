#include "dstrain/comm/quantized_collectives.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <string>

#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"

namespace ds::comm {
namespace {

// Blocks of 2048 values take microseconds each; fewer per task and the thread pool's overhead shows.
constexpr int64_t kBlocksPerTask = 16;
// The tag of the exchanges' sends and receives, apart from the caller's own point-to-point traffic.
constexpr int kExchangeTag = 0x5a50;

template <class Body>
void over_blocks(const quant::Layout& layout, const Body& body) {
  at::parallel_for(0, layout.blocks(), kBlocksPerTask, body);
}

void parallel_quantize(const float* x, const quant::Layout& layout, uint8_t* record) {
  over_blocks(layout, [&](int64_t first, int64_t end) { quant::quantize(x, layout, record, first, end); });
}

void parallel_dequantize(const uint8_t* record, const quant::Layout& layout, float* out) {
  over_blocks(layout, [&](int64_t first, int64_t end) { quant::dequantize(record, layout, out, first, end); });
}

void parallel_dequantize_add(const uint8_t* record, const quant::Layout& layout, float* sum) {
  over_blocks(layout, [&](int64_t first, int64_t end) { quant::dequantize_add(record, layout, sum, first, end); });
}

void check_dtype(const char* op, const at::Tensor& t, const char* role, int rank, bool model_dtypes) {
  if (!t.defined()) throw Error(log::concat(op, ": ", role, " is an undefined tensor")).with_rank(rank);
  const at::ScalarType type = t.scalar_type();
  const bool dtype_ok = type == at::kFloat || (model_dtypes && (type == at::kBFloat16 || type == at::kHalf));
  if (!dtype_ok || !t.is_cpu())
    throw Error(log::concat(op, ": ", role, " is ", c10::toString(type), " on ", t.device().str(), "; it must be ",
                            model_dtypes ? "float32, bfloat16 or float16" : "float32", " on the CPU"))
        .with_rank(rank);
}
void check_float32(const char* op, const at::Tensor& t, const char* role, int rank) {
  check_dtype(op, t, role, rank, false);
}
// The dtypes a model's weights may have: quantized from and dequantized back into through fp32.
void check_model_dtype(const char* op, const at::Tensor& t, const char* role, int rank) {
  check_dtype(op, t, role, rank, true);
}

// The partner of participant `me` (of `count`) in round `round` of a round-robin tournament (the
// circle method: participant m = even − 1 stays put, the others rotate): each round pairs everyone
// with at most one other participant, and over rounds(count) rounds every pair meets exactly once.
// −1: no partner this round (with an odd count, one sits out each round).
int rounds(int count) { return count + count % 2 - 1; }
int partner(int me, int count, int round) {
  const int m = rounds(count);
  int other;
  if (me == m) {
    other = round % m;
  } else {
    const int j = ((2 * round - me) % m + m) % m;
    other = j == me ? m : j;
  }
  return other < count ? other : -1;
}

// Exchanges one message with every other participant: participant p is group rank rank_of(p);
// prepare(p, sent) fills the bytes for p, received(p, bytes) consumes what p sent. In each pair the
// lower participant sends first, so blocking sends never wait on each other.
template <class RankOf, class Prepare, class Received>
void exchange(Backend& group, int count, int me, int64_t message_bytes, const RankOf& rank_of, const Prepare& prepare,
              const Received& received) {
  at::Tensor sent = at::empty({message_bytes}, at::kByte);
  at::Tensor incoming = at::empty({message_bytes}, at::kByte);
  for (int round = 0; round < rounds(count); ++round) {
    const int other = partner(me, count, round);
    if (other < 0) continue;
    prepare(other, sent.data_ptr<uint8_t>());
    if (me < other) {
      group.send(sent, rank_of(other), kExchangeTag);
      group.recv(incoming, rank_of(other), kExchangeTag);
    } else {
      group.recv(incoming, rank_of(other), kExchangeTag);
      group.send(sent, rank_of(other), kExchangeTag);
    }
    received(other, incoming.data_ptr<uint8_t>());
  }
}

// The gather of records in flight; wait() dequantizes every rank's record into the output.
class QuantizedGatherWork : public Work {
 public:
  QuantizedGatherWork(Backend& group, at::Tensor output, const quant::Layout& layout, at::Tensor gathered,
                      std::unique_ptr<Work> gather, CommsLogger::Timing timing)
      : group_(group), output_(std::move(output)), layout_(layout), gathered_(std::move(gathered)),
        gather_(std::move(gather)), timing_(timing) {}

  void wait() override {
    if (!gather_) return;
    gather_->wait();
    gather_.reset();
    const int world = group_.world_size();
    const bool in_place = output_.is_contiguous() && output_.scalar_type() == at::kFloat;
    at::Tensor result = in_place ? output_ : at::empty({output_.numel()}, at::kFloat);
    for (int r = 0; r < world; ++r)
      parallel_dequantize(gathered_.data_ptr<uint8_t>() + r * layout_.bytes(), layout_,
                          result.data_ptr<float>() + r * layout_.numel);
    if (!in_place) output_.copy_(result.view(output_.sizes()));
    gathered_ = at::Tensor();
    group_.comms_logger().end(timing_, world);
  }
  bool test() override { return !gather_ || gather_->test(); }

 private:
  Backend& group_;
  at::Tensor output_;
  quant::Layout layout_;
  at::Tensor gathered_;
  std::unique_ptr<Work> gather_;
  CommsLogger::Timing timing_;
};

}  // namespace

std::unique_ptr<Work> quantized_all_gather_async(Backend& group, at::Tensor output, const at::Tensor& input, int bits,
                                                 int64_t block) {
  const char* const op = "quantized_all_gather";
  const int world = group.world_size();
  check_model_dtype(op, input, "input", group.rank());
  check_model_dtype(op, output, "output", group.rank());
  if (output.numel() != world * input.numel())
    throw Error(log::concat(op, ": output has ", output.numel(), " values; ", world, " ranks of ", input.numel(),
                            " need ", world * input.numel()))
        .with_rank(group.rank());
  const quant::Layout layout = quant::layout_for(input.numel(), bits, block);
  const auto timing = group.comms_logger().begin(
      op, world * layout.bytes(), bits == 8 ? "int8 records: all_gather_into" : "int4 records: all_gather_into");

  const at::Tensor shard = input.to(at::kFloat).contiguous();
  at::Tensor sent = at::empty({layout.bytes()}, at::kByte);
  parallel_quantize(shard.data_ptr<float>(), layout, sent.data_ptr<uint8_t>());
  at::Tensor gathered = at::empty({world * layout.bytes()}, at::kByte);
  std::unique_ptr<Work> gather = group.all_gather_into_async(gathered, sent);
  return std::make_unique<QuantizedGatherWork>(group, std::move(output), layout, std::move(gathered),
                                               std::move(gather), timing);
}

void quantized_all_gather(Backend& group, const at::Tensor& output, const at::Tensor& input, int bits, int64_t block) {
  quantized_all_gather_async(group, output, input, bits, block)->wait();
}

void quantized_reduce_scatter(Backend& world, Backend& local_group, const at::Tensor& output, const at::Tensor& input,
                              int bits, ReduceOp op, int64_t block) {
  const char* const name = "quantized_reduce_scatter";
  const int world_size = world.world_size(), rank = world.rank();
  const int per_node = local_group.world_size(), local_rank = local_group.rank();
  check_float32(name, input, "input", rank);
  check_float32(name, output, "output", rank);
  if (op != ReduceOp::Sum && op != ReduceOp::Avg)
    throw Error(log::concat(name, ": reduces by sum or avg, not ", to_string(op))).with_rank(rank);
  if (input.numel() != world_size * output.numel())
    throw Error(log::concat(name, ": input has ", input.numel(), " values; ", world_size, " ranks of ", output.numel(),
                            " need ", world_size * output.numel()))
        .with_rank(rank);
  if (world_size % per_node != 0 || rank % per_node != local_rank)
    throw Error(log::concat(name, ": the local group (rank ", local_rank, " of ", per_node,
                            ") is not this rank's node of the world (rank ", rank, " of ", world_size,
                            "): a node must be the ranks n*L .. n*L+L-1, in order"))
        .with_rank(rank);
  const int nodes = world_size / per_node, node = rank / per_node;
  const int64_t m = output.numel();
  const quant::Layout slice = quant::layout_for(m, bits, block);
  const auto timing = world.comms_logger().begin(name, world_size * slice.bytes(),
                                                 bits == 8 ? "int8 records: send/recv within the node, then across"
                                                           : "int4 records: send/recv within the node, then across");

  const at::Tensor contiguous_input = input.contiguous();
  const float* const x = contiguous_input.data_ptr<float>();
  // partial[k]: the sum over this node of slice k·L + local_rank, bound for world rank k·L + local_rank.
  at::Tensor partial = at::empty({nodes * m}, at::kFloat);
  float* const partial_data = partial.data_ptr<float>();
  for (int k = 0; k < nodes; ++k) std::copy_n(x + (int64_t{k} * per_node + local_rank) * m, m, partial_data + k * m);

  exchange(
      local_group, per_node, local_rank, nodes * slice.bytes(), [](int peer) { return peer; },
      [&](int peer, uint8_t* message) {
        for (int k = 0; k < nodes; ++k)
          parallel_quantize(x + (int64_t{k} * per_node + peer) * m, slice, message + k * slice.bytes());
      },
      [&](int, const uint8_t* message) {
        for (int k = 0; k < nodes; ++k)
          parallel_dequantize_add(message + k * slice.bytes(), slice, partial_data + k * m);
      });

  float* const own = partial_data + int64_t{node} * m;
  exchange(
      world, nodes, node, slice.bytes(), [&](int peer_node) { return peer_node * per_node + local_rank; },
      [&](int peer_node, uint8_t* message) {
        parallel_quantize(partial_data + int64_t{peer_node} * m, slice, message);
      },
      [&](int, const uint8_t* message) { parallel_dequantize_add(message, slice, own); });

  at::Tensor result = partial.narrow(0, int64_t{node} * m, m);
  if (op == ReduceOp::Avg) result.mul_(1.0 / world_size);
  output.copy_(result.view(output.sizes()));
  world.comms_logger().end(timing, world_size);
}

}  // namespace ds::comm
