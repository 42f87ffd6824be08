// Turning MPI's return codes and 64-bit sizes into ds::Error (the communicators use MPI_ERRORS_RETURN).
#pragma once

#include <cstdint>
#include <string>

namespace ds::comm {

// "<call> failed: <MPI's error string>".
std::string mpi_error_message(int rc, const char* call);
// Throws ds::Error mpi_error_message(rc, call) unless rc is MPI_SUCCESS.
void check_mpi(int rc, const char* call);
// n as MPI's int count; a ds::Error naming `what` when it does not fit.
int mpi_count(int64_t n, const char* what);

}  // namespace ds::comm
