// CheckedCall: one collective of MpiBackend (see mpi_backend.hpp) and the check of its arguments.
// The check is one nonblocking MAX-allreduce of {h, -h, problem, -problem}, h a hash of the
// collective's name and the values every rank must pass alike: it answers whether all ranks agree
// (max(h) == -max(-h)), whether any rank found a problem with its own arguments, and whether all
// did. Its length is the same for every collective, so ranks that reached different collectives
// find that out too. The data call is posted only after the check agreed: MPI leaves a collective
// whose ranks pass different counts undefined, and Open MPI's nonblocking collectives then write
// past their buffers.
//
// A data call may be posted in pieces (several nonblocking calls over parts of the buffers): the
// call completes when every piece has.
#pragma once

#include <mpi.h>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ds::comm {

class CheckedCall {
 public:
  // Posts piece `piece` of the data call into *request and returns MPI's return code.
  using Post = std::function<int(int piece, MPI_Request* request)>;

  // Starts the check on check_comm. problem: what is wrong with this rank's own arguments, or "".
  // description: this rank's arguments, for the messages.
  CheckedCall(const char* collective, int64_t number, const std::vector<int64_t>& values, std::string description,
              std::string problem, MPI_Comm check_comm);
  CheckedCall(const CheckedCall&) = delete;
  CheckedCall& operator=(const CheckedCall&) = delete;

  const char* collective() const { return collective_; }
  int64_t number() const { return number_; }  // this call's position among its group's calls

  // What posts the data call once the check agrees; set by a rank with no problem of its own.
  void set_post(Post post, const char* mpi_call, int pieces) {
    post_ = std::move(post);
    mpi_call_ = mpi_call;
    requests_.assign(pieces, MPI_REQUEST_NULL);
  }
  // Polls the check; true once it has completed on this rank.
  bool check_complete();
  // After the check: why this call cannot run ("" when every rank agrees and none found a problem).
  std::string disagreement() const;
  // After the check: every rank found a problem of its own, so nothing was sent and the group is
  // still usable.
  bool every_rank_problem() const { return global_[3] == -1; }  // max(-problem) = -min(problem)

  // Posts every piece of the data call; returns "" or why one failed.
  std::string post();
  // The call will not run: wait() reports `reason`.
  void fail(std::string reason) { failure_ = std::move(reason); }

  // Polls the data call; true once it has completed, failed, or will never run.
  bool complete();
  // After complete(): "" or the reason this call failed.
  const std::string& failure() const { return failure_; }
  // The data call's first request, reused by calls with several phases once the first completed.
  MPI_Request* request() { return &requests_.front(); }

 private:
  const char* collective_;
  int64_t number_;
  std::string description_;
  std::string problem_;
  std::array<int64_t, 4> local_, global_;
  MPI_Request check_request_ = MPI_REQUEST_NULL;
  bool checked_ = false;
  Post post_;
  const char* mpi_call_ = "";
  std::vector<MPI_Request> requests_;
  bool posted_ = false;
  bool done_ = false;
  std::string failure_;
};

}  // namespace ds::comm
