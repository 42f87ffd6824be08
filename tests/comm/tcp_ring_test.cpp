// TcpRing (comm/tcp_ring.hpp): rings of 2 to 5 members, each a thread of this process with its own
// sockets over the loopback. Results against a reference computed here: integer values, whose sums
// float32 and float64 hold exactly, so every element must equal its closed form and every member
// must hold the same bits; lengths around the segment and chunk boundaries (0, 1, fewer than the
// members, one chunk, many chunks, uneven segments); jobs queued back to back; reduce-scatter and
// all-gather alone. Failures: members that submitted different lengths, a member that leaves
// mid-job, a peer that cannot be reached, a previous rank that never connects; each fails in
// seconds with the neighbour named, never hangs. Torch-free, also built under ASan/UBSan.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dstrain/comm/tcp_ring.hpp"

using ds::comm::TcpRing;
using namespace std::chrono_literals;

namespace {

// The endpoints' all-gather among the threads of one ring.
class Board {
 public:
  explicit Board(int size) : size_(size), endpoints_(static_cast<size_t>(size)) {}
  std::vector<TcpRing::Endpoint> exchange(int rank, const TcpRing::Endpoint& mine) {
    std::unique_lock lock(mutex_);
    endpoints_[static_cast<size_t>(rank)] = mine;
    if (++arrived_ == size_) all_.notify_all();
    all_.wait(lock, [&] { return arrived_ == size_; });
    return endpoints_;
  }

 private:
  int size_;
  int arrived_ = 0;
  std::vector<TcpRing::Endpoint> endpoints_;
  std::mutex mutex_;
  std::condition_variable all_;
};

// Runs member(rank, ring) on `size` threads, each with its ring; returns what each thread reported.
std::vector<std::string> on_ring(int size, const std::function<std::string(int, TcpRing&)>& member,
                                 std::chrono::milliseconds connect_timeout = 10s) {
  Board board(size);
  std::vector<std::string> reports(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank)
    threads.emplace_back([&, rank] {
      try {
        TcpRing ring(rank, size, "test", [&](const TcpRing::Endpoint& mine) { return board.exchange(rank, mine); },
                     connect_timeout);
        reports[static_cast<size_t>(rank)] = member(rank, ring);
      } catch (const std::exception& e) {
        reports[static_cast<size_t>(rank)] = std::string("threw: ") + e.what();
      }
    });
  for (auto& t : threads) t.join();
  return reports;
}

template <class T>
T value(int rank, int64_t i, int job) {
  return static_cast<T>((rank + 1) * ((i * 7 + job) % 1001) - 500 * rank);
}

template <class T>
T expected_sum(int size, int64_t i, int job) {
  T sum = 0;
  for (int r = 0; r < size; ++r) sum += value<T>(r, i, job);
  return sum;
}

// All-reduces `counts` (queued back to back) on every member; "" when each element equals its sum.
template <class T>
std::string reduce_and_check(int rank, TcpRing& ring, int size, const std::vector<int64_t>& counts) {
  const auto type = sizeof(T) == 8 ? TcpRing::Type::Float64 : TcpRing::Type::Float32;
  std::vector<std::vector<T>> buffers;
  std::vector<std::shared_ptr<TcpRing::Job>> jobs;
  for (size_t j = 0; j < counts.size(); ++j) {
    buffers.emplace_back(static_cast<size_t>(counts[j]));
    for (int64_t i = 0; i < counts[j]; ++i) buffers[j][static_cast<size_t>(i)] = value<T>(rank, i, static_cast<int>(j));
  }
  for (size_t j = 0; j < counts.size(); ++j) {
    jobs.push_back(std::make_shared<TcpRing::Job>(buffers[j].data(), counts[j], type));
    ring.submit(jobs.back());
  }
  for (size_t j = 0; j < counts.size(); ++j) {
    if (!jobs[j]->wait_for(60s)) return "job " + std::to_string(j) + " did not finish";
    if (!jobs[j]->failure().empty()) return "job " + std::to_string(j) + " failed: " + jobs[j]->failure();
    for (int64_t i = 0; i < counts[j]; ++i)
      if (buffers[j][static_cast<size_t>(i)] != expected_sum<T>(size, i, static_cast<int>(j)))
        return "job " + std::to_string(j) + " element " + std::to_string(i) + ": " +
               std::to_string(buffers[j][static_cast<size_t>(i)]) + " != " +
               std::to_string(expected_sum<T>(size, i, static_cast<int>(j)));
  }
  return "";
}

// A port nothing listens on.
uint16_t closed_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t length = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &length);
  ::close(fd);
  return a.sin_port;
}

}  // namespace

TEST_CASE("TcpRing sums float32 and float64 of every length exactly on every member", "[tcp_ring]") {
  const int64_t chunk32 = TcpRing::kChunkBytes / 4, chunk64 = TcpRing::kChunkBytes / 8;
  for (int size : {2, 3, 4, 5}) {
    INFO("members " << size);
    const std::vector<int64_t> counts = {1, size - 1, size, 2 * size + 1, 1000, chunk32 + 3, 3 * chunk32 * size + 17,
                                         0, 5};
    auto reports = on_ring(size, [&](int rank, TcpRing& ring) { return reduce_and_check<float>(rank, ring, size, counts); });
    for (const auto& r : reports) CHECK(r == "");
    const std::vector<int64_t> counts64 = {chunk64 * size - 1, chunk64 * size, 7};
    reports = on_ring(size, [&](int rank, TcpRing& ring) { return reduce_and_check<double>(rank, ring, size, counts64); });
    for (const auto& r : reports) CHECK(r == "");
  }
}

TEST_CASE("TcpRing reduce-scatters into each member's own segment and all-gathers every member's", "[tcp_ring]") {
  const int64_t chunk32 = TcpRing::kChunkBytes / 4;
  for (int size : {2, 3, 5}) {
    INFO("members " << size);
    for (int64_t segment : {int64_t{1}, int64_t{1000}, 2 * chunk32 + 1}) {
      INFO("segment " << segment);
      auto reports = on_ring(size, [&](int rank, TcpRing& ring) -> std::string {
        const int64_t n = segment * size;
        std::vector<float> scattered(static_cast<size_t>(n)), gathered(static_cast<size_t>(n), -1.0f);
        for (int64_t i = 0; i < n; ++i) scattered[static_cast<size_t>(i)] = value<float>(rank, i, 1);
        for (int64_t i = 0; i < segment; ++i)
          gathered[static_cast<size_t>(rank * segment + i)] = value<float>(rank, i, 2);
        auto rs = std::make_shared<TcpRing::Job>(scattered.data(), n, TcpRing::Type::Float32, TcpRing::Kind::ReduceScatter);
        auto ag = std::make_shared<TcpRing::Job>(gathered.data(), n, TcpRing::Type::Float32, TcpRing::Kind::AllGather);
        ring.submit(rs);
        ring.submit(ag);
        if (!rs->wait_for(60s) || !ag->wait_for(60s)) return "hung";
        if (!rs->failure().empty() || !ag->failure().empty()) return rs->failure() + ag->failure();
        for (int64_t i = rank * segment; i < (rank + 1) * segment; ++i)
          if (scattered[static_cast<size_t>(i)] != expected_sum<float>(size, i, 1))
            return "reduce_scatter element " + std::to_string(i);
        for (int r = 0; r < size; ++r)
          for (int64_t i = 0; i < segment; ++i)
            if (gathered[static_cast<size_t>(r * segment + i)] != value<float>(r, i, 2))
              return "all_gather element " + std::to_string(r * segment + i);
        return "";
      });
      for (const auto& r : reports) CHECK(r == "");
    }
  }
  // Lengths that do not split into equal segments fail on every member alike, and nothing moves.
  auto reports = on_ring(3, [&](int, TcpRing& ring) {
    std::vector<float> data(10);
    auto job = std::make_shared<TcpRing::Job>(data.data(), 10, TcpRing::Type::Float32, TcpRing::Kind::AllGather);
    ring.submit(job);
    return job->wait_for(30s) ? job->failure() : std::string("hung");
  });
  for (const auto& r : reports)
    CHECK(r == "all_gather #1 of group test over the TCP ring: 10 values do not split into 3 equal segments");
}

TEST_CASE("TcpRing members that submit different lengths fail, naming the neighbour, and stay failed",
          "[tcp_ring]") {
  const int size = 3;
  auto reports = on_ring(size, [&](int rank, TcpRing& ring) {
    std::vector<float> data(rank == 1 ? 10 : 11, 1.0f);
    auto job = std::make_shared<TcpRing::Job>(data.data(), static_cast<int64_t>(data.size()), TcpRing::Type::Float32);
    ring.submit(job);
    if (!job->wait_for(30s)) return std::string("hung");
    std::vector<float> next(4, 1.0f);
    auto after = std::make_shared<TcpRing::Job>(next.data(), 4, TcpRing::Type::Float32);
    ring.submit(after);
    if (!after->wait_for(30s)) return std::string("the next job hung");
    return job->failure() + " | " + after->failure();
  });
  // Rank 1 and rank 2 receive a header that differs from their own; rank 0 sees rank 2 leave.
  CHECK_THAT(reports[1], Catch::Contains("rank 0 (host ") && Catch::Contains("sent all_reduce #1 of 11 float32 values") &&
                             Catch::Contains("this rank has all_reduce #1 of 10 float32 values"));
  CHECK_THAT(reports[2], Catch::Contains("rank 1 (host ") && Catch::Contains("sent all_reduce #1 of 10 float32 values"));
  CHECK_THAT(reports[0], Catch::Contains("all_reduce #1 of group test over the TCP ring: "));
  for (const auto& r : reports) CHECK_THAT(r, Catch::Contains("| all_reduce #2 of group test over the TCP ring: the ring is unusable since an earlier job failed"));
}

TEST_CASE("TcpRing: a member that leaves mid-job fails its neighbours instead of hanging them", "[tcp_ring]") {
  const int size = 3;
  std::vector<std::shared_ptr<TcpRing::Job>> jobs(size);
  auto reports = on_ring(size, [&](int rank, TcpRing& ring) {
    if (rank == 1) return std::string("left");  // its ring is destroyed without a job
    std::vector<float> data(1 << 20, 1.0f);
    auto job = std::make_shared<TcpRing::Job>(data.data(), static_cast<int64_t>(data.size()), TcpRing::Type::Float32);
    ring.submit(job);
    if (!job->wait_for(30s)) return std::string("hung");
    return job->failure();
  });
  CHECK(reports[1] == "left");
  // Each neighbour fails on whichever connection ends first (rank 1's, or the other's, which shut
  // its own down on failing), naming the peer.
  for (int rank : {0, 2}) {
    INFO("rank " << rank);
    CHECK_THAT(reports[static_cast<size_t>(rank)], Catch::StartsWith("all_reduce #1 of group test over the TCP ring: ") &&
                                                       Catch::Contains(" (host "));
  }
}

TEST_CASE("TcpRing: a peer that cannot be reached is named with its address and port", "[tcp_ring]") {
  // Rank 0 alone, told that rank 1 listens on this host at a port where nobody does.
  const uint16_t port = closed_port();
  std::string report = "constructed";
  try {
    TcpRing ring(0, 2, "test",
                 [&](const TcpRing::Endpoint& mine) {
                   TcpRing::Endpoint next = mine;
                   next.port = port;
                   return std::vector<TcpRing::Endpoint>{mine, next};
                 },
                 2s);
  } catch (const std::exception& e) {
    report = e.what();
  }
  CHECK_THAT(report, Catch::Contains("TcpRing of group test: cannot connect to rank 1 (host ") &&
                         Catch::Contains("at [127.0.0.1] port " + std::to_string(ntohs(port))) &&
                         Catch::Contains("rank=0"));
}

TEST_CASE("TcpRing: a previous rank that never connects is named after the timeout", "[tcp_ring]") {
  // Rank 1 alone. Its next, rank 0, is a bare listener of this test: rank 1's connection lands in
  // its backlog, and nobody ever connects back. (With two real members, the one that fails first
  // closes its listener, so whether the other times out or is refused depends on the scheduler.)
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(listener, 4) == 0);
  socklen_t length = sizeof a;
  getsockname(listener, reinterpret_cast<sockaddr*>(&a), &length);
  std::string report = "constructed";
  const auto started = std::chrono::steady_clock::now();
  try {
    TcpRing ring(1, 2, "test",
                 [&](const TcpRing::Endpoint& mine) {
                   TcpRing::Endpoint previous = mine;
                   previous.port = a.sin_port;
                   return std::vector<TcpRing::Endpoint>{previous, mine};
                 },
                 2s);
  } catch (const std::exception& e) {
    report = e.what();
  }
  const auto waited = std::chrono::steady_clock::now() - started;
  ::close(listener);
  CHECK_THAT(report, Catch::Contains("TcpRing of group test: rank 0 (host ") &&
                         Catch::Contains("did not connect within 2000 ms") && Catch::Contains("rank=1"));
  CHECK(waited > 1900ms);  // the poll counts whole milliseconds: it may end just short of 2 s
  CHECK(waited < 10s);
}
