// ZeroOneAdam in the engine against a plain LibTorch reference of 0/1 Adam written out on one rank's
// whole model, with the compression simulated over the ordinary all_reduce: full-precision variance
// steps at exponentially spaced intervals, compressed gradients between them, then local steps with
// the accumulated moves averaged at intervals that double up to local_step_clipper. Small scalers make
// every phase happen within a few steps. A checkpoint taken before the freeze resumes exactly, one at
// a sync to roundoff; one taken between syncs (each rank's weights its own) resumes every rank from
// rank 0's state.

#include "optimizer_reference.hpp"
#include "shared_folder.hpp"

namespace {

using namespace optimizer_reference;

constexpr double kLr = 2e-3, kWeightDecay = 0.01, kBeta1 = 0.9, kBeta2 = 0.999;
constexpr int64_t kVarFreezeStep = 6, kVarUpdateScaler = 2, kLocalStepScaler = 2, kLocalStepClipper = 4;

nlohmann::json zero_one_adam(double eps) {
  return {{"type", "ZeroOneAdam"},
          {"params",
           {{"lr", kLr},
            {"eps", eps},
            {"weight_decay", kWeightDecay},
            {"var_freeze_step", kVarFreezeStep},
            {"var_update_scaler", kVarUpdateScaler},
            {"local_step_scaler", kLocalStepScaler},
            {"local_step_clipper", kLocalStepClipper},
            {"comm_backend_name", "mpi"}}}};
}

// DeepSpeed's bookkeeping, step by step, as zoadam.py keeps it in its state.
struct ZeroOneReference {
  ReferenceModel& reference;
  double eps;
  at::Tensor m = at::zeros({reference.numel()}), v = at::zeros({reference.numel()});
  at::Tensor accumulator = at::zeros({reference.numel()});
  CompressionSimulation compression{reference.numel(), ds::comm::get_world_size()};
  int64_t var_interval = 1, var_counter = 0, local_interval = 1, local_counter = 0;
  double lrs = 0;

  // Step s (from 0); returns its loss.
  double step(int s) {
    const int64_t t = s + 1;
    double loss = 0;
    at::Tensor grad = reference.local_gradient(s, loss);
    at::NoGradGuard no_grad;
    at::Tensor& w = reference.weights;
    if (t <= kVarFreezeStep) {
      if (t % var_interval == 0) {
        grad = ReferenceModel::averaged(grad);
        v = kBeta2 * v + (1 - kBeta2) * grad * grad;
        m = kBeta1 * m + (1 - kBeta1) * grad;
      } else {
        m = kBeta1 * m + (1 - kBeta1) * compression.allreduce(grad);
      }
      w -= kLr * (m / (v.sqrt() + eps) + kWeightDecay * w);
      if (t % var_interval == 0 && ++var_counter == kVarUpdateScaler) {
        var_counter = 0;
        var_interval *= 2;
      }
      return loss;
    }
    if (t == kVarFreezeStep + 1) {
      compression.worker_error.zero_();
      compression.server_error.zero_();
    }
    m = kBeta1 * m + (1 - kBeta1) * grad;  // this rank's own gradient
    lrs += kLr;
    const at::Tensor update = m / (v.sqrt() + eps) + kWeightDecay * w;
    w -= kLr * update;
    accumulator -= kLr * update;
    if (t % local_interval == 0) {
      w -= accumulator;
      accumulator = compression.allreduce(accumulator * (v.sqrt() + eps));
      m = -accumulator / lrs;
      w += accumulator / (v.sqrt() + eps);
      accumulator.zero_();
      lrs = 0;
    }
    if (++local_counter == kLocalStepScaler) {
      local_counter = 0;
      local_interval = std::min(kLocalStepClipper, local_interval * 2);
    }
    return loss;
  }
};

std::vector<double> reference_losses(ReferenceModel& reference, double eps, int steps) {
  ZeroOneReference zero_one{reference, eps};
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) losses.push_back(zero_one.step(s));
  return losses;
}

}  // namespace

TEST_CASE("ZeroOneAdam follows a plain reference of 0/1 Adam through every phase", "[mpi][zero_one_adam]") {
  // Steps 1-2 and 4, 6: variance steps; 3, 5: compressed gradients; 7-14: local steps, synced at 7, 8,
  // 10, 12 (interval 1, then 2, then 4 after 2 local steps each).
  constexpr int kSteps = 14;
  constexpr double kTestEps = 1e-4;  // as the OneBitAdam test: keeps ±scale / √v well conditioned
  auto engine = make_engine(zero_one_adam(kTestEps));
  const std::vector<double> losses = train(*engine, kSteps);
  ReferenceModel reference;
  const std::vector<double> expected = reference_losses(reference, kTestEps, kSteps);
  // Measured with Debian's OpenBLAS: losses within 6e-8 relative, weights within 3.6e-7 (-np 2).
  // pip LibTorch on the CUDA machine summed gradients in another order, and some 1-bit sign
  // decisions went the other way (WeightComparison): losses 3.3e-5 relative apart at -np 2. A
  // reference that freezes the variance one step late is 1.2e-3 to 3.1e-2 apart at every step after
  // the freeze (-np 2 and 4), with 99.9% of its elements beyond 1e-5, so 2e-4 still tells.
  require_close(*engine, losses, expected, reference, 1e-5, 2e-4, kSignFlips);
}

namespace {

// Every rank's weights, flat.
at::Tensor flat_weights(ds::Engine<ds::models::GPT>& engine) {
  std::vector<at::Tensor> parts;
  for (auto& [name, weight] : engine.consolidated_weights()) parts.push_back(weight.reshape({-1}));
  return at::cat(parts);
}

// The largest difference between two ranks' values of one element.
double spread(const at::Tensor& local) {
  at::Tensor high = local.clone(), low = local.clone();
  ds::comm::world().all_reduce(high, ds::comm::ReduceOp::Max);
  ds::comm::world().all_reduce(low, ds::comm::ReduceOp::Min);
  return (high - low).max().item<double>();
}

}  // namespace

TEST_CASE("a ZeroOneAdam checkpoint resumes the interval schedule and the errors", "[mpi][zero_one_adam]") {
  const int world = ds::comm::get_world_size();
  const std::string dir = fresh_shared_folder("dstrain_zero_one_ckpt");
  // After step 4 var_interval is 2: step 5 compresses its gradient with the saved errors, 6 updates
  // the variance, 7 and 8 are local steps (each synced). After step 8 (a sync) every rank holds the
  // same momentum and, to roundoff, the same weights (p − accumulator + average rounds differently on
  // each rank, as in DeepSpeed): 9 is a local step, 10 and 12 sync with the saved errors.
  for (int saved_at : {4, 8}) {
    INFO("saved after step " << saved_at);
    std::vector<double> uninterrupted;
    {
      auto engine = make_engine(zero_one_adam(1e-4));
      train(*engine, saved_at);
      engine->save_checkpoint(dir, "synced");
      uninterrupted = train(*engine, 4);
    }
    {
      auto engine = make_engine(zero_one_adam(1e-4));
      engine->load_checkpoint(dir);
      REQUIRE(engine->global_steps() == saved_at);
      const std::vector<double> resumed = train(*engine, 4);
      if (saved_at == 4) REQUIRE(resumed == uninterrupted);
      for (size_t i = 0; i < resumed.size(); ++i) REQUIRE(std::abs(resumed[i] - uninterrupted[i]) <= 1e-6 * uninterrupted[i]);
    }
    // Without the compression errors the resumed steps differ from the first compressed one on: the
    // equality above needed them.
    zero_local_sections(dir, "synced");
    auto engine = make_engine(zero_one_adam(1e-4));
    engine->load_checkpoint(dir);
    const std::vector<double> reset = train(*engine, 4);
    CHECK(std::abs(reset[0] - uninterrupted[0]) <= 1e-6 * uninterrupted[0]);  // before any update
    if (world > 1) CHECK(std::abs(reset[3] - uninterrupted[3]) > 1e-6 * uninterrupted[3]);
  }
}

TEST_CASE("a ZeroOneAdam checkpoint between syncs resumes every rank from rank 0's state", "[mpi][zero_one_adam]") {
  const int world = ds::comm::get_world_size();
  const std::string dir = fresh_shared_folder("dstrain_zero_one_local");
  // Step 9 is a local step: each rank's weights, momentum and accumulated moves are its own. A
  // checkpoint keeps rank 0's (with the sum of learning rates since the sync), and the sync at step
  // 10 must bring every rank to the same weights (to roundoff), as it does in an uninterrupted run.
  {
    auto engine = make_engine(zero_one_adam(1e-4));
    train(*engine, 9);
    if (world > 1) CHECK(spread(flat_weights(*engine)) > 1e-5);
    engine->save_checkpoint(dir, "local");
  }
  auto engine = make_engine(zero_one_adam(1e-4));
  engine->load_checkpoint(dir);
  REQUIRE(spread(flat_weights(*engine)) == 0);
  train(*engine, 1);
  REQUIRE(spread(flat_weights(*engine)) <= 1e-6);
  train(*engine, 1);  // step 11, local
  if (world > 1) CHECK(spread(flat_weights(*engine)) > 1e-5);
}
