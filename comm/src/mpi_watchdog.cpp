#include "mpi_watchdog.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <thread>

#include <sched.h>
#include <unistd.h>

#include "dstrain/comm/job.hpp"
#include "dstrain/runtime/log.hpp"
#include "mpi_multi_node_defaults.hpp"

namespace ds::comm {
namespace {

constexpr int kQuestionTag = 1;
constexpr int kAnswerTag = 2;

struct Question {
  uint64_t group_id;
};

struct Answer {
  int64_t posted_calls;  // on the asked group; -1 when this rank does not know it
  char waiting[120];     // this rank's current wait
};

using Clock = std::chrono::steady_clock;

constexpr int kHostBytes = 64;

// How long a rank that timed out waits for the others' answers: the ranks that can answer are
// polling and answer within microseconds, so this only needs to cover a loaded machine.
std::chrono::milliseconds answer_grace(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 4, std::chrono::milliseconds(500), std::chrono::milliseconds(10000));
}

std::string seconds(std::chrono::milliseconds d) {
  std::ostringstream out;
  out << d.count() / 1000.0 << " s";
  return out.str();
}

}  // namespace

Watchdog::Watchdog(std::chrono::milliseconds timeout) : timeout_(timeout) {
  MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &world_rank_);
  const int ranks_on_node = ranks_on_this_node(comm_);
  int world = 1;
  MPI_Comm_size(comm_, &world);
  char host[kHostBytes] = {};
  ::gethostname(host, sizeof host - 1);
  std::vector<char> hosts(static_cast<size_t>(world) * kHostBytes);
  MPI_Allgather(host, kHostBytes, MPI_CHAR, hosts.data(), kHostBytes, MPI_CHAR, comm_);
  for (int r = 0; r < world; ++r) hosts_.emplace_back(&hosts[static_cast<size_t>(r) * kHostBytes]);
  cpu_set_t cores;
  CPU_ZERO(&cores);
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  const int available = sched_getaffinity(0, sizeof cores, &cores) == 0 ? CPU_COUNT(&cores) : static_cast<int>(online);
  // Bound to fewer cores than the node has, the launcher already divided them among the ranks.
  oversubscribed_ = available >= online && ranks_on_node > available;
}

Watchdog::~Watchdog() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm_);
}

void Watchdog::register_group(uint64_t group_id, const int64_t* posted_calls) { groups_[group_id] = posted_calls; }

void Watchdog::unregister_group(uint64_t group_id) { groups_.erase(group_id); }

void Watchdog::wait(const Waiting& waiting, const std::function<bool()>& poll) {
  if (poll()) return;
  current_ = waiting.call > 0
                 ? log::concat(waiting.what, " (call #", waiting.call, " of group ", *waiting.group_label, ")")
                 : log::concat(waiting.what, " in group ", *waiting.group_label);
  const auto started = Clock::now();
  auto last_answered = started;
  // Polling, as MPI_Wait does: MPI's nonblocking collectives progress only inside MPI calls, a
  // round at a time, so a reduction in many pieces needs many polls. Each round gives the core
  // away; when ranks outnumber cores, a wait past 1 ms also sleeps between rounds, or a spinning
  // rank takes the core from the very rank it waits for (4 ranks on 2 cores ran the engine tests
  // past their 5-minute limit without it). Without oversubscription the sleep only slows the
  // progress: 25M GPT at -np 2, stage 1, reduce wait 130 ms without it against 235-255 with it.
  while (!poll()) {
    const auto now = Clock::now();
    if (oversubscribed_ && now - started > std::chrono::milliseconds(1))
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    else
      std::this_thread::yield();
    if (now - last_answered > std::chrono::milliseconds(1)) {
      answer_questions();
      last_answered = now;
    }
    if (now - started > timeout_) report_and_abort(waiting);
  }
  current_.clear();
}

void Watchdog::answer_questions() {
  for (;;) {
    int pending = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, kQuestionTag, comm_, &pending, &status);
    if (!pending) return;
    Question question{};
    MPI_Recv(&question, sizeof question, MPI_BYTE, status.MPI_SOURCE, kQuestionTag, comm_, MPI_STATUS_IGNORE);
    Answer answer{};
    const auto group = groups_.find(question.group_id);
    answer.posted_calls = group == groups_.end() ? -1 : *group->second;
    std::strncpy(answer.waiting, current_.c_str(), sizeof answer.waiting - 1);
    // Small enough to be sent eagerly: the asking rank is alive and receiving.
    MPI_Send(&answer, sizeof answer, MPI_BYTE, status.MPI_SOURCE, kAnswerTag, comm_);
  }
}

void Watchdog::report_and_abort(const Waiting& waiting) {
  const std::vector<int>& peers = *waiting.peers;
  Question question{waiting.group_id};
  std::vector<MPI_Request> sent(peers.size());
  for (size_t i = 0; i < peers.size(); ++i)
    MPI_Isend(&question, sizeof question, MPI_BYTE, peers[i], kQuestionTag, comm_, &sent[i]);

  std::map<int, Answer> answers;
  const auto deadline = Clock::now() + answer_grace(timeout_);
  while (answers.size() < peers.size() && Clock::now() < deadline) {
    answer_questions();  // a rank that timed out too may be asking this one
    int pending = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, kAnswerTag, comm_, &pending, &status);
    if (!pending) continue;
    Answer answer{};
    MPI_Recv(&answer, sizeof answer, MPI_BYTE, status.MPI_SOURCE, kAnswerTag, comm_, MPI_STATUS_IGNORE);
    answers[status.MPI_SOURCE] = answer;
  }

  std::ostringstream missing;
  for (int peer : peers) {
    const auto found = answers.find(peer);
    if (found != answers.end() && waiting.call > 0 && found->second.posted_calls >= waiting.call) continue;
    missing << (missing.tellp() > 0 ? "; " : "") << "rank " << peer;
    if (found == answers.end())
      missing << " (does not answer: stopped, unreachable, or busy outside communication)";
    else if (found->second.waiting[0] != '\0')
      missing << " (waiting in " << found->second.waiting << ")";
    else
      missing << " (not waiting in any communication)";
    missing << ", host " << hosts_[static_cast<size_t>(peer)];
  }
  const std::string never_arrived = missing.str();
  abort_job(log::concat(current_, " timed out after ", seconds(timeout_), " on rank ", world_rank_, " (host ",
                        hosts_[static_cast<size_t>(world_rank_)], "); ",
                        never_arrived.empty() ? std::string("every rank arrived, but the transport did not complete it")
                                              : "never arrived: " + never_arrived));
}

}  // namespace ds::comm
