// CommsLogger: what the collectives of a group (and of the groups split from it) cost, as DeepSpeed's
// comms_logger. A backend records each call where it completes: its op (the Backend method's name,
// the async variants under the blocking one's), its message size, the seconds from the call to its
// completion as this rank saw it, and the algorithm the backend used. Calls are summed per op and
// message size and reported as DeepSpeed's log_summary: count, total and mean latency, algorithm
// bandwidth and bus bandwidth (nccl-tests' definitions; docs/comm.md). Off until configured; while
// off a call site costs one branch and reads no clock.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ds::comm {

// The "comms_logger" block of a DeepSpeed config.
struct CommsLoggerSettings {
  bool enabled = false;
  bool verbose = false;  // also log every recorded call as it completes
  bool prof_all = true;  // record every op; false: only those named in prof_ops
  std::vector<std::string> prof_ops;  // op names, ours or DeepSpeed's spelling (all_gather_into_tensor)
  bool debug = false;    // DeepSpeed adds the caller's Python function to the op's name; kept, not acted on

  // From the block as written (absent or null: the defaults). Throws ds::Error naming the key
  // ("comms_logger.prof_ops") for a wrong type, an unknown key or an op no backend has.
  static CommsLoggerSettings from_json(const nlohmann::json& block);
};

// Bandwidths in gigabits per second (DeepSpeed's unit), from the message size and the seconds one
// or more calls took. algbw = bytes / seconds; busbw = algbw times the share of the message each
// rank's link carries in a ring: 2(n-1)/n for all_reduce (and compressed_allreduce, counted on the
// uncompressed buffer), (n-1)/n for all_gather and reduce_scatter (the message being the whole
// gathered or reduced buffer; for their quantized forms, its int8/int4 records), 1 for broadcast,
// send and recv, 0 for barrier.
struct Bandwidth {
  double algbw_gbps = 0;
  double busbw_gbps = 0;
};
double bus_factor(const std::string& op, int group_size);
Bandwidth bandwidth(const std::string& op, int64_t bytes, double seconds, int group_size);

// One op and message size of the summary.
struct CommSummaryRow {
  std::string op;
  int64_t bytes = 0;   // the message: the buffer reduced, gathered or sent, as DeepSpeed's msg_size
  int64_t count = 0;
  double total_seconds = 0;
  std::string algorithm;  // what the backend asked its transport for ("MPI_Iallreduce", ...)
  // Over all its calls (time-weighted: total bytes over total seconds, each call's bus share
  // by its own group's size).
  double algbw_gbps = 0;
  double busbw_gbps = 0;
  double average_ms() const { return count > 0 ? total_seconds * 1e3 / count : 0; }
};

class CommsLogger {
 public:
  using Clock = std::chrono::steady_clock;

  // One call being timed: from begin() where the backend starts it to end() once it has completed.
  struct Timing {
    const char* op = nullptr;  // null: not recorded
    int64_t bytes = 0;
    const char* algorithm = "";
    Clock::time_point start;
  };

  void configure(CommsLoggerSettings settings);
  const CommsLoggerSettings& settings() const { return settings_; }
  bool enabled() const { return settings_.enabled; }

  // `op`, `algorithm`: string literals (kept by pointer).
  Timing begin(const char* op, int64_t bytes, const char* algorithm) const;
  // The call completed now on a group of group_size ranks.
  void end(const Timing& timing, int group_size);

  // Every op and message size recorded since configure(), by op name, then size.
  std::vector<CommSummaryRow> summary() const;

 private:
  struct Totals {
    int64_t count = 0;
    double seconds = 0;
    double bus_bytes = 0;  // bytes times each call's bus factor
    std::string algorithm;
  };

  bool records(const char* op) const;

  CommsLoggerSettings settings_;
  mutable std::mutex mutex_;  // a backend may complete calls on another thread than the trainer's
  std::map<std::pair<std::string, int64_t>, Totals> totals_;
};

// DeepSpeed's log_summary table: one header, then per op its message sizes ("8.0 MB", 1024-based
// as DeepSpeed's convert_size) with count, total and average latency (ms), algbw, busbw (Gbps) and
// the algorithm.
std::string format_comms_summary(const std::vector<CommSummaryRow>& rows);

}  // namespace ds::comm
