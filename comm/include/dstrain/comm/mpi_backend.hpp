// MpiBackend: the Backend over MPI (OpenMPI). CPU tensors of float32, float64, bfloat16, float16,
// int64, int32 and uint8; bfloat16 and float16 are reduced as numbers through custom MPI ops.
// CUDA tensors go straight to MPI when cuda_aware, else through a host copy. Every operation is
// one of MPI's nonblocking calls, waited on by a watchdog (see mpi_watchdog.hpp): a wait longer
// than the timeout ends the job with the call's name and the ranks that never arrived.
//
// Arguments are checked without blocking the caller: each collective starts a small nonblocking
// allreduce of its arguments' sizes and dtypes, and its data call is posted as soon as that check
// has agreed (by any later call or wait on the group), in the order the calls began. A rank whose
// own arguments are invalid throws; when the ranks disagree (sizes, dtypes, or some ranks'
// arguments invalid), every rank throws, no data moves, and the group is unusable from then on,
// each later call throwing that reason.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "dstrain/comm/backend.hpp"

namespace ds::comm {

class MpiBackend final : public Backend {
 public:
  // The world (MPI_COMM_WORLD); initializes MPI (MPI_THREAD_SERIALIZED) if nobody has yet. Every
  // wait of this group and of the groups split from it ends the job after `timeout`.
  explicit MpiBackend(bool cuda_aware = false, std::chrono::milliseconds timeout = kDefaultTimeout);
  ~MpiBackend() override;
  MpiBackend(const MpiBackend&) = delete;
  MpiBackend& operator=(const MpiBackend&) = delete;

  std::string name() const override { return "mpi"; }
  int rank() const override;
  int world_size() const override;
  bool cuda_aware() const;

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

  // The communicators, the queue of checked calls and MPI's custom ops (comm/src/mpi_backend_impl.hpp):
  // <mpi.h> stays out of this header.
  struct Impl;

 private:
  explicit MpiBackend(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds::comm
