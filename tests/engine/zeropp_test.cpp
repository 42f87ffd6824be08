// ZeRO++ in the engine at 4 ranks as 2 simulated nodes of 2 (the launcher's ranks-per-node variables
// set before the engine reads them), each against plain ZeRO stage 3 on the same batches:
//   hpZ  the same losses and weights, bit for bit; backward's gathers run in groups of 2 (their bus
//        share, (n-1)/n, tells the group's size) and move what plain stage 3's backward moves; the
//        secondary slices cost 1/2 of every gathered parameter, as the memory plan counts them;
//   qwZ  the gathered weights are each rank's chunk quantized to int8 blocks of 2048 (within half a
//        scale of the exact ones, computed here), the records are the closed form of every gather
//        of plain stage 3, and the loss stays within 1% of plain stage 3's;
//   qgZ  the first loss is plain stage 3's exactly (the same weights), the records are the closed
//        form of every reduce-scatter (int4), the loss stays within 1%;
//   all three together: within 1%, in fp32 and on a bf16 model (against plain stage 3 in bf16).
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/engine/engine.hpp"
#include "dstrain/engine/memory_plan.hpp"
#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/engine/models/loss.hpp"
#include "dstrain/zero/gathered_parameters.hpp"
#include "dstrain/zero/param_coordinator.hpp"
#include "training_loop.hpp"

namespace {

constexpr int64_t kSeed = 23;
constexpr double kLr = 3e-3;
constexpr int kGlobalBatch = 8;
constexpr int kPerNode = 2;
// Biases and norms (at most 256 values) stay whole; every matrix is gathered for each use.
constexpr int64_t kPersistence = 300;
constexpr int64_t kBlock = 2048;
// The goal for the loss of a quantized run against the unquantized one.
constexpr double kLossTolerance = 0.01;

ds::models::GPT make_model() {
  torch::manual_seed(kSeed);
  return ds::models::GPT(ds::models::GPTConfig::from_json(
      {{"n_layer", 2}, {"n_head", 4}, {"n_embd", 64}, {"block_size", 16}, {"vocab_size", 64}, {"dropout", 0.0}}));
}

// Ranks 0-1 and 2-3 as two nodes, as mpirun describes a 2 x 2 job to its ranks.
void simulate_two_nodes() {
  const int rank = ds::comm::get_rank();
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(kPerNode).c_str(), 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(rank % kPerNode).c_str(), 1);
}

nlohmann::json zero_block(const nlohmann::json& zeropp) {
  nlohmann::json zero = {{"stage", 3},
                         {"reduce_bucket_size", 20000},
                         {"stage3_param_persistence_threshold", kPersistence},
                         {"stage3_max_reuse_distance", 0}};
  if (!zeropp.is_null()) zero.update(zeropp);
  return zero;
}

ds::Config config_of(const nlohmann::json& zeropp, bool bf16 = false) {
  return ds::Config::from_json({
      {"train_micro_batch_size_per_gpu", kGlobalBatch / ds::comm::get_world_size()},
      {"gradient_accumulation_steps", 1},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", kLr}, {"weight_decay", 0.01}}}}},
      {"zero_optimization", zero_block(zeropp)},
      {"bf16", {{"enabled", bf16}}},
  });
}

std::shared_ptr<ds::Engine<ds::models::GPT>> make_engine(const nlohmann::json& zeropp, bool bf16 = false) {
  return ds::initialize(make_model(), config_of(zeropp, bf16), ds::comm::init_distributed("mpi"));
}

void start_logging(ds::Engine<ds::models::GPT>& engine) {
  ds::comm::CommsLoggerSettings settings;
  settings.enabled = true;
  engine.dp_group().comms_logger().configure(settings);  // also clears what was recorded
}

// (op, message bytes) -> calls, and the bus share of their bytes ((n-1)/n for a gather on n ranks).
struct Calls {
  int64_t count = 0;
  double bus_share = 0;
};
std::map<std::pair<std::string, int64_t>, Calls> recorded(ds::Engine<ds::models::GPT>& engine, const std::string& op) {
  std::map<std::pair<std::string, int64_t>, Calls> calls;
  for (const auto& row : engine.dp_group().comms_logger().summary())
    if (row.op == op) calls[{row.op, row.bytes}] = {row.count, row.busbw_gbps / row.algbw_gbps};
  return calls;
}

// The bytes of a record of n values at `bits`, by hand: codes padded to 4 bytes, one fp32 per block.
int64_t record_bytes(int64_t n, int bits) {
  const int64_t codes = bits == 8 ? n : (n + 1) / 2;
  return (codes + 3) / 4 * 4 + 4 * ((n + kBlock - 1) / kBlock);
}

// One step of `engine` with the logger recording forward and backward apart.
struct Phases {
  std::map<std::pair<std::string, int64_t>, Calls> forward, backward;
};
Phases logged_step(ds::Engine<ds::models::GPT>& engine, const std::string& op) {
  ds::comm::Backend& group = engine.dp_group();
  const auto source = training_loop::synthetic_source();
  ds::data::Batch batch = source->batch(engine.global_steps(), 0, group.rank(), group.world_size(),
                                        engine.train_micro_batch_size_per_gpu());
  Phases phases;
  start_logging(engine);
  at::Tensor loss = ds::models::cross_entropy_loss(engine.forward(batch.inputs), batch.targets);
  phases.forward = recorded(engine, op);
  start_logging(engine);
  engine.backward(loss);
  phases.backward = recorded(engine, op);
  engine.step();
  return phases;
}

void require_within_tolerance(const std::vector<double>& quantized, const std::vector<double>& plain) {
  REQUIRE(quantized.size() == plain.size());
  for (size_t s = 0; s < plain.size(); ++s) {
    INFO("step " << s << ": " << quantized[s] << " against " << plain[s]);
    REQUIRE(std::isfinite(quantized[s]));
    REQUIRE(std::fabs(quantized[s] - plain[s]) <= kLossTolerance * plain[s]);
  }
}

}  // namespace

TEST_CASE("hpZ: plain stage 3's training, backward's gathers within the node", "[mpi][engine][zeropp]") {
  const int world = ds::comm::get_world_size();
  REQUIRE(world == 4);
  simulate_two_nodes();
  auto plain = make_engine({});
  auto hpz = make_engine({{"zero_hpz_partition_size", kPerNode}});
  REQUIRE(training_loop::train(*hpz, 3) == training_loop::train(*plain, 3));
  const auto plain_weights = plain->consolidated_weights();
  const auto hpz_weights = hpz->consolidated_weights();
  for (const auto& [name, weight] : plain_weights) {
    INFO(name);
    REQUIRE(torch::equal(hpz_weights.at(name), weight));
  }

  // The secondary slices: half of every gathered (padded) parameter, held between steps.
  int64_t gathered_numel = 0;
  std::vector<int64_t> numels;
  for (const auto& param : make_model()->parameters()) {
    numels.push_back(param.numel());
    if (param.numel() > kPersistence) gathered_numel += (param.numel() + world - 1) / world * world;
  }
  REQUIRE(hpz->parameter_coordinator()->bytes() - plain->parameter_coordinator()->bytes() ==
          4 * gathered_numel / kPerNode);
  ds::ModelShape shape;
  shape.numels = numels;
  const ds::Config plain_config = config_of({}), hpz_config = config_of({{"zero_hpz_partition_size", kPerNode}});
  REQUIRE(ds::size_memory(hpz_config, shape, world).model_state.parameters -
              ds::size_memory(plain_config, shape, world).model_state.parameters ==
          4 * gathered_numel / kPerNode);

  const Phases plain_step = logged_step(*plain, "all_gather_into");
  const Phases hpz_step = logged_step(*hpz, "all_gather_into");
  REQUIRE(!plain_step.backward.empty());
  REQUIRE(hpz_step.forward.size() == plain_step.forward.size());
  for (const auto& [key, calls] : plain_step.forward) {
    INFO("forward, " << key.second << " bytes");
    REQUIRE(hpz_step.forward.at(key).count == calls.count);
    REQUIRE(hpz_step.forward.at(key).bus_share == Approx(3.0 / 4));  // the 4 ranks
  }
  REQUIRE(hpz_step.backward.size() == plain_step.backward.size());
  for (const auto& [key, calls] : plain_step.backward) {
    INFO("backward, " << key.second << " bytes");
    REQUIRE(calls.bus_share == Approx(3.0 / 4));
    REQUIRE(hpz_step.backward.at(key).count == calls.count);
    REQUIRE(hpz_step.backward.at(key).bus_share == Approx(1.0 / 2));  // the node's 2 ranks
  }
}

TEST_CASE("qwZ: the gathered weights are the int8 blocks of each chunk", "[mpi][engine][zeropp]") {
  const int world = ds::comm::get_world_size();
  REQUIRE(world == 4);
  simulate_two_nodes();
  auto qwz = make_engine({{"zero_quantized_weights", true}});
  {
    ds::zero::GatheredParameters whole(qwz->parameter_coordinator());
    const auto exact = make_model()->named_parameters();
    for (const auto& item : qwz->module()->named_parameters()) {
      INFO(item.key());
      const at::Tensor gathered = item.value().detach().reshape({-1});
      const at::Tensor x = exact[item.key()].detach().reshape({-1}).to(at::kDouble);
      if (x.numel() <= kPersistence) {
        REQUIRE(torch::equal(gathered, exact[item.key()].detach().reshape({-1})));
        continue;
      }
      const int64_t chunk = (x.numel() + world - 1) / world;
      const at::Tensor padded = at::cat({x, at::zeros({chunk * world - x.numel()}, at::kDouble)});
      at::Tensor expected = at::empty_like(padded), half_scale = at::empty_like(padded);
      for (int r = 0; r < world; ++r)
        for (int64_t b = 0; b < chunk; b += kBlock) {
          const int64_t begin = r * chunk + b, n = std::min(kBlock, chunk - b);
          const at::Tensor block = padded.narrow(0, begin, n);
          const double scale = block.abs().max().item<double>() / 127;
          expected.narrow(0, begin, n).copy_(scale > 0 ? (block / scale).round() * scale : block);
          half_scale.narrow(0, begin, n).fill_(scale / 2);
        }
      const at::Tensor error = (gathered.to(at::kDouble) - x).abs();
      REQUIRE((error <= half_scale.narrow(0, 0, x.numel()) * (1 + 1e-5)).all().item<bool>());
      REQUIRE(error.max().item<double>() > 0);  // quantized, not exact
      const at::Tensor from_expected = (gathered.to(at::kDouble) - expected.narrow(0, 0, x.numel())).abs();
      REQUIRE((from_expected <= half_scale.narrow(0, 0, x.numel()) * 1e-4).all().item<bool>());
    }
  }

  // Every gather of a matrix in plain stage 3 is one of records here: W records of its chunk.
  auto plain = make_engine({});
  const Phases plain_step = logged_step(*plain, "all_gather_into");
  const Phases qwz_step = logged_step(*qwz, "quantized_all_gather");
  using PhaseCalls = std::map<std::pair<std::string, int64_t>, Calls> Phases::*;
  for (PhaseCalls phase : {&Phases::forward, &Phases::backward}) {
    std::map<int64_t, int64_t> expected;  // record bytes -> calls
    for (const auto& [key, calls] : plain_step.*phase) {
      const int64_t chunk = key.second / 4 / world;
      if (chunk * world > kPersistence) expected[world * record_bytes(chunk, 8)] += calls.count;
    }
    std::map<int64_t, int64_t> got;
    for (const auto& [key, calls] : qwz_step.*phase) got[key.second] += calls.count;
    REQUIRE(!expected.empty());
    REQUIRE(got == expected);
  }
}

TEST_CASE("ZeRO++ trains as plain stage 3 within the quantization's tolerance", "[mpi][engine][zeropp]") {
  const int world = ds::comm::get_world_size();
  REQUIRE(world == 4);
  simulate_two_nodes();
  constexpr int kSteps = 12;
  const std::vector<double> plain = training_loop::train(*make_engine({}), kSteps);

  SECTION("qwZ") {
    const std::vector<double> qwz = training_loop::train(*make_engine({{"zero_quantized_weights", true}}), kSteps);
    REQUIRE(qwz[0] != plain[0]);  // the first forward already runs on quantized weights
    require_within_tolerance(qwz, plain);
  }
  SECTION("qgZ") {
    auto engine = make_engine({{"zero_quantized_gradients", true}});
    const std::vector<double> qgz = training_loop::train(*engine, kSteps);
    REQUIRE(qgz[0] == plain[0]);  // the same weights; the gradients differ from the first step on
    REQUIRE(qgz[1] != plain[1]);
    require_within_tolerance(qgz, plain);

    // Every reduce-scatter of plain stage 3 is one of int4 records here: W records of its slice.
    auto plain_engine = make_engine({});
    training_loop::train(*plain_engine, kSteps);
    const Phases plain_step = logged_step(*plain_engine, "reduce_scatter_into");
    const Phases qgz_step = logged_step(*engine, "quantized_reduce_scatter");
    std::map<int64_t, int64_t> expected, got;
    for (const auto& [key, calls] : plain_step.backward) expected[world * record_bytes(key.second / 4 / world, 4)] += calls.count;
    for (const auto& [key, calls] : qgz_step.backward) got[key.second] += calls.count;
    REQUIRE(!expected.empty());
    REQUIRE(got == expected);
  }
  SECTION("qwZ, hpZ and qgZ") {
    const std::vector<double> all = training_loop::train(
        *make_engine({{"zero_quantized_weights", true}, {"zero_hpz_partition_size", kPerNode},
                      {"zero_quantized_gradients", true}}),
        kSteps);
    REQUIRE(all[0] != plain[0]);
    require_within_tolerance(all, plain);
  }
  SECTION("qwZ, hpZ and qgZ on a bf16 model") {
    // The quantizers take the bf16 weights and gradients as they come (the fp32 master stays whole
    // in its shard): against plain stage 3 in bf16.
    const nlohmann::json all_three = {{"zero_quantized_weights", true}, {"zero_hpz_partition_size", kPerNode},
                                      {"zero_quantized_gradients", true}};
    const std::vector<double> plain_bf16 = training_loop::train(*make_engine({}, true), kSteps);
    const std::vector<double> all = training_loop::train(*make_engine(all_three, true), kSteps);
    REQUIRE(all[0] != plain_bf16[0]);
    require_within_tolerance(all, plain_bf16);
  }
}
