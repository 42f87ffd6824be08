// The flops profiler on a pipeline of 2 stages (-np 2): each stage profiles its own slice, and the
// stages' model FLOPs summed over the world equal the data-parallel model's closed form (3 x one
// forward x micro-batches) for the GPT, a Llama with grouped-query attention and tied embeddings, and
// a user PipelineModule of Linears (by shape: 2·in·out per row); each stage holds a nonzero share;
// rank 0's printed profile names both stages.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <unistd.h>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/engine/model_pipelines.hpp"
#include "dstrain/engine/pipeline_engine.hpp"
#include "dstrain/engine/profiler/flops_profiler.hpp"
#include "flops_closed_form.hpp"

namespace {

constexpr int kMicroBatches = 2;
constexpr int64_t kMicro = 2;

ds::Config pipeline_config() {
  return ds::Config::from_json({{"train_batch_size", kMicro * kMicroBatches},
                                {"gradient_accumulation_steps", kMicroBatches},
                                {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-3}}}}},
                                {"pipeline", {{"stages", 2}}}});
}

// This rank's profiler over its stage; seq_len tokens per sequence.
ds::profiler::FlopsProfiler stage_profiler(ds::PipelineEngine& engine, ds::comm::Backend& world, int64_t seq_len,
                                           const std::string& output_file) {
  ds::profiler::FlopsProfilerSettings settings;
  settings.enabled = true;
  settings.output_file = output_file;
  const int stage = engine.grid().stage();
  ds::profiler::PipelinePlace place{stage, engine.grid().stages(), engine.grid().replica(),
                                    "layers " + std::to_string(engine.bounds()[stage]) + ".." +
                                        std::to_string(engine.bounds()[stage + 1] - 1)};
  return ds::profiler::FlopsProfiler(settings, *engine.stage_module(), world, kMicro, kMicroBatches, seq_len, place);
}

}  // namespace

TEST_CASE("pipeline stages' model FLOPs sum to the whole model's closed form", "[mpi][profiler][pipeline]") {
  auto world = ds::comm::init_distributed("mpi");
  REQUIRE(world->world_size() == 2);
  // The file rank 0 writes: rank 0's pid, so every rank reads the same path.
  at::Tensor pid = at::tensor({static_cast<int64_t>(::getpid())}, at::kLong);
  world->broadcast(pid, 0);
  const std::string shared_file = "/tmp/dstrain_flops_pipeline_" + std::to_string(pid.item<int64_t>()) + ".txt";

  {
    INFO("the GPT");
    const auto config = ds::test::shape(3, 2, 16, 8, 50, true);
    ds::PipelineEngine engine(ds::gpt_pipeline_module(config, "parameters"), pipeline_config(), world);
    const auto profiler = stage_profiler(engine, *world, config.block_size, shared_file);
    const double whole = ds::test::closed_form_flops(config, kMicro, config.block_size);
    CHECK(profiler.step_flops() == Approx(3 * kMicroBatches * whole).epsilon(1e-12));
    CHECK(profiler.model().flops > 0);
    CHECK(profiler.model().flops < whole);
    ds::profiler::StepProfile step;
    step.step = 2;
    step.iteration_seconds = 0.5;
    profiler.print_profile(step);
    world->barrier();
    if (world->rank() == 0) {
      std::ifstream in(shared_file);
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      CHECK(text.find("Profile Summary at step 2 of pipeline stage 0 of 2:") != std::string::npos);
      CHECK(text.find("Profile Summary at step 2 of pipeline stage 1 of 2:") != std::string::npos);
      CHECK(text.find("MFU of the pipeline") != std::string::npos);
      std::remove(shared_file.c_str());
    }
  }
  {
    INFO("a Llama with grouped-query attention and tied embeddings");
    const auto config = ds::test::llama_shape(3, 8, 2, 64, 160, 64, true);
    ds::PipelineEngine engine(ds::llama_pipeline_module(config, "parameters"), pipeline_config(), world);
    const int64_t T = 12;
    const auto profiler = stage_profiler(engine, *world, T, "");
    const double whole = ds::test::llama_closed_form_flops(config, kMicro, T);
    CHECK(profiler.step_flops() == Approx(3 * kMicroBatches * whole).epsilon(1e-12));
    CHECK(profiler.model().flops > 0);
    CHECK(profiler.model().flops < whole);
  }
  {
    INFO("a user PipelineModule: Linears by shape");
    auto linear = [](int64_t in, int64_t out) { return [=] { return torch::nn::AnyModule(torch::nn::Linear(in, out)); }; };
    auto tanh = [] { return torch::nn::AnyModule(torch::nn::Tanh()); };
    ds::PipelineModule module({ds::LayerSpec{"Linear", linear(6, 12)}, ds::LayerSpec{"Tanh", tanh},
                               ds::LayerSpec{"Linear", linear(12, 12)}, ds::LayerSpec{"Tanh", tanh},
                               ds::LayerSpec{"Linear", linear(12, 6)}},
                              [](const at::Tensor& out, const at::Tensor& y) { return (out - y).pow(2).mean(); });
    ds::PipelineEngine engine(module, pipeline_config(), world);
    const auto profiler = stage_profiler(engine, *world, /*seq_len=*/1, "");
    const double whole = kMicro * 2.0 * (6 * 12 + 12 * 12 + 12 * 6);
    CHECK(profiler.step_flops() == Approx(3 * kMicroBatches * whole).epsilon(1e-12));
    CHECK(profiler.model().flops > 0);
    CHECK(ds::profiler::uncounted_modules(profiler.model()).empty());
  }
}
