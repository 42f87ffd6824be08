// Sharded checkpoints: resharding to other world sizes and stages against an uninterrupted run,
// flat memory at save and load (peak RSS from /proc/self/status), and one clear error, naming the
// file, for every fault a checkpoint can have.
#include <catch2/catch.hpp>
#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/engine/checkpoint/folder.hpp"
#include "dstrain/engine/checkpoint/index.hpp"
#include "dstrain/engine/engine.hpp"
#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/io/crc32c.hpp"
#include "dstrain/runtime/error.hpp"
#include "shared_folder.hpp"
#include "training_loop.hpp"

namespace {

namespace fs = std::filesystem;
using Engine = ds::Engine<ds::models::GPT>;

constexpr int kGlobalBatch = 12;  // divisible by every group size used (1 to 4)

nlohmann::json model_block(int n_embd = 32) {
  return {{"n_layer", 2}, {"n_head", 2}, {"n_embd", n_embd}, {"block_size", 16}, {"vocab_size", 64}, {"dropout", 0.0}};
}

nlohmann::json config_json(int stage, int world, const nlohmann::json& model = model_block()) {
  return {{"train_micro_batch_size_per_gpu", kGlobalBatch / world},
          {"gradient_accumulation_steps", 1},
          {"gradient_clipping", 0.5},
          {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 3e-3}, {"weight_decay", 0.01}}}}},
          {"zero_optimization", {{"stage", stage}, {"reduce_bucket_size", 3000}, {"stage3_param_persistence_threshold", 0}}},
          {"dstrain", {{"model", model}}}};
}

std::shared_ptr<Engine> make_engine(const nlohmann::json& config, std::shared_ptr<ds::comm::Backend> group = nullptr) {
  torch::manual_seed(7);
  ds::models::GPT model(ds::models::GPTConfig::from_json(config["dstrain"]["model"]));
  return ds::initialize(model, ds::Config::from_json(config), group ? group : ds::comm::init_distributed("mpi"));
}

using training_loop::train;

std::string fresh_dir(const std::string& name) { return fresh_shared_folder("dstrain_ckpt_" + name); }

// Runs `body` on rank 0 only, the others waiting: edits to the shared checkpoint files. The first
// barrier keeps the edit from racing a rank still reading those files for the statement before.
template <class Fn>
void on_rank0(Fn body) {
  ds::comm::Backend& world = *ds::comm::init_distributed("mpi");
  world.barrier();
  if (world.rank() == 0) body();
  world.barrier();
}

// The error `body` throws (on every rank), as text.
template <class Fn>
std::string error_of(Fn body) {
  try {
    body();
  } catch (const ds::Error& e) {
    return e.what();
  }
  return "(no error)";
}

int64_t status_kib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  return -1;
}

// Peak RSS growth (bytes) while `body` runs: the kernel's high-water mark is reset first
// (clear_refs 5), so VmHWM afterwards is the peak of `body` alone.
template <class Fn>
int64_t peak_growth(Fn body) {
  std::ofstream("/proc/self/clear_refs") << "5";
  const int64_t before = status_kib("VmRSS");
  REQUIRE(status_kib("VmHWM") <= before + 64);  // the reset worked
  body();
  return (status_kib("VmHWM") - before) * 1024;
}

void flip_byte(const std::string& path, int64_t offset) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(offset);
  char c = 0;
  file.get(c);
  file.seekp(offset);
  file.put(static_cast<char>(c ^ 0x10));
}

}  // namespace

TEST_CASE("a sharded checkpoint reloads under other world sizes and stages", "[mpi][checkpoint]") {
  // Adam's state, and Lamb's, whose trust ratio needs each parameter's norms summed over the chunks
  // of whatever layout loads it.
  const nlohmann::json optimizers[] = {
      {{"type", "AdamW"}, {"params", {{"lr", 3e-3}, {"weight_decay", 0.01}}}},
      {{"type", "Lamb"}, {"params", {{"lr", 3e-3}, {"weight_decay", 0.01}, {"max_coeff", 0.3}}}}};
  for (const nlohmann::json& optimizer : optimizers) {
    const std::string type = optimizer["type"];
    INFO(type);
    const std::string dir = fresh_dir("reshard_" + type);
    const int world = ds::comm::get_world_size();
    std::vector<double> uninterrupted;
    {
      nlohmann::json config = config_json(3, world);
      config["optimizer"] = optimizer;
      auto engine = make_engine(config);
      train(*engine, 3);
      engine->save_checkpoint(dir);
      uninterrupted = train(*engine, 3);
    }
    {
      // The files: one shard per rank and an index that describes them.
      const ds::ckpt::CheckpointIndex index = ds::ckpt::CheckpointIndex::read(ds::ckpt::checkpoint_folder(dir, ""));
      REQUIRE(index.tag == "global_step3");
      REQUIRE(index.world_size == world);
      REQUIRE(index.partitions == world);
      REQUIRE(index.optimizer == type);
      REQUIRE(index.shards.size() == static_cast<size_t>(world));
      for (int r = 0; r < world; ++r)
        REQUIRE(fs::file_size(dir + "/global_step3/rank" + std::to_string(r) + ".bin") ==
                static_cast<uintmax_t>(index.shards[r].bytes));
    }
    // Two groups load it at once: rank 0 alone, and the other ranks (world - 1 of them).
    auto world_group = ds::comm::init_distributed("mpi");
    const int color = world_group->rank() == 0 ? 0 : 1;
    auto group = world_group->split(color, world_group->rank());
    for (int stage : {0, 1, 2, 3}) {
      INFO("world " << world << " -> " << group->world_size() << ", ZeRO 3 -> " << stage);
      nlohmann::json config = config_json(stage, group->world_size());
      config["optimizer"] = optimizer;
      auto engine = make_engine(config, group);
      engine->load_checkpoint(dir);
      REQUIRE(engine->global_steps() == 3);
      const std::vector<double> resumed = train(*engine, 3);
      for (size_t i = 0; i < resumed.size(); ++i)
        REQUIRE(std::abs(resumed[i] - uninterrupted[i]) <= 1e-6 * uninterrupted[i]);
    }
    world_group->barrier();
  }
}

TEST_CASE("the 1-bit family's shared state reloads under other world sizes", "[mpi][checkpoint]") {
  // Saved before the freeze at this world size, resumed through it in the two groups (rank 0 alone,
  // the others): the steps must be the group's own uninterrupted run. ZeroOneAdam's variance steps
  // are all full-precision here (var_update_scaler beyond the freeze), so before the freeze both
  // are world-size independent; OneBitLamb's running trust ratios (lamb_coeff_freeze, replicated
  // state) decide every step after it.
  constexpr int kFreeze = 4;
  const nlohmann::json optimizers[] = {
      {{"type", "OneBitLamb"},
       {"params", {{"lr", 3e-3}, {"weight_decay", 0.01}, {"max_coeff", 0.3}, {"freeze_step", kFreeze},
                   {"comm_backend_name", "mpi"}}}},
      {{"type", "ZeroOneAdam"},
       {"params", {{"lr", 3e-3}, {"weight_decay", 0.01}, {"var_freeze_step", kFreeze}, {"var_update_scaler", 100},
                   {"local_step_scaler", 1}, {"comm_backend_name", "mpi"}}}}};
  for (const nlohmann::json& optimizer : optimizers) {
    const std::string type = optimizer["type"];
    INFO(type);
    const std::string dir = fresh_dir("reshard_" + type);
    const int world = ds::comm::get_world_size();
    {
      nlohmann::json config = config_json(0, world);
      config["optimizer"] = optimizer;
      auto engine = make_engine(config);
      train(*engine, 3);
      engine->save_checkpoint(dir);
    }
    auto world_group = ds::comm::init_distributed("mpi");
    auto group = world_group->split(world_group->rank() == 0 ? 0 : 1, world_group->rank());
    INFO("world " << world << " -> " << group->world_size());
    nlohmann::json config = config_json(0, group->world_size());
    config["optimizer"] = optimizer;
    std::vector<double> uninterrupted;
    {
      auto engine = make_engine(config, group);
      uninterrupted = train(*engine, 3 + 4);
      uninterrupted.erase(uninterrupted.begin(), uninterrupted.begin() + 3);
    }
    auto engine = make_engine(config, group);
    engine->load_checkpoint(dir);
    REQUIRE(engine->global_steps() == 3);
    const std::vector<double> resumed = train(*engine, 4);
    // Steps 4-5 are the same arithmetic on other partial sums (1e-6). After the freeze a group of
    // one rank compresses nothing (1e-4); in a larger group the 1-bit sign decisions turn those
    // ulp-level differences into steps of ±scale (in ZeroOneAdam's zero-gradient directions, of
    // lr·scale/eps: docs/optimizers.md), so there only the steps before the freeze are compared.
    const size_t compared = group->world_size() == 1 ? resumed.size() : 2;
    for (size_t i = 0; i < compared; ++i)
      REQUIRE(std::abs(resumed[i] - uninterrupted[i]) <= (i < 2 ? 1e-6 : 1e-4) * uninterrupted[i]);
    for (double loss : resumed) REQUIRE(std::isfinite(loss));
    world_group->barrier();
  }
}

TEST_CASE("saving and loading at stage 3 raise peak RSS by at most one bucket", "[mpi][checkpoint]") {
  const std::string dir = fresh_dir("memory");
  const int world = ds::comm::get_world_size();
  // ~1.6 M parameters: 19 MB of fp32 master weights and Adam state in all, 19/world MB per rank.
  nlohmann::json config = config_json(3, world, model_block(256));
  config["zero_optimization"]["reduce_bucket_size"] = 50000;  // a 200 KB bucket
  auto engine = make_engine(config);
  train(*engine, 1);
  const ds::ModelStateBytes bytes = engine->model_state_bytes();
  const int64_t bucket = engine->checkpoint_bucket_bytes();
  REQUIRE(bucket == 200000);
  const int64_t save = peak_growth([&] { engine->save_checkpoint(dir); });
  const int64_t load = peak_growth([&] { engine->load_checkpoint(dir); });
  INFO("rank " << ds::comm::get_rank() << ": optimizer state " << bytes.optimizer << " B, bucket " << bucket
       << " B; peak RSS growth at save " << save << " B, at load " << load << " B");
  // One bucket, plus 1 MiB for the allocator's and the index's small change.
  REQUIRE(save <= bucket + (1 << 20));
  REQUIRE(load <= bucket + (1 << 20));
  REQUIRE(bytes.optimizer * world > 4 * (bucket + (1 << 20)));  // gathering the state whole would not pass
}

TEST_CASE("every damaged or mismatched checkpoint is an error naming the file", "[mpi][checkpoint]") {
  const int world = ds::comm::get_world_size();
  const std::string dir = fresh_dir("faults");
  {
    auto engine = make_engine(config_json(1, world));
    train(*engine, 2);
    engine->save_checkpoint(dir);
  }
  const std::string folder = dir + "/global_step2";
  const std::string shard = folder + "/rank0.bin";
  auto load = [&](const nlohmann::json& config) { return error_of([&] { make_engine(config)->load_checkpoint(dir); }); };
  const nlohmann::json good = config_json(1, world);
  REQUIRE(load(good) == "(no error)");

  SECTION("a flipped bit") {
    on_rank0([&] { flip_byte(shard, static_cast<int64_t>(fs::file_size(shard) / 2)); });
    const std::string e = load(good);
    REQUIRE_THAT(e, Catch::Contains("corrupted") && Catch::Contains(shard));
  }
  SECTION("a truncated shard") {
    on_rank0([&] { fs::resize_file(shard, fs::file_size(shard) - 100); });
    REQUIRE_THAT(load(good), Catch::Contains("truncated") && Catch::Contains(shard));
  }
  SECTION("a missing shard") {
    on_rank0([&] { fs::remove(shard); });
    REQUIRE_THAT(load(good), Catch::Contains(shard));
  }
  SECTION("a truncated index") {
    on_rank0([&] { fs::resize_file(folder + "/index.json", 100); });
    REQUIRE_THAT(load(good), Catch::Contains("not valid JSON") && Catch::Contains(folder + "/index.json"));
  }
  SECTION("an empty latest") {
    on_rank0([&] { std::ofstream(dir + "/latest", std::ios::trunc); });
    REQUIRE_THAT(load(good), Catch::Contains("'latest' is empty") && Catch::Contains(dir + "/latest"));
  }
  SECTION("a latest naming a missing checkpoint") {
    on_rank0([&] { std::ofstream(dir + "/latest", std::ios::trunc) << "global_step9\n"; });
    REQUIRE_THAT(load(good), Catch::Contains("global_step9") && Catch::Contains("index.json"));
  }
  SECTION("another optimizer") {
    nlohmann::json sgd = good;
    sgd["optimizer"] = {{"type", "SGD"}, {"params", {{"lr", 0.1}, {"momentum", 0.9}}}};
    REQUIRE_THAT(load(sgd), Catch::Contains("optimizer AdamW, this run configures SGD") && Catch::Contains("index.json"));
  }
  SECTION("another model") {
    nlohmann::json fewer = good;
    fewer["dstrain"]["model"]["n_layer"] = 1;
    REQUIRE_THAT(load(fewer), Catch::Contains("n_layer 2 -> 1"));
    nlohmann::json heads = good;
    heads["dstrain"]["model"]["n_head"] = 4;
    REQUIRE_THAT(load(heads), Catch::Contains("n_head 2 -> 4"));
  }
  SECTION("an interrupted save leaves the previous checkpoint loadable and its debris is removed") {
    // What a save killed before its rename leaves: a partial folder, a temporary latest.
    on_rank0([&] {
      fs::create_directories(dir + "/.global_step4.partial");
      std::ofstream(dir + "/.global_step4.partial/rank0.bin") << "half";
      std::ofstream(dir + "/latest.tmp.12345") << "global_st";
    });
    REQUIRE(load(good) == "(no error)");
    auto engine = make_engine(good);
    engine->load_checkpoint(dir);
    train(*engine, 2);
    engine->save_checkpoint(dir);
    REQUIRE(!fs::exists(dir + "/.global_step4.partial"));
    REQUIRE(!fs::exists(dir + "/latest.tmp.12345"));
    REQUIRE(ds::ckpt::checkpoint_folder(dir, "") == dir + "/global_step4");
  }
}

TEST_CASE("diverged weights never become a checkpoint", "[mpi][checkpoint]") {
  const std::string dir = fresh_dir("diverged");
  const int world = ds::comm::get_world_size();
  nlohmann::json config = config_json(2, world);
  auto engine = make_engine(config);
  train(*engine, 1);
  engine->save_checkpoint(dir);
  config["optimizer"]["params"]["lr"] = 1e30;  // weights of ~1e30 overflow the next forward
  config["gradient_clipping"] = 0.0;
  auto diverging = make_engine(config);
  diverging->load_checkpoint(dir);
  train(*diverging, 4);
  REQUIRE_THAT(error_of([&] { diverging->save_checkpoint(dir); }), Catch::Contains("not finite"));
  REQUIRE(ds::ckpt::checkpoint_folder(dir, "") == dir + "/global_step1");
  REQUIRE(!fs::exists(dir + "/global_step5"));
  REQUIRE(!fs::exists(dir + "/.global_step5.partial"));
}

// The index as a hand editor leaves it: `edit` applied to the saved index.json, written back by rank
// 0 with index_crc32c recomputed as docs/checkpoints.md says (CRC-32C of the compact dump, keys
// sorted) when `recompute`, else with the saved checksum.
template <class Edit>
void rewrite_index(const std::string& path, Edit edit, bool recompute) {
  ds::comm::init_distributed("mpi")->barrier();  // every rank has read the saved index by now
  on_rank0([&] {
    nlohmann::json json = nlohmann::json::parse(std::ifstream(path));
    edit(json);
    if (recompute) {
      json.erase("index_crc32c");
      const std::string body = json.dump();
      json["index_crc32c"] = ds::io::crc32c(0, body.data(), body.size());
    }
    std::ofstream(path, std::ios::trunc) << json.dump(1);
  });
}

TEST_CASE("an index.json edited by hand is an error naming the file and the field", "[mpi][checkpoint]") {
  const int world = ds::comm::get_world_size();
  const std::string dir = fresh_dir("edited_index");
  {
    auto engine = make_engine(config_json(1, world));
    train(*engine, 2);
    engine->save_checkpoint(dir);
  }
  const std::string index = dir + "/global_step2/index.json";
  const nlohmann::json saved = nlohmann::json::parse(std::ifstream(index));
  const std::string name3 = saved["params"][3]["name"];
  const int64_t offset3 = saved["params"][3]["shard_offset"];
  auto load = [&] { return error_of([&] { make_engine(config_json(1, world))->load_checkpoint(dir); }); };
  using Json = nlohmann::json;

  SECTION("rewritten unchanged with the recomputed checksum, it loads") {
    rewrite_index(index, [](Json&) {}, true);
    REQUIRE(load() == "(no error)");
  }
  SECTION("an edit that leaves the checksum") {
    rewrite_index(index, [](Json& j) { j["params"][3]["shard_offset"] = j["params"][3]["shard_offset"].get<int64_t>() + 7; }, false);
    REQUIRE_THAT(load(), Catch::Contains("index is corrupted or was edited") && Catch::Contains(index));
  }
  SECTION("a shard_offset + 7") {
    rewrite_index(index, [](Json& j) { j["params"][3]["shard_offset"] = j["params"][3]["shard_offset"].get<int64_t>() + 7; }, true);
    REQUIRE_THAT(load(), Catch::Contains("params[3] ('" + name3 + "').shard_offset: " + std::to_string(offset3 + 7) +
                                         ", expected " + std::to_string(offset3)) &&
                             Catch::Contains(index));
  }
  SECTION("exp_avg's and exp_avg_sq's offsets swapped") {
    rewrite_index(index, [](Json& j) {
      Json& s = j["shards"][0]["sections"];
      std::swap(s[1]["offset"], s[2]["offset"]);
    }, true);
    const int64_t expected = saved["shards"][0]["sections"][1]["offset"];
    REQUIRE_THAT(load(), Catch::Contains("shards[0].sections[1] ('optim/exp_avg').offset: " +
                                         saved["shards"][0]["sections"][2]["offset"].dump() + ", expected " +
                                         std::to_string(expected)) &&
                             Catch::Contains(index));
  }
  SECTION("a section reaching past the end of its shard") {
    rewrite_index(index, [](Json& j) { j["shards"][0]["sections"].back()["bytes"] = j["shards"][0]["sections"].back()["bytes"].get<int64_t>() + 4; }, true);
    REQUIRE_THAT(load(), Catch::Contains("shards[0].bytes: ") && Catch::Contains(index));
  }
  SECTION("a chunk that is not ceil(numel / partitions)") {
    rewrite_index(index, [](Json& j) { j["params"][0]["chunk"] = j["params"][0]["chunk"].get<int64_t>() + 1; }, true);
    REQUIRE_THAT(load(), Catch::Contains("params[0] ('" + saved["params"][0]["name"].get<std::string>() + "').chunk") &&
                             Catch::Contains(index));
  }
  SECTION("a negative step") {
    rewrite_index(index, [](Json& j) { j["counters"]["global_steps"] = -5; }, true);
    REQUIRE_THAT(load(), Catch::Contains("counters.global_steps: -5 is below 0") && Catch::Contains(index));
  }
  // Found by tests/fuzz (regressions/index): a float where an integer belongs reached nlohmann's
  // undefined float-to-integer cast; a shape whose product overflows, signed overflow.
  SECTION("a float where an integer belongs") {
    rewrite_index(index, [](Json& j) { j["shard_numel"] = 2.35556e+85; }, true);
    REQUIRE_THAT(load(), Catch::Contains("shard_numel: must be an integer in range") && Catch::Contains(index));
  }
  SECTION("a shape whose element count overflows") {
    rewrite_index(index, [](Json& j) { j["params"][0]["shape"] = {int64_t{1} << 40, int64_t{1} << 40}; }, true);
    REQUIRE_THAT(load(), Catch::Contains("params[0] ('" + saved["params"][0]["name"].get<std::string>() + "').shape") &&
                             Catch::Contains(index));
  }
  SECTION("counters that disagree") {
    rewrite_index(index, [](Json& j) { j["counters"]["optimizer_steps"] = 3; }, true);
    REQUIRE_THAT(load(), Catch::Contains("counters.global_steps: 2, but optimizer_steps 3 + skipped_steps 0 = 3") &&
                             Catch::Contains(index));
  }
}

TEST_CASE("a save folder holds one job at a time, and saves remove only the debris of processes that are gone",
          "[mpi][checkpoint]") {
  const int world = ds::comm::get_world_size();
  const std::string dir = fresh_dir("lock");
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string self = std::string(host) + "." + std::to_string(::getpid());
  std::string gone;
  on_rank0([&] {
    fs::create_directories(dir);
    {
      ds::SaveDirLock first(dir);
      const std::string holder = "host " + std::string(host) + " pid " + std::to_string(::getpid());
      REQUIRE_THAT(error_of([&] { ds::SaveDirLock second(dir); }),
                   Catch::Contains("in use by another dstrain job (" + holder + ")") &&
                       Catch::Contains(dir + "/.dstrain.lock"));
    }
    REQUIRE(error_of([&] { ds::SaveDirLock again(dir); }) == "(no error)");  // released with the first
    // A pid no process of this host runs (the highest free one).
    int64_t pid_max = 0;
    std::ifstream("/proc/sys/kernel/pid_max") >> pid_max;
    int64_t free_pid = pid_max - 1;
    while (::kill(static_cast<pid_t>(free_pid), 0) == 0 || errno != ESRCH) --free_pid;
    gone = std::string(host) + "." + std::to_string(free_pid);
    for (const std::string& owner : {self, gone, std::string("other-host.1")})
      fs::create_directories(dir + "/.global_step9.partial." + owner);
  });
  auto engine = make_engine(config_json(1, world));
  train(*engine, 1);
  engine->save_checkpoint(dir);
  on_rank0([&] {
    REQUIRE(fs::exists(dir + "/.global_step9.partial." + self));          // its process is alive
    REQUIRE(fs::exists(dir + "/.global_step9.partial.other-host.1"));     // cannot be known from here
    REQUIRE(!fs::exists(dir + "/.global_step9.partial." + gone));         // its process is gone
    REQUIRE(ds::ckpt::checkpoint_folder(dir, "") == dir + "/global_step1");
  });
}

TEST_CASE("the newest tag complete in every one of several folders", "[mpi][checkpoint]") {
  const int world = ds::comm::get_world_size();
  const std::string a = fresh_dir("common_a"), b = fresh_dir("common_b");
  auto engine = make_engine(config_json(1, world));
  for (int step = 1; step <= 3; ++step) {
    train(*engine, 1);
    engine->save_checkpoint(a);
    if (step < 3) engine->save_checkpoint(b);  // b's step-3 save never happened
  }
  REQUIRE(ds::ckpt::newest_common_tag({a}) == "global_step3");
  REQUIRE(ds::ckpt::newest_common_tag({a, b}) == "global_step2");
  on_rank0([&] { fs::remove(b + "/global_step2/index.json"); });  // b's step-2 save incomplete
  REQUIRE(ds::ckpt::newest_common_tag({a, b}) == "global_step1");
  on_rank0([&] { fs::remove(b + "/global_step1/index.json"); });
  REQUIRE_THAT(error_of([&] { ds::ckpt::newest_common_tag({a, b}); }),
               Catch::Contains("no checkpoint is complete in every one of these folders") && Catch::Contains(b));
}
