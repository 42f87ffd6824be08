// zero::GradientReducer in local-only mode under partitions (the 1-bit optimizers at ZeRO-1/2):
// no collective runs, and local_gradients() holds this rank's own gradients of every parameter,
// whole, concatenated in parameter order and zero-padded to the compressed allreduce's length
// (8 x world), summed over the micro-steps whether they were accumulated in param.grad() (stage 1:
// one reducing backward) or in the buffer (stage 2: every backward reduces). Checked against the
// gradients each rank's seeded loss gives by construction.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <vector>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/zero/gradient_reducer.hpp"
#include "dstrain/zero/shard_layout.hpp"

namespace {

const std::vector<std::vector<int64_t>> kShapes{{7}, {3, 5}, {4}, {2, 3}, {9}};
constexpr size_t kUnused = 2;  // never in the loss: its gradient counts as zeros

// Rank `rank`'s gradient of parameter i at micro-step `micro`.
at::Tensor local_gradient(int rank, int micro, size_t i) {
  if (i == kUnused) return torch::zeros(kShapes[i]);
  torch::manual_seed(1000 * micro + 10 * rank + static_cast<int64_t>(i) + 1);
  return torch::randn(kShapes[i]);
}

void backward(const std::vector<at::Tensor>& params, int micro) {
  at::Tensor loss = torch::zeros({});
  for (size_t i = 0; i < params.size(); ++i)
    if (i != kUnused) loss = loss + (params[i] * local_gradient(ds::comm::get_rank(), micro, i)).sum();
  loss.backward();
}

// This rank's gradients summed over `micros`, whole and flat, padded to a multiple of 8 x world.
at::Tensor expected_local(const std::vector<int>& micros) {
  std::vector<at::Tensor> parts;
  for (size_t i = 0; i < kShapes.size(); ++i) {
    at::Tensor sum = torch::zeros(kShapes[i]);
    for (int micro : micros) sum += local_gradient(ds::comm::get_rank(), micro, i);
    parts.push_back(sum.reshape({-1}));
  }
  at::Tensor flat = torch::cat(parts);
  const int64_t unit = 8 * ds::comm::get_world_size();
  const int64_t padded = (flat.numel() + unit - 1) / unit * unit;
  return torch::cat({flat, torch::zeros({padded - flat.numel()})});
}

}  // namespace

TEST_CASE("local-only under partitions: each rank's whole gradients, summed over micro-steps", "[mpi][zero]") {
  ds::comm::Backend& group = ds::comm::world();
  for (bool every_micro_step : {false, true}) {
    INFO((every_micro_step ? "stage 2: every backward reduces" : "stage 1: the boundary backward reduces"));
    std::vector<at::Tensor> params;
    for (const auto& shape : kShapes) params.push_back(torch::zeros(shape).requires_grad_(true));
    ds::zero::ShardLayout layout(params, group.world_size(), group.rank());
    ds::zero::GradientReducer reducer(params, layout, group, /*bucket_numel=*/8, /*overlap=*/true);
    reducer.set_local_only(true);
    // Two steps of two micro-steps: the second step's buffer must not keep the first's values.
    for (int step = 0; step < 2; ++step) {
      for (int micro = 0; micro < 2; ++micro) {
        reducer.set_reducing(every_micro_step || micro == 1);
        backward(params, 2 * step + micro);
        if (reducer.reducing()) reducer.finish_backward();
      }
      const at::Tensor& local = reducer.local_gradients();
      REQUIRE(torch::allclose(local, expected_local({2 * step, 2 * step + 1}), 1e-6, 1e-6));
      for (const at::Tensor& p : params) REQUIRE(!p.grad().defined());  // taken and freed
      // What the compressed allreduce leaves in the padding is gone by the next step.
      local.fill_(7.0f);
      reducer.zero_grad_shard();
    }
    REQUIRE(torch::equal(reducer.local_gradients(), torch::zeros_like(reducer.local_gradients())));
  }
}
