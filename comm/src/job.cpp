#include "dstrain/comm/job.hpp"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "abort_deadlines.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"

namespace ds::comm {
namespace {

// How long MPI_Abort may take before this rank exits by itself, and before mpirun, still waiting
// for daemons it cannot reach, is signalled (abort_deadlines.hpp): a healthy mpirun ends a job
// within a second or two.
constexpr std::chrono::seconds kAbortGrace{10};
constexpr std::chrono::seconds kLauncherGrace{15};

// The world group: with the log level, the only global state dstrain keeps.
std::shared_ptr<Backend> g_world;

bool mpi_running() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

}  // namespace

bool is_initialized() { return g_world != nullptr; }

Backend& world() {
  if (!g_world) throw Error("ds::comm used before init_distributed()");
  return *g_world;
}

std::shared_ptr<Backend> world_group() { return g_world; }

void set_world(std::shared_ptr<Backend> group) { g_world = std::move(group); }

void finalize() {
  // The world's communicators and watchdog go before MPI does.
  g_world.reset();
  if (mpi_running()) MPI_Finalize();
}

void abort_job(const std::string& message) {
  log::error(message);
  std::fflush(stdout);
  std::fflush(stderr);
  if (mpi_running()) {
    start_launcher_deadline(kLauncherGrace);
    start_exit_deadline(kAbortGrace);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  std::_Exit(1);
}

int run_or_abort(const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    abort_job(e.what());
  }
}

}  // namespace ds::comm
