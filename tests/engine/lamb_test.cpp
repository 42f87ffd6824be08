// Lamb in the engine against a plain LibTorch LAMB written out on one rank's whole model (FusedLamb's
// arithmetic: raw moments in the update, bias correction in the step size, one trust ratio per
// parameter tensor), at every ZeRO stage: under partitioning each parameter's norms are summed from
// the ranks' chunks, and the result must be the same.
#include "optimizer_reference.hpp"

namespace {

using namespace optimizer_reference;

constexpr double kLr = 2e-3, kWeightDecay = 0.01, kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-6;

struct LambCase {
  double max_coeff, min_coeff;
  bool bias_correction, eps_inside_sqrt;
};

nlohmann::json lamb(const LambCase& c) {
  return {{"type", "Lamb"},
          {"params",
           {{"lr", kLr},
            {"eps", kEps},
            {"weight_decay", kWeightDecay},
            {"max_coeff", c.max_coeff},
            {"min_coeff", c.min_coeff},
            {"bias_correction", c.bias_correction},
            {"eps_inside_sqrt", c.eps_inside_sqrt}}}};
}

std::vector<double> reference_losses(ReferenceModel& reference, const LambCase& c, int steps) {
  at::Tensor m = at::zeros({reference.numel()}), v = at::zeros({reference.numel()});
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    double loss = 0;
    const at::Tensor grad = ReferenceModel::averaged(reference.local_gradient(s, loss));
    losses.push_back(loss);
    at::NoGradGuard no_grad;
    m = kBeta1 * m + (1 - kBeta1) * grad;
    v = kBeta2 * v + (1 - kBeta2) * grad * grad;
    const at::Tensor denom = c.eps_inside_sqrt ? (v + kEps).sqrt() : v.sqrt() + kEps;
    const at::Tensor update = m / denom + kWeightDecay * reference.weights;
    const int t = s + 1;
    const double step_size =
        c.bias_correction ? kLr * std::sqrt(1 - std::pow(kBeta2, t)) / (1 - std::pow(kBeta1, t)) : kLr;
    for (size_t k = 0; k < reference.segments.size(); ++k) {
      const double w = reference.segment(reference.weights, k).norm().item<double>();
      const double u = reference.segment(update, k).norm().item<double>();
      double coeff = 1.0;
      if (w != 0 && u != 0) coeff = std::min(std::max(w / u, c.min_coeff), c.max_coeff);
      reference.segment(reference.weights, k).sub_(step_size * coeff * reference.segment(update, k));
    }
  }
  return losses;
}

}  // namespace

TEST_CASE("Lamb follows a plain LibTorch LAMB at every ZeRO stage", "[mpi][lamb]") {
  constexpr int kSteps = 6;
  // max_coeff 0.3 clamps the layer norms' ratios (‖1‖/‖update‖ ≈ 1), min_coeff 0.01 stays below the
  // weights' (≈ 0.02), zero biases take 1; DeepSpeed's defaults (10, 0.01) clamp nothing here.
  const std::vector<LambCase> cases = {{0.3, 0.01, true, false}, {10.0, 0.01, false, true}};
  for (const LambCase& c : cases) {
    ReferenceModel reference;
    const std::vector<double> expected = reference_losses(reference, c, kSteps);
    for (int stage : {0, 1, 2, 3}) {
      INFO("stage " << stage << ", max_coeff " << c.max_coeff << ", bias_correction " << c.bias_correction);
      auto engine = make_engine(lamb(c), stage);
      const std::vector<double> losses = train(*engine, kSteps);
      require_close(*engine, losses, expected, reference, 1e-5);
    }
  }
}

TEST_CASE("Lamb's trust ratio matters: max_coeff changes the trajectory", "[mpi][lamb]") {
  auto clamped = make_engine(lamb({0.3, 0.01, true, false}));
  auto loose = make_engine(lamb({10.0, 0.01, true, false}));
  const std::vector<double> a = train(*clamped, 3), b = train(*loose, 3);
  CHECK(a[0] == b[0]);
  CHECK(a[2] != b[2]);
}
