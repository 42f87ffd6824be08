// The checks an NVMe swap folder must pass before training writes to it, so that a bad path fails
// at start with what to fix rather than mid-step: the path exists and is a folder, is writable,
// supports O_DIRECT, and has room for every byte that will be written there.
//
//   std::string folder = ds::io::make_swap_folder("/nvme", "dstrain-optimizer-rank0",
//                                                 "zero_optimization.offload_optimizer.nvme_path", bytes);
//   ...                            // swap files under `folder`
//   ds::remove_tree(folder);       // at a clean exit
#pragma once

#include <cstdint>
#include <string>

namespace ds::io {

// Checks `nvme_path` (see above) for `bytes_needed` bytes and creates a fresh, uniquely named folder
// `<nvme_path>/<prefix>-XXXXXX` in it (mkdtemp: never one left by another run). Returns its path.
// Every failure is a ds::Error carrying `key`, the path and, for space, the bytes needed and free.
std::string make_swap_folder(const std::string& nvme_path, const std::string& prefix, const std::string& key,
                             int64_t bytes_needed);

}  // namespace ds::io
