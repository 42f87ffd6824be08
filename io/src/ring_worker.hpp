// A thread that owns one io_uring and moves the slices handed to it, starting them in order and
// keeping up to queue_depth of their pieces in flight (SliceTransfers).
#pragma once

#include <liburing.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>

#include "dstrain/io/aio_settings.hpp"
#include "slice_transfer.hpp"

namespace ds::io {

class RingWorker {
 public:
  // Sets up a ring of settings.queue_depth entries; throws ds::Error with errno if the kernel refuses.
  explicit RingWorker(const AioSettings& settings);
  ~RingWorker();  // runs what is queued, then stops
  RingWorker(const RingWorker&) = delete;
  RingWorker& operator=(const RingWorker&) = delete;

  // The slice's request hears of its completion through FileRequest::finish_slice.
  void enqueue(Slice slice);

  int64_t direct_bytes() const { return direct_bytes_.load(std::memory_order_relaxed); }
  int64_t buffered_bytes() const { return buffered_bytes_.load(std::memory_order_relaxed); }

 private:
  void run();

  const AioSettings settings_;
  io_uring ring_;
  std::atomic<int64_t> direct_bytes_{0};
  std::atomic<int64_t> buffered_bytes_{0};

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Slice> queue_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once everything above is initialized
};

}  // namespace ds::io
