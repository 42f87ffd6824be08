#include "slice_transfer.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <chrono>
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

// The ring refused a submit or a wait. Pieces already in flight write into the caller's buffer and
// can no longer be awaited, so returning to the caller could let the kernel corrupt freed memory.
[[noreturn]] void ring_failed(const char* call, int result) {
  log::error("io_uring ", call, " failed: ", std::strerror(-result),
             "; aborting because in-flight I/O can no longer be awaited");
  std::abort();
}

bool transient(int result) { return result == -EINTR || result == -EAGAIN || result == -EBUSY; }

bool reading(const Slice& slice) { return slice.request->direction() == Direction::Read; }

// A block, except that an O_DIRECT-capable start keeps its 4096-aligned bulk apart from an
// unaligned tail, so that only the tail goes through the page cache.
int64_t next_piece_length(const AioSettings& settings, const Slice& slice, int64_t issued) {
  int64_t length = std::min(settings.block_size, slice.length - issued);
  bool direct_start = slice.request->direct_fd() >= 0 && aligned(slice.buffer + issued) &&
                      aligned(slice.file_offset + issued);
  if (direct_start && length > kDirectIoAlignment && !aligned(length)) length -= length % kDirectIoAlignment;
  return length;
}

int64_t file_size(const FileRequest& file) {
  struct stat status;
  return ::fstat(file.buffered_fd(), &status) == 0 ? status.st_size : -1;
}

}  // namespace

SliceTransfers::SliceTransfers(io_uring& ring, const AioSettings& settings)
    : ring_(ring), settings_(settings), slots_(settings.queue_depth), free_slots_(settings.queue_depth) {
  std::iota(free_slots_.begin(), free_slots_.end(), 0);
}

std::vector<SliceTransfers::Finished> SliceTransfers::advance(const std::function<std::optional<Slice>()>& next) {
  fill(next);
  take_checksums();
  std::vector<Finished> finished = take_finished();
  if (!finished.empty() || in_flight_ == 0) {
    if (io_uring_sq_ready(&ring_) > 0) submit();  // the next slices' pieces work while these finish
    return finished;
  }

  submit_and_wait_one();
  unsigned head;
  unsigned reaped = 0;
  io_uring_cqe* cqe;
  io_uring_for_each_cqe(&ring_, head, cqe) {
    ++reaped;
    // Kernels before 5.11 have no timed wait: liburing queues a timeout of its own, whose
    // completion is no piece's.
    if (cqe->user_data == LIBURING_UDATA_TIMEOUT) continue;
    complete(static_cast<int>(cqe->user_data), cqe->res);
  }
  io_uring_cq_advance(&ring_, reaped);
  return {};
}

void SliceTransfers::fill(const std::function<std::optional<Slice>()>& next) {
  // Overlapped events top the queue up after every reap; sequential ones wait for the whole wave
  // to drain first.
  if (!settings_.overlap_events && in_flight_ > 0) return;
  auto running = running_.begin();
  while (in_flight_ < settings_.queue_depth) {
    while (running != running_.end() && (*running)->fully_issued()) ++running;
    if (running == running_.end()) {
      std::optional<Slice> slice = next();
      if (!slice) return;
      running_.push_back(std::make_unique<Running>());
      running_.back()->slice = std::move(*slice);
      running = std::prev(running_.end());
      continue;
    }
    Running& owner = **running;
    const int slot = free_slots_.back();
    free_slots_.pop_back();
    const int64_t length = next_piece_length(settings_, owner.slice, owner.issued);
    slots_[slot] = Piece{&owner, owner.slice.buffer + owner.issued, owner.slice.file_offset + owner.issued, length};
    if (owner.slice.request->checksummed() && !reading(owner.slice)) unsummed_.push_back(slots_[slot]);
    owner.issued += length;
    ++owner.in_flight;
    ++in_flight_;
    prepare(slot);
  }
}

// The pieces on the ring go to the device first; their checksums are taken while it works.
void SliceTransfers::take_checksums() {
  if (unsummed_.empty()) return;
  if (io_uring_sq_ready(&ring_) > 0) submit();
  for (const Piece& piece : unsummed_)
    piece.owner->checksums.push_back(
        {piece.file_offset, piece.length, crc32c(0, piece.buffer, static_cast<size_t>(piece.length))});
  unsummed_.clear();
}

std::vector<SliceTransfers::Finished> SliceTransfers::take_finished() {
  std::vector<Finished> finished;
  for (auto it = running_.begin(); it != running_.end();) {
    Running& running = **it;
    if (!running.fully_issued() || running.in_flight > 0) {
      ++it;
      continue;
    }
    if (running.slice.request->checksummed() && !running.outcome.error)
      running.outcome.checksum = {running.slice.file_offset, running.slice.length,
                                  combine_in_file_order(running.checksums)};
    finished.push_back({std::move(running.slice), std::move(running.outcome)});
    it = running_.erase(it);
  }
  return finished;
}

// Queues an SQE for what is left of the slot's piece.
void SliceTransfers::prepare(int slot) {
  Piece& piece = slots_[slot];
  const FileRequest& file = *piece.owner->slice.request;
  char* buffer = piece.buffer + piece.done;
  int64_t offset = piece.file_offset + piece.done;
  int64_t length = piece.length - piece.done;
  piece.direct = file.direct_fd() >= 0 && aligned(buffer) && aligned(offset) && aligned(length);
  int fd = piece.direct ? file.direct_fd() : file.buffered_fd();

  // Never null: at most queue_depth pieces are in flight and the ring has at least that many SQEs.
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (!sqe) ring_failed("get_sqe", -EBUSY);
  if (file.direction() == Direction::Read)
    io_uring_prep_read(sqe, fd, buffer, static_cast<unsigned>(length), static_cast<uint64_t>(offset));
  else
    io_uring_prep_write(sqe, fd, buffer, static_cast<unsigned>(length), static_cast<uint64_t>(offset));
  io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(slot));
  if (settings_.single_submit) submit();
}

void SliceTransfers::submit() {
  int result;
  while (transient(result = io_uring_submit(&ring_))) {}
  if (result < 0) ring_failed("submit", result);
}

// Batched submission hands the kernel every prepared SQE and waits in the same system call, for
// at most kCompletionWait: a slice queued meanwhile starts then, beside a piece that takes long (a
// FIFO's read, a stalled device), instead of behind it.
void SliceTransfers::submit_and_wait_one() {
  __kernel_timespec timeout{0, std::chrono::nanoseconds(kCompletionWait).count()};
  io_uring_cqe* cqe;
  int result;
  while (transient(result = io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &timeout, nullptr))) {}
  if (result < 0 && result != -ETIME) ring_failed("submit_and_wait_timeout", result);
}

void SliceTransfers::complete(int slot, int result) {
  Piece& piece = slots_[slot];
  Running& owner = *piece.owner;
  const FileRequest& file = *owner.slice.request;
  const bool read = file.direction() == Direction::Read;
  if (result == -EINTR || result == -EAGAIN) {
    prepare(slot);
    return;
  }
  auto fail = [&](const std::string& message) {
    Error error = Error(message)
                      .with_path(file.path())
                      .with_offset(piece.file_offset + piece.done)
                      .with_length(piece.length - piece.done);
    if (result < 0) error.with_errno(-result);
    if (!owner.outcome.error) owner.outcome.error = std::move(error);
  };
  if (result < 0) {
    fail(read ? "read failed" : "write failed");
  } else if (result == 0) {
    fail(read ? "read past end of file (file is " + std::to_string(file_size(file)) + " bytes)"
              : "write made no progress");
  } else {
    (piece.direct ? owner.outcome.direct_bytes : owner.outcome.buffered_bytes) += result;
    piece.done += result;
    if (piece.done < piece.length && !owner.outcome.error) {
      prepare(slot);  // a short transfer: the remainder goes back to the ring
      return;
    }
    if (file.checksummed() && read && piece.done == piece.length) unsummed_.push_back(piece);
  }
  free_slots_.push_back(slot);
  --owner.in_flight;
  --in_flight_;
}

}  // namespace ds::io
