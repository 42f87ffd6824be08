// The checks an NVMe swap folder must pass before training writes to it, so that a bad path fails
// at start with what to fix rather than mid-step: the path exists and is a folder, is writable,
// takes O_DIRECT, is not a file system in memory (tmpfs, ramfs), and has room for every byte that
// will be written there. Each failure names the key, the path, the bytes needed and the bytes free.
// And the cleanup of runs that could not clean up after themselves (killed, out of memory): their
// folders are named by host and pid, and a run removes those of its own host whose process is gone.
//
//   std::string folder = ds::io::make_swap_folder("/nvme", "dstrain-optimizer-rank0",
//                                                 "zero_optimization.offload_optimizer.nvme_path", bytes);
//   ...                            // swap files under `folder`: /nvme/dstrain-optimizer-rank0-<host>-<pid>-XXXXXX
//   ds::remove_tree(folder);       // at a clean exit
#pragma once

#include <cstdint>
#include <string>

namespace ds::io {

// Removes dead runs' folders from `nvme_path` (remove_dead_swap_folders), checks it (see above) for
// `bytes_needed` bytes and creates a fresh, uniquely named folder `<nvme_path>/<prefix>-<host>-<pid>-XXXXXX`
// in it (mkdtemp: never one left by another run). Returns its path. Every failure is a ds::Error
// carrying `key` and the path, and past the path's existence the bytes needed and free.
std::string make_swap_folder(const std::string& nvme_path, const std::string& prefix, const std::string& key,
                             int64_t bytes_needed);

// The same checks for `bytes_needed` bytes that `who` (e.g. "this node (2 ranks)") will
// write, leaving nothing behind: for a start-up check before any swapper exists, when ranks that
// share a disk must fit together.
void check_swap_path(const std::string& nvme_path, const std::string& key, const std::string& who,
                     int64_t bytes_needed);

// Removes the folders of `nvme_path` named `dstrain-*-<host>-<pid>-XXXXXX` whose host is this one
// and whose pid no longer runs here (kill(pid, 0) says ESRCH), logs how many bytes that freed and
// returns it. Other names, other hosts and live pids are left alone; a folder another rank is
// removing at the same time is not an error. A container that shares the disk and the host name
// but not the pid namespace would see this run's pids as dead: give such containers their own
// nvme_path.
int64_t remove_dead_swap_folders(const std::string& nvme_path);

// Whether two existing paths are on one file system (the same st_dev), so that swap files under
// both share one disk's bandwidth; false when either cannot be stat'ed.
bool same_file_system(const std::string& a, const std::string& b);

}  // namespace ds::io
