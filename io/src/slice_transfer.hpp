// Moving worker slices of requests through one worker's io_uring, several slices at a time.
#pragma once

#include <liburing.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "dstrain/io/aio_settings.hpp"
#include "dstrain/runtime/error.hpp"
#include "file_request.hpp"

namespace ds::io {

// One worker's share of a request: a contiguous range of the buffer and the same range of the file.
struct Slice {
  std::shared_ptr<FileRequest> request;
  char* buffer = nullptr;
  int64_t file_offset = 0;
  int64_t length = 0;
};

struct SliceOutcome {
  std::optional<Error> error;  // the first failure; the slice is incomplete when set
  RangeChecksum checksum;      // of the slice's bytes, when the request is checksummed and no error
  int64_t direct_bytes = 0;    // moved through the O_DIRECT descriptor
  int64_t buffered_bytes = 0;  // moved through the page cache
};

// Each slice is cut into pieces of at most settings.block_size bytes, and up to settings.queue_depth
// pieces are in flight on the ring, from the slices in the order they were added. A slice added
// while the previous ones are finishing puts its first pieces on the ring beside their last ones,
// so a queue of requests keeps the device as busy as one large request would: one request at a
// time left the ring draining for 0.4 ms between two 8 MiB reads (docs/offload.md).
// A checksummed request's pieces are checksummed here, on the worker, once the next pieces are
// submitted, so the device is never idle for it: a write's as soon as it is on the ring (the
// buffer does not change while it is written), a read's once it has all its bytes.
class SliceTransfers {
 public:
  struct Finished {
    Slice slice;
    SliceOutcome outcome;
  };

  // The longest advance() waits for a completion before it looks for new slices again.
  static constexpr std::chrono::milliseconds kCompletionWait{2};

  SliceTransfers(io_uring& ring, const AioSettings& settings);
  SliceTransfers(const SliceTransfers&) = delete;
  SliceTransfers& operator=(const SliceTransfers&) = delete;

  bool idle() const { return running_.empty(); }

  // Puts pieces on the ring, taking another slice from `next` (nullopt: none waiting) whenever
  // those running have all their pieces on it and depth is left. Returns the slices that are done
  // (every piece completed, or one failed and none is left in flight: their buffers are free), or
  // else waits up to kCompletionWait for a completion and returns none.
  std::vector<Finished> advance(const std::function<std::optional<Slice>()>& next);

 private:
  // A slice on its way: how much of it is on the ring and what became of the rest.
  struct Running {
    Slice slice;
    int64_t issued = 0;  // bytes of the slice already handed to pieces
    int in_flight = 0;
    std::vector<RangeChecksum> checksums;  // of the pieces done, checksummed requests only
    SliceOutcome outcome;
    bool fully_issued() const { return issued == slice.length || outcome.error.has_value(); }
  };

  // A block of a slice. A short transfer grows `done` and the remainder goes back to the ring.
  struct Piece {
    Running* owner = nullptr;
    char* buffer = nullptr;
    int64_t file_offset = 0;
    int64_t length = 0;
    int64_t done = 0;
    bool direct = false;  // whether the SQE in flight uses the O_DIRECT descriptor
  };

  void fill(const std::function<std::optional<Slice>()>& next);
  void take_checksums();
  std::vector<Finished> take_finished();
  void prepare(int slot);
  void submit();
  void submit_and_wait_one();
  void complete(int slot, int result);

  io_uring& ring_;
  const AioSettings& settings_;
  std::deque<std::unique_ptr<Running>> running_;  // in the order added; pieces are issued in it
  std::vector<Piece> slots_;  // one per piece that may be in flight; the SQE's user_data is the index
  std::vector<int> free_slots_;
  int in_flight_ = 0;  // pieces with an SQE prepared or submitted and no final CQE yet
  std::vector<Piece> unsummed_;  // pieces whose checksum is still to be taken
};

}  // namespace ds::io
