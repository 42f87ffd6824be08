// A checkpoint folder's life on disk, shared by saving, pruning and the trainer's start-up checks:
// files replaced atomically, folders prepared before step 1 and pruned after saves, one job at a
// time in a folder.
#pragma once

#include <string>

namespace ds {

// Creates `dir` if missing and proves it writable (a probe file written and removed), then removes
// what interrupted saves left behind, but only where the process that made it is gone: a
// .<tag>.partial.<host>.<pid> folder or *.tmp.<host>.<pid> file of this host whose pid no longer
// runs, and the owner-less .<tag>.partial / *.tmp.<pid> of earlier dstrain versions. Another host's
// debris stays (its process may still be saving). A ds::Error with the path and errno when the
// directory cannot be used.
void prepare_save_dir(const std::string& dir);

// "<host>.<pid>" of this process: the owner part of the temporary names it creates.
std::string owner_id();

// One job at a time in a save folder: holds an exclusive flock on <dir>/.dstrain.lock, which
// records "host <name> pid <n>", from construction until destruction (or the process's end). A
// folder another process holds is a ds::Error naming that holder's host and pid and the lock file.
// The trainer takes it (its rank 0) before step 1; embedders sharing folders between jobs should
// too. The lock file itself stays (removing it would let two jobs lock two different files).
class SaveDirLock {
 public:
  explicit SaveDirLock(const std::string& dir);
  ~SaveDirLock();
  SaveDirLock(const SaveDirLock&) = delete;
  SaveDirLock& operator=(const SaveDirLock&) = delete;

 private:
  int fd_ = -1;
};

// Removes the complete global_step<N> checkpoints of `dir` beyond the newest `keep`, never the one
// `latest` names. Other tags are the user's and stay.
void prune_checkpoints(const std::string& dir, int keep);

// Flushes `path` (a file or a folder) to disk; a ds::Error with the path and errno.
void fsync_path(const std::string& path);

// Writes `text` to `path` through a temporary name (<path>.tmp.<host>.<pid>), fsync and rename: a
// crash leaves the old file or the new one, never a torn one.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace ds
