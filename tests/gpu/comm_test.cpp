// The GPU path of comm/: NcclBackend on CUDA tensors (one rank per GPU, so at one rank here), and
// MpiBackend staging CUDA tensors through host memory (any number of ranks sharing a GPU). The
// reference is always the CPU path: the same collective on CPU tensors through MpiBackend.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/comm/mpi_backend.hpp"
#include "dstrain/comm/nccl_backend.hpp"
#include "dstrain/comm/onebit_kernels.hpp"
#include "dstrain/runtime/rank_env.hpp"

namespace {

at::Device gpu() { return at::Device(at::kCUDA, 0); }

at::Tensor seeded(int64_t n, int seed) {
  at::manual_seed(seed);
  return at::randn({n});
}

// Runs `steps` compressed allreduces on `backend` with tensors on `device`, carrying the error
// buffers between calls as an optimizer does, and returns each call's result on the CPU.
std::vector<at::Tensor> compressed_steps(ds::comm::Backend& backend, at::Device device, int64_t n, int steps) {
  const ds::comm::onebit::Layout layout = ds::comm::onebit::layout_for(n, backend.world_size());
  at::Tensor worker_error = at::zeros({layout.padded}, at::dtype(at::kFloat).device(device));
  at::Tensor server_error = at::zeros({layout.chunk}, at::dtype(at::kFloat).device(device));
  std::vector<at::Tensor> results;
  for (int s = 0; s < steps; ++s) {
    at::Tensor buffer = seeded(n, 100 * s + backend.rank()).to(device);
    backend.compressed_allreduce(buffer, worker_error, server_error, ds::rank_env_from_environment().local_rank);
    results.push_back(buffer.cpu());
  }
  return results;
}

}  // namespace

TEST_CASE("NcclBackend collectives on CUDA tensors match the CPU path", "[mpi][gpu]") {
  if (ds::comm::get_world_size() != 1) return;  // NCCL takes one rank per GPU; this machine has one
  auto cpu = ds::comm::init_distributed("mpi");
  ds::comm::NcclBackend nccl;
  REQUIRE(nccl.world_size() == 1);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf, at::kDouble}) {
    INFO("dtype " << c10::toString(dtype));
    const at::Tensor x = seeded(1000, 1).to(dtype);
    at::Tensor on_gpu = x.to(gpu());
    at::Tensor on_cpu = x.clone();
    nccl.all_reduce(on_gpu, ds::comm::ReduceOp::Avg);
    cpu->all_reduce(on_cpu, ds::comm::ReduceOp::Avg);
    CHECK(at::equal(on_gpu.cpu(), on_cpu));

    at::Tensor gathered = at::empty({1000}, x.options().device(gpu()));
    nccl.all_gather_into(gathered, x.to(gpu()));
    CHECK(at::equal(gathered.cpu(), x));

    at::Tensor scattered = at::empty({1000}, x.options().device(gpu()));
    nccl.reduce_scatter_into_async(scattered, x.to(gpu()), ds::comm::ReduceOp::Sum)->wait();
    CHECK(at::equal(scattered.cpu(), x));

    at::Tensor broadcast = x.to(gpu());
    nccl.broadcast(broadcast, 0);
    CHECK(at::equal(broadcast.cpu(), x));
  }
}

TEST_CASE("NcclBackend's 1-bit compressed allreduce on the GPU matches MpiBackend's on the CPU", "[mpi][gpu]") {
  if (ds::comm::get_world_size() != 1) return;
  auto cpu = ds::comm::init_distributed("mpi");
  ds::comm::NcclBackend nccl;
  // An odd size exercises the padding; five calls exercise the error feedback carried between them.
  const auto on_gpu = compressed_steps(nccl, gpu(), 4099, 5);
  const auto on_cpu = compressed_steps(*cpu, at::kCPU, 4099, 5);
  for (size_t s = 0; s < on_cpu.size(); ++s) {
    INFO("call " << s + 1);
    CHECK(at::allclose(on_gpu[s], on_cpu[s], /*rtol=*/1e-5, /*atol=*/1e-6));
  }
}

TEST_CASE("MpiBackend stages CUDA tensors through the host, at any number of ranks on one GPU", "[mpi][gpu]") {
  ds::comm::MpiBackend staged(/*cuda_aware=*/false);
  auto cpu = ds::comm::init_distributed("mpi");
  const int rank = cpu->rank();
  at::Tensor on_gpu = seeded(777, rank).to(gpu());
  at::Tensor on_cpu = seeded(777, rank);
  staged.all_reduce(on_gpu, ds::comm::ReduceOp::Sum);
  cpu->all_reduce(on_cpu, ds::comm::ReduceOp::Sum);
  CHECK(on_gpu.is_cuda());
  CHECK(at::equal(on_gpu.cpu(), on_cpu));

  const auto compressed_gpu = compressed_steps(staged, gpu(), 4099, 5);
  const auto compressed_cpu = compressed_steps(*cpu, at::kCPU, 4099, 5);
  for (size_t s = 0; s < compressed_cpu.size(); ++s) {
    INFO("call " << s + 1);
    CHECK(at::equal(compressed_gpu[s], compressed_cpu[s]));
  }
}

TEST_CASE("NcclBackend takes CPU tensors too, staging them through its GPU", "[mpi][gpu]") {
  if (ds::comm::get_world_size() != 1) return;
  auto cpu = ds::comm::init_distributed("mpi");
  ds::comm::NcclBackend nccl;
  const at::Tensor x = seeded(300, 4).to(at::kDouble);
  at::Tensor through_nccl = x.clone();
  at::Tensor through_mpi = x.clone();
  nccl.all_reduce(through_nccl, ds::comm::ReduceOp::Avg);
  cpu->all_reduce(through_mpi, ds::comm::ReduceOp::Avg);
  CHECK(through_nccl.is_cpu());
  CHECK(at::equal(through_nccl, through_mpi));

  // A non-contiguous CPU view is written back in place.
  at::Tensor matrix = seeded(64, 5).view({8, 8});
  const at::Tensor expected = matrix.t().clone();
  at::Tensor view = matrix.t();
  nccl.broadcast(view, 0);
  CHECK(at::equal(view, expected));
}
