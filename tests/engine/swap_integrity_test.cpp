// A stage-3 run with both offloads on NVMe whose swap files are changed behind its back between
// steps: the parameter file and the optimizer's files, overwritten with other bytes or cut to 4 KiB.
// Every time, the next step ends with a ds::Error naming the file it read (never a run that goes on
// with other values), because each block read back is checked against the CRC-32C of its write.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <vector>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/engine/engine.hpp"
#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/remove_tree.hpp"
#include "dstrain/zero/optimizer_swapper.hpp"
#include "dstrain/zero/param_swapper.hpp"
#include "training_loop.hpp"

namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using Engine = ds::Engine<ds::models::GPT>;

std::shared_ptr<Engine> make_engine(const std::string& nvme) {
  torch::manual_seed(5);
  ds::models::GPT model(ds::models::GPTConfig::from_json(
      {{"n_layer", 2}, {"n_head", 2}, {"n_embd", 32}, {"block_size", 16}, {"vocab_size", 64}, {"dropout", 0.0}}));
  const nlohmann::json config = {
      {"train_micro_batch_size_per_gpu", 8},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 3e-3}}}}},
      {"zero_optimization",
       {{"stage", 3},
        {"sub_group_size", 3000},
        {"stage3_param_persistence_threshold", 100},
        {"offload_optimizer", {{"device", "nvme"}, {"nvme_path", nvme}, {"buffer_count", 12}, {"pipeline_read", true}}},
        {"offload_param", {{"device", "nvme"}, {"nvme_path", nvme}, {"buffer_count", 5}, {"max_in_cpu", 0}}}}},
      {"aio", {{"block_size", 8192}, {"queue_depth", 4}, {"thread_count", 2}}}};
  return ds::initialize(model, ds::Config::from_json(config), ds::comm::init_distributed("mpi"));
}

// Garbage over the whole file, its size kept. (Not one spot: the parameter file also holds the
// chunks of persistent parameters, which stay whole in memory and are never read back.)
void overwrite_all(const std::string& path) {
  const std::vector<char> garbage(fs::file_size(path), 0x33);
  const int fd = ::open(path.c_str(), O_WRONLY);
  REQUIRE(fd >= 0);
  REQUIRE(::pwrite(fd, garbage.data(), garbage.size(), 0) == static_cast<ssize_t>(garbage.size()));
  ::close(fd);
}

}  // namespace

TEST_CASE("swap files changed between steps of a stage-3 run with both offloads end the run, every time",
          "[mpi][offload]") {
  if (ds::comm::get_world_size() != 1) return;  // one rank failing alone would leave the others waiting
  const std::string nvme = (fs::temp_directory_path() / ("dstrain_swap_integrity_" + std::to_string(::getpid()))).string();
  fs::create_directories(nvme);
  enum class Victim { Params, Master, ExpAvg, Gradients };
  for (Victim victim : {Victim::Params, Victim::Master, Victim::ExpAvg, Victim::Gradients}) {
    for (bool truncate : {false, true}) {
      for (int steps_before : {1, 3}) {
        DYNAMIC_SECTION("victim " << static_cast<int>(victim) << (truncate ? ", cut to 4 KiB" : ", overwritten")
                                  << " after " << steps_before << " step(s)") {
          auto engine = make_engine(nvme);
          training_loop::train(*engine, steps_before);
          const ds::zero::OptimizerSwapper& optimizer = *engine->optimizer_swapper();
          const std::string path = victim == Victim::Params      ? engine->parameter_coordinator()->swapper()->path()
                                   : victim == Victim::Master    ? optimizer.path_of(0)
                                   : victim == Victim::ExpAvg    ? optimizer.path_of(1)
                                                                 : optimizer.gradient_path();
          if (truncate)
            REQUIRE(::truncate(path.c_str(), 4096) == 0);
          else
            overwrite_all(path);
          std::optional<ds::Error> error;
          try {
            training_loop::train(*engine, 2);
          } catch (const ds::Error& e) {
            error = e;
          }
          // The gradient file is rewritten whole by the next backward before it is read: a change
          // to it between steps is overwritten, and the run rightly goes on.
          if (victim == Victim::Gradients) {
            CHECK_FALSE(error.has_value());
            continue;
          }
          REQUIRE(error.has_value());
          INFO(error->what());
          CHECK(error->path() == path);
          CHECK(error->offset().has_value());
          CHECK(error->rank() == 0);
          if (truncate)
            CHECK_THAT(error->message(), Contains("read past end of file") || Contains("CRC-32C"));
          else
            CHECK_THAT(error->message(), Contains("CRC-32C"));
        }
      }
    }
  }
  ds::remove_tree(nvme);
}
