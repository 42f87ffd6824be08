// Moving one worker's slice of a request through that worker's io_uring.
#pragma once

#include <liburing.h>

#include <cstdint>
#include <memory>
#include <optional>

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

// Cuts the slice into pieces of at most settings.block_size bytes and keeps up to
// settings.queue_depth of them in flight on ring. Returns once no piece is in flight, so the
// buffer is free again even when the outcome carries an error. A checksummed request's pieces are
// checksummed here, on the worker, once the next pieces are submitted, so the device is never idle
// for it: a write's as soon as it is on the ring (the buffer does not change while it is written),
// a read's once it has all its bytes.
SliceOutcome transfer_slice(io_uring& ring, const AioSettings& settings, const Slice& slice);

}  // namespace ds::io
