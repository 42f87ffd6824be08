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
  while (true) {
    Slice slice;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      slice = std::move(queue_.front());
      queue_.pop_front();
    }
    SliceOutcome outcome = transfer_slice(ring_, settings_, slice);
    direct_bytes_.fetch_add(outcome.direct_bytes, std::memory_order_relaxed);
    buffered_bytes_.fetch_add(outcome.buffered_bytes, std::memory_order_relaxed);
    slice.request->finish_slice(std::move(outcome.error), outcome.checksum);
  }
}

}  // namespace ds::io
