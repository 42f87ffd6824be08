#include "ring_worker.hpp"

#include "dstrain/runtime/error.hpp"

namespace ds::io {

RingWorker::RingWorker(const AioSettings& settings) : settings_(settings) {
  int result = io_uring_queue_init(static_cast<unsigned>(settings_.queue_depth), &ring_, 0);
  if (result < 0)
    throw Error("cannot set up an io_uring of queue_depth " + std::to_string(settings_.queue_depth))
        .with_errno(-result);
  thread_ = std::thread([this] { run(); });
}

RingWorker::~RingWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
  io_uring_queue_exit(&ring_);
}

void RingWorker::enqueue(Slice slice) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(slice));
  }
  wake_.notify_one();
}

void RingWorker::run() {
  SliceTransfers transfers(ring_, settings_);
  const auto next_slice = [this]() -> std::optional<Slice> {
    std::lock_guard<std::mutex> lock(mutex_);
    if (queue_.empty()) return std::nullopt;
    Slice slice = std::move(queue_.front());
    queue_.pop_front();
    return slice;
  };
  while (true) {
    if (transfers.idle()) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
    }
    for (SliceTransfers::Finished& done : transfers.advance(next_slice)) {
      direct_bytes_.fetch_add(done.outcome.direct_bytes, std::memory_order_relaxed);
      buffered_bytes_.fetch_add(done.outcome.buffered_bytes, std::memory_order_relaxed);
      done.slice.request->finish_slice(std::move(done.outcome.error), done.outcome.checksum);
    }
  }
}

}  // namespace ds::io
