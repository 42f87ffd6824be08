// ds_io --sweep, as DeepSpeed's ds_nvme_tune: write then read at every block size x queue depth x
// io_parallel, and print the best settings (highest read + write GB/s) as an "aio" config block.
#pragma once

#include "options.hpp"

namespace ds::io_bench {

// Returns false when a validation failed.
bool run_sweep(const Options& options);

}  // namespace ds::io_bench
