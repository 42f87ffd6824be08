// ZeRO-Offload with the model on cuda:0 (offload_optimizer.device "cpu": master, optimizer state and
// gradient shard on the host, the CPU's fused Adam; "nvme": the same through the swap files) against
// the same engine with everything on the GPU: per-step losses, gradient norms and the final weights,
// at ZeRO stages 1-3 with gradient accumulation and clipping; and the GPU memory the offload leaves,
// against the parameter count. 1 and 2 ranks on one GPU, over MPI (NCCL takes one rank per GPU).
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <c10/cuda/CUDACachingAllocator.h>

#include <filesystem>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/engine/data/token_source.hpp"
#include "dstrain/engine/engine.hpp"
#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/engine/models/loss.hpp"
#include "dstrain/runtime/remove_tree.hpp"

namespace {

namespace fs = std::filesystem;

constexpr int kSteps = 4;
constexpr int64_t kBucketNumel = 20000;

enum class Offload { None, Cpu, Nvme };

const char* name(Offload o) { return o == Offload::None ? "gpu" : o == Offload::Cpu ? "cpu" : "nvme"; }

// A folder on disk (tmpfs may lack O_DIRECT), fresh per world size.
std::string nvme_dir() {
  const std::string dir =
      (fs::temp_directory_path() / ("dstrain_gpu_offload_np" + std::to_string(ds::comm::get_world_size()))).string();
  if (ds::comm::get_rank() == 0) {
    ds::remove_tree(dir);
    fs::create_directories(dir);
  }
  ds::comm::init_distributed("mpi")->barrier();
  return dir;
}

nlohmann::json config_json(int stage, Offload offload, bool bf16, const std::string& nvme_path) {
  nlohmann::json zero = {{"stage", stage},
                         {"reduce_bucket_size", kBucketNumel},
                         {"stage3_param_persistence_threshold", 0}};
  if (offload == Offload::Cpu) zero["offload_optimizer"] = {{"device", "cpu"}, {"pin_memory", true}};
  if (offload == Offload::Nvme) zero["offload_optimizer"] = {{"device", "nvme"}, {"nvme_path", nvme_path}};
  nlohmann::json config = {
      {"train_micro_batch_size_per_gpu", 4},
      {"gradient_accumulation_steps", 2},
      {"gradient_clipping", 0.1},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 3e-3}, {"weight_decay", 0.01}}}}},
      {"zero_optimization", zero},
  };
  if (bf16) config["bf16"] = {{"enabled", true}};
  return config;
}

int64_t gpu_allocated() {
  // LibTorch sets up its CUDA allocator at the first CUDA tensor; its statistics need it.
  torch::ones({1}, torch::kCUDA);
  torch::cuda::synchronize();
  return c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].current;  // [0]: aggregate
}

struct Run {
  std::vector<double> losses;
  std::vector<double> grad_norms;
  std::map<std::string, at::Tensor> weights;  // on the CPU
  int64_t parameter_count = 0;
  int64_t model_bytes = 0;  // the model on the GPU before the engine was built
  int64_t engine_bytes = 0; // what the GPU holds beyond it after the last step
};

Run train(int stage, Offload offload, bool bf16, const std::string& nvme_path = "") {
  const at::Device gpu(at::kCUDA, 0);
  auto group = ds::comm::init_distributed("mpi");
  torch::manual_seed(5);
  ds::models::GPT model(ds::models::GPTConfig::from_json(
      {{"n_layer", 2}, {"n_head", 4}, {"n_embd", 64}, {"block_size", 32}, {"vocab_size", 96}, {"dropout", 0.0}}));
  Run run;
  for (const at::Tensor& p : model->parameters()) run.parameter_count += p.numel();
  {
    const int64_t before = gpu_allocated();
    model->to(gpu);
    run.model_bytes = gpu_allocated() - before;
    auto engine = ds::initialize(model, ds::Config::from_json(config_json(stage, offload, bf16, nvme_path)), group);
    auto source = ds::data::make_token_source(nlohmann::json{{"type", "synthetic"}, {"seed", 3}}, 96, 32);
    for (int s = 0; s < kSteps; ++s) {
      double sum = 0;
      for (int a = 0; a < engine->gradient_accumulation_steps(); ++a) {
        ds::data::Batch batch =
            source->batch(s, a, group->rank(), group->world_size(), engine->train_micro_batch_size_per_gpu());
        at::Tensor logits = engine->forward(batch.inputs.to(gpu));
        at::Tensor loss = ds::models::cross_entropy_loss(logits.to(at::kFloat), batch.targets.to(gpu));
        engine->backward(loss);
        engine->step();
        sum += loss.item<double>();
      }
      run.losses.push_back(sum / engine->gradient_accumulation_steps());
      run.grad_norms.push_back(engine->last_grad_norm());
    }
    run.engine_bytes = gpu_allocated() - (before + run.model_bytes);
    for (auto& [key, value] : engine->consolidated_weights()) run.weights[key] = value.to(at::kCPU, at::kFloat);
  }
  return run;
}

double relative(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-12); }

void check_same(const Run& run, const Run& reference, double tolerance, const std::string& what) {
  for (int s = 0; s < kSteps; ++s) {
    INFO(what << " step " << s + 1 << ": loss " << run.losses[s] << " vs " << reference.losses[s] << ", grad norm "
              << run.grad_norms[s] << " vs " << reference.grad_norms[s]);
    CHECK(relative(run.losses[s], reference.losses[s]) <= tolerance);
    CHECK(relative(run.grad_norms[s], reference.grad_norms[s]) <= tolerance);
  }
  REQUIRE(run.weights.size() == reference.weights.size());
  for (const auto& [key, value] : reference.weights) {
    const at::Tensor& got = run.weights.at(key);
    const double error = (got - value).abs().max().item<double>();
    const double scale = value.abs().max().item<double>();
    // The attention's key bias has no true gradient (softmax ignores a shift of all scores): Adam steps
    // it by its rounding noise, which the host's and the GPU's summation orders change. It gets the
    // 1e-5 absolute allowance tests/engine/pipeline_zero_test.cpp gives it (2.4e-7 to 3.8e-7 seen at
    // 2 ranks on an H200, lr 3e-3; every other weight, loss and norm was within the relative bound).
    const double allowance = key.find("attn.c_attn.bias") != std::string::npos ? 1e-5 : 0.0;
    INFO(what << " weight " << key << ": max difference " << error << " of max " << scale);
    CHECK(error <= tolerance * scale + allowance);
  }
}

}  // namespace

// fp32: the same operations on the CPU and on the GPU; their rounding differs, nothing else.
void check_fp32_at_every_stage(Offload offload, const std::string& nvme_path) {
  for (int stage = 1; stage <= 3; ++stage) {
    const Run reference = train(stage, Offload::None, false);
    REQUIRE(reference.grad_norms.front() > 0.1);  // clipping acts
    const Run run = train(stage, offload, false, nvme_path);
    check_same(run, reference, 1e-5, std::string("stage ") + std::to_string(stage) + " " + name(offload));
  }
}

TEST_CASE("ZeRO-Offload to the CPU equals the in-GPU engine in fp32 at stages 1-3", "[mpi][gpu]") {
  check_fp32_at_every_stage(Offload::Cpu, "");
}

TEST_CASE("the optimizer on NVMe for a model on the GPU equals the in-GPU engine in fp32 at stages 1-3",
          "[mpi][gpu]") {
  const std::string dir = nvme_dir();
  check_fp32_at_every_stage(Offload::Nvme, dir);
  ds::comm::init_distributed("mpi")->barrier();
  if (ds::comm::get_rank() == 0) ds::remove_tree(dir);
}

TEST_CASE("ZeRO-Offload to the CPU in bf16 follows the in-GPU engine", "[mpi][gpu]") {
  for (int stage : {2, 3}) {
    const Run reference = train(stage, Offload::None, true);
    const Run run = train(stage, Offload::Cpu, true);
    // Both keep an fp32 master; a bf16 weight rounded from the same master may still differ by
    // one ulp after a step, so the tolerance of tests/gpu/engine_test.cpp's half precisions.
    check_same(run, reference, 2e-2, "bf16 stage " + std::to_string(stage));
  }
}

TEST_CASE("ZeRO-Offload to the CPU leaves no fp32 master, gradient shard or optimizer state on the GPU",
          "[mpi][gpu]") {
  // fp32 at stage 2: in-GPU the engine adds Adam's two moments (8 bytes a parameter; the master
  // is the model's own storage) and the fp32 gradient shard (4 / ranks); offloaded, only
  // buckets in flight (at most two, fp32) and nothing shard-sized. The partition size: P / ranks.
  const int ranks = ds::comm::get_world_size();
  const Run in_gpu = train(2, Offload::None, false);
  const Run offloaded = train(2, Offload::Cpu, false);
  const int64_t shard_bytes = 4 * in_gpu.parameter_count / ranks;
  INFO("in-GPU engine " << in_gpu.engine_bytes << " bytes, offloaded " << offloaded.engine_bytes << " bytes, P "
                        << in_gpu.parameter_count << ", ranks " << ranks);
  CHECK(in_gpu.engine_bytes >= 2 * shard_bytes);
  CHECK(offloaded.engine_bytes <= 2 * 4 * kBucketNumel * ranks + shard_bytes / 4);
}
