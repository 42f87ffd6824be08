#include "slice_transfer.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "dstrain/io/crc32c.hpp"
#include "dstrain/runtime/log.hpp"

namespace ds::io {

namespace {

bool aligned(int64_t value) { return value % kDirectIoAlignment == 0; }
bool aligned(const char* address) {
  return reinterpret_cast<uintptr_t>(address) % kDirectIoAlignment == 0;
}

// A block of the slice. A short transfer grows `done` and the remainder goes back to the ring.
struct Piece {
  char* buffer = nullptr;
  int64_t file_offset = 0;
  int64_t length = 0;
  int64_t done = 0;
  bool direct = false;  // whether the SQE in flight uses the O_DIRECT descriptor
};

// The ring refused a submit or a wait. Pieces already in flight write into the caller's buffer and
// can no longer be awaited, so returning to the caller could let the kernel corrupt freed memory.
[[noreturn]] void ring_failed(const char* call, int result) {
  log::error("io_uring ", call, " failed: ", std::strerror(-result),
             "; aborting because in-flight I/O can no longer be awaited");
  std::abort();
}

bool transient(int result) { return result == -EINTR || result == -EAGAIN || result == -EBUSY; }

class SliceTransfer {
 public:
  SliceTransfer(io_uring& ring, const AioSettings& settings, const Slice& slice)
      : ring_(ring), settings_(settings), slice_(slice), file_(*slice.request),
        slots_(settings.queue_depth), free_slots_(settings.queue_depth) {
    std::iota(free_slots_.begin(), free_slots_.end(), 0);
  }

  SliceOutcome run() {
    while (true) {
      // Overlapped events top the queue up after every reap; sequential ones wait for the whole
      // wave to drain first.
      if (settings_.overlap_events || in_flight_ == 0) {
        while (!outcome_.error && next_ < slice_.length && in_flight_ < settings_.queue_depth) {
          int slot = free_slots_.back();
          free_slots_.pop_back();
          int64_t length = next_piece_length();
          slots_[slot] = Piece{slice_.buffer + next_, slice_.file_offset + next_, length};
          if (file_.checksummed() && !reading()) unsummed_.push_back(slots_[slot]);
          next_ += length;
          ++in_flight_;
          prepare(slot);
        }
      }
      // The pieces on the ring go to the device first; their checksums are taken while it works.
      if (!unsummed_.empty()) {
        if (io_uring_sq_ready(&ring_) > 0) submit();
        for (const Piece& piece : unsummed_) checksum(piece);
        unsummed_.clear();
      }
      if (in_flight_ == 0) {
        if (file_.checksummed() && !outcome_.error)
          outcome_.checksum = {slice_.file_offset, slice_.length, combine_in_file_order(checksums_)};
        return std::move(outcome_);
      }

      submit_and_wait_one();
      unsigned head;
      unsigned reaped = 0;
      io_uring_cqe* cqe;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        ++reaped;
        complete(static_cast<int>(cqe->user_data), cqe->res);
      }
      io_uring_cq_advance(&ring_, reaped);
    }
  }

 private:
  // A block, except that an O_DIRECT-capable start keeps its 4096-aligned bulk apart from an
  // unaligned tail, so that only the tail goes through the page cache.
  int64_t next_piece_length() const {
    int64_t length = std::min(settings_.block_size, slice_.length - next_);
    bool direct_start = file_.direct_fd() >= 0 && aligned(slice_.buffer + next_) &&
                        aligned(slice_.file_offset + next_);
    if (direct_start && length > kDirectIoAlignment && !aligned(length))
      length -= length % kDirectIoAlignment;
    return length;
  }

  // Queues an SQE for what is left of the slot's piece.
  void prepare(int slot) {
    Piece& piece = slots_[slot];
    char* buffer = piece.buffer + piece.done;
    int64_t offset = piece.file_offset + piece.done;
    int64_t length = piece.length - piece.done;
    piece.direct = file_.direct_fd() >= 0 && aligned(buffer) && aligned(offset) && aligned(length);
    int fd = piece.direct ? file_.direct_fd() : file_.buffered_fd();

    // Never null: at most queue_depth pieces are in flight and the ring has at least that many SQEs.
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (!sqe) ring_failed("get_sqe", -EBUSY);
    if (file_.direction() == Direction::Read)
      io_uring_prep_read(sqe, fd, buffer, static_cast<unsigned>(length), static_cast<uint64_t>(offset));
    else
      io_uring_prep_write(sqe, fd, buffer, static_cast<unsigned>(length), static_cast<uint64_t>(offset));
    io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(slot));
    if (settings_.single_submit) submit();
  }

  void submit() {
    int result;
    while (transient(result = io_uring_submit(&ring_))) {}
    if (result < 0) ring_failed("submit", result);
  }

  // Batched submission hands the kernel every prepared SQE and waits in the same system call.
  void submit_and_wait_one() {
    int result;
    if (io_uring_sq_ready(&ring_) > 0) {
      while (transient(result = io_uring_submit_and_wait(&ring_, 1))) {}
      if (result < 0) ring_failed("submit_and_wait", result);
    } else {
      io_uring_cqe* cqe;
      while (transient(result = io_uring_wait_cqe(&ring_, &cqe))) {}
      if (result < 0) ring_failed("wait_cqe", result);
    }
  }

  void complete(int slot, int result) {
    Piece& piece = slots_[slot];
    if (result == -EINTR || result == -EAGAIN) {
      prepare(slot);
      return;
    }
    if (result < 0) {
      fail(piece_error(piece, reading() ? "read failed" : "write failed").with_errno(-result));
    } else if (result == 0) {
      fail(reading() ? piece_error(piece, "read past end of file (file is " +
                                              std::to_string(file_size()) + " bytes)")
                     : piece_error(piece, "write made no progress"));
    } else {
      (piece.direct ? outcome_.direct_bytes : outcome_.buffered_bytes) += result;
      piece.done += result;
      if (piece.done < piece.length && !outcome_.error) {
        prepare(slot);  // a short transfer: the remainder goes back to the ring
        return;
      }
      if (file_.checksummed() && reading() && piece.done == piece.length) unsummed_.push_back(piece);
    }
    free_slots_.push_back(slot);
    --in_flight_;
  }

  bool reading() const { return file_.direction() == Direction::Read; }

  void checksum(const Piece& piece) {
    checksums_.push_back({piece.file_offset, piece.length, crc32c(0, piece.buffer, static_cast<size_t>(piece.length))});
  }

  int64_t file_size() const {
    struct stat status;
    return ::fstat(file_.buffered_fd(), &status) == 0 ? status.st_size : -1;
  }

  Error piece_error(const Piece& piece, const std::string& message) const {
    return Error(message)
        .with_path(file_.path())
        .with_offset(piece.file_offset + piece.done)
        .with_length(piece.length - piece.done);
  }

  void fail(Error error) {
    if (!outcome_.error) outcome_.error = std::move(error);
  }

  io_uring& ring_;
  const AioSettings& settings_;
  const Slice& slice_;
  const FileRequest& file_;
  std::vector<Piece> slots_;  // one per piece that may be in flight; the SQE's user_data is the index
  std::vector<int> free_slots_;
  int64_t next_ = 0;          // bytes of the slice already handed to pieces
  int in_flight_ = 0;         // pieces with an SQE prepared or submitted and no final CQE yet
  std::vector<RangeChecksum> checksums_;  // of the pieces done, checksummed requests only
  std::vector<Piece> unsummed_;           // pieces whose checksum is still to be taken
  SliceOutcome outcome_;
};

}  // namespace

SliceOutcome transfer_slice(io_uring& ring, const AioSettings& settings, const Slice& slice) {
  return SliceTransfer(ring, settings, slice).run();
}

}  // namespace ds::io
