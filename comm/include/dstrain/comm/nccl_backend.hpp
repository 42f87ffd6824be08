// NcclBackend: the Backend over NCCL for CUDA tensors, one GPU per rank (local_rank). Ranks are found
// and NCCL is bootstrapped through MPI. Compiled only when dstrain is built with NCCL
// (DSTRAIN_WITH_NCCL); its compressed_allreduce is MpiBackend's algorithm on the GPU: an all-to-all
// of packed sign chunks and an all-gather of the server chunks.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dstrain/comm/backend.hpp"

namespace ds::comm {

class NcclBackend final : public Backend {
 public:
  // The world of mpirun; binds this process to GPU local_rank % device_count.
  NcclBackend();
  ~NcclBackend() override;
  NcclBackend(const NcclBackend&) = delete;
  NcclBackend& operator=(const NcclBackend&) = delete;

  std::string name() const override { return "nccl"; }
  int rank() const override;
  int world_size() const override;

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
  struct State;  // NCCL and MPI handles stay out of this header
  explicit NcclBackend(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace ds::comm
