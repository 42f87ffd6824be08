#include "report.hpp"

#include <algorithm>
#include <cstdio>

namespace ds::io_bench {

std::string human_size(int64_t bytes) {
  const char* units = "KMGT";
  int unit = -1;
  while (unit < 3 && bytes != 0 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return std::to_string(bytes) + (unit >= 0 ? std::string(1, units[unit]) : "");
}

void print_settings(const Options& options, bool read, const io::AioSettings& settings) {
  std::printf("ds_io %s: %d loop(s) of %s bytes x %d process(es) in %s; block_size %s, queue_depth %d, "
              "io_parallel %d, single_submit %s, overlap_events %s, %s handle%s\n",
              read ? "read" : "write", options.loops, human_size(options.io_size).c_str(),
              options.multi_process, options.folder.c_str(), human_size(settings.block_size).c_str(),
              settings.queue_depth, settings.intra_op_parallelism, settings.single_submit ? "true" : "false",
              settings.overlap_events ? "true" : "false", options.handle ? "one reused" : "a fresh per-loop",
              options.checksum ? ", CRC-32C on" : "");
}

void print_run(const RunResult& result) {
  const int loops = static_cast<int>(result.processes.front().loops.size());
  double min_latency = result.loop_latency_s(0), max_latency = min_latency;
  for (int loop = 0; loop < loops; ++loop) {
    const double latency = result.loop_latency_s(loop);
    min_latency = std::min(min_latency, latency);
    max_latency = std::max(max_latency, latency);
    std::printf("  loop %d: latency %.4f s, %.3f GB/s\n", loop + 1, latency,
                static_cast<double>(result.loop_bytes()) / latency / 1e9);
  }
  std::printf("aggregate %s: %.3f GB/s, latency mean %.4f s min %.4f s max %.4f s, cpu %.4f s/GB, "
              "O_DIRECT %.1f%%\n",
              result.read ? "read" : "write", result.gb_per_s(), result.total_latency_s() / loops, min_latency,
              max_latency, result.cpu_s_per_gb(), 100.0 * result.direct_fraction());
}

bool print_validation(const RunResult& result) {
  bool valid = true;
  for (size_t p = 0; p < result.processes.size(); ++p) {
    if (!result.processes[p].validation_error.empty()) {
      std::printf("validation FAILED in process %zu: %s\n", p, result.processes[p].validation_error.c_str());
      valid = false;
    }
  }
  if (valid)
    std::printf("validation passed: %zu file(s) of %s bytes match the buffers (plain pread)\n",
                result.processes.size(), human_size(result.bytes_per_process).c_str());
  return valid;
}

}  // namespace ds::io_bench
