// ds_io's printed results: per-loop and aggregate latency and throughput, CPU time, validation.
#pragma once

#include <cstdint>
#include <string>

#include "benchmark.hpp"
#include "dstrain/io/aio_settings.hpp"

namespace ds::io_bench {

std::string human_size(int64_t bytes);  // 1048576 -> "1M", 1000 -> "1000"

void print_settings(const Options& options, bool read, const io::AioSettings& settings);
// The "aggregate" line's layout is what bench/io/ds_io_vs_fio.sh parses.
void print_run(const RunResult& result);
// Prints the validation outcome; false when a process's bytes differed.
bool print_validation(const RunResult& result);

}  // namespace ds::io_bench
