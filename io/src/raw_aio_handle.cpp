#include "dstrain/io/raw_aio_handle.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"
#include "file_request.hpp"
#include "ring_worker.hpp"

namespace ds::io {
RawAioHandle::RawAioHandle(const AioSettings& settings) : settings_(settings) {
  validate(settings_);
  for (int i = 0; i < settings_.intra_op_parallelism; ++i)
    workers_.push_back(std::make_unique<RingWorker>(settings_));
}

RawAioHandle::~RawAioHandle() {
  for (auto& request : queued_) {
    try {
      request->wait();
    } catch (const Error& error) {
      log::warn_all("aio request abandoned at handle destruction failed: ", error.what());
    }
  }
}

int RawAioHandle::sync_pread(void* buffer, int64_t num_bytes, const std::string& path, int64_t file_offset,
                             uint32_t* checksum) {
  start(true, buffer, num_bytes, path, file_offset, checksum)->wait();
  return 1;
}

int RawAioHandle::sync_pwrite(const void* buffer, int64_t num_bytes, const std::string& path,
                              int64_t file_offset, uint32_t* checksum) {
  start(false, buffer, num_bytes, path, file_offset, checksum)->wait();
  return 1;
}

int RawAioHandle::async_pread(void* buffer, int64_t num_bytes, const std::string& path, int64_t file_offset,
                              uint32_t* checksum) {
  queued_.push_back(start(true, buffer, num_bytes, path, file_offset, checksum));
  return 0;
}

int RawAioHandle::async_pwrite(const void* buffer, int64_t num_bytes, const std::string& path,
                               int64_t file_offset, uint32_t* checksum) {
  queued_.push_back(start(false, buffer, num_bytes, path, file_offset, checksum));
  return 0;
}

int RawAioHandle::wait_for(int64_t count) {
  std::optional<Error> first_error;
  int waited = 0;
  std::chrono::duration<double> busy{0};
  // In request order, so queueing times only grow: each request adds the part of its
  // [queued, finished] interval past the busy time already counted.
  for (; first_queued_ < count && !queued_.empty(); ++first_queued_, ++waited) {
    const std::shared_ptr<FileRequest> request = std::move(queued_.front());
    queued_.pop_front();
    try {
      request->wait();
    } catch (const Error& error) {
      if (!first_error) first_error = error;
    }
    const auto from = std::max(request->queued_at(), busy_until_);
    if (request->finished_at() > from) busy += request->finished_at() - from;
    busy_until_ = std::max(busy_until_, request->finished_at());
  }
  busy_seconds_ = busy.count();
  if (first_error) throw *first_error;
  return waited;
}

int64_t RawAioHandle::direct_bytes() const {
  int64_t total = 0;
  for (const auto& worker : workers_) total += worker->direct_bytes();
  return total;
}

int64_t RawAioHandle::buffered_bytes() const {
  int64_t total = 0;
  for (const auto& worker : workers_) total += worker->buffered_bytes();
  return total;
}

std::shared_ptr<FileRequest> RawAioHandle::start(bool read, const void* buffer, int64_t num_bytes,
                                                 const std::string& path, int64_t file_offset, uint32_t* checksum) {
  if (num_bytes < 0 || file_offset < 0 || (buffer == nullptr && num_bytes > 0))
    throw Error(std::string("invalid ") + (read ? "read" : "write") + " request")
        .with_path(path)
        .with_offset(file_offset)
        .with_length(num_bytes);

  // Workers get contiguous runs of whole blocks, as even as the block count allows, so a size
  // that the parallelism does not divide still splits (DeepSpeed refuses it).
  const int64_t block = settings_.block_size;
  const int64_t blocks = (num_bytes + block - 1) / block;
  const int parallelism = settings_.intra_op_parallelism;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (int t = 0; t < parallelism; ++t) {
    int64_t begin = std::min(blocks * t / parallelism * block, num_bytes);
    int64_t end = std::min(blocks * (t + 1) / parallelism * block, num_bytes);
    if (end > begin) ranges.emplace_back(begin, end);
  }

  auto request = std::make_shared<FileRequest>(read ? Direction::Read : Direction::Write, path,
                                               static_cast<int>(ranges.size()), checksum);
  // Writes only read from the buffer; Slice carries one pointer type for both directions.
  char* bytes = static_cast<char*>(const_cast<void*>(buffer));
  for (size_t i = 0; i < ranges.size(); ++i) {
    auto [begin, end] = ranges[i];
    workers_[i]->enqueue(Slice{request, bytes + begin, file_offset + begin, end - begin});
  }
  return request;
}

}  // namespace ds::io
