// ds::clip_coefficient against LibTorch's torch::nn::utils::clip_grad_norm_, the reference
// DeepSpeed's gradient_clipping follows.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "dstrain/engine/optim/gradient_clipping.hpp"

namespace {

// Parameters holding gradients of overall scale `scale`.
std::vector<torch::Tensor> parameters_with_gradients(double scale) {
  torch::manual_seed(7);
  std::vector<torch::Tensor> params;
  for (int64_t numel : {5, 17, 64}) {
    torch::Tensor param = torch::zeros({numel}, torch::kDouble).requires_grad_();
    param.mutable_grad() = torch::randn({numel}, torch::kDouble) * scale;
    params.push_back(param);
  }
  return params;
}

}  // namespace

TEST_CASE("clip_coefficient scales gradients as clip_grad_norm_ does", "[clipping]") {
  for (double scale : {1e-3, 0.1, 1.0, 10.0, 1e4}) {
    for (double max_norm : {0.5, 1.0, 3.0}) {
      INFO("gradient scale " << scale << ", max_norm " << max_norm);
      std::vector<torch::Tensor> reference = parameters_with_gradients(scale);
      std::vector<torch::Tensor> ours = parameters_with_gradients(scale);
      const double norm = torch::nn::utils::clip_grad_norm_(reference, max_norm);
      const double coefficient = ds::clip_coefficient(norm, max_norm);
      CHECK(coefficient <= 1.0);
      for (size_t i = 0; i < ours.size(); ++i) {
        torch::Tensor clipped = ours[i].grad() * coefficient;
        CHECK(torch::allclose(clipped, reference[i].grad(), 1e-12, 0));
      }
    }
  }
}

TEST_CASE("clip_coefficient is 1 below the limit, with clipping off, and for a zero norm", "[clipping]") {
  CHECK(ds::clip_coefficient(0.5, 1.0) == 1.0);
  CHECK(ds::clip_coefficient(0.0, 1.0) == 1.0);
  CHECK(ds::clip_coefficient(1e9, 0.0) == 1.0);
  CHECK(ds::clip_coefficient(1e9, -1.0) == 1.0);
  // Just above the limit the epsilon decides: max_norm / (norm + 1e-6).
  CHECK(ds::clip_coefficient(2.0, 1.0) == 1.0 / (2.0 + 1e-6));
}
