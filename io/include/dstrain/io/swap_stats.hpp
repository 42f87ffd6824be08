// ds::io::SwapStats: what a swapper moved between memory and its NVMe swap files, for the
// trainer's nvme_* metrics (docs/offload.md). The optimizer and the parameter swappers each count
// their own; the engine adds them up.
#pragma once

#include <cstdint>

namespace ds::io {

// Bytes moved, the seconds from queueing transfers to seeing them complete, and the seconds the
// caller was blocked waiting on them.
struct SwapStats {
  int64_t read_bytes = 0;
  int64_t write_bytes = 0;
  double read_seconds = 0;
  double write_seconds = 0;
  double wait_seconds = 0;

  SwapStats& operator+=(const SwapStats& other) {
    read_bytes += other.read_bytes;
    write_bytes += other.write_bytes;
    read_seconds += other.read_seconds;
    write_seconds += other.write_seconds;
    wait_seconds += other.wait_seconds;
    return *this;
  }
};

}  // namespace ds::io
