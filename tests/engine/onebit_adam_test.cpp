// OneBitAdam in the engine: Adam until freeze_step; afterwards an independent reference (plain
// LibTorch on each rank, with the 1-bit compression simulated over the ordinary all_reduce, as
// tests/comm does) must follow the same trajectory; a checkpoint taken after the freeze resumes with
// the same losses because the compression errors travel with it; ZeRO stage 3 is refused (stages
// 1-2: onebit_zero_test.cpp).
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "dstrain/runtime/error.hpp"
#include "optimizer_reference.hpp"
#include "shared_folder.hpp"

namespace {

using optimizer_reference::CompressionSimulation;
using optimizer_reference::kAccumulation;
using optimizer_reference::kMicro;
using optimizer_reference::make_model;
using optimizer_reference::make_source;
using optimizer_reference::mean_over_ranks;
using optimizer_reference::train;
using optimizer_reference::zero_local_sections;

constexpr double kLr = 2e-3;
constexpr double kWeightDecay = 0.01;
constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8;

nlohmann::json onebit_adam(int64_t freeze_step, double eps = kEps) {
  return {{"type", "OneBitAdam"},
          {"params",
           {{"lr", kLr}, {"eps", eps}, {"weight_decay", kWeightDecay}, {"freeze_step", freeze_step}, {"comm_backend_name", "mpi"}}}};
}

// DeepSpeed's OnebitAdam never bias-corrects: Adam without it is what it must equal before the freeze.
nlohmann::json adam_without_bias_correction() {
  return {{"type", "Adam"}, {"params", {{"lr", kLr}, {"weight_decay", kWeightDecay}, {"bias_correction", false}}}};
}

ds::Config make_config(const nlohmann::json& optimizer, double clipping, int stage = 0) {
  return ds::Config::from_json({
      {"train_micro_batch_size_per_gpu", kMicro},
      {"gradient_accumulation_steps", kAccumulation},
      {"gradient_clipping", clipping},
      {"optimizer", optimizer},
      // One bucket: the engine's warm-up allreduce is then the reference's, element for element.
      {"zero_optimization", {{"stage", stage}, {"reduce_bucket_size", 1 << 30}}},
  });
}

std::shared_ptr<ds::Engine<ds::models::GPT>> make_engine(const nlohmann::json& optimizer, double clipping) {
  return ds::initialize(make_model(), make_config(optimizer, clipping), ds::comm::init_distributed("mpi"));
}

// 1-bit Adam written out on one rank's whole model, no clipping, constant lr.
struct Reference {
  ds::models::GPT model = make_model();
  std::vector<at::Tensor> params;
  at::Tensor exp_avg, exp_avg_sq;
  CompressionSimulation compression;
  int64_t freeze_step;
  double eps;

  static std::vector<at::Tensor> trainable(ds::models::GPT& model) {
    std::vector<at::Tensor> out;
    for (auto& item : model->named_parameters())
      if (item.value().requires_grad()) out.push_back(item.value());
    return out;
  }
  static int64_t numel_of(const std::vector<at::Tensor>& tensors) {
    int64_t n = 0;
    for (const at::Tensor& t : tensors) n += t.numel();
    return n;
  }

  Reference(int64_t freeze, double epsilon)
      : params(trainable(model)),
        exp_avg(at::zeros({numel_of(params)})),
        exp_avg_sq(at::zeros({numel_of(params)})),
        compression(numel_of(params), ds::comm::get_world_size()),
        freeze_step(freeze),
        eps(epsilon) {}

  double step(int64_t step, const ds::data::TokenSource& source) {
    const int rank = ds::comm::get_rank(), world = ds::comm::get_world_size();
    for (at::Tensor& p : params) p.mutable_grad() = at::Tensor();
    double sum = 0;
    for (int a = 0; a < kAccumulation; ++a) {
      ds::data::Batch batch = source.batch(step, a, rank, world, kMicro);
      at::Tensor loss = ds::models::cross_entropy_loss(model->forward(batch.inputs), batch.targets);
      (loss * (1.0 / kAccumulation)).backward();
      sum += loss.item<double>();
    }
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> grads;
    for (at::Tensor& p : params) grads.push_back(p.grad().reshape({-1}));
    at::Tensor grad = at::cat(grads);
    const int64_t count = step + 1;
    if (count <= freeze_step) {
      ds::comm::world().all_reduce(grad, ds::comm::ReduceOp::Avg);
      exp_avg.mul_(kBeta1).add_(grad, 1 - kBeta1);
      exp_avg_sq.mul_(kBeta2).addcmul_(grad, grad, 1 - kBeta2);
    } else {
      exp_avg.mul_(kBeta1).add_(grad, 1 - kBeta1);  // this rank's own gradient
      exp_avg.copy_(compression.allreduce(exp_avg));
    }
    int64_t offset = 0;
    for (at::Tensor& p : params) {
      at::Tensor flat = p.view({-1});
      const at::Tensor m = exp_avg.narrow(0, offset, p.numel()), v = exp_avg_sq.narrow(0, offset, p.numel());
      flat.mul_(1 - kLr * kWeightDecay).addcdiv_(m, v.sqrt().add(eps), -kLr);
      offset += p.numel();
    }
    return mean_over_ranks(sum / kAccumulation);
  }
};

}  // namespace

TEST_CASE("OneBitAdam before freeze_step is Adam", "[mpi][onebit]") {
  constexpr int kSteps = 6;
  auto adam = make_engine(adam_without_bias_correction(), 0.5);
  const std::vector<double> expected = train(*adam, kSteps);
  const auto expected_weights = adam->consolidated_weights();

  auto warming = make_engine(onebit_adam(kSteps), 0.5);
  REQUIRE(train(*warming, kSteps) == expected);
  for (const auto& [name, weight] : warming->consolidated_weights()) {
    INFO(name);
    REQUIRE(at::equal(weight, expected_weights.at(name)));
  }

  // Frozen after 3 steps: the loss of step 4 still comes from Adam's weights, those after it from
  // the compressed momentum.
  auto frozen = make_engine(onebit_adam(3), 0.5);
  const std::vector<double> losses = train(*frozen, kSteps);
  for (int s = 0; s < 4; ++s) CHECK(losses[s] == expected[s]);
  CHECK(losses[4] != expected[4]);
  CHECK(losses[5] != expected[5]);
}

TEST_CASE("OneBitAdam after freeze_step follows a plain reference of 1-bit Adam", "[mpi][onebit]") {
  constexpr int kFreeze = 2;
  constexpr int kSteps = 7;
  // Not 1e-8: directions the loss cannot see (an attention key bias) keep a variance of ~0, where
  // the compressed momentum ±scale / √v turns ulp-level differences into large ones. A larger eps
  // keeps the comparison about the algorithm rather than about conditioning.
  constexpr double kTestEps = 1e-4;
  // The bounds leave room for summation order: two ranks' half-batch gradients summed against one
  // whole batch, and another BLAS. The signs the compression takes of near-zero momenta follow
  // those last bits, and the trajectory with them: here, OpenBLAS on 1, 4 or 16 threads moves step
  // 7's loss by 2.4e-4 relative (engine and reference alike), and pip LibTorch's BLAS on the CUDA
  // machine put the engine 2.1e-4 from the reference. A reference frozen one step late is 1.7e-3
  // to 9e-3 relative off at every step after the freeze, so 5e-4 still tells. The weights: within
  // 1e-5 but for the elements whose sign the two sides decided differently (WeightComparison); the
  // late reference has 99.9% of its elements beyond that.
  constexpr double kLossTolerance = 5e-4, kWeightTolerance = 1e-5;
  auto engine = make_engine(onebit_adam(kFreeze, kTestEps), 0.0);
  const std::vector<double> losses = train(*engine, kSteps);

  Reference reference(kFreeze, kTestEps);
  auto source = make_source();
  for (int s = 0; s < kSteps; ++s) {
    const double expected = reference.step(s, *source);
    INFO("step " << s + 1 << ": " << losses[s] << " vs " << expected);
    REQUIRE(std::abs(losses[s] - expected) <= kLossTolerance * std::abs(expected));
  }
  const auto weights = engine->consolidated_weights();
  optimizer_reference::WeightComparison comparison(kWeightTolerance, optimizer_reference::kSignFlips);
  for (auto& item : reference.model->named_parameters())
    if (item.value().requires_grad()) comparison.add(item.key(), weights.at(item.key()), item.value());
  comparison.require();
  REQUIRE(static_cast<size_t>(comparison.tensors()) == weights.size());
}

TEST_CASE("a OneBitAdam checkpoint taken after the freeze resumes with the same losses", "[mpi][onebit]") {
  const std::string dir = fresh_shared_folder("dstrain_onebit_ckpt");
  constexpr int kFreeze = 2;
  std::vector<double> uninterrupted;
  {
    auto engine = make_engine(onebit_adam(kFreeze), 0.5);
    train(*engine, kFreeze + 2);
    engine->save_checkpoint(dir, "frozen");
    uninterrupted = train(*engine, 3);
  }
  {
    auto engine = make_engine(onebit_adam(kFreeze), 0.5);
    engine->load_checkpoint(dir);
    REQUIRE(engine->global_steps() == kFreeze + 2);
    REQUIRE(train(*engine, 3) == uninterrupted);
  }
  // Without the compression errors the resumed steps must differ: the errors matter, and the
  // equality above could not have held without restoring them.
  zero_local_sections(dir, "frozen");
  auto engine = make_engine(onebit_adam(kFreeze), 0.5);
  engine->load_checkpoint(dir);
  const std::vector<double> reset = train(*engine, 3);
  CHECK(reset[0] == uninterrupted[0]);  // computed before any update from the resumed state
  CHECK(reset[1] != uninterrupted[1]);
  CHECK(reset[2] != uninterrupted[2]);
}

TEST_CASE("OneBitAdam is refused under ZeRO stage 3, naming the key", "[onebit]") {
  for (int stage : {3}) {
    INFO("stage " << stage);
    try {
      ds::initialize(make_model(), make_config(onebit_adam(2), 0.0, stage), ds::comm::init_distributed("mpi"));
      FAIL("OneBitAdam under ZeRO stage 3 was accepted");
    } catch (const ds::Error& e) {
      CHECK(e.key() == std::string("zero_optimization.stage"));
      CHECK_THAT(e.message(), Catch::Contains("OneBitAdam"));
    }
  }
}
