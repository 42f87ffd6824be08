// Watchdog: every wait of the MPI backend goes through it, so that no wait lasts forever. A wait
// polls its requests; past the timeout it asks the other ranks of the group, over a communicator of
// its own, how far each one got, and ends the job (MPI_Abort) with the call's name and the ranks
// that never arrived. A rank answers such questions whenever it is itself waiting, so a rank that is
// stopped, or busy outside communication, is the one that does not answer.
//
// One Watchdog serves a world and every group split from it (MpiBackend shares it). Groups are
// known to it by an id that every member computes alike, and by the count of calls each member has
// posted on the group: a rank has arrived at call #k when it has posted k calls there.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ds::comm {

class Watchdog {
 public:
  // What a rank is waiting for: call number `call` (1-based; 0 for point to point) of a group.
  struct Waiting {
    std::string what;        // e.g. "all_reduce", "recv from rank 3 (tag 7)"
    uint64_t group_id;
    const std::string* group_label;
    int64_t call;
    const std::vector<int>* peers;  // world ranks to ask, this rank excluded
  };

  // Duplicates MPI_COMM_WORLD for its questions and answers, and gathers the ranks' host names.
  explicit Watchdog(std::chrono::milliseconds timeout);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  std::chrono::milliseconds timeout() const { return timeout_; }

  // A group's posted-call counter, read when another rank asks about the group.
  void register_group(uint64_t group_id, const int64_t* posted_calls);
  void unregister_group(uint64_t group_id);

  // Calls `poll` until it returns true; past the timeout, ends the job naming `waiting`.
  void wait(const Waiting& waiting, const std::function<bool()>& poll);

 private:
  // Answers the questions other ranks have sent.
  void answer_questions();
  [[noreturn]] void report_and_abort(const Waiting& waiting);

  MPI_Comm comm_;
  int world_rank_ = 0;
  std::chrono::milliseconds timeout_;
  bool oversubscribed_ = false;  // more ranks on this node than cores: waits sleep between polls
  std::map<uint64_t, const int64_t*> groups_;
  // This rank's current wait, told to ranks that ask ("" when not waiting).
  std::string current_;
  // Each world rank's host name, for the report: on several nodes, the node is what to look at.
  std::vector<std::string> hosts_;
};

}  // namespace ds::comm
