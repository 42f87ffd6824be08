// MpiBackend: the Backend over MPI (OpenMPI). CPU tensors of float32, float64, bfloat16, float16,
// int64, int32 and uint8; bfloat16 and float16 are reduced as numbers through custom MPI ops.
// CUDA tensors go straight to MPI when cuda_aware, else through a host copy. Async operations
// are MPI's nonblocking collectives.
#pragma once

#include <mpi.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "dstrain/comm/backend.hpp"

namespace ds::comm {

class MpiBackend final : public Backend {
 public:
  // The world (MPI_COMM_WORLD); initializes MPI (MPI_THREAD_SERIALIZED) if nobody has yet.
  explicit MpiBackend(bool cuda_aware = false);
  ~MpiBackend() override;
  MpiBackend(const MpiBackend&) = delete;
  MpiBackend& operator=(const MpiBackend&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  bool cuda_aware() const { return cuda_aware_; }
  // This group's communicator (a duplicate of the one it was made from), e.g. for benchmarks.
  MPI_Comm communicator() const { return comm_; }

  void all_reduce(const at::Tensor& tensor, ReduceOp op = ReduceOp::Sum) override;
  std::unique_ptr<Work> all_reduce_async(at::Tensor tensor, ReduceOp op = ReduceOp::Sum) override;
  void all_gather(const std::vector<at::Tensor>& outputs, const at::Tensor& input) override;
  void all_gather_into(const at::Tensor& output, const at::Tensor& input) override;
  std::unique_ptr<Work> all_gather_into_async(at::Tensor output, at::Tensor input) override;
  void reduce_scatter(const at::Tensor& output, const std::vector<at::Tensor>& inputs,
                      ReduceOp op = ReduceOp::Sum) override;
  void reduce_scatter_into(const at::Tensor& output, const at::Tensor& input, ReduceOp op = ReduceOp::Sum) override;
  std::unique_ptr<Work> reduce_scatter_into_async(at::Tensor output, at::Tensor input,
                                                  ReduceOp op = ReduceOp::Sum) override;
  void broadcast(const at::Tensor& tensor, int src) override;
  void send(const at::Tensor& tensor, int dst, int tag = 0) override;
  void recv(const at::Tensor& tensor, int src, int tag = 0) override;
  void barrier() override;
  std::shared_ptr<Backend> split(int color, int key) override;
  at::Tensor compressed_allreduce(at::Tensor buffer, at::Tensor worker_error, at::Tensor server_error,
                                  int local_rank) override;
  [[noreturn]] void abort(const std::string& message) override;

 private:
  MpiBackend(MPI_Comm comm, bool cuda_aware);  // takes ownership of comm

  // Every collective starts here: each rank passes values that must be equal on all ranks, a
  // description of its own arguments, and the problem it found with them ("" if none). Throws a
  // ds::Error on every rank when any rank found a problem or the values differ, so that no rank
  // enters the collective alone.
  void agree(const char* collective, std::vector<int64_t> values, const std::string& description,
             const std::string& problem) const;
  // MPI can use this tensor's memory as it is (CPU, or CUDA with CUDA-aware MPI).
  bool reachable(const at::Tensor& tensor) const;
  MPI_Op mpi_op(ReduceOp op, at::ScalarType dtype) const;

  MPI_Comm comm_;
  int rank_ = 0;
  int world_size_ = 1;
  bool cuda_aware_ = false;
  // Sum, Max, Min on bfloat16 and on float16: MPI has no 16-bit floating types of its own.
  std::array<MPI_Op, 3> bfloat16_ops_;
  std::array<MPI_Op, 3> float16_ops_;
  // compressed_allreduce's padded copy and packed signs, kept between calls: fresh allocations
  // of this size come from mmap and would page-fault on every call.
  at::Tensor compression_scratch_;
};

}  // namespace ds::comm
