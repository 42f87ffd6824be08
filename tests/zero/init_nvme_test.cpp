// Partitioned construction onto NVMe (ds::zero::Init with offload_param.device "nvme"): each chunk
// is in the build file as soon as its module is built, equal to the GPT built whole after the same
// seed (the independent reference); the engine takes the chunks over into its parameter swap file
// and trains bit for bit as the engines built in memory, with and without parameter offload; the
// build folder holds the padded chunks and goes when nothing refers to it; a bad nvme_path fails
// at Init naming the key.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/engine/engine.hpp"
#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/remove_tree.hpp"
#include "dstrain/zero/init.hpp"
#include "dstrain/zero/param_swapper.hpp"
#include "training_loop.hpp"

namespace {

namespace fs = std::filesystem;
using Engine = ds::Engine<ds::models::GPT>;

constexpr int64_t kSeed = 5;
constexpr int64_t kPersistence = 100;

// A folder on disk (tmpfs may lack O_DIRECT), fresh per test and world size.
std::string nvme_dir(const std::string& name) {
  const std::string dir =
      (fs::temp_directory_path() / ("dstrain_init_" + name + "_np" + std::to_string(ds::comm::get_world_size()))).string();
  if (ds::comm::get_rank() == 0) {
    ds::remove_tree(dir);
    fs::create_directories(dir);
  }
  ds::comm::init_distributed("mpi")->barrier();
  return dir;
}

// Stage 3, AdamW; offload_param on NVMe in nvme_path unless it is empty.
ds::Config config(const std::string& nvme_path, int stage = 3) {
  nlohmann::json zero = {{"stage", stage},
                         {"reduce_bucket_size", 3000},
                         {"stage3_param_persistence_threshold", kPersistence}};
  if (!nvme_path.empty())
    zero["offload_param"] = {{"device", "nvme"}, {"nvme_path", nvme_path}, {"buffer_count", 2}, {"max_in_cpu", 0}};
  return ds::Config::from_json({{"train_micro_batch_size_per_gpu", 8 / ds::comm::get_world_size()},
                                {"gradient_clipping", 0.5},
                                {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 3e-3}, {"weight_decay", 0.01}}}}},
                                {"zero_optimization", zero},
                                {"aio", {{"block_size", 8192}, {"queue_depth", 4}}}});
}

ds::models::GPT make_model() {
  return ds::models::GPT(ds::models::GPTConfig::from_json(
      {{"n_layer", 2}, {"n_head", 2}, {"n_embd", 32}, {"block_size", 16}, {"vocab_size", 64}, {"dropout", 0.0}}));
}

ds::models::GPT build(const ds::Config& config) {
  torch::manual_seed(kSeed);
  return ds::zero::build(config, make_model);
}

// This rank's build folders in nvme_path.
std::vector<fs::path> build_folders(const std::string& nvme_path) {
  const std::string prefix = "dstrain-build-rank" + std::to_string(ds::comm::get_rank()) + "-";
  std::vector<fs::path> found;
  for (const auto& entry : fs::directory_iterator(nvme_path))
    if (entry.path().filename().string().rfind(prefix, 0) == 0) found.push_back(entry.path());
  return found;
}

// Checks each parameter of built against whole's (the GPT built whole after the same seed): small
// ones whole and equal, the others partitioned with one element in memory and this rank's chunk,
// zero-padded, in the build file. Returns the file size that makes: each chunk padded to 4096 bytes.
int64_t check_chunks(ds::models::GPT& whole, ds::models::GPT& built) {
  const int world = ds::comm::get_world_size();
  const int rank = ds::comm::get_rank();
  int64_t file_bytes = 0;
  auto whole_params = whole->named_parameters();
  auto built_params = built->named_parameters();
  REQUIRE(whole_params.size() == built_params.size());
  for (size_t i = 0; i < whole_params.size(); ++i) {
    const at::Tensor& expected = whole_params[i].value();
    const at::Tensor& param = built_params[i].value();
    INFO(whole_params[i].key());
    REQUIRE(param.sizes() == expected.sizes());
    const int64_t numel = expected.numel();
    if (numel <= kPersistence) {
      REQUIRE(torch::equal(param, expected));
      continue;
    }
    REQUIRE(ds::zero::is_partitioned(param));
    REQUIRE(param.storage().nbytes() == sizeof(float));  // memory holds one element, not the chunk
    const int64_t chunk = (numel + world - 1) / world;
    file_bytes += (chunk * 4 + 4095) / 4096 * 4096;
    const at::Tensor mine = ds::zero::partition_chunk(param);
    REQUIRE(mine.numel() == chunk);
    const int64_t begin = std::min(rank * chunk, numel);
    const int64_t valid = std::min(chunk, numel - begin);
    REQUIRE(torch::equal(mine.narrow(0, 0, valid), expected.reshape({-1}).narrow(0, begin, valid)));
    REQUIRE(mine.narrow(0, valid, chunk - valid).count_nonzero().item<int64_t>() == 0);
  }
  return file_bytes;
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

}  // namespace

TEST_CASE("ds::zero::Init with offload_param on NVMe builds the partition onto disk", "[mpi][zero]") {
  const std::string nvme = nvme_dir("build");
  torch::manual_seed(kSeed);
  ds::models::GPT whole = make_model();
  ds::models::GPT built = build(config(nvme));
  if (ds::comm::get_world_size() == 1) {
    // Init is inactive on one rank: the model is built whole, nothing goes to disk.
    REQUIRE(build_folders(nvme).empty());
    for (const at::Tensor& param : built->parameters()) REQUIRE_FALSE(ds::zero::is_partitioned(param));
    return;
  }

  const std::vector<fs::path> folders = build_folders(nvme);
  REQUIRE(folders.size() == 1);
  const fs::path file = folders.front() / "partition.swp";
  REQUIRE(static_cast<int64_t>(fs::file_size(file)) == check_chunks(whole, built));

  SECTION("the engine takes the chunks over and the build folder goes") {
    auto engine = ds::initialize(built, config(nvme));
    CHECK(!fs::exists(folders.front()));
    const ds::zero::ParamSwapper& swap = *engine->parameter_coordinator()->swapper();
    CHECK(fs::exists(swap.path()));
    const auto weights = engine->consolidated_weights();
    for (const auto& item : whole->named_parameters()) REQUIRE(torch::equal(weights.at(item.key()), item.value()));
  }
  SECTION("dropping the model removes the build folder") {
    built = nullptr;
    CHECK(!fs::exists(folders.front()));
  }
}

TEST_CASE("a GPT built onto NVMe trains as the GPTs built in memory", "[mpi][zero]") {
  const std::string nvme = nvme_dir("train");
  constexpr int kSteps = 20;
  // The reference: built partitioned in memory, trained in memory.
  ds::models::GPT in_memory = build(config(""));
  auto reference = ds::initialize(in_memory, config(""));
  const std::vector<double> expected = train(*reference, kSteps);
  // The existing offload path: built in memory, the engine moves the chunks to its swap file.
  ds::models::GPT built_in_memory = build(config(""));
  auto offloaded = ds::initialize(built_in_memory, config(nvme));
  // Built onto NVMe.
  ds::models::GPT on_disk = build(config(nvme));
  auto from_disk = ds::initialize(on_disk, config(nvme));
  REQUIRE(build_folders(nvme).empty());

  REQUIRE(train(*offloaded, kSteps) == expected);  // bitwise
  REQUIRE(train(*from_disk, kSteps) == expected);
  require_same_weights(*reference, *offloaded);
  require_same_weights(*reference, *from_disk);
}

TEST_CASE("a bad offload_param.nvme_path fails the build naming the key; inactive Inits touch no disk",
          "[mpi][zero]") {
  const std::string nvme = nvme_dir("bad_path");
  const std::string file = nvme + "/not_a_folder_rank" + std::to_string(ds::comm::get_rank());
  { std::ofstream(file) << "x"; }
  for (const std::string& path : {nvme + "/missing", file}) {
    INFO(path);
    if (ds::comm::get_world_size() == 1) {
      REQUIRE_NOTHROW(build(config(path)));  // one rank: Init is inactive, the path is the engine's business
      continue;
    }
    try {
      build(config(path));
      FAIL("no error");
    } catch (const ds::Error& e) {
      CHECK(e.key() == std::string("zero_optimization.offload_param.nvme_path"));
      CHECK(e.path() == path);
    }
    CHECK(ds::zero::Init::active() == nullptr);
  }
  // Below stage 3 Init does nothing, offload_param or not.
  ds::models::GPT stage2 = build(config(nvme, 2));
  CHECK(build_folders(nvme).empty());
  for (const at::Tensor& param : stage2->parameters()) CHECK_FALSE(ds::zero::is_partitioned(param));
}
