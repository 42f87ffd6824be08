#include "dstrain/zero/param_swapper.hpp"

#include <algorithm>
#include <cstring>

#include "dstrain/io/crc32c.hpp"
#include "dstrain/io/preallocate.hpp"
#include "dstrain/io/swap_check.hpp"
#include "dstrain/io/swap_preflight.hpp"
#include "dstrain/io/swap_units.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"
#include "dstrain/runtime/remove_tree.hpp"
#include "dstrain/zero/buffer_sizes.hpp"

namespace ds::zero {
namespace {

constexpr const char* kKey = "zero_optimization.offload_param";

// The reader's settings: pieces large enough that the largest read goes out in one wave of
// queue_depth pieces per worker. A master file's window is a page or two longer than its chunk, so
// at DeepSpeed's 1 MiB x 8 an 8 MiB chunk's window would send its last page alone, a round trip
// after the rest (docs/offload.md, "The parameter chunks' reads").
io::AioSettings one_wave(io::AioSettings aio, int64_t largest_read_bytes) {
  const int64_t pieces = int64_t{aio.queue_depth} * aio.intra_op_parallelism;
  const int64_t wave = io::round_up((largest_read_bytes + pieces - 1) / pieces, io::kDirectIoAlignment);
  aio.block_size = std::max(aio.block_size, std::min(wave, io::kMaxBlockSize));
  return aio;
}

}  // namespace

ParamSwapper::ParamSwapper(Options options) : options_(std::move(options)) {
  const size_t n = options_.chunks.size();
  file_offset_.assign(n, -1);
  read_numel_.assign(n, 0);
  lead_.assign(n, 0);
  window_pieces_.resize(n);
  window_taken_.assign(n, 0);
  resident_.resize(n);
  buffer_of_.assign(n, -1);
  written_crc_.assign(n, 0);
  stored_.assign(n, false);
  // The first chunks in shard order stay in memory up to max_in_cpu elements; the rest go to the
  // file, each at a 4096-aligned offset, or are read from the shard file, each as the aligned
  // window around it.
  std::vector<int64_t> chunk_numels;
  for (const Chunk& chunk : options_.chunks) chunk_numels.push_back(chunk.numel);
  if (n > 0) shard_numel_ = options_.chunks.back().shard_offset + options_.chunks.back().numel;
  const ParamSwapSizes sizes = param_swap_sizes(chunk_numels, options_.max_in_cpu);
  const int64_t largest = sizes.largest_swapped;
  const size_t largest_at = sizes.largest_swapped_at;
  constexpr int64_t kFloat = sizeof(float);
  for (size_t i = 0; i < n; ++i) {
    if (resident_numel_ < sizes.resident_numel) {
      resident_numel_ += chunk_numels[i];
      resident_[i].resize(chunk_numels[i]);
      continue;
    }
    if (reads_master_file()) {
      const Chunk& chunk = options_.chunks[i];
      const int64_t begin = chunk.shard_offset / io::kAlignElements * io::kAlignElements;
      file_offset_[i] = begin * kFloat;
      lead_[i] = chunk.shard_offset - begin;
      read_numel_[i] = io::round_up(chunk.shard_offset + chunk.numel, io::kAlignElements) - begin;
    } else {
      file_offset_[i] = file_bytes_;
      read_numel_[i] = padded(i);
      file_bytes_ += read_numel_[i] * kFloat;
    }
    buffer_numel_ = std::max(buffer_numel_, read_numel_[i]);
  }
  if (largest > 0) {
    if (largest > options_.buffer_size)
      throw Error("buffer_size is " + std::to_string(options_.buffer_size) + " elements, but parameter " +
                  std::to_string(largest_at) + "'s chunk on this rank has " + std::to_string(largest) +
                  ": set buffer_size to " + std::to_string(largest) + " or more")
          .with_key(std::string(kKey) + ".buffer_size")
          .with_rank(options_.rank);
    if (options_.buffer_count < 1)
      throw Error("buffer_count is " + std::to_string(options_.buffer_count) +
                  ", but swapping parameters needs a buffer for the chunk being all-gathered (more let reads run "
                  "ahead of the gathers): set buffer_count to 1 or more (DeepSpeed's default is 5)")
          .with_key(std::string(kKey) + ".buffer_count")
          .with_rank(options_.rank);
  }

  if (!reads_master_file())
    folder_ = io::make_swap_folder(options_.nvme_path, "dstrain-param-rank" + std::to_string(options_.rank),
                                   std::string(kKey) + ".nvme_path", file_bytes_);
  try {
    if (largest > 0) {
      for (int b = 0; b < options_.buffer_count; ++b)
        buffers_.push_back({static_cast<float*>(memory_.allocate(buffer_numel_ * sizeof(float)))});
      reader_ = std::make_unique<io::RawAioHandle>(
          one_wave(io::for_swap_reads(options_.aio), buffer_numel_ * static_cast<int64_t>(sizeof(float))));
    }
    if (file_bytes_ > 0) {
      writer_ = std::make_unique<io::RawAioHandle>(options_.aio);
      io::preallocate(path(), file_bytes_);
    }
  } catch (...) {
    reader_.reset();
    writer_.reset();
    if (!folder_.empty()) remove_tree(folder_);
    throw;
  }
  log::info("offload_param: ", swapped_numel(), " fp32 elements of this rank's parameter partition on NVMe in ",
            reads_master_file() ? path() + " (the optimizer's master: nothing written twice)" : folder_, ", ",
            resident_numel_, " in memory (max_in_cpu), ", buffers_.size(), " buffers of ", buffer_numel_,
            " elements (", buffers_.size() * buffer_numel_ * sizeof(float) / 1e6, " MB)");
}

ParamSwapper::~ParamSwapper() {
  // The handles' destructors wait for queued I/O (and log its errors) before the file goes.
  writer_.reset();
  reader_.reset();
  if (folder_.empty()) return;  // reading the shard file, whose owner removes it
  try {
    remove_tree(folder_);
  } catch (const Error& e) {
    log::warn_all("offload_param: could not remove the swap folder: ", e.what());
  }
}

std::string ParamSwapper::path() const { return reads_master_file() ? options_.master_file->master_path() : folder_ + "/params.swp"; }

int64_t ParamSwapper::padded(size_t i) const { return io::round_up(options_.chunks[i].numel, io::kAlignElements); }

int64_t ParamSwapper::swapped_numel() const {
  int64_t numel = 0;
  for (size_t i = 0; i < options_.chunks.size(); ++i)
    if (swapped(i)) numel += options_.chunks[i].numel;
  return numel;
}

int64_t ParamSwapper::memory_bytes() const {
  return static_cast<int64_t>(buffers_.size()) * buffer_numel_ * sizeof(float) + resident_numel_ * sizeof(float);
}

int ParamSwapper::take_buffer(bool may_wait_writes) {
  auto find = [&](State state) {
    int best = -1;
    for (size_t b = 0; b < buffers_.size(); ++b)
      if (buffers_[b].state == state && (best < 0 || buffers_[b].order > buffers_[best].order)) best = static_cast<int>(b);
    return best;
  };
  int b = find(State::Free);
  if (b < 0 && may_wait_writes && find(State::Writing) >= 0) {
    wait_writes();
    b = find(State::Free);
  }
  if (b < 0 && (b = find(State::Reading)) >= 0) {
    // Give up the chunk read furthest ahead: the others are needed sooner.
    wait_reads(b);
    buffer_of_[buffers_[b].param] = -1;
  }
  if (b >= 0) buffers_[b].state = State::Free;
  return b;
}

std::string ParamSwapper::chunk_name(size_t i) const {
  return "parameter " + std::to_string(i) + "'s chunk (" + std::to_string(options_.chunks[i].numel) +
         " elements at shard offset " + std::to_string(options_.chunks[i].shard_offset) + ")";
}

const float* ParamSwapper::in_owner_memory(size_t i) const {
  return options_.master_file ? options_.master_file->master_in_memory(options_.chunks[i].shard_offset, options_.chunks[i].numel)
                              : nullptr;
}

bool ParamSwapper::read_ahead(size_t i) {
  if (!swapped(i) || buffer_of_[i] >= 0 || in_owner_memory(i)) return true;
  if (!stored_[i])
    throw Error("offload_param: " + chunk_name(i) + " is read before it was ever stored").with_path(path()).with_rank(options_.rank);
  wait_writes();  // a chunk is never read while its new values are being written
  int b = -1;
  for (size_t k = 0; k < buffers_.size() && b < 0; ++k)
    if (buffers_[k].state == State::Free) b = static_cast<int>(k);
  if (b < 0) return false;
  Buffer& buffer = buffers_[b];
  if (options_.master_file)
    options_.master_file->settle(file_offset_[i] / static_cast<int64_t>(sizeof(float)), read_numel_[i]);
  reader_->async_pread(buffer.data, read_numel_[i] * sizeof(float), path(), file_offset_[i], &buffer.read_crc);
  buffer.read_done_at = reader_->queued_count();
  buffer.checked = false;
  // New values have begun to come for this window (a step begun in backward has stepped part of
  // it, so its parameter's backward is done, and this is a read ahead backward will not use).
  buffer.stale = reads_master_file() && window_taken_[i] > 0;
  stats_.read_bytes += read_numel_[i] * sizeof(float);
  buffer.state = State::Reading;
  buffer.param = i;
  buffer.order = next_order_++;
  buffer_of_[i] = b;
  return true;
}

bool ParamSwapper::can_acquire(size_t i) const {
  if (!swapped(i) || buffer_of_[i] >= 0 || in_owner_memory(i)) return true;
  return std::any_of(buffers_.begin(), buffers_.end(), [](const Buffer& b) {
    return b.state == State::Free || b.state == State::Reading || b.state == State::Writing;
  });
}

const float* ParamSwapper::acquire(size_t i) {
  if (!swapped(i)) return resident_[i].data();
  wait_writes();
  if (buffer_of_[i] < 0) {
    if (const float* held = in_owner_memory(i)) return held;
    const int b = take_buffer(false);
    if (b < 0)
      throw Error("offload_param: every one of the " + std::to_string(buffers_.size()) +
                  " buffers holds a chunk being gathered; set buffer_count higher")
          .with_key(std::string(kKey) + ".buffer_count")
          .with_rank(options_.rank);
    if (!read_ahead(i)) throw Error("offload_param: internal error, no buffer for parameter " + std::to_string(i));
  }
  // Only this chunk's read (and those queued before it): the reads ahead of it go on.
  wait_reads(buffer_of_[i]);
  Buffer& buffer = buffers_[buffer_of_[i]];
  if (buffer.stale)
    throw Error("offload_param: internal error, " + chunk_name(i) + " is gathered after new values were stored")
        .with_rank(options_.rank);
  buffer.state = State::Acquired;
  return buffer.data + lead_[i];
}

void ParamSwapper::release(size_t i) {
  if (!swapped(i) || buffer_of_[i] < 0) return;
  buffers_[buffer_of_[i]].state = State::Free;
  buffer_of_[i] = -1;
}

void ParamSwapper::drop_read_ahead() {
  wait_reads();
  for (Buffer& buffer : buffers_)
    if (buffer.state == State::Reading) {
      buffer.state = State::Free;
      buffer_of_[buffer.param] = -1;
    }
}

void ParamSwapper::store_range(const float* values, int64_t shard_offset, int64_t count) {
  if (reads_master_file()) checksum_windows(values, shard_offset, count);
  const int64_t end = shard_offset + count;
  // The first chunk ending past shard_offset; chunks are in shard order.
  auto first = std::upper_bound(options_.chunks.begin(), options_.chunks.end(), shard_offset,
                                [](int64_t offset, const Chunk& c) { return offset < c.shard_offset + c.numel; });
  for (size_t i = first - options_.chunks.begin(); i < options_.chunks.size(); ++i) {
    const Chunk& chunk = options_.chunks[i];
    if (chunk.shard_offset >= end) break;
    const int64_t lo = std::max(shard_offset, chunk.shard_offset), hi = std::min(end, chunk.shard_offset + chunk.numel);
    if (lo >= hi) continue;  // an empty chunk
    if (!swapped(i)) {
      std::memcpy(resident_[i].data() + (lo - chunk.shard_offset), values + (lo - shard_offset), (hi - lo) * sizeof(float));
      continue;
    }
    if (reads_master_file()) continue;  // its owner writes these values
    // A chunk cut by the range's end waits in its buffer for the rest from the next range.
    if (buffer_of_[i] < 0) {
      const int b = take_buffer(true);
      if (b < 0) throw Error("offload_param: internal error, no buffer to store parameter " + std::to_string(i));
      buffers_[b] = {buffers_[b].data, State::Staging, i, 0, 0};
      buffer_of_[i] = b;
    }
    Buffer& buffer = buffers_[buffer_of_[i]];
    if (buffer.state != State::Staging)
      throw Error("offload_param: parameter " + std::to_string(i) + " stored while it is in use");
    std::memcpy(buffer.data + (lo - chunk.shard_offset), values + (lo - shard_offset), (hi - lo) * sizeof(float));
    buffer.staged += hi - lo;
    if (buffer.staged < chunk.numel) continue;
    // Whole: out O_DIRECT, padding zeroed so the file's bytes do not depend on the buffer's past.
    std::fill(buffer.data + chunk.numel, buffer.data + padded(i), 0.0f);
    writer_->async_pwrite(buffer.data, padded(i) * sizeof(float), path(), file_offset_[i], &written_crc_[i]);
    stored_[i] = true;
    writes_queued_ = true;
    stats_.write_bytes += padded(i) * sizeof(float);
    buffer.state = State::Writing;
    buffer_of_[i] = -1;
  }
}

void ParamSwapper::checksum_windows(const float* values, int64_t shard_offset, int64_t count) {
  const int64_t end = shard_offset + count;
  // Windows are in shard order and overlap only where two chunks share a page: from the first
  // window ending past shard_offset to the last starting before end.
  auto first = std::upper_bound(options_.chunks.begin(), options_.chunks.end(), shard_offset, [](int64_t offset, const Chunk& c) {
    return offset < io::round_up(c.shard_offset + c.numel, io::kAlignElements);
  });
  for (size_t i = first - options_.chunks.begin(); i < options_.chunks.size(); ++i) {
    if (!swapped(i)) continue;
    const int64_t begin = options_.chunks[i].shard_offset - lead_[i];
    if (begin >= end) break;
    const int64_t lo = std::max(shard_offset, begin), hi = std::min(end, begin + read_numel_[i]);
    if (lo >= hi) continue;
    window_pieces_[i].push_back({lo, hi - lo, io::crc32c(0, values + (lo - shard_offset), (hi - lo) * sizeof(float))});
    window_taken_[i] += hi - lo;
    if (buffer_of_[i] >= 0 && buffers_[buffer_of_[i]].state == State::Reading) buffers_[buffer_of_[i]].stale = true;
    // Past the shard's end the file holds its padding's zeros, which no range brings.
    const int64_t in_shard = std::min(begin + read_numel_[i], shard_numel_) - begin;
    if (window_taken_[i] < in_shard) continue;
    // The window whole: its pieces in file order, then the zeros.
    std::vector<CrcPiece>& pieces = window_pieces_[i];
    std::sort(pieces.begin(), pieces.end(), [](const CrcPiece& a, const CrcPiece& b) { return a.offset < b.offset; });
    uint32_t crc = 0;
    for (const CrcPiece& piece : pieces)
      crc = io::crc32c_combine(crc, piece.crc, piece.numel * static_cast<int64_t>(sizeof(float)));
    const int64_t zero_bytes = (read_numel_[i] - in_shard) * static_cast<int64_t>(sizeof(float));
    written_crc_[i] = zero_bytes > 0 ? io::crc32c_combine(crc, io::crc32c_of_zeros(zero_bytes), zero_bytes) : crc;
    stored_[i] = true;
    pieces.clear();  // the next pass starts afresh
    window_taken_[i] = 0;
  }
}

void ParamSwapper::finish_writes() {
  for (const Buffer& buffer : buffers_)
    if (buffer.state == State::Staging)
      throw Error("offload_param: internal error, parameter " + std::to_string(buffer.param) + " only partly stored");
  wait_writes();
}

void ParamSwapper::wait_reads(int b) {
  if (!reader_) return;  // nothing swapped
  const int64_t count = b < 0 ? reader_->queued_count() : buffers_[b].read_done_at;
  try {
    stats_.read_seconds += io::wait_counted(*reader_, stats_, count);
  } catch (const Error& e) {
    // The failed read's offset says whose chunk it was.
    std::string whose = "parameter chunk";
    for (size_t i = 0; i < file_offset_.size() && e.offset(); ++i)
      if (swapped(i) && *e.offset() >= file_offset_[i] && *e.offset() < file_offset_[i] + read_numel_[i] * static_cast<int64_t>(sizeof(float)))
        whose = chunk_name(i);
    throw io::naming_block(e, whose).with_rank(options_.rank);
  }
  for (Buffer& buffer : buffers_)
    if (buffer.state == State::Reading && !buffer.checked && !buffer.stale && buffer.read_done_at <= count) {
      const size_t i = buffer.param;
      // The owner's newer values over the file's: the window checked is the one handed out.
      const int64_t bytes = read_numel_[i] * static_cast<int64_t>(sizeof(float));
      if (options_.master_file &&
          options_.master_file->overlay_unwritten_master(file_offset_[i] / static_cast<int64_t>(sizeof(float)),
                                                         read_numel_[i], buffer.data))
        buffer.read_crc = io::crc32c(0, buffer.data, bytes);
      io::check_swap_block(written_crc_[i], buffer.read_crc, path(), file_offset_[i],
                           read_numel_[i] * static_cast<int64_t>(sizeof(float)), chunk_name(i), options_.rank);
      buffer.checked = true;
    }
}

void ParamSwapper::wait_writes() {
  if (!writes_queued_) return;
  stats_.write_seconds += io::wait_counted(*writer_, stats_);
  writes_queued_ = false;
  for (Buffer& buffer : buffers_)
    if (buffer.state == State::Writing) buffer.state = State::Free;
}

io::SwapStats ParamSwapper::take_stats() {
  const io::SwapStats stats = stats_;
  stats_ = {};
  return stats;
}

}  // namespace ds::zero
