// MpiBackend::Impl: what MpiBackend holds of MPI (its communicators, the queue of collectives
// whose argument check is pending, the custom 16-bit ops) and the steps every collective goes
// through: begin (start the check), post (queue the data call), advance, finish.
#pragma once

#include <mpi.h>

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "dstrain/comm/mpi_backend.hpp"
#include "dstrain/comm/tcp_ring.hpp"

namespace ds::comm {

class Watchdog;
class CheckedCall;

struct MpiBackend::Impl {
  // Takes ownership of comm; label names the group in the watchdog's reports.
  Impl(MPI_Comm comm, bool cuda_aware, std::shared_ptr<Watchdog> watchdog, std::string label);
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

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
  // Waits for `call`'s job on the TCP ring; throws why it failed.
  void wait(TcpRing::Job& job, const CheckedCall& call);
  // Whether a collective over `buffer` (the whole of it: the all-reduced tensor, the reduce-scatter's
  // input, the all-gather's output) goes over the ring: float32 or float64 on the host, a sum or an
  // average, kRingMinBytes or more, and the group has a ring.
  bool on_ring(const at::Tensor& buffer, ReduceOp op) const;
  // Gives a begun call its data call: `kind` over the contiguous host `buffer` on the ring.
  std::shared_ptr<TcpRing::Job> post_on_ring(CheckedCall& call, const at::Tensor& buffer, TcpRing::Kind kind);
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
  // Where set, float all-reduces go over it (comm/src/mpi_tcp_ring.hpp).
  std::unique_ptr<TcpRing> ring_;
  // compressed_allreduce's padded copy and packed signs, kept between calls: fresh allocations
  // of this size come from mmap and would page-fault on every call.
  at::Tensor compression_scratch_;
};

}  // namespace ds::comm
