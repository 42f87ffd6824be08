// Turning MPI's return codes and 64-bit sizes into ds::Error (the communicators use MPI_ERRORS_RETURN).
#pragma once

#include <cstdint>

namespace ds::comm {

// Throws ds::Error "<call> failed: <MPI's error string>" unless rc is MPI_SUCCESS.
void check_mpi(int rc, const char* call);
// n as MPI's int count; a ds::Error naming `what` when it does not fit.
int mpi_count(int64_t n, const char* what);

}  // namespace ds::comm
