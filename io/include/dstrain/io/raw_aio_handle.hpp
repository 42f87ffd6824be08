// ds::io::RawAioHandle: DeepSpeed's aio handle on raw pointers and sizes, over io_uring.
//
// A request (one buffer, one file range) is cut into block_size pieces. The pieces are shared out
// as contiguous slices among intra_op_parallelism worker threads, each with its own io_uring and at
// most queue_depth pieces in flight. A worker starts the next request's slice while the last
// pieces of the one before are in flight, so queued requests keep the ring as full as one large one. Pieces whose buffer address, file offset and length are
// 4096-aligned go through O_DIRECT; the rest (unaligned buffers, tails) through the page cache.
// Short transfers are resubmitted for the remainder; a read that meets the end of the file fails.
//
// Requests are not ordered against each other: wait() (or wait_for() of a request) before touching a
// buffer or a file range that an outstanding request uses. One thread drives a handle.
//
// A request given a `checksum` pointer also yields the CRC-32C of the bytes it moved (io::crc32c),
// computed on the worker threads piece by piece while other pieces are in flight, so the caller
// pays no pass of its own over the buffer: set when the request has finished (the sync call has
// returned, or wait()), and only if it succeeded.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "dstrain/io/aio_settings.hpp"

namespace ds::io {

class FileRequest;
class RingWorker;

class RawAioHandle {
 public:
  // Throws ds::Error for settings out of range or when the kernel refuses an io_uring.
  explicit RawAioHandle(const AioSettings& settings);
  // Waits for outstanding requests (the kernel may still be using their buffers); their errors
  // are logged, not thrown.
  ~RawAioHandle();
  RawAioHandle(const RawAioHandle&) = delete;
  RawAioHandle& operator=(const RawAioHandle&) = delete;

  const AioSettings& settings() const { return settings_; }

  // Blocking transfers; return 1 on success and throw ds::Error (path, offset, length, errno) on
  // failure. Writes create the file and never truncate it; bytes outside the range stay as they were.
  int sync_pread(void* buffer, int64_t num_bytes, const std::string& path, int64_t file_offset = 0,
                 uint32_t* checksum = nullptr);
  int sync_pwrite(const void* buffer, int64_t num_bytes, const std::string& path, int64_t file_offset = 0,
                  uint32_t* checksum = nullptr);

  // Queue a transfer and return 0; the buffer must stay alive and untouched until wait(). A file
  // that cannot be opened throws here; I/O failures are thrown by wait().
  int async_pread(void* buffer, int64_t num_bytes, const std::string& path, int64_t file_offset = 0,
                  uint32_t* checksum = nullptr);
  int async_pwrite(const void* buffer, int64_t num_bytes, const std::string& path, int64_t file_offset = 0,
                   uint32_t* checksum = nullptr);

  // Blocks until every queued request has finished; returns how many there were, or throws the
  // first failure once all of them have finished.
  int wait() { return wait_for(queued_count()); }
  // Requests are numbered 0, 1, ... as async_pread/async_pwrite queue them, over the handle's life.
  // wait_for(n) blocks until requests 0..n-1 have finished and returns how many of them it waited
  // for now (earlier waits took the rest), or throws the first failure among those; requests
  // queued after them stay in flight. So a swapper waits for the one buffer it needs next.
  int64_t queued_count() const { return first_queued_ + static_cast<int64_t>(queued_.size()); }
  int wait_for(int64_t count);
  // What the last wait added to the seconds during which at least one request of this handle was
  // in flight (the union of their queue-to-completion times, over the handle's life; waits go in
  // request order, so summing the waits' figures counts no second twice). Bytes over it is the
  // transfer rate, not counting time the caller spent elsewhere before waiting.
  double busy_seconds() const { return busy_seconds_; }

  // Bytes moved so far through O_DIRECT and through the page cache, over the handle's life.
  int64_t direct_bytes() const;
  int64_t buffered_bytes() const;

 private:
  std::shared_ptr<FileRequest> start(bool read, const void* buffer, int64_t num_bytes,
                                     const std::string& path, int64_t file_offset, uint32_t* checksum);

  AioSettings settings_;
  std::vector<std::unique_ptr<RingWorker>> workers_;
  std::deque<std::shared_ptr<FileRequest>> queued_;
  int64_t first_queued_ = 0;  // the number of queued_.front()
  double busy_seconds_ = 0;
  std::chrono::steady_clock::time_point busy_until_;  // the end of the busy time counted so far
};

}  // namespace ds::io
