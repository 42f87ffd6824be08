// offload_param on NVMe for a model on cuda:0 (ZeRO stage 3, -np 1 and -np 2 over MPI on the one
// GPU): the chunks live in a swap file on the host, go to the GPU through pinned memory for each
// all-gather and come back to the host after every step. Against stage 3 without offload on the
// same GPU, whose chunks never leave it: every step's loss and the final weights (the master, and
// the model's parameters gathered through the swap file) within 1e-5 relative, with the default
// live-parameter limit and with one so small that every module's chunks come and go.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <filesystem>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/engine/data/token_source.hpp"
#include "dstrain/engine/engine.hpp"
#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/engine/models/loss.hpp"
#include "dstrain/runtime/remove_tree.hpp"
#include "dstrain/zero/gathered_parameters.hpp"

namespace {

namespace fs = std::filesystem;

constexpr int kSteps = 3;
constexpr int kGlobalBatch = 8;

// A folder on the machine's disk (tmpfs may lack O_DIRECT), fresh per world size.
std::string nvme_dir() {
  const std::string dir =
      (fs::temp_directory_path() / ("dstrain_gpu_nvme_param_np" + std::to_string(ds::comm::get_world_size()))).string();
  if (ds::comm::get_rank() == 0) {
    ds::remove_tree(dir);
    fs::create_directories(dir);
  }
  ds::comm::init_distributed("mpi")->barrier();
  return dir;
}

ds::Config make_config(int64_t max_live, const std::string& nvme_path) {
  nlohmann::json zero = {{"stage", 3},
                         {"reduce_bucket_size", 3000},
                         {"allgather_bucket_size", 2000},
                         {"stage3_param_persistence_threshold", 100},
                         {"stage3_max_live_parameters", max_live},
                         {"stage3_prefetch_bucket_size", std::min<int64_t>(max_live, 50000)}};
  if (!nvme_path.empty())
    zero["offload_param"] = {
        {"device", "nvme"}, {"nvme_path", nvme_path}, {"buffer_count", 4}, {"buffer_size", 100000000}, {"max_in_cpu", 0}};
  return ds::Config::from_json({{"train_micro_batch_size_per_gpu", kGlobalBatch / ds::comm::get_world_size()},
                                {"gradient_accumulation_steps", 1},
                                {"gradient_clipping", 0.5},
                                {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 3e-3}, {"weight_decay", 0.01}}}}},
                                {"zero_optimization", zero},
                                {"aio", {{"block_size", 8192}, {"queue_depth", 4}, {"thread_count", 2}}}});
}

struct Run {
  std::vector<double> losses;
  std::map<std::string, at::Tensor> master;    // consolidated, on the CPU
  std::map<std::string, at::Tensor> gathered;  // the model's parameters gathered whole, on the CPU
  int64_t read_bytes = 0;
  int64_t write_bytes = 0;
};

Run train(int64_t max_live, const std::string& nvme_path) {
  const at::Device gpu(at::kCUDA, 0);
  torch::manual_seed(11);
  ds::models::GPT model(ds::models::GPTConfig::from_json(
      {{"n_layer", 2}, {"n_head", 2}, {"n_embd", 32}, {"block_size", 16}, {"vocab_size", 64}, {"dropout", 0.0}}));
  model->to(gpu);
  auto engine = ds::initialize(model, make_config(max_live, nvme_path), ds::comm::init_distributed("mpi"));
  auto source = ds::data::make_token_source(nlohmann::json{{"type", "synthetic"}, {"seed", 3}}, 64, 16);
  const int rank = ds::comm::get_rank(), world = ds::comm::get_world_size();
  Run run;
  for (int step = 0; step < kSteps; ++step) {
    ds::data::Batch batch = source->batch(step, 0, rank, world, engine->train_micro_batch_size_per_gpu());
    at::Tensor logits = engine->forward(batch.inputs.to(gpu));
    at::Tensor loss = ds::models::cross_entropy_loss(logits, batch.targets.to(gpu));
    engine->backward(loss);
    engine->step();
    at::Tensor mean = loss.detach().to(at::kCPU, at::kDouble).reshape({1});
    engine->dp_group().all_reduce(mean, ds::comm::ReduceOp::Avg);
    run.losses.push_back(mean.item<double>());
  }
  for (const auto& [name, weight] : engine->consolidated_weights()) run.master[name] = weight.cpu();
  {
    ds::zero::GatheredParameters whole(engine->parameter_coordinator());
    for (const auto& item : model->named_parameters()) {
      REQUIRE(item.value().is_cuda());
      run.gathered[item.key()] = item.value().detach().cpu();
    }
  }
  const ds::io::SwapStats stats = engine->take_swap_stats();
  run.read_bytes = stats.read_bytes;
  run.write_bytes = stats.write_bytes;
  return run;
}

void require_close(const std::map<std::string, at::Tensor>& actual, const std::map<std::string, at::Tensor>& expected) {
  REQUIRE(actual.size() == expected.size());
  for (const auto& [name, weight] : expected) {
    INFO(name);
    REQUIRE(actual.count(name) == 1);
    CHECK(torch::allclose(actual.at(name), weight, 1e-5, 1e-5));
  }
}

}  // namespace

TEST_CASE("offload_param on NVMe feeds a model on cuda:0 as stage 3 in GPU memory does", "[mpi][gpu]") {
  const std::string nvme = nvme_dir();
  // The default limit, and one below the largest parameter: no prefetch, every gather on demand.
  for (int64_t max_live : {int64_t{1000000000}, int64_t{2048}}) {
    INFO("stage3_max_live_parameters " << max_live << ", " << ds::comm::get_world_size() << " ranks");
    const Run reference = train(max_live, "");
    const Run offloaded = train(max_live, nvme);
    REQUIRE(reference.read_bytes == 0);
    // Every step read the chunks from the file and wrote the new ones back.
    CHECK(offloaded.read_bytes > 0);
    CHECK(offloaded.write_bytes > 0);
    REQUIRE(reference.losses.back() < reference.losses.front());
    for (int step = 0; step < kSteps; ++step) {
      INFO("step " << step + 1 << ": " << offloaded.losses[step] << " (NVMe) vs " << reference.losses[step]);
      CHECK(std::abs(offloaded.losses[step] - reference.losses[step]) <= 1e-5 * std::abs(reference.losses[step]));
    }
    require_close(offloaded.master, reference.master);
    require_close(offloaded.gathered, reference.gathered);
    require_close(reference.gathered, reference.master);
  }
  ds::comm::init_distributed("mpi")->barrier();
  if (ds::comm::get_rank() == 0) ds::remove_tree(nvme);
}
