// Preemption: what the trainer does when the scheduler wants the nodes back. Slurm sends SIGTERM at
// preemption, at the time limit and on scancel (and whatever --signal asks, e.g. USR1, ahead of
// the limit); Open MPI's mpirun forwards SIGUSR1 to every rank at once.
//
// A listed signal asks every rank to finish the current step, save a checkpoint and exit with
// kPreemptedExitCode. The ranks agree at each step boundary (requested(), one allreduce of a flag),
// so a signal that reached one rank stops them all on the same step. A second signal ends the
// process at once (its default action); so does SIGALRM `timeout_seconds` after the first, should
// the step or the save hang.
#pragma once

#include <signal.h>

#include <string>
#include <vector>

#include "dstrain/comm/backend.hpp"

namespace ds::app {

// EX_TEMPFAIL of sysexits.h, "a temporary failure; the user is invited to retry": the job stopped
// early, saved, and resumes with --resume. Not 143 (128 + SIGTERM): that is what a rank killed by
// the signal itself reports, with nothing saved.
constexpr int kPreemptedExitCode = 75;

// "TERM,USR1" -> {SIGTERM, SIGUSR1} (names with or without "SIG", or numbers); "none" -> {}. A
// name that is not a catchable signal is a ds::Error naming --preempt-signals.
std::vector<int> parse_signal_list(const std::string& list);

class Preemption {
 public:
  // Installs the handlers (only one Preemption at a time); restores the previous ones on destruction.
  Preemption(const std::vector<int>& signals, unsigned timeout_seconds);
  ~Preemption();
  Preemption(const Preemption&) = delete;
  Preemption& operator=(const Preemption&) = delete;

  // Collective over `world`: whether any rank has received one of the signals.
  bool requested(comm::Backend& world);
  // The signal this rank received (0: none; another rank's).
  int signal() const;

 private:
  std::vector<int> signals_;
  std::vector<struct sigaction> previous_;
};

}  // namespace ds::app
