// NVMe optimizer (with the gradient shard) and parameter offload against the in-memory engine, the
// independent reference: the same fused kernel on the same elements, gradients unscaled and clipped
// by the same operations, and all-gathers of the same chunk values, so losses and weights must
// match bit for bit, at every stage, every pipelining choice, with gradient accumulation, and
// through checkpoints taken with and without offload. The swappers' read seconds leave out the
// time the caller spent between queueing a read and waiting for it (a sleep).
#include <catch2/catch.hpp>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <thread>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/engine/data/token_source.hpp"
#include "dstrain/engine/engine.hpp"
#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/engine/models/loss.hpp"
#include "dstrain/zero/optimizer_swapper.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/zero/param_swapper.hpp"
#include "shared_folder.hpp"
#include "training_loop.hpp"
#include "caught_error.hpp"

namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using Engine = ds::Engine<ds::models::GPT>;

constexpr int64_t kSeed = 11;
constexpr int kGlobalBatch = 8;

struct Offload {
  bool on = false;
  bool pipeline_read = false;
  bool pipeline_write = false;
  int64_t sub_group_size = 3000;  // a few sub-groups of the ~30k-element shard, the last one ragged
  int buffer_count = 12;  // Adam's 3 shards and the gradient x 3 sub-groups in memory
  std::string optimizer = "AdamW";
  int gradient_accumulation = 1;
  // offload_param to NVMe (stage 3).
  bool params = false;
  int param_buffer_count = 5;
  int64_t param_buffer_size = 100000000;
  int64_t max_in_cpu = 0;
  double gradient_clipping = 0.5;
  std::optional<bool> step_in_backward;  // dstrain.step_in_backward, unset by default
};

std::string nvme_dir(const std::string& name) { return fresh_shared_folder("dstrain_offload_" + name); }

nlohmann::json config_json(int stage, const Offload& offload, const std::string& nvme_path) {
  const int world = ds::comm::get_world_size();
  nlohmann::json optimizer = {{"type", offload.optimizer}, {"params", {{"lr", 3e-3}, {"weight_decay", 0.01}}}};
  if (offload.optimizer == "SGD") optimizer["params"] = {{"lr", 0.05}, {"momentum", 0.9}};
  nlohmann::json zero = {{"stage", stage},
                         {"reduce_bucket_size", 3000},
                         {"allgather_bucket_size", 2000},
                         {"stage3_param_persistence_threshold", 100},
                         {"sub_group_size", offload.sub_group_size}};
  if (offload.on)
    zero["offload_optimizer"] = {{"device", "nvme"},
                                 {"nvme_path", nvme_path},
                                 {"buffer_count", offload.buffer_count},
                                 {"pipeline_read", offload.pipeline_read},
                                 {"pipeline_write", offload.pipeline_write}};
  if (offload.params)
    zero["offload_param"] = {{"device", "nvme"},
                             {"nvme_path", nvme_path},
                             {"buffer_count", offload.param_buffer_count},
                             {"buffer_size", offload.param_buffer_size},
                             {"max_in_cpu", offload.max_in_cpu}};
  nlohmann::json config = {{"train_micro_batch_size_per_gpu", kGlobalBatch / world / offload.gradient_accumulation},
                            {"gradient_accumulation_steps", offload.gradient_accumulation},
                            {"gradient_clipping", offload.gradient_clipping},
                            {"optimizer", optimizer},
                            {"zero_optimization", zero},
                            {"aio", {{"block_size", 8192}, {"queue_depth", 4}, {"thread_count", 2}}}};
  if (offload.step_in_backward) config["dstrain"] = {{"step_in_backward", *offload.step_in_backward}};
  return config;
}

ds::models::GPT make_model() {
  return ds::models::GPT(ds::models::GPTConfig::from_json(
      {{"n_layer", 2}, {"n_head", 2}, {"n_embd", 32}, {"block_size", 16}, {"vocab_size", 64}, {"dropout", 0.0}}));
}

std::shared_ptr<Engine> make_engine(int stage, const Offload& offload, const std::string& nvme_path) {
  torch::manual_seed(kSeed);
  ds::models::GPT model = make_model();
  return ds::initialize(model, ds::Config::from_json(config_json(stage, offload, nvme_path)),
                        ds::comm::init_distributed("mpi"));
}

using training_loop::train;

void require_same_weights(Engine& a, Engine& b) {
  const auto wa = a.consolidated_weights(), wb = b.consolidated_weights();
  REQUIRE(wa.size() == wb.size());
  for (const auto& [name, tensor] : wa) {
    INFO(name);
    REQUIRE(torch::equal(tensor, wb.at(name)));
  }
}

int64_t round_up(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }


// fn throws a ds::Error naming `key` whose message contains `text`; returned for more checks.
ds::Error expect_error(const std::function<void()>& fn, const std::string& key, const std::string& text) {
  const ds::Error error = caught_error(fn);
  CHECK(error.key() == key);
  CHECK_THAT(error.message(), Contains(text));
  return error;
}

// ZeRO's chunks of the model: every parameter padded to a multiple of the world size, 1/world of each.
std::vector<int64_t> chunk_numels() {
  const int world = ds::comm::get_world_size();
  std::vector<int64_t> chunks;
  for (const at::Tensor& p : make_model()->parameters()) chunks.push_back(round_up(p.numel(), world) / world);
  return chunks;
}

int64_t shard_numel() {
  int64_t numel = 0;
  for (int64_t chunk : chunk_numels()) numel += chunk;
  return numel;
}

// The parameter swap file: the chunks past the first max_in_cpu elements, each padded to 1024.
int64_t param_file_bytes(int64_t max_in_cpu) {
  int64_t resident = 0, bytes = 0;
  for (int64_t chunk : chunk_numels()) {
    if (bytes == 0 && resident + chunk <= max_in_cpu)
      resident += chunk;
    else
      bytes += round_up(chunk, 1024) * 4;
  }
  return bytes;
}

// The parameters read from the optimizer's master file: for each chunk past the first max_in_cpu
// elements, the 4096-aligned window of the shard around it, unless `held(offset, numel)` says the
// optimizer holds the chunk in memory.
int64_t param_window_bytes(int64_t max_in_cpu,
                           const std::function<bool(int64_t, int64_t)>& held = [](int64_t, int64_t) { return false; }) {
  int64_t resident = 0, offset = 0, bytes = 0;
  bool swapping = false;
  for (int64_t chunk : chunk_numels()) {
    swapping = swapping || resident + chunk > max_in_cpu;
    if (!swapping) resident += chunk;
    if (swapping && !held(offset, chunk)) bytes += (round_up(offset + chunk, 1024) - offset / 1024 * 1024) * 4;
    offset += chunk;
  }
  return bytes;
}

// The optimizer swapper's bytes over `steps` steps (docs/offload.md, The step). Sub-group j is the
// same padded range of each file. Each step visits the sub-groups up the shard, then down on the
// next, and starts with the first min(slots, sub-groups) it visits already in memory: kept from
// the step before, or (the first step, pipeline_read) their state read during its backward.
// Those read nothing in the step and their gradients never go to the file; every other sub-group
// reads its state and its gradient, whose pages each reducing backward writes and each one after
// the first reads back before adding to them. Every sub-group's state is written back, but for the
// last min(slots, sub-groups) the step visits: kept for the next step, they are written there.
ds::io::SwapStats optimizer_swap_bytes(const Offload& offload, int steps, int reductions) {
  const int64_t shard = shard_numel();
  const int64_t group = round_up(offload.sub_group_size, 1024);
  const int64_t groups = (shard + group - 1) / group;
  const int64_t slots = 1 + int64_t{offload.pipeline_read} + int64_t{offload.pipeline_write};
  const int64_t files = offload.optimizer == "SGD" ? 2 : 3;
  ds::io::SwapStats bytes;
  for (int t = 0; t < steps; ++t)
    for (int64_t k = 0; k < groups; ++k) {
      const int64_t j = t % 2 == 0 ? k : groups - 1 - k;
      const int64_t block = round_up(std::min(group, shard - j * group), 1024) * 4;
      if (k < groups - std::min(slots, groups)) bytes.write_bytes += files * block;
      if ((t > 0 || offload.pipeline_read) && k < slots) {
        if (t == 0) bytes.read_bytes += files * block;  // read during the first backward
        continue;
      }
      bytes.read_bytes += (files + reductions) * block;
      bytes.write_bytes += reductions * block;
    }
  return bytes;
}

}  // namespace

TEST_CASE("NVMe optimizer offload reproduces the in-memory engine bit for bit", "[mpi][offload]") {
  const std::string nvme = nvme_dir("parity");
  constexpr int kSteps = 20;
  for (int stage = 1; stage <= 3; ++stage) {
    auto reference = make_engine(stage, {}, nvme);
    const std::vector<double> expected = train(*reference, kSteps);
    // Every pipelining choice at stage 2; none and both at stages 1 and 3 (the step is the same code).
    for (int pipelining = 0; pipelining < 4; ++pipelining) {
      if (stage != 2 && (pipelining == 1 || pipelining == 2)) continue;
      Offload offload;
      offload.on = true;
      offload.pipeline_read = pipelining & 1;
      offload.pipeline_write = pipelining & 2;
      DYNAMIC_SECTION("stage " << stage << ", pipeline_read " << offload.pipeline_read << ", pipeline_write "
                                << offload.pipeline_write) {
        std::string folder;
        {
          auto engine = make_engine(stage, offload, nvme);
          const ds::zero::OptimizerSwapper& swap = *engine->optimizer_swapper();
          folder = swap.folder();
          REQUIRE(fs::path(folder).parent_path() == fs::path(nvme));
          // Adam's master, exp_avg and exp_avg_sq and the fp32 gradient, each one file of the padded shard.
          const int64_t shard = shard_numel();
          const auto file_bytes = static_cast<uintmax_t>(round_up(shard, 1024) * 4);
          REQUIRE(swap.names() == std::vector<std::string>{"master", "exp_avg", "exp_avg_sq"});
          for (size_t k = 0; k < 3; ++k) REQUIRE(fs::file_size(swap.path_of(k)) == file_bytes);
          REQUIRE(swap.swaps_gradients());
          REQUIRE(fs::path(swap.gradient_path()).parent_path() == fs::path(folder));
          REQUIRE(fs::file_size(swap.gradient_path()) == file_bytes);
          REQUIRE(swap.sub_groups() == (shard + 3071) / 3072);
          engine->take_swap_stats();  // the initial writes

          const std::vector<double> losses = train(*engine, kSteps);
          REQUIRE(losses == expected);  // bitwise
          require_same_weights(*reference, *engine);
          // Each step reads and writes what is not kept in memory from the step before.
          const ds::io::SwapStats stats = engine->take_swap_stats();
          const ds::io::SwapStats expected_bytes = optimizer_swap_bytes(offload, kSteps, 1);
          CHECK(stats.read_bytes == expected_bytes.read_bytes);
          CHECK(stats.write_bytes == expected_bytes.write_bytes);
          // Less than the four files read whole each step and the optimizer's three written back,
          // with the gradient once from backward.
          CHECK(stats.read_bytes < int64_t{kSteps} * 4 * round_up(shard, 1024) * 4);
          // Between steps no gradient is in memory: only the gradient's swap buffers.
          CHECK(engine->model_state_bytes().optimizer == swap.buffer_bytes());
          CHECK(engine->model_state_bytes().gradients == swap.gradient_buffer_bytes());
          REQUIRE(fs::exists(folder));
        }
        CHECK(!fs::exists(folder));  // removed with the engine
      }
    }
  }
}

// dstrain.step_in_backward: each sub-group is stepped inside the boundary backward once its reduced
// gradient is whole (stage 3, no clipping, one micro-step a step). The same kernel on the same
// values: losses and weights equal the in-memory engine's with ==. Its bytes have a closed form
// that shows the gradient never went to disk: each step reads every sub-group's state once (the
// steps all go down the shard, so the sub-groups one ends with are not the next one's first), and
// writes every one but the last step's final sub-groups (one per slot), kept unwritten until the
// next backward.
TEST_CASE("a step begun in backward reproduces the in-memory engine, the gradient never on disk", "[mpi][offload]") {
  const std::string nvme = nvme_dir("step_in_backward");
  constexpr int kSteps = 12;
  Offload reference_settings;
  reference_settings.gradient_clipping = 0;
  auto reference = make_engine(3, reference_settings, nvme);
  const std::vector<double> expected = train(*reference, kSteps);
  for (int variant = 0; variant < 3; ++variant) {
    Offload offload = reference_settings;
    offload.on = true;
    offload.step_in_backward = true;
    offload.pipeline_read = true;
    offload.pipeline_write = variant != 1;  // 3 slots, or 2
    // Sub-groups smaller than the largest parameter (4096 elements): a range spans up to three.
    offload.sub_group_size = 2000;
    offload.params = variant == 2;          // the parameters read from the master file as it changes
    DYNAMIC_SECTION("pipeline_write " << offload.pipeline_write << ", parameters on NVMe " << offload.params) {
      auto engine = make_engine(3, offload, nvme);
      const ds::zero::OptimizerSwapper& swap = *engine->optimizer_swapper();
      engine->take_swap_stats();  // the initial writes
      REQUIRE(train(*engine, kSteps) == expected);  // bitwise
      require_same_weights(*reference, *engine);

      const int64_t shard = shard_numel();
      const int64_t group = round_up(offload.sub_group_size, 1024);
      const int64_t groups = (shard + group - 1) / group;
      const int64_t slots = offload.pipeline_write ? 3 : 2;
      REQUIRE(swap.sub_groups() == groups);
      int64_t all = 0, last = 0;
      for (int64_t j = 0; j < groups; ++j) {
        const int64_t block = round_up(std::min(group, shard - j * group), 1024) * 4;
        all += block;
        if (j < slots) last += block;
      }
      const ds::io::SwapStats stats = engine->take_swap_stats();
      CHECK(stats.write_bytes == 3 * (kSteps * all - last));  // parameters: none (read from the master file)
      if (offload.params)
        CHECK(stats.read_bytes > 3 * kSteps * all);
      else
        CHECK(stats.read_bytes == 3 * kSteps * all);

      // The reduced gradient of a backward that stepped is gone: asking for it names the key.
      const ds::data::Batch batch = training_loop::synthetic_source()->batch(
          engine->global_steps(), 0, ds::comm::get_rank(), ds::comm::get_world_size(), engine->train_micro_batch_size_per_gpu());
      engine->backward(ds::models::cross_entropy_loss(engine->forward(batch.inputs), batch.targets));
      expect_error([&] { engine->reduced_gradient_chunk(engine->module()->parameters().front()); },
                   "dstrain.step_in_backward", "consumed by the step begun in backward");
      engine->step();
    }
  }
  SECTION("where it cannot act (clipping, accumulation), the step runs after backward as before") {
    for (int obstacle = 0; obstacle < 2; ++obstacle) {
      Offload offload = reference_settings;
      offload.on = offload.pipeline_read = offload.pipeline_write = true;
      offload.step_in_backward = true;
      if (obstacle == 0) offload.gradient_clipping = 0.5;
      else offload.gradient_accumulation = 2;
      auto engine = make_engine(3, offload, nvme);
      engine->take_swap_stats();
      train(*engine, 2);
      // The kept schedule: the gradient goes through its file.
      const ds::io::SwapStats expected_bytes = optimizer_swap_bytes(offload, 2, offload.gradient_accumulation);
      CHECK(engine->take_swap_stats().write_bytes == expected_bytes.write_bytes);
    }
  }
  SECTION("a value other than a bool names the key") {
    nlohmann::json config = config_json(3, reference_settings, nvme);
    config["zero_optimization"]["offload_optimizer"] = {{"device", "nvme"}, {"nvme_path", nvme}, {"buffer_count", 12},
                                                        {"pipeline_read", true}, {"pipeline_write", true}};
    config["dstrain"] = {{"step_in_backward", "yes"}};
    torch::manual_seed(kSeed);
    expect_error([&] { ds::initialize(make_model(), ds::Config::from_json(config), ds::comm::init_distributed("mpi")); },
                 "dstrain.step_in_backward", "must be true or false");
  }
}

TEST_CASE("the gradient on NVMe accumulates micro-steps and reads back as in memory", "[mpi][offload]") {
  const std::string nvme = nvme_dir("accumulation");
  constexpr int kSteps = 10;  // of two micro-steps each
  const int64_t file_bytes = round_up(shard_numel(), 1024) * 4;
  for (int stage = 1; stage <= 3; ++stage) {
    DYNAMIC_SECTION("stage " << stage) {
      Offload plain;
      plain.gradient_accumulation = 2;
      Offload offload = plain;
      offload.on = true;
      offload.pipeline_read = offload.pipeline_write = true;
      auto reference = make_engine(stage, plain, nvme);
      auto engine = make_engine(stage, offload, nvme);
      engine->take_swap_stats();  // the initial writes
      auto source = ds::data::make_token_source(nlohmann::json{{"type", "synthetic"}, {"seed", 3}}, 64, 16);
      auto& group = engine->dp_group();
      const auto reference_params = reference->module()->named_parameters();
      const auto params = engine->module()->named_parameters();
      bool clipped = false;
      for (int64_t micro = 0; micro < 2 * kSteps; ++micro) {
        INFO("micro-step " << micro);
        ds::data::Batch batch =
            source->batch(micro, 0, group.rank(), group.world_size(), engine->train_micro_batch_size_per_gpu());
        std::vector<double> losses;
        for (Engine* e : {reference.get(), engine.get()}) {
          at::Tensor loss = ds::models::cross_entropy_loss(e->forward(batch.inputs), batch.targets);
          e->backward(loss);
          losses.push_back(loss.item<double>());
        }
        REQUIRE(losses[0] == losses[1]);
        // After a reducing backward (stages 2-3 every micro-step, the second adding to the file;
        // stage 1 at the boundary) every chunk of the reduced gradient is the in-memory one.
        if (stage >= 2 || reference->is_gradient_accumulation_boundary())
          for (const auto& item : reference_params) {
            INFO(item.key());
            REQUIRE(torch::equal(reference->reduced_gradient_chunk(item.value()),
                                 engine->reduced_gradient_chunk(params[item.key()])));
          }
        reference->step();
        engine->step();
        // The norm comes from sums of squares taken as the file was written, in another order.
        CHECK(engine->last_grad_norm() == Approx(reference->last_grad_norm()).epsilon(1e-12));
        clipped = clipped || reference->last_grad_norm() > 0.5;  // gradient_clipping is 0.5
      }
      CHECK(clipped);
      require_same_weights(*reference, *engine);
      // Per step: the state of the sub-groups not kept from the step before read, and their
      // gradient written by each reducing backward and read back before the second one adds to it
      // and for the step; every sub-group's state written back.
      const int reductions = stage >= 2 ? 2 : 1;
      const ds::io::SwapStats stats = engine->take_swap_stats();
      const ds::io::SwapStats expected_bytes = optimizer_swap_bytes(offload, kSteps, reductions);
      CHECK(stats.read_bytes == expected_bytes.read_bytes);
      CHECK(stats.write_bytes == expected_bytes.write_bytes);
      CHECK(stats.read_bytes < kSteps * (4 + reductions - 1) * file_bytes);
    }
  }
}

TEST_CASE("NVMe offload of SGD's momentum matches in memory", "[mpi][offload]") {
  const std::string nvme = nvme_dir("sgd");
  Offload plain;
  plain.optimizer = "SGD";
  Offload offload = plain;
  offload.on = true;
  offload.pipeline_read = offload.pipeline_write = true;
  offload.buffer_count = 9;  // three files (master, momentum_buffer, gradients) x three sub-groups in memory
  auto reference = make_engine(2, plain, nvme);
  auto engine = make_engine(2, offload, nvme);
  REQUIRE(engine->optimizer_swapper()->names() == std::vector<std::string>{"master", "momentum_buffer"});
  REQUIRE(train(*engine, 10) == train(*reference, 10));
  require_same_weights(*reference, *engine);
}

TEST_CASE("checkpoints move between offloaded and in-memory runs", "[mpi][offload]") {
  const std::string nvme = nvme_dir("checkpoint");
  const std::string dir = nvme + "/checkpoints";
  Offload offload;
  offload.on = true;
  offload.pipeline_read = offload.pipeline_write = true;
  for (int stage : {1, 3}) {
    auto reference = make_engine(stage, {}, nvme);
    const std::vector<double> expected = train(*reference, 12);
    const std::vector<double> tail(expected.begin() + 6, expected.end());
    for (bool save_offloaded : {true, false}) {
      DYNAMIC_SECTION("stage " << stage << ", saved " << (save_offloaded ? "offloaded" : "in memory")) {
        auto first = make_engine(stage, save_offloaded ? offload : Offload{}, nvme);
        train(*first, 6);
        first->save_checkpoint(dir, "mid");
        auto second = make_engine(stage, save_offloaded ? Offload{} : offload, nvme);
        second->load_checkpoint(dir, "mid");
        REQUIRE(second->global_steps() == 6);
        REQUIRE(train(*second, 6) == tail);
        require_same_weights(*reference, *second);
      }
    }
  }
}

TEST_CASE("too few swap buffers, or a missing path, name the key and what would work", "[mpi][offload]") {
  const std::string nvme = nvme_dir("buffers");
  Offload offload;
  offload.on = true;
  offload.pipeline_read = offload.pipeline_write = true;
  offload.buffer_count = 4;  // DeepSpeed's default; Adam's 3 shards and the gradient x 3 sub-groups need 12
  expect_error([&] { make_engine(2, offload, nvme); }, "zero_optimization.offload_optimizer.buffer_count",
               "set buffer_count to 12");
  offload.buffer_count = 12;
  REQUIRE_NOTHROW(make_engine(2, offload, nvme));  // the value named works
  const ds::Error absent = expect_error([&] { make_engine(2, offload, nvme + "/absent"); },
                                        "zero_optimization.offload_optimizer.nvme_path", "does not exist");
  CHECK(absent.path() == nvme + "/absent");
}

TEST_CASE("a swap file cut short mid-run ends the step with the file and offset", "[mpi][offload]") {
  if (ds::comm::get_world_size() != 1) return;  // one rank failing alone would leave the others waiting
  const std::string nvme = nvme_dir("fault");
  Offload offload;
  offload.on = true;
  offload.pipeline_read = true;
  auto engine = make_engine(2, offload, nvme);
  train(*engine, 2);
  const std::string victim = engine->optimizer_swapper()->path_of(2);  // exp_avg_sq
  REQUIRE(::truncate(victim.c_str(), 8192) == 0);
  const ds::Error error = caught_error([&] { train(*engine, 1); });
  CHECK(error.path() == victim);
  REQUIRE(error.offset().has_value());
  CHECK(*error.offset() >= 8192);
}

TEST_CASE("NVMe parameter offload, alone and with the optimizer's, reproduces the in-memory engine", "[mpi][offload]") {
  const std::string nvme = nvme_dir("params");
  constexpr int kSteps = 20;
  auto reference = make_engine(3, {}, nvme);
  const std::vector<double> expected = train(*reference, kSteps);
  const int64_t in_memory_bytes = reference->model_state_bytes().parameters;
  struct Case {
    const char* name;
    bool optimizer;
    int buffer_count;
    int64_t max_in_cpu;
  };
  // One buffer: every gather waits for the previous one to give its buffer back. Five: reads run
  // ahead. A third of the shard resident (max_in_cpu): both kinds of chunk in one step.
  for (const Case& c : {Case{"parameters, one buffer", false, 1, 0}, Case{"parameters, five buffers", false, 5, 0},
                        Case{"parameters and optimizer, a third resident", true, 5, shard_numel() / 3}}) {
    DYNAMIC_SECTION(c.name) {
      Offload offload;
      offload.params = true;
      offload.param_buffer_count = c.buffer_count;
      offload.max_in_cpu = c.max_in_cpu;
      offload.on = c.optimizer;
      offload.pipeline_read = offload.pipeline_write = c.optimizer;
      std::string folder;
      {
        auto engine = make_engine(3, offload, nvme);
        const ds::zero::ParamSwapper& swap = *engine->parameter_coordinator()->swapper();
        // With the optimizer's master file on the same disk, the chunks are read from it: no
        // parameter file, nothing written for the parameters.
        const int64_t param_writes = c.optimizer ? 0 : param_file_bytes(c.max_in_cpu);
        const int64_t param_reads = c.optimizer ? param_window_bytes(c.max_in_cpu) : param_file_bytes(c.max_in_cpu);
        if (c.optimizer) {
          REQUIRE(swap.path() == engine->optimizer_swapper()->path_of(0));
          REQUIRE(swap.folder().empty());
          REQUIRE(swap.file_bytes() == 0);
          for (const auto& entry : fs::directory_iterator(nvme))
            CHECK(entry.path().filename().string().rfind("dstrain-param-", 0) != 0);
          folder = engine->optimizer_swapper()->folder();
        } else {
          folder = swap.folder();
          REQUIRE(static_cast<int64_t>(fs::file_size(swap.path())) == param_file_bytes(c.max_in_cpu));
        }
        REQUIRE(fs::path(folder).parent_path() == fs::path(nvme));
        REQUIRE(swap.resident_numel() + swap.swapped_numel() == shard_numel());
        engine->take_swap_stats();  // the initial writes

        const auto start = std::chrono::steady_clock::now();
        REQUIRE(train(*engine, kSteps) == expected);  // bitwise
        const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        require_same_weights(*reference, *engine);
        // Each step writes every swapped chunk once, unless the master file holds them (plus the
        // optimizer's three files and the gradient whole), and reads each at least once.
        const ds::io::SwapStats stats = engine->take_swap_stats();
        // With the optimizer, a chunk inside one of the sub-groups it keeps in memory between steps
        // (from step 2 on, the first 3 that the next step visits: up the shard, then down) is
        // taken from there, not read.
        const ds::io::SwapStats optimizer_bytes = c.optimizer ? optimizer_swap_bytes(offload, kSteps, 1) : ds::io::SwapStats{};
        int64_t param_read_bytes = 0;
        for (int t = 0; t < kSteps; ++t) {
          const int64_t group = round_up(offload.sub_group_size, 1024);
          const int64_t groups = (shard_numel() + group - 1) / group;
          param_read_bytes += !c.optimizer ? param_reads : param_window_bytes(c.max_in_cpu, [&](int64_t offset, int64_t numel) {
            const int64_t j = offset / group, k = t % 2 == 0 ? j : groups - 1 - j;
            return t > 0 && k < 3 && offset + numel <= (j + 1) * group;
          });
        }
        CHECK(stats.write_bytes == kSteps * param_writes + optimizer_bytes.write_bytes);
        CHECK(stats.read_bytes >= param_read_bytes + optimizer_bytes.read_bytes);
        if (c.optimizer) CHECK(param_read_bytes < kSteps * param_reads);
        // The engine's seconds are the process's time with reads (writes) in flight, the two
        // swappers' overlapping reads counted once: within the wall time.
        CHECK(stats.read_seconds > 0);
        CHECK(stats.read_seconds <= wall);
        CHECK(stats.write_seconds > 0);
        CHECK(stats.write_seconds <= wall);
        // The partition is not in memory: only the swap buffers and the resident chunks are, beside
        // the fp32 master while the optimizer is in memory (in memory, that master is the partition),
        // and the whole parameters that the in-memory engine holds too.
        const int64_t master_bytes = c.optimizer ? 0 : 4 * shard_numel();
        CHECK(engine->model_state_bytes().parameters - master_bytes - swap.memory_bytes() ==
              in_memory_bytes - 4 * shard_numel());
      }
      CHECK(!fs::exists(folder));  // removed with the engine
    }
  }
}

// A read queued ahead and waited for a second later: the swappers' read_seconds count the time
// the read was in flight (milliseconds for 1 MiB), not the second the caller spent elsewhere.
TEST_CASE("swap read seconds exclude the caller's time between queueing a read and waiting for it", "[mpi][offload]") {
  const std::string nvme = nvme_dir("busy");
  constexpr int64_t kNumel = int64_t{1} << 18;
  constexpr auto kElsewhere = std::chrono::seconds(1);

  SECTION("parameter swapper, a read ahead") {
    ds::zero::ParamSwapper::Options options;
    options.nvme_path = nvme;
    options.rank = ds::comm::get_rank();
    options.chunks = {{0, kNumel}};
    options.buffer_count = 1;
    options.buffer_size = kNumel;
    ds::zero::ParamSwapper swapper(options);
    const std::vector<float> values(kNumel, 1.0f);
    swapper.store_range(values.data(), 0, kNumel);
    swapper.finish_writes();
    swapper.take_stats();
    REQUIRE(swapper.read_ahead(0));
    std::this_thread::sleep_for(kElsewhere);
    CHECK(swapper.acquire(0)[kNumel - 1] == 1.0f);
    swapper.release(0);
    const ds::io::SwapStats stats = swapper.take_stats();
    CHECK(stats.read_bytes == kNumel * 4);
    CHECK(stats.read_seconds > 0);
    CHECK(stats.read_seconds < 0.5);  // the margin: the read on a loaded disk
  }
  SECTION("optimizer swapper, pipeline_read") {
    ds::zero::OptimizerSwapper::Options options;
    options.nvme_path = nvme;
    options.rank = ds::comm::get_rank();
    options.names = {"master"};
    options.shard_numel = 4 * kNumel;  // sub-group 0 written back (the last three are kept unwritten)
    options.sub_group_size = kNumel;
    options.buffer_count = 3;
    options.pipeline_read = options.pipeline_write = true;
    ds::zero::OptimizerSwapper swapper(options);
    swapper.swap_in(0);  // queues sub-groups 1 and 2's reads
    swapper.swap_out(0);  // queues 0's write
    swapper.take_stats();  // their bytes were counted when they were queued, their seconds are not yet
    std::this_thread::sleep_for(kElsewhere);
    for (int64_t i = 1; i < 4; ++i) {
      swapper.swap_in(i);
      swapper.swap_out(i);  // 1: waits for 0's write, whose slot 3 is read into
    }
    swapper.finish_step();
    const ds::io::SwapStats stats = swapper.take_stats();
    CHECK(stats.read_seconds > 0);
    CHECK(stats.read_seconds < 0.5);
    CHECK(stats.write_seconds > 0);
  }
}

TEST_CASE("checkpoints move between runs with parameters on NVMe and in memory", "[mpi][offload]") {
  const std::string nvme = nvme_dir("param_checkpoint");
  const std::string dir = nvme + "/checkpoints";
  Offload offload;
  offload.params = true;
  offload.on = true;
  auto reference = make_engine(3, {}, nvme);
  const std::vector<double> expected = train(*reference, 12);
  const std::vector<double> tail(expected.begin() + 6, expected.end());
  for (bool save_offloaded : {true, false}) {
    DYNAMIC_SECTION("saved " << (save_offloaded ? "offloaded" : "in memory")) {
      auto first = make_engine(3, save_offloaded ? offload : Offload{}, nvme);
      train(*first, 6);
      first->save_checkpoint(dir, "mid");
      auto second = make_engine(3, save_offloaded ? Offload{} : offload, nvme);
      second->load_checkpoint(dir, "mid");
      REQUIRE(second->global_steps() == 6);
      REQUIRE(train(*second, 6) == tail);
      require_same_weights(*reference, *second);
    }
  }
}

TEST_CASE("parameter swap buffers too small or too few, or the wrong stage, name the key and what works",
          "[mpi][offload]") {
  const std::string nvme = nvme_dir("param_buffers");
  Offload offload;
  offload.params = true;
  const std::vector<int64_t> chunks = chunk_numels();
  const int64_t largest = *std::max_element(chunks.begin(), chunks.end());
  offload.param_buffer_size = largest - 1;
  expect_error([&] { make_engine(3, offload, nvme); }, "zero_optimization.offload_param.buffer_size",
               "set buffer_size to " + std::to_string(largest));
  offload.param_buffer_size = largest;
  offload.param_buffer_count = 0;
  expect_error([&] { make_engine(3, offload, nvme); }, "zero_optimization.offload_param.buffer_count",
               "set buffer_count to 1");
  offload.param_buffer_count = 1;
  REQUIRE_NOTHROW(make_engine(3, offload, nvme));  // the values named work
  expect_error([&] { make_engine(2, offload, nvme); }, "zero_optimization.offload_param.device", "stage 2");
}

TEST_CASE("a parameter swap file cut short mid-run ends the forward with the file and offset", "[mpi][offload]") {
  if (ds::comm::get_world_size() != 1) return;  // one rank failing alone would leave the others waiting
  const std::string nvme = nvme_dir("param_fault");
  Offload offload;
  offload.params = true;
  auto engine = make_engine(3, offload, nvme);
  train(*engine, 2);
  const std::string victim = engine->parameter_coordinator()->swapper()->path();
  REQUIRE(::truncate(victim.c_str(), 8192) == 0);
  const ds::Error error = caught_error([&] { train(*engine, 1); });
  CHECK(error.path() == victim);
  REQUIRE(error.offset().has_value());
  CHECK(*error.offset() >= 8192);
}
