// The default process group, as torch.distributed / deepspeed.comm: init_distributed() brings up
// the world once (from mpirun's environment, or as a single process without mpirun) and the free
// functions below run collectives on it. The world group itself, finalize() and abort_job() are
// in job.hpp, below the backends, which end the job from there.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dstrain/comm/backend.hpp"
#include "dstrain/comm/job.hpp"  // is_initialized, world, finalize, abort_job, run_or_abort

namespace ds::comm {

// "mpi" or "nccl" (only when built with NCCL). Idempotent: a second call with the same name returns
// the same world (with its first timeout); another name is a ds::Error. Sets the logging rank and
// installs a terminate handler that aborts the whole job, so an exception escaping any thread leaves
// no rank hanging. timeout: how long any wait of the "mpi" backend may last before the job is
// ended, naming the call and the ranks that never arrived (the "nccl" backend's collectives are
// not watched); must be positive.
std::shared_ptr<Backend> init_distributed(const std::string& backend_name = "mpi",
                                          std::chrono::milliseconds timeout = kDefaultTimeout);
int get_rank();
int get_world_size();

void all_reduce(const at::Tensor& tensor, ReduceOp op = ReduceOp::Sum);
void all_gather(const std::vector<at::Tensor>& outputs, const at::Tensor& input);
void reduce_scatter(const at::Tensor& output, const std::vector<at::Tensor>& inputs, ReduceOp op = ReduceOp::Sum);
void broadcast(const at::Tensor& tensor, int src);
void send(const at::Tensor& tensor, int dst, int tag = 0);
void recv(const at::Tensor& tensor, int src, int tag = 0);
void barrier();

}  // namespace ds::comm
