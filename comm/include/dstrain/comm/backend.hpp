// ds::comm::Backend: one process group and the collectives it offers, in the style of PyTorch
// c10d's ProcessGroup. The caller never knows which transport it has: MpiBackend (CPU tensors,
// optionally CUDA-aware MPI) and NcclBackend (CUDA tensors) implement the same interface.
//
// Every collective must be called by all ranks of the group, in the same order, with tensors of the
// same dtype and matching sizes; a mismatch that a backend can detect is a ds::Error on every rank.
// A call that some rank never reaches ends the job after the backend's timeout (kDefaultTimeout
// unless given), naming the call and the missing ranks, instead of waiting forever.
// Tensors may be non-contiguous (they are staged through a contiguous copy). Results are written
// into the tensors passed in: as in ATen, a `const at::Tensor&` is a handle whose data may change,
// so views and temporaries (e.g. `t.narrow(0, a, n)`) can be reduced in place.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "dstrain/comm/comms_logger.hpp"

namespace ds::comm {

// How long a wait of any collective or point-to-point call may last before the job is ended
// (DeepSpeed's and torch.distributed's default).
inline constexpr std::chrono::milliseconds kDefaultTimeout = std::chrono::minutes(30);

enum class ReduceOp { Sum, Avg, Max, Min };

const char* to_string(ReduceOp op);

// Handle of an asynchronous collective; wait() blocks until its tensors hold the result.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  // Lets the operation advance without blocking, and tells whether it has completed (wait() would
  // return at once). For transports that move data only inside their own calls (MPI: Open MPI
  // advances a nonblocking collective round by round, within MPI calls), calling this now and then
  // keeps the operation going while the caller computes. The default, for transports that progress
  // on their own, does nothing and answers false.
  virtual bool test() { return false; }
};

class Backend {
 public:
  virtual ~Backend() = default;

  // The transport, as init_distributed() and the config's comm_backend_name spell it ("mpi", "nccl").
  virtual std::string name() const = 0;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // In place, as torch.distributed.all_reduce.
  virtual void all_reduce(const at::Tensor& tensor, ReduceOp op = ReduceOp::Sum) = 0;
  // The tensor must stay alive and untouched until wait().
  virtual std::unique_ptr<Work> all_reduce_async(at::Tensor tensor, ReduceOp op = ReduceOp::Sum) = 0;

  // outputs[r] receives rank r's input (outputs.size() == world_size()); sizes may differ per rank
  // as long as every rank's outputs[r] matches rank r's input.
  virtual void all_gather(const std::vector<at::Tensor>& outputs, const at::Tensor& input) = 0;
  // output.numel() == world_size() * input.numel(); rank r's input lands at offset r * input.numel()
  // (torch's all_gather_into_tensor).
  virtual void all_gather_into(const at::Tensor& output, const at::Tensor& input) = 0;
  virtual std::unique_ptr<Work> all_gather_into_async(at::Tensor output, at::Tensor input) = 0;

  // inputs[r] is this rank's contribution to rank r's output (inputs.size() == world_size()); sizes
  // may differ per destination rank. output.numel() == inputs[rank()].numel().
  virtual void reduce_scatter(const at::Tensor& output, const std::vector<at::Tensor>& inputs,
                              ReduceOp op = ReduceOp::Sum) = 0;
  // input.numel() == world_size() * output.numel(); rank r receives the reduction of slice r
  // (torch's reduce_scatter_tensor).
  virtual void reduce_scatter_into(const at::Tensor& output, const at::Tensor& input, ReduceOp op = ReduceOp::Sum) = 0;
  virtual std::unique_ptr<Work> reduce_scatter_into_async(at::Tensor output, at::Tensor input,
                                                          ReduceOp op = ReduceOp::Sum) = 0;

  // In place: every rank ends with src's tensor.
  virtual void broadcast(const at::Tensor& tensor, int src) = 0;

  // Point to point. recv's tensor must have exactly the size and dtype that was sent.
  virtual void send(const at::Tensor& tensor, int dst, int tag = 0) = 0;
  virtual void recv(const at::Tensor& tensor, int src, int tag = 0) = 0;

  virtual void barrier() = 0;

  // The sub-group of the ranks that passed the same color, ordered by key (MPI_Comm_split), e.g. a
  // data-parallel or pipeline group. A negative color takes part in the split and gets nullptr.
  virtual std::shared_ptr<Backend> split(int color, int key) = 0;

  // DeepSpeed's 1-bit compressed allreduce with error feedback (see docs/comm.md). buffer: float32,
  // any shape; worker_error: float32 of the buffer's numel padded to a multiple of 8 * world_size();
  // server_error: float32 of worker_error.numel() / world_size(); both start at zero and are updated
  // in place. The averaged, compressed result is written into buffer, which is returned.
  // local_rank: the caller's GPU, for backends that compute on it.
  virtual at::Tensor compressed_allreduce(at::Tensor buffer, at::Tensor worker_error, at::Tensor server_error,
                                          int local_rank) = 0;

  // Logs the message with this rank and ends the whole job (every rank of every group).
  [[noreturn]] virtual void abort(const std::string& message) = 0;

  // What this group's calls cost (off until configured); shared with the groups split from it.
  CommsLogger& comms_logger() const { return *comms_logger_; }

 protected:
  std::shared_ptr<CommsLogger> comms_logger_ = std::make_shared<CommsLogger>();
};

}  // namespace ds::comm
