// ZeRO++'s quantized collectives against the plain fp32 ones: quantized_all_gather (qwZ) and
// quantized_reduce_scatter (qgZ, hierarchical over simulated nodes split from the world) agree with
// all_gather_into and reduce_scatter_into within the closed-form quantization bound computed here in
// double from every rank's seeded input, and the bytes the comms logger sees are the closed form of
// the records (int8: a quarter of fp32's plus the scales; int4: an eighth).
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <vector>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/comm/quantized_collectives.hpp"
#include "dstrain/runtime/error.hpp"
#include "seeded.hpp"

using ds::comm::Backend;
using ds::comm::ReduceOp;

namespace {

constexpr int64_t kBlock = 2048;

int max_code(int bits) { return bits == 8 ? 127 : 7; }

// The bytes of a record of n values, by hand: one byte per value (int8) or per two (int4), padded
// to 4, plus 4 per block.
int64_t record_bytes(int64_t n, int bits) {
  const int64_t codes = bits == 8 ? n : (n + 1) / 2;
  return (codes + 3) / 4 * 4 + 4 * ((n + kBlock - 1) / kBlock);
}

// For each value of v, the max |v| over its block of kBlock (blocks start at 0).
std::vector<double> block_max_abs(const std::vector<double>& v) {
  std::vector<double> out(v.size());
  for (size_t b = 0; b < v.size(); b += kBlock) {
    const size_t end = std::min(v.size(), b + kBlock);
    double m = 0;
    for (size_t i = b; i < end; ++i) m = std::max(m, std::fabs(v[i]));
    std::fill(out.begin() + b, out.begin() + end, m);
  }
  return out;
}

std::vector<double> slice_of(const at::Tensor& input, int64_t slice, int64_t m) {
  const at::Tensor s = input.narrow(0, slice * m, m).to(at::kDouble).contiguous();
  return std::vector<double>(s.data_ptr<double>(), s.data_ptr<double>() + m);
}

int64_t sent_bytes(const ds::comm::CommsLogger& logger) {
  int64_t total = 0;
  for (const auto& row : logger.summary())
    if (row.op == "send") total += row.count * row.bytes;
  return total;
}

std::map<std::string, ds::comm::CommSummaryRow> rows_by_op(const ds::comm::CommsLogger& logger) {
  std::map<std::string, ds::comm::CommSummaryRow> rows;
  for (const auto& row : logger.summary()) rows[row.op] = row;
  return rows;
}

ds::comm::CommsLoggerSettings logging_on() {
  ds::comm::CommsLoggerSettings settings;
  settings.enabled = true;
  return settings;
}

}  // namespace

TEST_CASE("quantized_all_gather: every shard within scale/2 of its block, the records' bytes on the wire", "[mpi]") {
  Backend& world = ds::comm::world();
  const int n = world.world_size(), rank = world.rank();
  for (int bits : {8, 4}) {
    for (int64_t m : {int64_t{3}, int64_t{5000}, int64_t{3 * kBlock}}) {
      CAPTURE(bits, m);
      std::vector<at::Tensor> inputs;
      // Ranks at different magnitudes: one shared scale would fail the per-block bound.
      for (int r = 0; r < n; ++r) inputs.push_back(ds::test::seeded_tensor(ds::test::seed_of(41, r), m) * (r + 1) * 10);
      at::Tensor plain = at::empty({n * m});
      world.all_gather_into(plain, inputs[rank]);

      world.comms_logger().configure(logging_on());
      at::Tensor quantized = at::full({n * m}, 1e30f);
      ds::comm::quantized_all_gather(world, quantized, inputs[rank], bits);
      const auto rows = rows_by_op(world.comms_logger());
      world.comms_logger().configure({});

      for (int r = 0; r < n; ++r) {
        const std::vector<double> exact = slice_of(plain, r, m), got = slice_of(quantized, r, m);
        const std::vector<double> max_abs = block_max_abs(exact);
        for (int64_t i = 0; i < m; ++i)
          REQUIRE(std::fabs(got[i] - exact[i]) <= max_abs[i] / max_code(bits) / 2 * (1 + 1e-5));
      }
      // Every rank holds the same gathered values, its own shard included.
      at::Tensor spread = quantized.clone();
      world.all_reduce(spread, ReduceOp::Max);
      CHECK(at::equal(spread, quantized));

      const int64_t message = n * record_bytes(m, bits);
      CHECK(rows.at("all_gather_into").bytes == message);
      CHECK(rows.at("all_gather_into").count == 1);
      CHECK(rows.at("quantized_all_gather").bytes == message);
      CHECK(rows.size() == 2);
      if (m == 3 * kBlock) {  // whole blocks: the fp32 message over 4 (int8) or 8 (int4), plus the scales
        CHECK(message == n * m * 4 / (bits == 8 ? 4 : 8) + n * 3 * 4);
      }
    }
  }
}

TEST_CASE("quantized_all_gather names a wrong output size and bit width on every rank", "[mpi]") {
  Backend& world = ds::comm::world();
  const int n = world.world_size();
  CHECK_THROWS_WITH(ds::comm::quantized_all_gather(world, at::empty({n * 10 + 1}), at::ones({10}), 8),
                    Catch::Contains("output has " + std::to_string(n * 10 + 1) + " values"));
  CHECK_THROWS_WITH(ds::comm::quantized_all_gather(world, at::empty({n * 10}), at::ones({10}), 2),
                    Catch::Contains("4 or 8 bits, not 2"));
  CHECK_THROWS_WITH(ds::comm::quantized_all_gather(world, at::empty({n * 10}, at::kDouble), at::ones({10}), 8),
                    Catch::Contains("float32"));
}

// Nodes of `per_node` consecutive world ranks: the reduce-scatter against reduce_scatter_into
// within the bound of its two quantizations, and the bytes sent against the closed form.
void check_reduce_scatter(int per_node) {
  Backend& world = ds::comm::world();
  const int n = world.world_size(), rank = world.rank();
  const int nodes = n / per_node, local = rank % per_node;
  std::shared_ptr<Backend> node_group = world.split(rank / per_node, rank);
  REQUIRE(node_group->world_size() == per_node);
  for (int bits : {8, 4}) {
    for (int64_t m : {int64_t{1}, int64_t{2 * kBlock + 777}}) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
        CAPTURE(per_node, bits, m, ds::comm::to_string(op));
        std::vector<at::Tensor> inputs;
        for (int r = 0; r < n; ++r)
          inputs.push_back(ds::test::seeded_tensor(ds::test::seed_of(43, r), n * m) * (r + 1));
        at::Tensor plain = at::empty({m});
        world.reduce_scatter_into(plain, inputs[rank], ReduceOp::Sum);

        world.comms_logger().configure(logging_on());
        at::Tensor quantized = at::full({m}, 1e30f);
        ds::comm::quantized_reduce_scatter(world, *node_group, quantized, inputs[rank], bits, op);
        const int64_t sent = sent_bytes(world.comms_logger());
        const auto rows = rows_by_op(world.comms_logger());
        world.comms_logger().configure({});

        // The bound, in double: phase 1 quantizes every source's slice `rank` except those of this
        // rank's local index (each within its block's scale/2); phase 2 quantizes the other nodes'
        // partial sums, whose block max is at most the exact partial's plus phase 1's error.
        const double q = max_code(bits);
        std::vector<double> bound(m, 0.0), exact(m, 0.0);
        for (int node = 0; node < nodes; ++node) {
          std::vector<double> partial(m, 0.0), partial_error(m, 0.0), magnitude(m, 0.0);
          for (int l = 0; l < per_node; ++l) {
            const std::vector<double> x = slice_of(inputs[node * per_node + l], rank, m);
            const std::vector<double> max_abs = block_max_abs(x);
            for (int64_t i = 0; i < m; ++i) {
              partial[i] += x[i];
              magnitude[i] += std::fabs(x[i]);
              if (l != local) partial_error[i] += max_abs[i] / q / 2;
            }
          }
          std::vector<double> worst_partial(m);
          for (int64_t i = 0; i < m; ++i) worst_partial[i] = std::fabs(partial[i]) + partial_error[i];
          const std::vector<double> partial_max = block_max_abs(worst_partial);
          for (int64_t i = 0; i < m; ++i) {
            exact[i] += partial[i];
            // fp32 sums: a relative 1e-6 of the magnitudes added.
            bound[i] += partial_error[i] + 1e-6 * magnitude[i] * n;
            if (node != rank / per_node) bound[i] += partial_max[i] / q / 2;
          }
        }
        const double divisor = op == ReduceOp::Avg ? n : 1;
        const std::vector<double> got = slice_of(quantized, 0, m), reference = slice_of(plain, 0, m);
        for (int64_t i = 0; i < m; ++i) {
          REQUIRE(std::fabs(got[i] * divisor - exact[i]) <= bound[i]);
          REQUIRE(std::fabs(reference[i] - exact[i]) <= 1e-5 * (1 + std::fabs(exact[i])));
        }

        // (L-1)·N records of N slices' worth within the node, then N-1 across: W-1 slices in all.
        CHECK(sent == (int64_t{per_node - 1} * nodes + (nodes - 1)) * record_bytes(m, bits));
        CHECK(sent == (n - 1) * record_bytes(m, bits));
        CHECK(rows.at("quantized_reduce_scatter").bytes == n * record_bytes(m, bits));
        CHECK(rows.at("quantized_reduce_scatter").count == 1);
        if (m > 1) {  // against the fp32 ring's (W-1)·m·4 bytes: a quarter or an eighth, plus scales
          const double ratio = double(sent) / ((n - 1) * m * 4.0);
          CHECK(ratio == Approx(bits == 8 ? 0.25 : 0.125).margin(0.002));
        }
      }
    }
  }
}

TEST_CASE("quantized_reduce_scatter over nodes of 2 (4 ranks: 2 nodes; 2 ranks: 1 node)", "[mpi]") {
  if (ds::comm::get_world_size() % 2 != 0) return;
  check_reduce_scatter(2);
}

TEST_CASE("quantized_reduce_scatter with every rank a node of its own, and with one node of all (odd sizes too)",
          "[mpi]") {
  check_reduce_scatter(1);
  check_reduce_scatter(ds::comm::get_world_size());
}

TEST_CASE("quantized_reduce_scatter names a group that is not this rank's node, and a wrong size", "[mpi]") {
  Backend& world = ds::comm::world();
  const int n = world.world_size();
  if (n < 2) return;
  // The world in reverse order as a "node": a rank whose place in it is not its world rank is
  // refused (every rank when n is even; a rank left in place would go on to the exchange).
  std::shared_ptr<Backend> reversed = world.split(0, n - 1 - world.rank());
  if (world.rank() != reversed->rank())
    CHECK_THROWS_WITH(ds::comm::quantized_reduce_scatter(world, *reversed, at::empty({4}), at::ones({n * 4}), 8),
                      Catch::Contains("is not this rank's node"));
  CHECK_THROWS_WITH(ds::comm::quantized_reduce_scatter(world, world, at::empty({4}), at::ones({n * 4 + 1}), 8),
                    Catch::Contains("input has " + std::to_string(n * 4 + 1) + " values"));
  CHECK_THROWS_WITH(
      ds::comm::quantized_reduce_scatter(world, world, at::empty({4}), at::ones({n * 4}), 8, ReduceOp::Max),
      Catch::Contains("sum or avg"));
}
