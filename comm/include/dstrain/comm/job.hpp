// The job's life, below every backend: the world group it holds and how it ends. The backends end
// the job from here when a collective fails; init_distributed (distributed.hpp) sets the world.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "dstrain/comm/backend.hpp"

namespace ds::comm {

bool is_initialized();
Backend& world();  // throws ds::Error when not initialized
std::shared_ptr<Backend> world_group();  // the world, shared; null when not initialized

// Drops the world group and shuts MPI down; collectives afterwards are a ds::Error. Optional: when
// dstrain initialized MPI, it finalizes it at exit (a normal return from main or exit()).
void finalize();

// Logs the message as an error with this rank and ends the whole job: MPI_Abort when MPI is up,
// else this process alone. Safe to call before init_distributed and from any thread.
[[noreturn]] void abort_job(const std::string& message);

// Runs body and returns its exit code. A std::exception (ds::Error included) escaping body on any
// rank is logged with that rank and ends the whole job through MPI_Abort, so no rank is left waiting
// in a collective. Meant to wrap main().
int run_or_abort(const std::function<int()>& body);

// For init_distributed alone: makes `group` the world (null drops it).
void set_world(std::shared_ptr<Backend> group);

}  // namespace ds::comm
