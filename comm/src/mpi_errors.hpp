// Shared by the MPI backend's files: MPI's return codes and 64-bit sizes turned into ds::Error (the
// communicators use MPI_ERRORS_RETURN), and the hash that ranks compare.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ds::comm {

// "<call> failed: <MPI's error string>".
std::string mpi_error_message(int rc, const char* call);
// Throws ds::Error mpi_error_message(rc, call) unless rc is MPI_SUCCESS.
void check_mpi(int rc, const char* call);
// FNV-1a of `bytes` bytes, continuing from `h`: ids and argument hashes that must be equal on
// every rank.
uint64_t fnv1a(const void* data, size_t bytes, uint64_t h = 1469598103934665603ull);
// n as MPI's int count; a ds::Error naming `what` when it does not fit.
int mpi_count(int64_t n, const char* what);

}  // namespace ds::comm
