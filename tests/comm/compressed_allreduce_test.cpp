// Port of DeepSpeed's tests/onebit/test_mpi_backend.py: MpiBackend::compressed_allreduce against a
// plain LibTorch simulation of the same compression built on the ordinary all_reduce, with the
// errors carried over between calls as the optimizer carries them.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <cmath>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/runtime/error.hpp"
#include "seeded.hpp"

using ds::comm::Backend;
using ds::test::seed_of;
using ds::test::seeded_tensor;

namespace {

// The seed's thresholds: results must agree to 1e-6, except where the server's compensated value is
// itself within 1e-6 of zero, where sign() of two correctly rounded computations may differ.
constexpr double kThreshold = 1e-6;
constexpr double kMagnitudeThreshold = 1e-6;

// DeepSpeed's sign: +1 for x >= 0, -1 below.
at::Tensor sign_of(const at::Tensor& x) { return x.sign().add(1).to(at::kBool).to(at::kFloat).add(-0.5).mul(2.0); }

at::Tensor rms(const at::Tensor& x) {
  return (x.to(at::kDouble).norm() / std::sqrt(double(x.numel()))).to(at::kFloat);
}

// The seed's torch_sim, generalized to padding and to error buffers that persist between calls.
struct Simulation {
  int64_t numel, padded, chunk;
  at::Tensor worker_error, server_error;
  at::Tensor compensated;  // this rank's server chunk before compression, in the last call

  Simulation(int64_t n, int world) : numel(n) {
    const int64_t unit = 8 * world;
    padded = (n + unit - 1) / unit * unit;
    chunk = padded / world;
    worker_error = at::zeros({padded});
    server_error = at::zeros({chunk});
  }

  at::Tensor step(const at::Tensor& buffer, Backend& world) {
    const int w = world.world_size(), rank = world.rank();
    const at::Tensor x = at::cat({buffer.reshape({-1}), at::zeros({padded - numel})}) + worker_error;
    const at::Tensor compressed = rms(x) * sign_of(x);
    worker_error = x - compressed;
    world.all_reduce(compressed);
    compressed.mul_(1.0 / w);

    compensated = compressed.narrow(0, rank * chunk, chunk) + server_error;
    const at::Tensor server_compressed = rms(compensated) * sign_of(compensated);
    server_error = compensated - server_compressed;
    // All-gather of the servers' chunks through all_reduce: each element has one non-zero term.
    at::Tensor result = at::zeros({padded});
    result.narrow(0, rank * chunk, chunk).copy_(server_compressed);
    world.all_reduce(result);
    return result.narrow(0, 0, numel).view(buffer.sizes());
  }
};

// The seed's input: uniform in [-0.5, 0.5) plus a bias of 0.01 * rank.
at::Tensor seed_input(int test_id, int rank, at::IntArrayRef shape) {
  int64_t numel = 1;
  for (int64_t s : shape) numel *= s;
  return (0.5 * seeded_tensor(seed_of(test_id, rank), numel) + 0.01 * rank).view(shape);
}

struct Comparison {
  int64_t significant_mismatches = 0;  // beyond the threshold where the sign is well defined
  int64_t ambiguous = 0;               // positions skipped by the seed's magnitude rule
};

// Compares this rank's chunk of the result and its server error, as the seed does, then adopts the
// backend's server error at the ambiguous positions so that later calls compare like with like.
Comparison compare_server_chunk(const at::Tensor& result, Simulation& sim, const at::Tensor& reference,
                                const at::Tensor& server_error, int rank) {
  const int64_t begin = std::min(sim.numel, rank * sim.chunk), end = std::min(sim.numel, begin + sim.chunk);
  const at::Tensor ambiguous = sim.compensated.abs() <= kMagnitudeThreshold;
  const at::Tensor result_differs = at::zeros({sim.chunk}, at::kBool);
  result_differs.narrow(0, 0, end - begin)
      .copy_((result.reshape({-1}).narrow(0, begin, end - begin) - reference.reshape({-1}).narrow(0, begin, end - begin))
                 .abs() > kThreshold);
  const at::Tensor error_differs = (server_error - sim.server_error).abs() > kThreshold;

  Comparison c;
  c.significant_mismatches = ((result_differs | error_differs) & ~ambiguous).sum().item<int64_t>();
  c.ambiguous = ambiguous.sum().item<int64_t>();
  sim.server_error = at::where(ambiguous, server_error, sim.server_error);
  return c;
}

void check_calls(const std::vector<int64_t>& shape, int calls, int test_id) {
  Backend& world = ds::comm::world();
  const int rank = world.rank();
  int64_t numel = 1;
  for (int64_t s : shape) numel *= s;
  Simulation sim(numel, world.world_size());
  at::Tensor worker_error = at::zeros({sim.padded}), server_error = at::zeros({sim.chunk});
  for (int call = 0; call < calls; ++call) {
    CAPTURE(numel, call);
    const at::Tensor input = seed_input(test_id + call, rank, shape);
    const at::Tensor reference = sim.step(input, world);
    const at::Tensor result = world.compressed_allreduce(input.clone(), worker_error, server_error, 0);
    REQUIRE(result.sizes() == input.sizes());

    CHECK((worker_error - sim.worker_error).abs().max().item<double>() <= kThreshold);
    const Comparison c = compare_server_chunk(result, sim, reference, server_error, rank);
    CHECK(c.significant_mismatches == 0);
    CHECK(c.ambiguous <= std::max<int64_t>(1, sim.chunk / 1000));  // the rule must stay an exception
  }
}

}  // namespace

TEST_CASE("compressed_allreduce matches the simulated compression on one call", "[mpi]") {
  check_calls({1 << 20}, 1, 1000);
}

TEST_CASE("compressed_allreduce pads sizes that are not multiples of 8 x world size", "[mpi]") {
  check_calls({5}, 1, 2000);             // less than one byte per rank
  check_calls({100003}, 1, 3000);        // prime
  check_calls({317, 333}, 1, 4000);      // two-dimensional, 105561 values
  check_calls({8 * 3 * 4 * 999}, 1, 5000);  // a multiple of 8 x world for world 2, 3 and 4: no padding
}

TEST_CASE("compressed_allreduce carries its errors over five calls", "[mpi]") {
  check_calls({100003}, 5, 6000);
  check_calls({4096}, 5, 7000);
}

TEST_CASE("compressed_allreduce writes the result into the buffer it was given", "[mpi]") {
  Backend& world = ds::comm::world();
  Simulation sim(1000, world.world_size());
  at::Tensor buffer = seed_input(8000, world.rank(), {1000});
  const at::Tensor reference = sim.step(buffer, world);
  at::Tensor worker_error = at::zeros({sim.padded}), server_error = at::zeros({sim.chunk});
  const at::Tensor result = world.compressed_allreduce(buffer, worker_error, server_error, 0);
  CHECK(result.data_ptr() == buffer.data_ptr());
  CHECK((buffer - reference).abs().max().item<double>() < 1e-5);
}

TEST_CASE("compressed_allreduce rejects error buffers of the wrong size on every rank", "[mpi]") {
  Backend& world = ds::comm::world();
  const int w = world.world_size();
  at::Tensor buffer = at::ones({100});
  const int64_t padded = (100 + 8 * w - 1) / (8 * w) * (8 * w);
  CHECK_THROWS_WITH(world.compressed_allreduce(buffer, at::zeros({100}), at::zeros({padded / w}), 0),
                    Catch::Contains("worker_error of " + std::to_string(padded)));
  CHECK_THROWS_WITH(world.compressed_allreduce(buffer.to(at::kDouble), at::zeros({padded}), at::zeros({padded / w}), 0),
                    Catch::Contains("float32"));
  // Wrong on one rank only: the others learn of it instead of waiting in the exchange, and the group
  // (a copy of the world here) is unusable afterwards.
  auto group = world.split(0, world.rank());
  at::Tensor server_error = at::zeros({world.rank() == 0 ? padded : padded / w});
  CHECK_THROWS_WITH(group->compressed_allreduce(buffer, at::zeros({padded}), server_error, 0),
                    Catch::Contains(world.rank() == 0 ? "server_error" : "another rank"));
}

TEST_CASE("compressed_allreduce on a world of one returns scale times sign", "[comm]") {
  // One worker: the server's input is s·sign(x), whose own scale is s again, so the result is
  // s·sign(x) with s = ‖x‖/√n over the padded buffer, and the server keeps (almost) no error.
  Backend& world = ds::comm::world();
  REQUIRE(world.world_size() == 1);
  const at::Tensor x = seed_input(9000, 0, {21});
  at::Tensor worker_error = at::zeros({24}), server_error = at::zeros({24});
  const at::Tensor result = world.compressed_allreduce(x.clone(), worker_error, server_error, 0);

  const at::Tensor padded = at::cat({x, at::zeros({3})});
  const double scale = std::sqrt((padded.to(at::kDouble) * padded.to(at::kDouble)).sum().item<double>() / 24);
  const at::Tensor expected = scale * at::where(x >= 0, at::ones({21}), -at::ones({21}));
  CHECK(at::allclose(result, expected.to(at::kFloat), 1e-6, 1e-7));
  CHECK(at::allclose(worker_error.narrow(0, 0, 21), x - expected.to(at::kFloat), 1e-6, 1e-7));
  CHECK(at::allclose(worker_error.narrow(0, 21, 3), at::full({3}, -float(scale)), 1e-6, 1e-7));
  CHECK(server_error.abs().max().item<double>() <= 1e-6 * scale);
}
