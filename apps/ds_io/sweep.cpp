#include "sweep.hpp"

#include <cstdio>

#include "benchmark.hpp"
#include "report.hpp"

namespace ds::io_bench {

bool run_sweep(const Options& options) {
  struct Point {
    io::AioSettings settings;
    double read_gb_per_s;
    double write_gb_per_s;
  };
  bool valid = true;
  Point best{};
  std::printf("%10s %11s %11s %12s %13s\n", "block_size", "queue_depth", "io_parallel", "write GB/s", "read GB/s");
  for (int64_t block_size : options.sweep_block_sizes) {
    for (int queue_depth : options.sweep_queue_depths) {
      for (int io_parallel : options.sweep_io_parallel) {
        io::AioSettings settings = options.settings();
        settings.block_size = block_size;
        settings.queue_depth = queue_depth;
        settings.intra_op_parallelism = io_parallel;
        // The write leaves the file that the read then needs.
        RunResult write = run_benchmark(options, false, settings);
        RunResult read = run_benchmark(options, true, settings);
        if (options.validate) valid = print_validation(write) && print_validation(read) && valid;
        Point point{settings, read.gb_per_s(), write.gb_per_s()};
        std::printf("%10s %11d %11d %12.3f %13.3f\n", human_size(block_size).c_str(), queue_depth, io_parallel,
                    point.write_gb_per_s, point.read_gb_per_s);
        std::fflush(stdout);
        if (point.read_gb_per_s + point.write_gb_per_s > best.read_gb_per_s + best.write_gb_per_s) best = point;
      }
    }
  }
  std::printf("Best performance (GB/s): read = %.3f, write = %.3f\n", best.read_gb_per_s, best.write_gb_per_s);
  std::printf(
      "\"aio\": {\n  \"block_size\": %ld,\n  \"queue_depth\": %d,\n  \"intra_op_parallelism\": %d,\n"
      "  \"single_submit\": %s,\n  \"overlap_events\": %s\n}\n",
      best.settings.block_size, best.settings.queue_depth, best.settings.intra_op_parallelism,
      best.settings.single_submit ? "true" : "false", best.settings.overlap_events ? "true" : "false");
  return valid;
}

}  // namespace ds::io_bench
