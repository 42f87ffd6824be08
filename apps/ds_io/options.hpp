// What a ds_io run was asked to do: DeepSpeed's ds_io flags, plus --overwrite and the sweep ranges.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dstrain/io/aio_settings.hpp"

namespace ds::io_bench {

struct Options {
  std::string folder;
  int64_t io_size = 0;  // bytes per process and loop
  bool read = false;
  int multi_process = 1;
  int64_t block_size = 1 << 20;
  int queue_depth = 32;
  bool single_submit = false;
  bool sequential_requests = false;
  bool validate = false;
  bool handle = false;  // reuse one handle for all loops; otherwise a fresh one per loop
  int loops = 3;
  int io_parallel = 1;
  bool overwrite = false;  // keep the file between write loops (DeepSpeed removes it)
  bool create = false;     // --read of a missing or short file writes it first (else an error)
  bool checksum = false;   // the handle computes each transfer's CRC-32C, as the NVMe swappers have it do
  int64_t request_size = 0;  // > 0: a loop's transfer is queued as async requests of this many bytes

  bool sweep = false;
  std::vector<int64_t> sweep_block_sizes{128 << 10, 256 << 10, 1 << 20, 8 << 20};
  std::vector<int> sweep_queue_depths{4, 8, 16, 32, 64};
  std::vector<int> sweep_io_parallel{1, 2, 4};

  io::AioSettings settings() const {
    return io::AioSettings{block_size, queue_depth, single_submit, !sequential_requests, io_parallel};
  }
};

}  // namespace ds::io_bench
