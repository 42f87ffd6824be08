// MpiBackend's collectives against reductions computed locally from every rank's seeded input.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/comm/mpi_backend.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/rank_env.hpp"
#include "seeded.hpp"

using ds::comm::Backend;
using ds::comm::ReduceOp;
using ds::test::seed_of;
using ds::test::seeded_tensor;

namespace {

// The reduction over all ranks of seeded_tensor(seed_of(test_id, r), n, dtype), in double.
at::Tensor expected_reduction(int test_id, int64_t n, at::ScalarType dtype, ReduceOp op, int world) {
  at::Tensor acc = seeded_tensor(seed_of(test_id, 0), n, dtype).to(at::kDouble);
  for (int r = 1; r < world; ++r) {
    const at::Tensor next = seeded_tensor(seed_of(test_id, r), n, dtype).to(at::kDouble);
    if (op == ReduceOp::Max) acc = at::maximum(acc, next);
    else if (op == ReduceOp::Min) acc = at::minimum(acc, next);
    else acc = acc + next;
  }
  return op == ReduceOp::Avg ? acc / world : acc;
}

bool equal_exactly(const at::Tensor& actual, const at::Tensor& expected) {
  return at::equal(actual.to(at::kDouble), expected.to(at::kDouble));
}

bool close(const at::Tensor& actual, const at::Tensor& expected, double rtol, double atol) {
  return at::allclose(actual.to(at::kDouble), expected.to(at::kDouble), rtol, atol);
}

const std::vector<ReduceOp> kAllOps = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min};
// A scalar, a small vector, and one whose length no world size divides.
const std::vector<int64_t> kSizes = {1, 1000, (1 << 16) + 3};

}  // namespace

TEST_CASE("the world's rank and size are mpirun's", "[mpi]") {
  const ds::RankEnv env = ds::rank_env_from_environment();
  CHECK(ds::comm::get_rank() == env.rank);
  CHECK(ds::comm::get_world_size() == env.world_size);
  CHECK(ds::comm::get_world_size() > 1);
}

TEST_CASE("all_reduce sums, averages, maxes and mins float32 and float64", "[mpi]") {
  Backend& world = ds::comm::world();
  int test_id = 0;
  for (auto dtype : {at::kFloat, at::kDouble})
    for (ReduceOp op : kAllOps)
      for (int64_t n : kSizes) {
        CAPTURE(c10::toString(dtype), ds::comm::to_string(op), n);
        ++test_id;
        at::Tensor t = seeded_tensor(seed_of(test_id, world.rank()), n, dtype);
        world.all_reduce(t, op);
        CHECK(t.scalar_type() == dtype);
        CHECK(close(t, expected_reduction(test_id, n, dtype, op, world.world_size()), 1e-5, 1e-6));
      }
}

TEST_CASE("all_reduce reduces bfloat16 and float16 as numbers, not bytes", "[mpi]") {
  Backend& world = ds::comm::world();
  for (auto dtype : {at::kBFloat16, at::kHalf}) {
    CAPTURE(c10::toString(dtype));
    // Small integers: every partial sum is exact in 16 bits, so the result must be exact.
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min}) {
      CAPTURE(ds::comm::to_string(op));
      at::Tensor t = seeded_tensor(seed_of(20, world.rank()), 1000, at::kLong).to(dtype);
      world.all_reduce(t, op);
      CHECK(equal_exactly(t, expected_reduction(20, 1000, at::kLong, op, world.world_size())));
    }
    // General values: each combination rounds to 16 bits, so allow a few units in the last place.
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
      CAPTURE(ds::comm::to_string(op));
      at::Tensor t = seeded_tensor(seed_of(21, world.rank()), 1000, at::kFloat).to(dtype);
      world.all_reduce(t, op);
      at::Tensor expected = seeded_tensor(seed_of(21, 0), 1000, at::kFloat).to(dtype).to(at::kDouble);
      for (int r = 1; r < world.world_size(); ++r)
        expected += seeded_tensor(seed_of(21, r), 1000, at::kFloat).to(dtype).to(at::kDouble);
      if (op == ReduceOp::Avg) expected /= world.world_size();
      CHECK(close(t, expected, 3e-2, 3e-2));
    }
  }
}

TEST_CASE("all_reduce on int64, int32 and uint8", "[mpi]") {
  Backend& world = ds::comm::world();
  for (auto dtype : {at::kLong, at::kInt, at::kByte})
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min}) {
      CAPTURE(c10::toString(dtype), ds::comm::to_string(op));
      at::Tensor t = seeded_tensor(seed_of(30, world.rank()), 777, dtype);
      world.all_reduce(t, op);
      CHECK(t.scalar_type() == dtype);
      CHECK(equal_exactly(t, expected_reduction(30, 777, dtype, op, world.world_size())));
    }
  at::Tensor integers = at::ones({4}, at::kLong);
  CHECK_THROWS_WITH(world.all_reduce(integers, ReduceOp::Avg), Catch::Contains("floating-point"));
}

TEST_CASE("all_reduce of a non-contiguous view writes through to its base", "[mpi]") {
  Backend& world = ds::comm::world();
  const at::Tensor base = seeded_tensor(seed_of(40, world.rank()), 200).view({20, 10});
  const at::Tensor original = base.clone();
  const at::Tensor view = base.t().narrow(0, 2, 5);  // columns 2..6, transposed: not contiguous
  REQUIRE_FALSE(view.is_contiguous());
  world.all_reduce(view);

  const at::Tensor sum = expected_reduction(40, 200, at::kFloat, ReduceOp::Sum, world.world_size()).view({20, 10});
  CHECK(close(base.narrow(1, 2, 5), sum.narrow(1, 2, 5), 1e-5, 1e-6));
  CHECK(at::equal(base.narrow(1, 0, 2), original.narrow(1, 0, 2)));
  CHECK(at::equal(base.narrow(1, 7, 3), original.narrow(1, 7, 3)));
}

// Each disagreement leaves its group unusable, so each runs on a fresh copy of the world.
TEST_CASE("mismatched sizes or dtypes across ranks throw on every rank, then the group refuses calls", "[mpi]") {
  Backend& world = ds::comm::world();
  const int rank = world.rank();
  {
    auto group = world.split(0, rank);
    at::Tensor different_size = at::ones({10 + rank});
    CHECK_THROWS_WITH(group->all_reduce(different_size), Catch::Contains("different sizes"));
    at::Tensor fine = at::ones({10});
    CHECK_THROWS_WITH(group->all_reduce(fine), Catch::Contains("unusable") && Catch::Contains("different sizes"));
  }
  {
    auto group = world.split(0, rank);
    at::Tensor different_dtype = at::ones({10}, rank == 0 ? at::kFloat : at::kDouble);
    CHECK_THROWS_WITH(group->all_reduce_async(different_dtype)->wait(), Catch::Contains("different sizes or dtypes"));
  }
  {
    auto group = world.split(0, rank);
    at::Tensor bad_on_rank_0 = rank == 0 ? at::ones({10}, at::kBool) : at::ones({10});
    if (rank == 0)
      CHECK_THROWS_WITH(group->broadcast(bad_on_rank_0, 0), Catch::Contains("dtype Bool"));
    else
      CHECK_THROWS_WITH(group->broadcast(bad_on_rank_0, 0), Catch::Contains("another rank"));
    CHECK_THROWS_WITH(group->barrier(), Catch::Contains("unusable"));
  }
  {
    auto group = world.split(0, rank);
    at::Tensor input = at::ones({world.world_size() * (rank + 1)});
    CHECK_THROWS_WITH(group->reduce_scatter_into(at::empty({rank + 1}), input),
                      Catch::Contains("different sizes"));
  }
  {
    auto group = world.split(0, rank);
    at::Tensor same_size = at::ones({10});
    CHECK_THROWS_WITH(rank == 0 ? group->broadcast(same_size, 0) : group->all_reduce(same_size),
                      Catch::Contains("different collectives"));
    CHECK(at::equal(same_size, at::ones({10})));  // no data moved
  }
}

TEST_CASE("arguments wrong on every rank alike throw, and the group stays usable", "[mpi]") {
  Backend& world = ds::comm::world();
  at::Tensor bad_gather_output = at::empty({world.world_size() * 3 + 1});
  CHECK_THROWS_WITH(world.all_gather_into(bad_gather_output, at::ones({3})), Catch::Contains("not world size"));
  CHECK_THROWS_WITH(world.all_reduce(at::ones({3}, at::kInt), ReduceOp::Avg), Catch::Contains("floating-point"));

  at::Tensor fine = at::ones({10});
  world.all_reduce(fine);
  CHECK(at::equal(fine, at::full({10}, float(world.world_size()))));
}

TEST_CASE("several all_reduce_async in flight complete in any order of waits", "[mpi]") {
  Backend& world = ds::comm::world();
  std::vector<at::Tensor> tensors;
  std::vector<std::unique_ptr<ds::comm::Work>> works;
  const std::vector<ReduceOp> ops = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max};
  for (int k = 0; k < 3; ++k) {
    tensors.push_back(seeded_tensor(seed_of(50 + k, world.rank()), 5000));
    works.push_back(world.all_reduce_async(tensors.back(), ops[k]));
  }
  for (int k = 2; k >= 0; --k) works[k]->wait();
  for (int k = 0; k < 3; ++k)
    CHECK(close(tensors[k], expected_reduction(50 + k, 5000, at::kFloat, ops[k], world.world_size()), 1e-5, 1e-6));
}

TEST_CASE("test() alone carries asynchronous collectives to completion", "[mpi]") {
  // Open MPI advances a nonblocking collective only inside MPI calls: the reducer polls its buckets
  // with test() while backward computes, and counts on test() moving them along.
  Backend& world = ds::comm::world();
  const int w = world.world_size();
  const int64_t n = (int64_t{5} << 19) + 7;  // 10 MB: more than one of the all-reduce's 8 MiB pieces
  at::Tensor reduced = seeded_tensor(seed_of(55, world.rank()), n);
  at::Tensor gathered = at::empty({w * 1001});
  at::Tensor scattered = at::empty({1001});
  std::vector<std::unique_ptr<ds::comm::Work>> works;
  works.push_back(world.all_reduce_async(reduced, ReduceOp::Avg));
  works.push_back(world.all_gather_into_async(gathered, seeded_tensor(seed_of(56, world.rank()), 1001)));
  works.push_back(world.reduce_scatter_into_async(scattered, seeded_tensor(seed_of(57, world.rank()), w * 1001)));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (bool all_done = false; !all_done;) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    all_done = true;
    for (auto& work : works) all_done = work->test() && all_done;
  }
  for (auto& work : works) {
    work->wait();
    CHECK(work->test());
  }
  CHECK(close(reduced, expected_reduction(55, n, at::kFloat, ReduceOp::Avg, w), 1e-5, 1e-6));
  for (int r = 0; r < w; ++r) CHECK(at::equal(gathered.narrow(0, r * 1001, 1001), seeded_tensor(seed_of(56, r), 1001)));
  const at::Tensor scatter_sum = expected_reduction(57, w * 1001, at::kFloat, ReduceOp::Sum, w);
  CHECK(close(scattered, scatter_sum.narrow(0, world.rank() * 1001, 1001), 1e-5, 1e-6));
}

TEST_CASE("float all-reduces, reduce-scatters and all-gathers of 64 KiB and more take the TCP ring where "
          "DSTRAIN_ALLREDUCE=ring, the rest Open MPI's",
          "[mpi]") {
  // Registered with and without the variable (tests/comm/CMakeLists.txt); on one machine "auto"
  // keeps Open MPI's, since the ranks share the node.
  const char* choice = std::getenv("DSTRAIN_ALLREDUCE");
  const bool ring = choice && std::string(choice) == "ring";
  Backend& world = ds::comm::world();
  ds::comm::CommsLoggerSettings on;
  on.enabled = true;
  world.comms_logger().configure(on);
  const int64_t n = (int64_t{1} << 20) + 5;
  at::Tensor summed = seeded_tensor(seed_of(60, world.rank()), n);
  at::Tensor averaged = seeded_tensor(seed_of(61, world.rank()), 8193, at::kDouble);  // 64 KiB + 8: the ring's least
  at::Tensor small = seeded_tensor(seed_of(63, world.rank()), 8191, at::kDouble);     // 64 KiB - 8: Open MPI's
  at::Tensor maxed = seeded_tensor(seed_of(62, world.rank()), 998);
  at::Tensor counts = at::full({997}, int64_t{world.rank()}, at::kLong);
  world.all_reduce(summed);
  world.all_reduce(averaged, ReduceOp::Avg);
  world.all_reduce(small);
  world.all_reduce(maxed, ReduceOp::Max);
  world.all_reduce(counts);
  // The halves: reduce-scatter and all-gather of 64 KiB and more, each with a 2-D side.
  const int w = world.world_size(), rank = world.rank();
  const int64_t part = 16385;
  const at::Tensor scatter_input = seeded_tensor(seed_of(64, rank), w * part);
  const at::Tensor scatter_copy = scatter_input.clone();
  at::Tensor scattered = at::empty({part});
  world.reduce_scatter_into(scattered, scatter_input.view({w, part}), ReduceOp::Avg);
  at::Tensor gathered = at::empty({w, part});
  world.all_gather_into(gathered, seeded_tensor(seed_of(65, rank), part));
  at::Tensor small_gathered = at::empty({w * 5});
  world.all_gather_into(small_gathered, seeded_tensor(seed_of(66, rank), 5));
  const auto rows = world.comms_logger().summary();
  world.comms_logger().configure({});
  CHECK(close(summed, expected_reduction(60, n, at::kFloat, ReduceOp::Sum, w), 1e-5, 1e-6));
  CHECK(close(scattered, expected_reduction(64, w * part, at::kFloat, ReduceOp::Avg, w).narrow(0, rank * part, part),
              1e-5, 1e-6));
  CHECK(at::equal(scatter_input, scatter_copy));  // the caller's input is left as it was
  for (int r = 0; r < w; ++r) {
    CHECK(at::equal(gathered[r], seeded_tensor(seed_of(65, r), part)));
    CHECK(at::equal(small_gathered.narrow(0, r * 5, 5), seeded_tensor(seed_of(66, r), 5)));
  }
  CHECK(close(averaged, expected_reduction(61, 8193, at::kDouble, ReduceOp::Avg, w), 1e-12, 1e-12));
  CHECK(close(small, expected_reduction(63, 8191, at::kDouble, ReduceOp::Sum, w), 1e-12, 1e-12));
  CHECK(equal_exactly(maxed, expected_reduction(62, 998, at::kFloat, ReduceOp::Max, w)));
  CHECK(at::equal(counts, at::full({997}, int64_t{w * (w - 1) / 2}, at::kLong)));
  auto algorithm_of = [&](int64_t bytes, const std::string& op = "all_reduce") {
    for (const auto& row : rows)
      if (row.op == op && row.bytes == bytes) return row.algorithm;
    return std::string("not recorded");
  };
  const std::string mpi = "MPI_Iallreduce (8 MiB pieces)";
  CHECK(algorithm_of(n * 4) == (ring ? "TCP ring" : mpi));
  CHECK(algorithm_of(8193 * 8) == (ring ? "TCP ring" : mpi));
  CHECK(algorithm_of(8191 * 8) == mpi);
  CHECK(algorithm_of(998 * 4) == mpi);
  CHECK(algorithm_of(997 * 8) == mpi);
  CHECK(algorithm_of(w * part * 4, "reduce_scatter_into") ==
        (ring ? "TCP ring" : "MPI_Ireduce to each rank (8 MiB pieces)"));
  CHECK(algorithm_of(w * part * 4, "all_gather_into") == (ring ? "TCP ring" : "MPI_Iallgather"));
  CHECK(algorithm_of(w * 5 * 4, "all_gather_into") == "MPI_Iallgather");
}

TEST_CASE("all_gather with equal and with unequal sizes per rank", "[mpi]") {
  Backend& world = ds::comm::world();
  const int w = world.world_size();
  for (bool unequal : {false, true}) {
    CAPTURE(unequal);
    auto size_of = [&](int r) { return unequal ? int64_t{r * 3 + 1} : int64_t{17}; };
    std::vector<at::Tensor> outputs;
    for (int r = 0; r < w; ++r) outputs.push_back(at::empty({size_of(r)}, at::kBFloat16));
    world.all_gather(outputs, seeded_tensor(seed_of(60, world.rank()), size_of(world.rank())).to(at::kBFloat16));
    for (int r = 0; r < w; ++r)
      CHECK(at::equal(outputs[r], seeded_tensor(seed_of(60, r), size_of(r)).to(at::kBFloat16)));
  }
}

TEST_CASE("all_gather_into and all_gather_into_async place rank r's input at slice r", "[mpi]") {
  Backend& world = ds::comm::world();
  const int w = world.world_size();
  const int64_t n = 1001;
  at::Tensor expected = at::empty({w * n});
  for (int r = 0; r < w; ++r) expected.narrow(0, r * n, n).copy_(seeded_tensor(seed_of(70, r), n));

  at::Tensor output = at::empty({w, n});
  world.all_gather_into(output, seeded_tensor(seed_of(70, world.rank()), n).view({1, n}));
  CHECK(at::equal(output.view({-1}), expected));

  at::Tensor async_output = at::zeros({w * n});
  auto work = world.all_gather_into_async(async_output, seeded_tensor(seed_of(70, world.rank()), n));
  work->wait();
  CHECK(at::equal(async_output, expected));
}

TEST_CASE("all_gather_into in place: the input is this rank's slice of the output", "[mpi]") {
  // As torch's all_gather_into_tensor allows, and zero::SliceGather does on each parameter's
  // storage; small (MPI_IN_PLACE) and 64 KiB and more (the TCP ring where it is chosen).
  Backend& world = ds::comm::world();
  const int w = world.world_size(), rank = world.rank();
  for (int64_t n : {int64_t{37}, int64_t{40000}}) {
    CAPTURE(n);
    at::Tensor expected = at::empty({w * n});
    for (int r = 0; r < w; ++r) expected.narrow(0, r * n, n).copy_(seeded_tensor(seed_of(71, r), n));
    at::Tensor output = at::full({w * n}, -1.0f);
    output.narrow(0, rank * n, n).copy_(seeded_tensor(seed_of(71, rank), n));
    world.all_gather_into_async(output, output.narrow(0, rank * n, n))->wait();
    CHECK(at::equal(output, expected));
  }
}

TEST_CASE("reduce_scatter with unequal parts per destination rank", "[mpi]") {
  Backend& world = ds::comm::world();
  const int w = world.world_size(), rank = world.rank();
  auto part_size = [](int destination) { return int64_t{destination * 5 + 2}; };
  // Rank r's contribution to destination d: slice d of its seeded input.
  int64_t total = 0;
  for (int d = 0; d < w; ++d) total += part_size(d);
  auto parts_of = [&](int r) { return seeded_tensor(seed_of(80, r), total).split_with_sizes([&] {
      std::vector<int64_t> sizes;
      for (int d = 0; d < w; ++d) sizes.push_back(part_size(d));
      return sizes;
    }());
  };
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
    CAPTURE(ds::comm::to_string(op));
    at::Tensor output = at::empty({part_size(rank)});
    world.reduce_scatter(output, parts_of(rank), op);
    at::Tensor expected = parts_of(0)[rank].to(at::kDouble);
    for (int r = 1; r < w; ++r) {
      const at::Tensor next = parts_of(r)[rank].to(at::kDouble);
      expected = op == ReduceOp::Max ? at::maximum(expected, next) : expected + next;
    }
    CHECK(close(output, expected, 1e-5, 1e-6));
  }
}

TEST_CASE("reduce_scatter_into and its async form reduce slice r onto rank r", "[mpi]") {
  Backend& world = ds::comm::world();
  const int w = world.world_size(), rank = world.rank();
  const int64_t n = 999;
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
    CAPTURE(ds::comm::to_string(op));
    const at::Tensor expected = expected_reduction(90, w * n, at::kFloat, op, w).narrow(0, rank * n, n);
    at::Tensor output = at::empty({n});
    world.reduce_scatter_into(output, seeded_tensor(seed_of(90, rank), w * n), op);
    CHECK(close(output, expected, 1e-5, 1e-6));

    at::Tensor async_output = at::empty({n});
    auto work = world.reduce_scatter_into_async(async_output, seeded_tensor(seed_of(90, rank), w * n), op);
    work->wait();
    CHECK(close(async_output, expected, 1e-5, 1e-6));
  }
}

// MpiBackend posts reductions in pieces of 8 MiB: sizes over one piece, with a partial last piece.
TEST_CASE("reductions larger than one piece reduce every element", "[mpi]") {
  Backend& world = ds::comm::world();
  const int w = world.world_size(), rank = world.rank();
  for (auto [dtype, n] : {std::pair{at::kFloat, int64_t{(5 << 20) / 2 + 7}}, std::pair{at::kBFloat16, int64_t{(5 << 20) + 3}}}) {
    CAPTURE(c10::toString(dtype), n);
    at::Tensor t = seeded_tensor(seed_of(95, rank), n, dtype);
    world.all_reduce_async(t, ReduceOp::Sum)->wait();
    CHECK(close(t, expected_reduction(95, n, dtype, ReduceOp::Sum, w), dtype == at::kFloat ? 1e-5 : 2e-2, 1e-2));
  }
  const int64_t part = (9 << 20) / 4 + 5;  // 2 pieces per rank's part
  const at::Tensor expected = expected_reduction(96, w * part, at::kFloat, ReduceOp::Avg, w).narrow(0, rank * part, part);
  at::Tensor output = at::empty({part});
  world.reduce_scatter_into_async(output, seeded_tensor(seed_of(96, rank), w * part), ReduceOp::Avg)->wait();
  CHECK(close(output, expected, 1e-5, 1e-6));
}

TEST_CASE("broadcast from every rank", "[mpi]") {
  Backend& world = ds::comm::world();
  for (int src = 0; src < world.world_size(); ++src)
    for (auto dtype : {at::kFloat, at::kHalf, at::kLong}) {
      CAPTURE(src, c10::toString(dtype));
      at::Tensor t = seeded_tensor(seed_of(100 + src, world.rank()), 333, dtype);
      ds::comm::broadcast(t, src);
      CHECK(at::equal(t, seeded_tensor(seed_of(100 + src, src), 333, dtype)));
    }
}

TEST_CASE("send and recv around a ring; a size mismatch is an error on the receiver", "[mpi]") {
  Backend& world = ds::comm::world();
  const int w = world.world_size(), rank = world.rank();
  const int next = (rank + 1) % w, previous = (rank + w - 1) % w;
  // Even ranks send first, odd ranks receive first: no cycle of blocked sends even when large.
  const at::Tensor mine = seeded_tensor(seed_of(110, rank), 100000);
  at::Tensor received = at::empty({100000});
  if (rank % 2 == 0) {
    world.send(mine, next, 7);
    world.recv(received, previous, 7);
  } else {
    world.recv(received, previous, 7);
    world.send(mine, next, 7);
  }
  CHECK(at::equal(received, seeded_tensor(seed_of(110, previous), 100000)));

  if (rank == 0) {
    world.send(at::ones({11}), 1, 3);
    world.send(at::ones({9}), 1, 4);
  } else if (rank == 1) {
    at::Tensor ten = at::empty({10});
    CHECK_THROWS_WITH(world.recv(ten, 0, 3), Catch::Contains("sent more than the 10"));
    CHECK_THROWS_WITH(world.recv(ten, 0, 4), Catch::Contains("sent 9 elements"));
  }
  CHECK_THROWS_WITH(world.send(mine, rank, 0), Catch::Contains("not another rank"));
  world.barrier();
}

TEST_CASE("split makes sub-groups ordered by key; a negative color gets none", "[mpi]") {
  Backend& world = ds::comm::world();
  const int w = world.world_size(), rank = world.rank();
  // The last rank stays out; the others form "even" and "odd" groups, ordered by descending rank.
  const bool out = rank == w - 1;
  const int color = out ? -1 : rank % 2;
  std::shared_ptr<Backend> group = world.split(color, -rank);
  if (out) {
    CHECK(group == nullptr);
    return;
  }
  REQUIRE(group != nullptr);
  std::vector<int> members;
  for (int r = w - 2; r >= 0; --r)
    if (r % 2 == color) members.push_back(r);
  CHECK(group->world_size() == static_cast<int>(members.size()));
  CHECK(members[group->rank()] == rank);

  at::Tensor t = seeded_tensor(seed_of(120, rank), 64);
  group->all_reduce(t);
  at::Tensor expected = at::zeros({64}, at::kDouble);
  for (int r : members) expected += seeded_tensor(seed_of(120, r), 64).to(at::kDouble);
  CHECK(close(t, expected, 1e-5, 1e-6));
}

TEST_CASE("init_distributed is idempotent and rejects other backends", "[comm]") {
  const auto first = ds::comm::init_distributed("mpi");
  CHECK(ds::comm::init_distributed("mpi") == first);
  CHECK(ds::comm::is_initialized());
  CHECK_THROWS_WITH(ds::comm::init_distributed("nccl"), Catch::Contains("initialized with 'mpi'"));
}

TEST_CASE("a process without mpirun is a world of one", "[comm]") {
  Backend& world = ds::comm::world();
  REQUIRE(world.world_size() == 1);
  at::Tensor t = seeded_tensor(seed_of(130, 0), 10);
  const at::Tensor original = t.clone();
  world.all_reduce(t, ReduceOp::Avg);
  CHECK(at::equal(t, original));
  at::Tensor gathered = at::empty({10});
  world.all_gather_into(gathered, original);
  CHECK(at::equal(gathered, original));
  world.barrier();
}

TEST_CASE("MpiBackend can be made directly, as DeepSpeed's MpiBackend(cuda_aware)", "[comm]") {
  ds::comm::MpiBackend backend(/*cuda_aware=*/false);
  CHECK_FALSE(backend.cuda_aware());
  CHECK(backend.world_size() == ds::comm::get_world_size());
}
