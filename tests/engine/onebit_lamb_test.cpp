// OneBitLamb in the engine: LAMB without bias correction until freeze_step; afterwards a plain
// LibTorch reference of DeepSpeed's compression stage (scaled momentum averaged by the simulated
// compressed allreduce, frozen variance, fresh variance from the reconstructed gradient, the factor
// rules) must follow the same trajectory; a checkpoint after the freeze resumes exactly, and only with
// its compression errors.

#include "dstrain/runtime/error.hpp"
#include "optimizer_reference.hpp"
#include "shared_folder.hpp"

namespace {

using namespace optimizer_reference;

constexpr double kLr = 2e-3, kWeightDecay = 0.01, kBeta1 = 0.9, kBeta2 = 0.999;
constexpr double kMaxCoeff = 0.3, kMinCoeff = 0.01, kCoeffBeta = 0.9;
constexpr double kFactorMax = 4.0, kFactorMin = 0.5, kFactorThreshold = 0.1;

nlohmann::json onebit_lamb(int64_t freeze_step, double eps) {
  return {{"type", "OneBitLamb"},
          {"params",
           {{"lr", kLr},
            {"eps", eps},
            {"weight_decay", kWeightDecay},
            {"max_coeff", kMaxCoeff},
            {"min_coeff", kMinCoeff},
            {"freeze_step", freeze_step},
            {"coeff_beta", kCoeffBeta},
            {"factor_max", kFactorMax},
            {"factor_min", kFactorMin},
            {"factor_threshold", kFactorThreshold},
            {"comm_backend_name", "mpi"}}}};
}

// DeepSpeed's OnebitLamb never bias-corrects: plain Lamb without it is its warm-up stage.
nlohmann::json lamb_without_bias_correction(double eps) {
  return {{"type", "Lamb"},
          {"params",
           {{"lr", kLr},
            {"eps", eps},
            {"weight_decay", kWeightDecay},
            {"max_coeff", kMaxCoeff},
            {"min_coeff", kMinCoeff},
            {"bias_correction", false}}}};
}

double clamp(double x, double lo, double hi) { return std::min(std::max(x, lo), hi); }

std::vector<double> reference_losses(ReferenceModel& reference, int64_t freeze_step, double eps, int steps) {
  const int64_t n = reference.numel();
  const size_t count = reference.segments.size();
  at::Tensor m = at::zeros({n}), v = at::zeros({n}), fresh = at::zeros({n});
  std::vector<double> coeff_freeze(count, 0.0), last_factor(count, 1.0), scaling(count, 1.0);
  CompressionSimulation compression(n, ds::comm::get_world_size());
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    const int64_t t = s + 1;
    double loss = 0;
    at::Tensor grad = reference.local_gradient(s, loss);
    losses.push_back(loss);
    at::NoGradGuard no_grad;
    at::Tensor& w = reference.weights;
    if (t <= freeze_step) {
      grad = ReferenceModel::averaged(grad);
      m = kBeta1 * m + (1 - kBeta1) * grad;
      v = kBeta2 * v + (1 - kBeta2) * grad * grad;
      if (t == freeze_step) fresh = v.clone();
      const at::Tensor update = m / (v.sqrt() + eps) + kWeightDecay * w;
      for (size_t k = 0; k < count; ++k) {
        const double wn = reference.segment(w, k).norm().item<double>();
        const double un = reference.segment(update, k).norm().item<double>();
        double coeff = 1.0;
        if (wn != 0 && un != 0) coeff = clamp(wn / un, kMinCoeff, kMaxCoeff);
        if (coeff != 1.0) coeff_freeze[k] = kCoeffBeta * coeff_freeze[k] + (1 - kCoeffBeta) * coeff;
        reference.segment(w, k).sub_(kLr * coeff * reference.segment(update, k));
      }
      continue;
    }
    if (t == freeze_step + 1) {
      std::vector<double> scales;
      double united = 0;
      for (size_t k = 0; k < count; ++k) {
        const at::Tensor mk = reference.segment(m, k);
        scales.push_back(mk.norm().item<double>() / std::sqrt(double(mk.numel())));
        united += scales.back();
      }
      united /= double(count);
      for (size_t k = 0; k < count; ++k) scaling[k] = scales[k] > 0 ? united / scales[k] : 1.0;
    }
    const at::Tensor last = m.clone();
    m = kBeta1 * m + (1 - kBeta1) * grad;  // this rank's own gradient
    for (size_t k = 0; k < count; ++k) reference.segment(m, k).mul_(scaling[k]);
    m = compression.allreduce(m);
    for (size_t k = 0; k < count; ++k) reference.segment(m, k).div_(scaling[k]);
    const at::Tensor reconstructed = (m - last * kBeta1) / (1 - kBeta1);
    fresh = kBeta2 * fresh + (1 - kBeta2) * reconstructed * reconstructed;
    const at::Tensor denom = v.sqrt() + eps;
    const at::Tensor prelim = m / denom;
    const at::Tensor update = prelim + kWeightDecay * w;
    const at::Tensor denom_fresh = fresh.sqrt() + eps;
    for (size_t k = 0; k < count; ++k) {
      double factor = (reference.segment(denom, k) / reference.segment(denom_fresh, k)).max().item<double>();
      const double update_norm = reference.segment(update, k).norm().item<double>();
      const double ratio =
          update_norm > 0 ? std::min(1.0, reference.segment(prelim, k).norm().item<double>() / update_norm) : 1.0;
      factor = factor * ratio + (1.0 - ratio);
      factor = clamp(factor, kFactorMin, kFactorMax);
      factor = clamp(factor, last_factor[k] * (1 - kFactorThreshold), last_factor[k] * (1 + kFactorThreshold));
      last_factor[k] = factor;
      reference.segment(w, k).sub_(kLr * coeff_freeze[k] * factor * reference.segment(update, k));
    }
  }
  return losses;
}

}  // namespace

TEST_CASE("OneBitLamb before freeze_step is LAMB without bias correction", "[mpi][onebit_lamb]") {
  constexpr int kSteps = 5;
  auto lamb = make_engine(lamb_without_bias_correction(1e-8));
  const std::vector<double> expected = train(*lamb, kSteps);
  const auto expected_weights = lamb->consolidated_weights();
  auto warming = make_engine(onebit_lamb(kSteps, 1e-8));
  REQUIRE(train(*warming, kSteps) == expected);
  for (const auto& [name, weight] : warming->consolidated_weights()) {
    INFO(name);
    REQUIRE(at::equal(weight, expected_weights.at(name)));
  }
}

TEST_CASE("OneBitLamb after freeze_step follows a plain reference of 1-bit LAMB", "[mpi][onebit_lamb]") {
  constexpr int kFreeze = 3, kSteps = 8;
  // eps 1e-4 as in the OneBitAdam test: directions the loss cannot see keep a variance of ~0, where a
  // compressed ±scale / √v turns ulp-level differences into large ones.
  constexpr double kTestEps = 1e-4;
  auto engine = make_engine(onebit_lamb(kFreeze, kTestEps));
  const std::vector<double> losses = train(*engine, kSteps);
  ReferenceModel reference;
  const std::vector<double> expected = reference_losses(reference, kFreeze, kTestEps, kSteps);
  // Measured: every loss within 1e-7 relative at -np 2 and 4; weights within 1.2e-7 at -np 2, and at
  // -np 4 as well but for elements (up to 1.5e-4 apart) whose 1-bit sign the two sides decided
  // differently (WeightComparison). A reference that freezes one step late has 90% of its elements
  // beyond 1e-5, and losses 1.6e-4 to 3.6e-4 apart: 5e-5 leaves room for the 3.3e-5 that such sign
  // decisions cost ZeroOneAdam's losses on another BLAS (zero_one_adam_test.cpp).
  require_close(*engine, losses, expected, reference, 1e-5, 5e-5, kSignFlips);
}

TEST_CASE("a OneBitLamb checkpoint taken after the freeze resumes with the same losses", "[mpi][onebit_lamb]") {
  const int world = ds::comm::get_world_size();
  const std::string dir = fresh_shared_folder("dstrain_onebit_lamb_ckpt");
  constexpr int kFreeze = 2;
  std::vector<double> uninterrupted;
  {
    auto engine = make_engine(onebit_lamb(kFreeze, 1e-4));
    train(*engine, kFreeze + 2);
    engine->save_checkpoint(dir, "frozen");
    uninterrupted = train(*engine, 3);
  }
  {
    auto engine = make_engine(onebit_lamb(kFreeze, 1e-4));
    engine->load_checkpoint(dir);
    REQUIRE(engine->global_steps() == kFreeze + 2);
    REQUIRE(train(*engine, 3) == uninterrupted);
  }
  // Without the compression errors the resumed run differs after its first compressed step: the
  // equality above needed them.
  zero_local_sections(dir, "frozen");
  auto engine = make_engine(onebit_lamb(kFreeze, 1e-4));
  engine->load_checkpoint(dir);
  const std::vector<double> reset = train(*engine, 3);
  CHECK(reset[0] == uninterrupted[0]);
  if (world > 1) CHECK(reset[2] != uninterrupted[2]);
}

TEST_CASE("the 1-bit family is refused under ZeRO stage 3, naming the key", "[onebit_lamb]") {
  for (const char* type : {"OneBitLamb", "ZeroOneAdam"}) {
    INFO(type);
    try {
      ds::initialize(make_model(), make_config({{"type", type}}, 3), ds::comm::init_distributed("mpi"));
      FAIL("accepted under ZeRO stage 3");
    } catch (const ds::Error& e) {
      CHECK(e.key() == std::string("zero_optimization.stage"));
      CHECK_THAT(e.message(), Catch::Contains(type));
    }
  }
}
