#include "mpi_checked_call.hpp"

#include <cstring>
#include <string>
#include <utility>

#include "mpi_errors.hpp"

namespace ds::comm {
namespace {

uint64_t hash_of(const char* collective, const std::vector<int64_t>& values) {
  return fnv1a(values.data(), values.size() * sizeof(int64_t), fnv1a(collective, std::strlen(collective) + 1));
}

}  // namespace

CheckedCall::CheckedCall(const char* collective, int64_t number, const std::vector<int64_t>& values,
                         std::string description, std::string problem, MPI_Comm check_comm)
    : collective_(collective), number_(number), description_(std::move(description)), problem_(std::move(problem)),
      global_{} {
  const int64_t h = static_cast<int64_t>(hash_of(collective, values) >> 2);  // -h cannot overflow
  const int64_t problem_flag = problem_.empty() ? 0 : 1;
  local_ = {h, -h, problem_flag, -problem_flag};
  check_mpi(MPI_Iallreduce(local_.data(), global_.data(), static_cast<int>(local_.size()), MPI_INT64_T, MPI_MAX,
                           check_comm, &check_request_),
            "MPI_Iallreduce");
}

bool CheckedCall::check_complete() {
  if (checked_) return true;
  int flag = 0;
  check_mpi(MPI_Test(&check_request_, &flag, MPI_STATUS_IGNORE), "MPI_Test");
  checked_ = flag != 0;
  return checked_;
}

std::string CheckedCall::disagreement() const {
  const std::string name(collective_);
  if (!problem_.empty()) return name + ": " + problem_;
  if (global_[2] != 0)
    return name + ": another rank passed invalid arguments (see its error); this rank passed " + description_;
  if (global_[0] != -global_[1])
    return name + " (call #" + std::to_string(number_) +
           "): ranks pass tensors of different sizes or dtypes, or have reached different collectives; this rank " +
           "passed " + description_;
  return "";
}

std::string CheckedCall::post() {
  posted_ = true;
  for (size_t piece = 0; piece < requests_.size(); ++piece) {
    const int rc = post_(static_cast<int>(piece), &requests_[piece]);
    if (rc == MPI_SUCCESS) continue;
    done_ = true;
    failure_ = mpi_error_message(rc, mpi_call_);
    return failure_;
  }
  return "";
}

bool CheckedCall::complete() {
  if (done_ || !failure_.empty()) return true;
  if (!posted_) return false;
  int flag = 0;
  const int rc = MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &flag, MPI_STATUSES_IGNORE);
  if (rc != MPI_SUCCESS) failure_ = mpi_error_message(rc, mpi_call_);
  done_ = flag != 0 || rc != MPI_SUCCESS;
  return done_;
}

}  // namespace ds::comm
