// One ds_io measurement: multi_process processes, each moving io_size bytes between its own file
// (<folder>/ds_io_<process>.dat) and a locked buffer, `loops` times, all loops started together.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dstrain/io/aio_settings.hpp"
#include "options.hpp"

namespace ds::io_bench {

struct LoopTiming {
  double start_s = 0;  // CLOCK_MONOTONIC, comparable across processes
  double end_s = 0;
};

struct ProcessResult {
  std::vector<LoopTiming> loops;
  double cpu_s = 0;  // user + system time of the process (all its threads) inside the timed loops
  int64_t direct_bytes = 0;
  int64_t buffered_bytes = 0;
  std::string validation_error;  // empty when validation passed or was not asked for
};

struct RunResult {
  bool read = false;
  int64_t bytes_per_process = 0;
  std::vector<ProcessResult> processes;

  // From the first process's start to the last one's end, in loop `loop`.
  double loop_latency_s(int loop) const;
  int64_t loop_bytes() const { return bytes_per_process * static_cast<int64_t>(processes.size()); }
  double total_latency_s() const;  // sum of the loop latencies
  double gb_per_s() const;         // all bytes over total_latency_s, 1 GB = 1e9 bytes
  double cpu_s_per_gb() const;
  double direct_fraction() const;
};

std::string file_of(const std::string& folder, int process);

// Forks the processes, runs them, collects their reports. Throws ds::Error when one fails.
RunResult run_benchmark(const Options& options, bool read, const io::AioSettings& settings);

}  // namespace ds::io_bench
