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

#include <mpi.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dstrain/comm/backend.hpp"

namespace ds::comm {

class Watchdog;
class CheckedCall;

class MpiBackend final : public Backend {
 public:
  // The world (MPI_COMM_WORLD); initializes MPI (MPI_THREAD_SERIALIZED) if nobody has yet. Every
  // wait of this group and of the groups split from it ends the job after `timeout`.
  explicit MpiBackend(bool cuda_aware = false, std::chrono::milliseconds timeout = kDefaultTimeout);
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
  friend class MpiWork;
  // Takes ownership of comm; label names the group in the watchdog's reports.
  MpiBackend(MPI_Comm comm, bool cuda_aware, std::shared_ptr<Watchdog> watchdog, std::string label);

  // A collective begins: it counts as this group's next call, starts the check of `values` (equal
  // on every rank) and joins the queue of calls whose data call waits for its check. A rank that
  // found a problem with its own arguments waits for the check and throws. description: this
  // rank's arguments, for the error messages.
  std::shared_ptr<CheckedCall> begin(const char* collective, const std::vector<int64_t>& values,
                                     std::string description, const std::string& problem);
  // Gives a begun call its data call (in `pieces` nonblocking calls), posted once its check and
  // every earlier call's have agreed.
  void post(CheckedCall& call, std::function<int(int piece, MPI_Request*)> data_call, const char* mpi_call,
            int pieces = 1);
  // Posts the queued calls whose checks have completed, in the order they began (the same on every
  // rank). A check that shows a disagreement fails its call and leaves the group unusable.
  void advance();
  // Waits until the call has run; throws why it could not.
  void finish(CheckedCall& call);
  // Waits for a request that is not a checked collective (point to point, later phases of a call).
  void wait(MPI_Request& request, const std::string& what, int64_t call, const std::vector<int>& peers,
            const char* mpi_call);
  void check_usable(const char* collective) const;
  // MPI can use this tensor's memory as it is (CPU, or CUDA with CUDA-aware MPI).
  bool reachable(const at::Tensor& tensor) const;
  MPI_Op mpi_op(ReduceOp op, at::ScalarType dtype) const;

  MPI_Comm comm_;
  MPI_Comm check_comm_;  // the argument checks' own communicator
  std::shared_ptr<Watchdog> watchdog_;
  std::string label_;  // "world", "world/2:1" (color 1 of the world's second split), ...
  uint64_t id_;        // hash of label_, equal on every member
  std::vector<int> world_ranks_;  // of the members, by rank in this group
  std::vector<int> peers_;        // world_ranks_ without this rank
  int64_t posted_calls_ = 0;
  int64_t splits_ = 0;
  std::string unusable_;  // why this group refuses calls ("" while usable)
  std::deque<std::shared_ptr<CheckedCall>> queued_;  // begun, data call not posted yet; oldest first
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
