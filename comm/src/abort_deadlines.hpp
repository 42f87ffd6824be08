// Deadlines that make an aborting rank's job end even when MPI_Abort cannot finish it.
//
// Open MPI 4.1's mpirun, once a rank called MPI_Abort, tells every daemon to kill its ranks and then
// waits, without any limit, until each daemon has confirmed. A daemon behind a link that went down,
// or on a node whose processes are stopped, never confirms, so mpirun never exits although every
// rank it could reach is gone (docs/multi-node.md has the investigation). Signals are the only way
// out: SIGTERM to an aborting mpirun prints "abort is already in progress", a second one makes it
// exit non-zero.
#pragma once

#include <chrono>

namespace ds::comm {

// When this rank's parent is Open MPI's launcher (mpirun, mpiexec, orterun, prterun), starts a
// detached process that outlives this rank (its own session, no inherited descriptors) and, if that
// launcher is still running `grace` later, sends it SIGTERM twice, a second apart, then SIGKILL after
// five more seconds. A launcher that ends within `grace` is never signalled (a pidfd names it, so a
// reused pid is never hit). Call just before MPI_Abort; async-signal-safe code only after fork.
void start_launcher_deadline(std::chrono::seconds grace);

// Ends this process with _exit(1) after `grace`, from a detached thread: MPI_Abort may wait for a
// daemon that does not answer.
void start_exit_deadline(std::chrono::seconds grace);

}  // namespace ds::comm
