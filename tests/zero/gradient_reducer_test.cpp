// zero::GradientReducer on its own, against gradients averaged directly: each rank's gradient of a
// parameter is a seeded tensor every rank can rebuild, so the expected shard is the plain mean of
// all ranks' gradients, padded to a multiple of the partitions and cut into equal chunks (rank r
// holds chunk r of every parameter). Stage 0 (one partition, all-reduce) and stages 1-3
// (a partition per rank, reduce-scatter), with buckets larger than the model and smaller than any
// parameter, reductions overlapped or not, and gradients accumulated over micro-steps either in
// param.grad() (stages 0-1) or in the shard (stages 2-3).
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <vector>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/zero/gradient_reducer.hpp"
#include "dstrain/zero/shard_layout.hpp"

namespace {

// Shapes of the test model's parameters: odd sizes, so that chunks are padded at 2 and 4 ranks.
const std::vector<std::vector<int64_t>> kShapes{{7}, {3, 5}, {4}, {2, 3}, {9}};
// A parameter the loss never uses: the reducer must count its gradient as zeros.
constexpr size_t kUnused = 2;

std::vector<at::Tensor> make_params() {
  std::vector<at::Tensor> params;
  for (const auto& shape : kShapes) params.push_back(torch::zeros(shape).requires_grad_(true));
  return params;
}

// Rank `rank`'s gradient of parameter i at micro-step `micro`: the loss below makes it exactly this.
at::Tensor local_gradient(int rank, int micro, size_t i) {
  if (i == kUnused) return torch::zeros(kShapes[i]);
  torch::manual_seed(1000 * micro + 10 * rank + static_cast<int64_t>(i) + 1);
  return torch::randn(kShapes[i]);
}

void backward(const std::vector<at::Tensor>& params, int micro) {
  const int rank = ds::comm::get_rank();
  at::Tensor loss = torch::zeros({});
  for (size_t i = 0; i < params.size(); ++i)
    if (i != kUnused) loss = loss + (params[i] * local_gradient(rank, micro, i)).sum();
  loss.backward();
}

// This rank's place in a layout of `partitions`: one partition is everyone's whole shard.
int layout_rank(int partitions) { return partitions == 1 ? 0 : ds::comm::get_rank(); }

// The mean over ranks of the gradients summed over `micros`, each parameter flattened, zero-padded
// to a multiple of `partitions` and cut into equal chunks; this rank's chunks, concatenated.
at::Tensor expected_shard(const std::vector<int>& micros, int partitions) {
  const int world = ds::comm::get_world_size();
  const int part = layout_rank(partitions);
  std::vector<at::Tensor> chunks;
  for (size_t i = 0; i < kShapes.size(); ++i) {
    at::Tensor mean = torch::zeros(kShapes[i]);
    for (int r = 0; r < world; ++r)
      for (int micro : micros) mean += local_gradient(r, micro, i);
    mean /= world;
    const int64_t numel = mean.numel();
    const int64_t chunk = (numel + partitions - 1) / partitions;
    const at::Tensor padded = torch::cat({mean.reshape({-1}), torch::zeros({chunk * partitions - numel})});
    chunks.push_back(padded.narrow(0, part * chunk, chunk));
  }
  return torch::cat(chunks);
}

void require_close(const at::Tensor& actual, const at::Tensor& expected) {
  REQUIRE(actual.sizes() == expected.sizes());
  INFO("max difference " << (actual - expected).abs().max().item<double>());
  REQUIRE(torch::allclose(actual, expected, /*rtol=*/1e-5, /*atol=*/1e-6));
}

struct Setup {
  int partitions;
  int64_t bucket_numel;
  bool overlap;
};

// Every combination the engine uses: one partition or one per rank; one bucket for everything or
// buckets of 3 elements (smaller than every parameter: one bucket per parameter); overlapped or not.
std::vector<Setup> setups() {
  std::vector<Setup> all;
  for (int partitions : {1, ds::comm::get_world_size()})
    for (int64_t bucket_numel : {int64_t{1} << 20, int64_t{3}})
      for (bool overlap : {false, true}) all.push_back({partitions, bucket_numel, overlap});
  return all;
}

}  // namespace

TEST_CASE("GradientReducer averages one backward into this rank's shard", "[mpi][zero][reducer]") {
  for (const Setup& setup : setups()) {
    DYNAMIC_SECTION("partitions " << setup.partitions << ", bucket " << setup.bucket_numel << ", overlap "
                                  << setup.overlap) {
      std::vector<at::Tensor> params = make_params();
      const ds::zero::ShardLayout layout(params, setup.partitions, layout_rank(setup.partitions));
      std::vector<size_t> taken;
      ds::zero::GradientReducer reducer(params, layout, ds::comm::world(), setup.bucket_numel, setup.overlap,
                                        [&](size_t i) { taken.push_back(i); });
      reducer.zero_grad_shard();
      backward(params, 0);
      reducer.finish_backward();
      REQUIRE(reducer.has_gradients());
      require_close(reducer.grad_shard(), expected_shard({0}, setup.partitions));
      // Every gradient was taken (the unused one by finish_backward) and freed.
      REQUIRE(taken.size() == params.size());
      for (const at::Tensor& param : params) REQUIRE_FALSE(param.grad().defined());
    }
  }
}

TEST_CASE("GradientReducer accumulates micro-steps in the shard (stages 2-3)", "[mpi][zero][reducer]") {
  for (const Setup& setup : setups()) {
    DYNAMIC_SECTION("partitions " << setup.partitions << ", bucket " << setup.bucket_numel << ", overlap "
                                  << setup.overlap) {
      std::vector<at::Tensor> params = make_params();
      const ds::zero::ShardLayout layout(params, setup.partitions, layout_rank(setup.partitions));
      ds::zero::GradientReducer reducer(params, layout, ds::comm::world(), setup.bucket_numel, setup.overlap);
      // Two steps of three micro-steps, each micro-step reduced: the second step starts afresh.
      for (int first : {0, 3}) {
        reducer.zero_grad_shard();
        for (int micro = first; micro < first + 3; ++micro) {
          backward(params, micro);
          reducer.finish_backward();
        }
        require_close(reducer.grad_shard(), expected_shard({first, first + 1, first + 2}, setup.partitions));
      }
    }
  }
}

TEST_CASE("GradientReducer reduces once what param.grad() accumulated (stages 0-1)", "[mpi][zero][reducer]") {
  for (const Setup& setup : setups()) {
    DYNAMIC_SECTION("partitions " << setup.partitions << ", bucket " << setup.bucket_numel << ", overlap "
                                  << setup.overlap) {
      std::vector<at::Tensor> params = make_params();
      const ds::zero::ShardLayout layout(params, setup.partitions, layout_rank(setup.partitions));
      ds::zero::GradientReducer reducer(params, layout, ds::comm::world(), setup.bucket_numel, setup.overlap);
      reducer.zero_grad_shard();
      reducer.set_reducing(false);
      backward(params, 0);
      backward(params, 1);
      REQUIRE_FALSE(reducer.has_gradients());  // nothing reduced yet: autograd summed into param.grad()
      REQUIRE(params[0].grad().defined());
      reducer.set_reducing(true);
      backward(params, 2);
      reducer.finish_backward();
      require_close(reducer.grad_shard(), expected_shard({0, 1, 2}, setup.partitions));
    }
  }
}

TEST_CASE("GradientReducer's overlapped buckets, polled from the hooks, give the plain path's shard bit for bit",
          "[mpi][zero][reducer]") {
  // Buckets of one parameter each, large enough to be several MPI calls and still in flight when the
  // next hooks poll them (Work::test): with overlap the reductions progress and complete during
  // backward, without it each completes at its launch. Same buckets, same collectives: the same bits.
  const std::vector<int64_t> numels{(int64_t{3} << 20) + 5, 1001, (int64_t{5} << 20) + 3, 77, int64_t{2} << 20};
  const int rank = ds::comm::get_rank();
  auto run = [&](int partitions, bool overlap) {
    std::vector<at::Tensor> params;
    for (int64_t numel : numels) params.push_back(torch::zeros({numel}).requires_grad_(true));
    const ds::zero::ShardLayout layout(params, partitions, layout_rank(partitions));
    ds::zero::GradientReducer reducer(params, layout, ds::comm::world(), int64_t{1} << 20, overlap);
    reducer.zero_grad_shard();
    at::Tensor loss = torch::zeros({});
    for (size_t i = 0; i < params.size(); ++i) {
      torch::manual_seed(100 * rank + static_cast<int64_t>(i));
      loss = loss + (params[i] * torch::randn({numels[i]})).sum();
    }
    loss.backward();
    reducer.finish_backward();
    return reducer.grad_shard().clone();
  };
  for (int partitions : {1, ds::comm::get_world_size()}) {
    CAPTURE(partitions);
    const at::Tensor polled = run(partitions, true);
    const at::Tensor plain = run(partitions, false);
    REQUIRE(polled.sizes() == plain.sizes());
    CHECK(torch::equal(polled, plain));
    CHECK(polled.abs().sum().item<double>() > 0);  // the gradients arrived: not a shard of zeros
  }
}
