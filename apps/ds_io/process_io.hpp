// What one ds_io process does: prepare its file and a locked buffer, run the timed loops between
// barriers, and validate the bytes against plain pread. It reports to the parent in text lines:
//   ready | loop <start_s> <end_s> | cpu <s> | bytes <direct> <buffered> | invalid <why> | error <why>
#pragma once

#include <string>

#include "dstrain/io/aio_settings.hpp"
#include "options.hpp"

namespace ds::io_bench {

// The child's ends of its two pipes to the parent.
struct ParentLink {
  int to_parent = -1;
  int from_parent = -1;

  void send(const std::string& line) const;
  // Says "ready" and blocks until the parent releases every process; false if the parent is gone.
  bool barrier() const;
};

// Throws on failure; the caller turns that into an "error" line.
void run_process(const Options& options, bool read, const io::AioSettings& settings, int process,
                 const ParentLink& link);

}  // namespace ds::io_bench
