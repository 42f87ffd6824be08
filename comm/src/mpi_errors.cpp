#include "mpi_errors.hpp"

#include <mpi.h>

#include <climits>
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"

namespace ds::comm {

std::string mpi_error_message(int rc, const char* call) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  return std::string(call) + " failed: " + std::string(text, length);
}

void check_mpi(int rc, const char* call) {
  if (rc != MPI_SUCCESS) throw Error(mpi_error_message(rc, call)).with_rank(log::rank());
}

uint64_t fnv1a(const void* data, size_t bytes, uint64_t h) {
  for (size_t i = 0; i < bytes; ++i) h = (h ^ static_cast<const unsigned char*>(data)[i]) * 1099511628211ull;
  return h;
}

int mpi_count(int64_t n, const char* what) {
  if (n > INT_MAX)
    throw Error(log::concat(what, " has ", n, " elements, more than an MPI count can hold (", INT_MAX, ")"));
  return static_cast<int>(n);
}

}  // namespace ds::comm
