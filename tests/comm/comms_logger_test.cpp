// CommsLogger: what the backends record of the calls a test makes (op, message bytes, count), the
// bandwidth arithmetic against nccl-tests' factors, the settings block, and the reducer's buckets of
// a known model against the sizes its shapes give in closed form.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <map>
#include <utility>
#include <vector>

#include "dstrain/comm/comms_logger.hpp"
#include "dstrain/comm/distributed.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/zero/gradient_reducer.hpp"
#include "dstrain/zero/shard_layout.hpp"

using ds::comm::Backend;
using ds::comm::CommsLogger;
using ds::comm::CommsLoggerSettings;
using ds::comm::CommSummaryRow;

namespace {

CommsLoggerSettings enabled() {
  CommsLoggerSettings settings;
  settings.enabled = true;
  return settings;
}

// (op, bytes) -> row.
std::map<std::pair<std::string, int64_t>, CommSummaryRow> rows_of(const CommsLogger& logger) {
  std::map<std::pair<std::string, int64_t>, CommSummaryRow> rows;
  for (const CommSummaryRow& row : logger.summary()) rows[{row.op, row.bytes}] = row;
  return rows;
}

int64_t count_of(const std::map<std::pair<std::string, int64_t>, CommSummaryRow>& rows, const std::string& op,
                 int64_t bytes) {
  auto it = rows.find({op, bytes});
  return it == rows.end() ? 0 : it->second.count;
}

int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

}  // namespace

TEST_CASE("bus bandwidth uses nccl-tests' factors and DeepSpeed's unit (Gbps)", "[comm]") {
  // 1 GB in 1 s is 8 Gbps of algorithm bandwidth.
  const auto all_reduce = ds::comm::bandwidth("all_reduce", 1'000'000'000, 1.0, 4);
  CHECK(all_reduce.algbw_gbps == Approx(8.0));
  CHECK(all_reduce.busbw_gbps == Approx(8.0 * 2 * 3 / 4));
  CHECK(ds::comm::bandwidth("reduce_scatter_into", 1'000'000'000, 2.0, 4).busbw_gbps == Approx(4.0 * 3 / 4));
  CHECK(ds::comm::bandwidth("all_gather_into", 1'000'000'000, 1.0, 8).busbw_gbps == Approx(8.0 * 7 / 8));
  CHECK(ds::comm::bandwidth("broadcast", 500'000'000, 1.0, 4).busbw_gbps == Approx(4.0));
  CHECK(ds::comm::bandwidth("all_reduce", 1000, 1.0, 1).busbw_gbps == 0.0);  // one rank moves nothing
}

TEST_CASE("comms_logger settings read DeepSpeed's block and name bad keys", "[comm]") {
  const auto settings = CommsLoggerSettings::from_json(
      {{"enabled", true}, {"verbose", false}, {"prof_all", false}, {"prof_ops", {"all_reduce", "reduce_scatter_tensor"}},
       {"debug", false}});
  CHECK(settings.enabled);
  CHECK_FALSE(settings.prof_all);
  CHECK(settings.prof_ops == std::vector<std::string>{"all_reduce", "reduce_scatter_into"});
  CHECK_FALSE(CommsLoggerSettings::from_json(nullptr).enabled);
  CHECK_THROWS_WITH(CommsLoggerSettings::from_json({{"prof_ops", {"all_to_all_single"}}}),
                    Catch::Contains("comms_logger.prof_ops") && Catch::Contains("all_to_all_single"));
  CHECK_THROWS_WITH(CommsLoggerSettings::from_json({{"enabled", 1}}), Catch::Contains("comms_logger.enabled"));
  CHECK_THROWS_WITH(CommsLoggerSettings::from_json({{"verbos", true}}), Catch::Contains("comms_logger.verbos"));
}

TEST_CASE("the MPI backend records each collective's op, message bytes and count", "[mpi]") {
  Backend& world = ds::comm::world();
  const int n = world.world_size();
  CommsLogger& logger = world.comms_logger();
  logger.configure(enabled());

  for (int i = 0; i < 3; ++i) {
    at::Tensor t = at::ones({1000});
    world.all_reduce(t);
  }
  world.all_reduce_async(at::ones({37}, at::kDouble), ds::comm::ReduceOp::Max)->wait();
  world.all_gather_into(at::empty({n * 10}), at::ones({10}));
  world.reduce_scatter_into(at::empty({6}, at::kLong), at::ones({n * 6}, at::kLong));
  world.broadcast(at::ones({5}, at::kInt), 0);
  world.barrier();
  const int64_t padded = round_up(100, 8 * n);
  world.compressed_allreduce(at::ones({100}), at::zeros({padded}), at::zeros({padded / n}), 0);
  // A group split from the world records into the same logger.
  auto halves = world.split(world.rank() % 2, world.rank());
  halves->all_reduce(at::ones({3}));

  const auto rows = rows_of(logger);
  CHECK(count_of(rows, "all_reduce", 1000 * 4) == 3);
  CHECK(count_of(rows, "all_reduce", 37 * 8) == 1);
  CHECK(count_of(rows, "all_gather_into", n * 10 * 4) == 1);
  CHECK(count_of(rows, "reduce_scatter_into", n * 6 * 8) == 1);
  CHECK(count_of(rows, "broadcast", 5 * 4) == 1);
  CHECK(count_of(rows, "barrier", 0) == 2);  // ours and split()'s own
  CHECK(count_of(rows, "compressed_allreduce", 100 * 4) == 1);
  CHECK(count_of(rows, "all_reduce", 3 * 4) == 1);
  CHECK(rows.size() == 8);
  const CommSummaryRow& big = rows.at({"all_reduce", 4000});
  CHECK(big.total_seconds > 0);
  CHECK(big.algorithm.find("MPI_Iallreduce") != std::string::npos);
  CHECK(big.algbw_gbps == Approx(4000.0 * 3 * 8 / big.total_seconds / 1e9));
  CHECK(big.busbw_gbps == Approx(big.algbw_gbps * 2 * (n - 1) / n));
  CHECK(rows.at({"compressed_allreduce", 400}).algorithm.find("1-bit") != std::string::npos);
  logger.configure({});
}

TEST_CASE("prof_all false records only the ops named in prof_ops; off records nothing", "[mpi]") {
  Backend& world = ds::comm::world();
  CommsLogger& logger = world.comms_logger();
  CommsLoggerSettings settings = enabled();
  settings.prof_all = false;
  settings.prof_ops = {"broadcast"};
  logger.configure(settings);
  world.all_reduce(at::ones({8}));
  world.broadcast(at::ones({8}), 0);
  auto rows = rows_of(logger);
  CHECK(rows.size() == 1);
  CHECK(count_of(rows, "broadcast", 32) == 1);

  logger.configure({});
  world.all_reduce(at::ones({8}));
  CHECK(logger.summary().empty());
}

TEST_CASE("the reducer's buckets of a known model: one collective per bucket and step, sized by its shapes",
          "[mpi]") {
  Backend& world = ds::comm::world();
  const int n = world.world_size();
  torch::manual_seed(7);
  torch::nn::Sequential model(torch::nn::Linear(5, 7), torch::nn::Linear(7, 3));
  std::vector<at::Tensor> params = model->parameters();
  // Closed form from the shapes: weights in*out, biases out.
  const std::vector<int64_t> numels = {5 * 7, 7, 7 * 3, 3};
  REQUIRE(params.size() == numels.size());
  const at::Tensor input = at::full({4, 5}, 1.0 + world.rank());
  constexpr int kSteps = 2;

  for (int partitions : {1, n}) {
    const ds::zero::ShardLayout layout(params, partitions, partitions == 1 ? 0 : world.rank());
    for (int64_t bucket_numel : {int64_t{1}, int64_t{1} << 20}) {
      CAPTURE(partitions, bucket_numel);
      world.comms_logger().configure(enabled());
      {
        ds::zero::GradientReducer reducer(params, layout, world, bucket_numel, /*overlap=*/true);
        for (int step = 0; step < kSteps; ++step) {
          reducer.zero_grad_shard();
          model->forward(input).sum().backward();
          reducer.finish_backward();
        }
      }
      // Stage 0 all-reduces the bucket; partitioned, it reduce-scatters the bucket of every rank's
      // chunks (each parameter padded to a multiple of the partitions), whose bytes are the message.
      const std::string op = partitions == 1 ? "all_reduce" : "reduce_scatter_into";
      std::map<int64_t, int64_t> expected;  // bytes -> count
      if (bucket_numel == 1) {
        for (int64_t numel : numels) expected[round_up(numel, partitions) * 4] += kSteps;
      } else {
        int64_t total = 0;
        for (int64_t numel : numels) total += round_up(numel, partitions) * 4;
        expected[total] = kSteps;
      }
      std::map<int64_t, int64_t> recorded;
      for (const CommSummaryRow& row : world.comms_logger().summary())
        if (row.op == op) recorded[row.bytes] = row.count;
      CHECK(recorded == expected);
    }
  }
  world.comms_logger().configure({});
}
