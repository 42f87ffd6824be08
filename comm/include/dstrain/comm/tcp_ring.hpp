// TcpRing: an all-reduce (and its halves, reduce-scatter and all-gather) of its own over TCP for
// ranks that are each alone on their node, as gloo does it. Each rank holds one connection to the next rank and one from the previous one, and a
// thread that runs the all-reduces handed to it, in order: reduce-scatter then all-gather around the
// ring, in chunks, each chunk sent on as soon as it has been reduced, so every link carries
// 2(N-1)/N of the buffer each way, the least an all-reduce can. The thread blocks in poll(2) while
// bytes are on the wire, so the link keeps moving while the caller computes and no core spins
// (Open MPI moves a nonblocking collective only inside MPI calls, and its blocking wait spins).
//
// Torch- and MPI-free: the caller exchanges the endpoints (MpiBackend all-gathers them) and hands
// over raw buffers. Every member must submit the same sequence of all-reduces (counts and types); a
// rank whose neighbour sent a different one fails that job and every later one, naming the
// neighbour. A neighbour that closes its connection fails the job likewise.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ds::comm {

class TcpRing {
 public:
  enum class Type : int32_t { Float32 = 1, Float64 = 2 };
  // What a job does to its buffer of N equal segments (N = the members; segments differ by one
  // element at most for an all-reduce, and must be equal otherwise):
  //   AllReduce:     every segment becomes the sum of the members' (in place);
  //   ReduceScatter: segment r of member r becomes the sum of the members' segments r; the
  //                  others hold partial sums afterwards;
  //   AllGather:     every member's segment r becomes member r's segment r.
  enum class Kind : int32_t { AllReduce = 1, ReduceScatter = 2, AllGather = 3 };

  // Where a rank listens; plain bytes, so that a transport can all-gather it.
  struct Endpoint {
    char host[64];
    uint32_t addresses[8];  // IPv4, network byte order; the loopback last
    int32_t address_count;
    uint16_t port;
  };

  // One collective over `count` values at `data`, which stay untouched until done().
  class Job {
   public:
    Job(void* data, int64_t count, Type type, Kind kind = Kind::AllReduce)
        : data_(data), count_(count), type_(type), kind_(kind) {}
    bool done() const { return done_.load(std::memory_order_acquire); }
    // Waits up to `limit` for the job; true once done.
    bool wait_for(std::chrono::milliseconds limit);
    // After done(): "" or why the job failed.
    const std::string& failure() const { return failure_; }

   private:
    friend class TcpRing;
    void finish(std::string failure);
    void* data_;
    int64_t count_;
    Type type_;
    Kind kind_;
    std::string failure_;
    std::atomic<bool> done_{false};
    std::mutex mutex_;
    std::condition_variable finished_;
  };

  // All-gathers this rank's endpoint: called once by every member, returns the members' in rank order.
  using Exchange = std::function<std::vector<Endpoint>(const Endpoint& mine)>;

  // Listens, exchanges endpoints, connects to rank + 1 and accepts rank - 1 (each within
  // `connect_timeout`), then starts the thread. label names the group in messages. size >= 2.
  TcpRing(int rank, int size, std::string label, const Exchange& exchange, std::chrono::milliseconds connect_timeout);
  ~TcpRing();
  TcpRing(const TcpRing&) = delete;
  TcpRing& operator=(const TcpRing&) = delete;

  // Queues the job after those submitted before it.
  void submit(std::shared_ptr<Job> job);

  // Bytes per chunk: each is sent on once the previous rank's chunk has been added into it.
  static constexpr int64_t kChunkBytes = int64_t{256} << 10;

 private:
  void run();
  // Runs one job around the ring; returns "" or why it failed.
  std::string run_job(Job& job, uint64_t sequence);
  std::string peer_name(int rank) const;

  int rank_;
  int size_;
  std::string label_;
  std::vector<Endpoint> endpoints_;
  int to_next_ = -1;      // connected to rank + 1: this rank sends on it
  int from_previous_ = -1;  // accepted from rank - 1: this rank receives on it
  std::vector<char> scratch_;  // one received chunk, before it is added
  std::string broken_;         // why the ring refuses jobs ("" while usable)

  std::mutex mutex_;
  std::condition_variable queued_;
  std::deque<std::shared_ptr<Job>> jobs_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace ds::comm
