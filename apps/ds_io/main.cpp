// ds_io: DeepSpeed's NVMe benchmark (deepspeed/nvme, ds_io and ds_nvme_tune) on dstrain's io_uring
// handle. Parses the flags and hands over to benchmark.cpp or sweep.cpp.
#include <CLI/CLI.hpp>

#include <sys/stat.h>

#include <cstdio>

#include "benchmark.hpp"
#include "dstrain/io/aio_settings.hpp"
#include "dstrain/runtime/error.hpp"
#include "options.hpp"
#include "report.hpp"
#include "sweep.hpp"

namespace {

using ds::io_bench::Options;

void add_options(CLI::App& app, Options& o) {
  app.add_option("--folder", o.folder, "Folder for the I/O files <folder>/ds_io_<process>.dat")
      ->required()
      ->check(CLI::ExistingDirectory);
  app.add_option("--io_size", o.io_size, "Bytes to read or write per process and loop (e.g. 400M, 1G)")
      ->required()
      ->transform(CLI::AsSizeValue(false));
  app.add_flag("--read", o.read, "Read the files (default: write them)");
  app.add_flag("--create", o.create,
               "With --read: write a file that is missing or shorter than --io_size first (default: an error)");
  app.add_option("--multi_process", o.multi_process, "Processes doing I/O in parallel, each on its own file")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--block_size", o.block_size, "I/O block size, K/M/G suffixes allowed")
      ->transform(CLI::AsSizeValue(false))
      ->default_str("1M");
  app.add_option("--queue_depth", o.queue_depth, "Blocks in flight per io_uring")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--single_submit", o.single_submit, "Submit blocks one per system call (default: in batches)");
  app.add_flag("--sequential_requests", o.sequential_requests,
               "Submit the next batch only once the previous one has completed (default: refill the queue "
               "as completions arrive, i.e. overlap_events)");
  app.add_flag("--validate", o.validate, "Check the transferred bytes against a plain pread of the file");
  app.add_flag("--handle", o.handle, "Reuse one aio handle for all loops (default: a fresh one per loop)");
  app.add_option("--loops", o.loops, "Repetitions of the transfer")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--io_parallel", o.io_parallel, "Worker threads (one io_uring each) per transfer")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--overwrite", o.overwrite,
               "Write into the existing file (as fio does) instead of removing it before each loop (as "
               "DeepSpeed does) and preallocating a fresh one");
  app.add_flag("--checksum", o.checksum,
               "Have the handle compute the CRC-32C of every transfer on its worker threads, as the NVMe "
               "swappers do (with --validate, checked against the buffer's)");
  app.add_option("--request_size", o.request_size,
                 "Queue each loop's transfer as async requests of this many bytes and wait once, as the "
                 "NVMe swappers queue reads ahead (default: one sync request of --io_size)")
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--sweep", o.sweep,
               "Write then read at every sweep block size x queue depth x io_parallel and print the best "
               "as an \"aio\" config block (ignores --read, --block_size, --queue_depth, --io_parallel)");
  app.add_option("--sweep_block_sizes", o.sweep_block_sizes, "Block sizes tried by --sweep")
      ->delimiter(',')
      ->transform(CLI::AsSizeValue(false))
      ->default_str("128K,256K,1M,8M");
  app.add_option("--sweep_queue_depths", o.sweep_queue_depths, "Queue depths tried by --sweep")
      ->delimiter(',')
      ->check(CLI::PositiveNumber)
      ->default_str("4,8,16,32,64");
  app.add_option("--sweep_io_parallel", o.sweep_io_parallel, "io_parallel values tried by --sweep")
      ->delimiter(',')
      ->check(CLI::PositiveNumber)
      ->default_str("1,2,4");
  app.footer(
      "Throughput is in GB/s with 1 GB = 1e9 bytes; latency is per loop, from the first process's start to "
      "the last one's end; cpu is user + system time of the I/O processes per GB moved.");
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"ds_io: measure io_uring reads and writes of tensors-sized buffers, as DeepSpeed's ds_io."};
  add_options(app, options);
  CLI11_PARSE(app, argc, argv);

  try {
    if (options.io_size <= 0)
      throw ds::Error("--io_size must be positive, got " + std::to_string(options.io_size));
    if (options.sweep) return ds::io_bench::run_sweep(options) ? 0 : 1;
    const ds::io::AioSettings settings = options.settings();
    ds::io::validate(settings);
    ds::io_bench::print_settings(options, options.read, settings);
    const ds::io_bench::RunResult result = ds::io_bench::run_benchmark(options, options.read, settings);
    ds::io_bench::print_run(result);
    return options.validate && !ds::io_bench::print_validation(result) ? 1 : 0;
  } catch (const ds::Error& error) {
    std::fprintf(stderr, "ds_io: %s\n", error.what());
    return 1;
  }
}
