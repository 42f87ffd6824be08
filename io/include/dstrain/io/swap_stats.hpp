// ds::io::SwapStats: what a swapper moved between memory and its NVMe swap files, for the
// trainer's nvme_* metrics (docs/offload.md). The optimizer and the parameter swappers each count
// their own; the engine adds up their bytes and waits, and takes the seconds in flight from the
// process (io/transfer_time.hpp), since the two swappers' transfers overlap.
#pragma once

#include <cstdint>

#include "dstrain/io/raw_aio_handle.hpp"
#include "dstrain/io/swap_units.hpp"

namespace ds::io {

// Bytes moved; the seconds the device had reads, and writes, in flight (summed over waits of
// RawAioHandle::busy_seconds: bytes over them is the transfer rate, whatever the caller did
// between queueing and waiting; reads and writes are on separate handles and may overlap); and
// the seconds the caller was blocked waiting on them.
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

// Waits for the transfers queued on `handle` before request number `count` (all of them by
// default; RawAioHandle::wait_for), counting the time blocked in stats.wait_seconds; returns the
// seconds they added to the handle's time in flight, for stats.read_seconds or stats.write_seconds.
inline double wait_counted(RawAioHandle& handle, SwapStats& stats, int64_t count = -1) {
  const double start = now();
  handle.wait_for(count < 0 ? handle.queued_count() : count);
  stats.wait_seconds += now() - start;
  return handle.busy_seconds();
}

}  // namespace ds::io
