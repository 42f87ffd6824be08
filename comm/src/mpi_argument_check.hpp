// ArgumentCheck: the check that runs beside a collective of MpiBackend (see mpi_backend.hpp). One
// nonblocking MAX-allreduce of {values, -values, problem, -problem} answers whether all ranks agree
// on the values (max(v) == -max(-v)), whether any rank found a problem, and whether all did.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mpi_errors.hpp"

namespace ds::comm {

class ArgumentCheck {
 public:
  ArgumentCheck(const char* collective, int64_t call, const std::vector<int64_t>& values, std::string description,
                bool problem, MPI_Comm comm)
      : collective_(collective), call_(call), description_(std::move(description)), n_(values.size()),
        local_(2 * n_ + 2), global_(2 * n_ + 2) {
    for (size_t i = 0; i < n_; ++i) {
      local_[i] = values[i];
      local_[n_ + i] = -values[i];
    }
    local_[2 * n_] = problem ? 1 : 0;
    local_[2 * n_ + 1] = problem ? -1 : 0;
    check_mpi(MPI_Iallreduce(local_.data(), global_.data(), static_cast<int>(local_.size()), MPI_INT64_T, MPI_MAX,
                             comm, &request_),
              "MPI_Iallreduce");
  }
  ArgumentCheck(const ArgumentCheck&) = delete;
  ArgumentCheck& operator=(const ArgumentCheck&) = delete;

  const char* collective() const { return collective_; }
  int64_t call() const { return call_; }
  bool done() const { return done_; }
  // Polls the check; true once it has completed.
  bool test() {
    if (done_) return true;
    int flag = 0;
    check_mpi(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE), "MPI_Test");
    done_ = flag != 0;
    return done_;
  }
  bool some_problem() const { return global_[2 * n_] != 0; }
  bool every_rank_problem() const { return global_[2 * n_ + 1] == -1; }  // max(-problem) = -min(problem)
  // Why the ranks disagree, from this rank's view, or "" when they agree and none found a problem.
  std::string disagreement() const {
    if (some_problem())
      return std::string(collective_) + ": another rank passed invalid arguments (see its error); this rank passed " +
             description_;
    for (size_t i = 0; i < n_; ++i)
      if (global_[i] != -global_[n_ + i])
        return std::string(collective_) + ": ranks pass tensors of different sizes or dtypes; this rank passed " +
               description_;
    return "";
  }

 private:
  const char* collective_;
  int64_t call_;
  std::string description_;
  size_t n_;
  std::vector<int64_t> local_, global_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  bool done_ = false;
};

}  // namespace ds::comm
