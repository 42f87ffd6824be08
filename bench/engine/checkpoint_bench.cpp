// Sharded checkpoints at -np N: save and load time and each rank's peak RSS growth (VmHWM after a
// clear_refs reset) against the bucket bound and the state size a whole-tensor gather would need;
// and CRC-32C throughput, SSE4.2 against the table version.
//   mpirun -np 4 build/bench/engine/checkpoint_bench --n-embd 512 --n-layer 4 --stage 3 --dir /tmp/ckb
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/engine/engine.hpp"
#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/engine/models/loss.hpp"
#include "dstrain/io/crc32c.hpp"
#include "dstrain/runtime/remove_tree.hpp"

namespace {

int64_t status_kib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  return -1;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// {seconds, peak RSS growth in bytes} of `body`.
template <class Fn>
std::pair<double, double> measure(ds::comm::Backend& world, Fn body) {
  std::ofstream("/proc/self/clear_refs") << "5";
  const int64_t before = status_kib("VmRSS");
  world.barrier();
  const auto start = std::chrono::steady_clock::now();
  body();
  world.barrier();
  const double seconds = seconds_since(start);
  at::Tensor growth = at::full({1}, double(status_kib("VmHWM") - before) * 1024, at::kDouble);
  world.all_reduce(growth, ds::comm::ReduceOp::Max);
  return {seconds, growth.item<double>()};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sharded checkpoint bench"};
  int n_embd = 512, n_layer = 4, stage = 3, repeats = 3;
  int64_t bucket = 1000000;
  std::string dir = "/tmp/dstrain_checkpoint_bench";
  app.add_option("--n-embd", n_embd);
  app.add_option("--n-layer", n_layer);
  app.add_option("--stage", stage);
  app.add_option("--bucket", bucket, "reduce_bucket_size (elements)");
  app.add_option("--repeats", repeats);
  app.add_option("--dir", dir);
  CLI11_PARSE(app, argc, argv);
  auto world = ds::comm::init_distributed("mpi");
  const nlohmann::json model = {{"n_layer", n_layer}, {"n_head", 8},      {"n_embd", n_embd},
                                {"block_size", 64},   {"vocab_size", 512}, {"dropout", 0.0}};
  torch::manual_seed(1);
  ds::models::GPT gpt(ds::models::GPTConfig::from_json(model));
  auto engine = ds::initialize(
      gpt,
      ds::Config::from_json({{"train_micro_batch_size_per_gpu", 2},
                             {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-3}}}}},
                             {"zero_optimization", {{"stage", stage}, {"reduce_bucket_size", bucket}}},
                             {"dstrain", {{"model", model}}}}),
      world);
  {
    at::Tensor x = torch::randint(512, {2, 64}, torch::kLong);
    engine->backward(ds::models::cross_entropy_loss(engine->forward(x), x));
    engine->step();
  }
  const ds::ModelStateBytes bytes = engine->model_state_bytes();
  at::Tensor whole = at::full({1}, double(bytes.optimizer), at::kDouble);
  world->all_reduce(whole, ds::comm::ReduceOp::Sum);  // optimizer state of all ranks
  if (world->rank() == 0) ds::remove_tree(dir);
  world->barrier();
  for (int r = 0; r < repeats; ++r) {
    const auto [save_s, save_rss] = measure(*world, [&] { engine->save_checkpoint(dir, "bench"); });
    const auto [load_s, load_rss] = measure(*world, [&] { engine->load_checkpoint(dir, "bench"); });
    if (world->rank() == 0)
      std::printf("np %d stage %d: fp32 master+optimizer state %.1f MB in all; bucket %.1f MB | save %.3f s, max peak RSS "
                  "growth %.2f MB | load %.3f s, max peak RSS growth %.2f MB\n",
                  world->world_size(), stage, whole.item<double>() * 1.5 / 1e6,
                  engine->checkpoint_bucket_bytes() / 1e6, save_s, save_rss / 1e6, load_s, load_rss / 1e6);
  }
  if (world->rank() == 0) {
    std::vector<char> data(64 << 20, 1);
    for (auto [name, fn] : {std::pair{"crc32c (SSE4.2 where present)", &ds::io::crc32c},
                            std::pair{"crc32c_portable (slicing-by-8)", &ds::io::crc32c_portable}}) {
      const auto start = std::chrono::steady_clock::now();
      uint32_t crc = 0;
      for (int i = 0; i < 4; ++i) crc = fn(crc, data.data(), data.size());
      std::printf("%s: %.2f GB/s (crc %08x)\n", name, 4.0 * data.size() / seconds_since(start) / 1e9, crc);
    }
    ds::remove_tree(dir);
  }
  ds::comm::finalize();
  return 0;
}
