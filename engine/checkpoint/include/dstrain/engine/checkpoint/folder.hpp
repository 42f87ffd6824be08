// A checkpoint folder's life on disk, shared by saving, pruning and the trainer's start-up checks:
// files replaced atomically, folders prepared before step 1 and pruned after saves.
#pragma once

#include <string>

namespace ds {

// Creates `dir` if missing and proves it writable (a probe file written and removed), then removes
// what interrupted saves left behind (.<tag>.partial folders, *.tmp.<pid> files). A ds::Error with
// the path and errno when the directory cannot be used.
void prepare_save_dir(const std::string& dir);

// Removes the complete global_step<N> checkpoints of `dir` beyond the newest `keep`, never the one
// `latest` names. Other tags are the user's and stay.
void prune_checkpoints(const std::string& dir, int keep);

// Flushes `path` (a file or a folder) to disk; a ds::Error with the path and errno.
void fsync_path(const std::string& path);

// Writes `text` to `path` through a temporary name, fsync and rename: a crash leaves the old file or
// the new one, never a torn one.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace ds
