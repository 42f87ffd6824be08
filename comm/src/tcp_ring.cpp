#include "dstrain/comm/tcp_ring.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>

#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"

namespace ds::comm {
namespace {

constexpr uint64_t kHelloMagic = 0x64737472696e6731;  // "dstring1"
constexpr uint64_t kJobMagic = 0x64737472696e676a;    // "dstringj"

using Clock = std::chrono::steady_clock;

struct Hello {
  uint64_t magic;
  int32_t rank;
  int32_t size;
};

// Sent ahead of each job's bytes, so that ranks that submitted different jobs find out.
struct JobHeader {
  uint64_t magic;
  uint64_t sequence;
  int64_t count;
  int32_t type;
  int32_t kind;
};

const char* kind_name(int32_t kind) {
  switch (static_cast<TcpRing::Kind>(kind)) {
    case TcpRing::Kind::AllReduce: return "all_reduce";
    case TcpRing::Kind::ReduceScatter: return "reduce_scatter";
    case TcpRing::Kind::AllGather: return "all_gather";
  }
  return "unknown collective";
}

const char* type_name(int32_t type) {
  switch (static_cast<TcpRing::Type>(type)) {
    case TcpRing::Type::Float32: return "float32";
    case TcpRing::Type::Float64: return "float64";
  }
  return "unknown";
}

int64_t element_size(TcpRing::Type type) { return type == TcpRing::Type::Float64 ? 8 : 4; }

std::string address_text(uint32_t address) {
  char text[INET_ADDRSTRLEN] = {};
  in_addr a{};
  a.s_addr = address;
  inet_ntop(AF_INET, &a, text, sizeof text);
  return text;
}

// Waits for `events` on fd until `deadline`; false on timeout.
bool wait_for_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
  }
}

// Moves all `bytes` through a nonblocking socket before `deadline` (the handshakes only).
bool transfer_all(int fd, void* data, size_t bytes, bool sending, Clock::time_point deadline) {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = sending ? ::send(fd, p, bytes, MSG_NOSIGNAL) : ::recv(fd, p, bytes, 0);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
    } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      return false;
    } else if (!wait_for_fd(fd, sending ? POLLOUT : POLLIN, deadline)) {
      return false;
    }
  }
  return true;
}

// A nonblocking connection to address:port, or -1 when it is not made before `deadline`.
int connect_to(uint32_t address, uint16_t port, Clock::time_point deadline) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_in peer{};
  peer.sin_family = AF_INET;
  peer.sin_port = port;
  peer.sin_addr.s_addr = address;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&peer), sizeof peer) == 0) return fd;
  int error = errno;
  if (error == EINPROGRESS && wait_for_fd(fd, POLLOUT, deadline)) {
    socklen_t length = sizeof error;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
    if (error == 0) return fd;
  }
  ::close(fd);
  return -1;
}

TcpRing::Endpoint listen_on(int fd) {
  TcpRing::Endpoint mine{};
  ::gethostname(mine.host, sizeof mine.host - 1);
  sockaddr_in bound{};
  socklen_t length = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  mine.port = bound.sin_port;
  ifaddrs* interfaces = nullptr;
  if (getifaddrs(&interfaces) == 0) {
    const int capacity = static_cast<int>(std::size(mine.addresses)) - 1;  // the loopback's place
    for (ifaddrs* i = interfaces; i && mine.address_count < capacity; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
      if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
      mine.addresses[mine.address_count++] = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
    }
    freeifaddrs(interfaces);
  }
  mine.addresses[mine.address_count++] = htonl(INADDR_LOOPBACK);
  return mine;
}

template <class T>
void add_into(void* destination, const void* source, int64_t count) {
  T* d = static_cast<T*>(destination);
  const T* s = static_cast<const T*>(source);
  for (int64_t i = 0; i < count; ++i) d[i] += s[i];
}

}  // namespace

bool TcpRing::Job::wait_for(std::chrono::milliseconds limit) {
  if (done()) return true;
  std::unique_lock lock(mutex_);
  return finished_.wait_for(lock, limit, [&] { return done(); });
}

void TcpRing::Job::finish(std::string failure) {
  {
    std::lock_guard lock(mutex_);
    failure_ = std::move(failure);
    done_.store(true, std::memory_order_release);
  }
  finished_.notify_all();
}

TcpRing::TcpRing(int rank, int size, std::string label, const Exchange& exchange,
                 std::chrono::milliseconds connect_timeout)
    : rank_(rank), size_(size), label_(std::move(label)) {
  if (size < 2) throw Error(log::concat("TcpRing of group ", label_, " needs at least 2 ranks, got ", size));
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listener < 0) throw Error("TcpRing: socket() failed").with_errno(errno).with_rank(rank_);
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  if (::bind(listener, reinterpret_cast<sockaddr*>(&any), sizeof any) != 0 || ::listen(listener, 16) != 0) {
    const int error = errno;
    ::close(listener);
    throw Error("TcpRing: cannot listen on a TCP port").with_errno(error).with_rank(rank_);
  }
  try {
    endpoints_ = exchange(listen_on(listener));
    const auto deadline = Clock::now() + connect_timeout;

    // Connect first, accept second: the kernel completes a connection into the listener's backlog
    // before it is accepted, so no rank waits on another's accept.
    const int next = (rank_ + 1) % size_;
    const Endpoint& to = endpoints_[static_cast<size_t>(next)];
    const Endpoint& here = endpoints_[static_cast<size_t>(rank_)];
    const bool same_host = std::strncmp(to.host, here.host, sizeof to.host) == 0;
    // On the same host, the loopback. Elsewhere the peer's other addresses, but not one this host
    // has too (a docker0 bridge has the same address on every node and would lead back here).
    auto is_here = [&](uint32_t address) {
      return std::find(here.addresses, here.addresses + here.address_count, address) != here.addresses + here.address_count;
    };
    std::string tried;
    for (int i = 0; i < to.address_count && to_next_ < 0; ++i) {
      const bool loopback = to.addresses[i] == htonl(INADDR_LOOPBACK);
      if (same_host ? !loopback : loopback || is_here(to.addresses[i])) continue;
      tried += (tried.empty() ? "" : ", ") + address_text(to.addresses[i]);
      to_next_ = connect_to(to.addresses[i], to.port, deadline);
    }
    if (to_next_ < 0)
      throw Error(log::concat("TcpRing of group ", label_, ": cannot connect to ", peer_name(next), " at [", tried,
                              "] port ", ntohs(to.port)))
          .with_rank(rank_);
    Hello hello{kHelloMagic, rank_, size_};
    if (!transfer_all(to_next_, &hello, sizeof hello, true, deadline))
      throw Error(log::concat("TcpRing of group ", label_, ": ", peer_name(next), " closed the connection at start"))
          .with_errno(errno)
          .with_rank(rank_);

    const int previous = (rank_ + size_ - 1) % size_;
    if (!wait_for_fd(listener, POLLIN, deadline))
      throw Error(log::concat("TcpRing of group ", label_, ": ", peer_name(previous), " did not connect within ",
                              connect_timeout.count(), " ms"))
          .with_rank(rank_);
    from_previous_ = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    Hello theirs{};
    if (from_previous_ < 0 || !transfer_all(from_previous_, &theirs, sizeof theirs, false, deadline) ||
        theirs.magic != kHelloMagic || theirs.rank != previous || theirs.size != size_)
      throw Error(log::concat("TcpRing of group ", label_, ": the connection accepted is not from ",
                              peer_name(previous), " (hello of rank ", theirs.rank, " of ", theirs.size, ")"))
          .with_rank(rank_);
  } catch (...) {
    ::close(listener);
    if (to_next_ >= 0) ::close(to_next_);
    if (from_previous_ >= 0) ::close(from_previous_);
    throw;
  }
  ::close(listener);
  const int on = 1;
  setsockopt(to_next_, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  setsockopt(from_previous_, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  scratch_.resize(static_cast<size_t>(kChunkBytes));
  thread_ = std::thread([this] { run(); });
}

TcpRing::~TcpRing() {
  {
    // Under the mutex, so that the thread cannot miss it between its check and its wait.
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  queued_.notify_all();
  thread_.join();
  ::close(to_next_);
  ::close(from_previous_);
}

void TcpRing::submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(job));
  }
  queued_.notify_one();
}

std::string TcpRing::peer_name(int rank) const {
  if (static_cast<size_t>(rank) >= endpoints_.size()) return log::concat("rank ", rank);
  return log::concat("rank ", rank, " (host ", endpoints_[static_cast<size_t>(rank)].host, ")");
}

void TcpRing::run() {
  uint64_t sequence = 0;
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(mutex_);
      queued_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    ++sequence;
    const std::string call =
        log::concat(kind_name(static_cast<int32_t>(job->kind_)), " #", sequence, " of group ", label_, " over the TCP ring");
    if (stopping_) {
      job->finish(call + ": the ring was shut down");
      continue;
    }
    if (!broken_.empty()) {
      job->finish(call + ": the ring is unusable since an earlier job failed: " + broken_);
      continue;
    }
    if (job->kind_ != Kind::AllReduce && job->count_ % size_ != 0) {
      job->finish(log::concat(call, ": ", job->count_, " values do not split into ", size_, " equal segments"));
      continue;
    }
    std::string failure = run_job(*job, sequence);
    if (!failure.empty()) {
      broken_ = failure;
      // The neighbours, mid-job too, see the connections end and fail in turn, around the ring.
      ::shutdown(to_next_, SHUT_RDWR);
      ::shutdown(from_previous_, SHUT_RDWR);
    }
    job->finish(std::move(failure));
  }
}

std::string TcpRing::run_job(Job& job, uint64_t sequence) {
  const int P = size_;
  const int r = rank_;
  const int64_t es = element_size(job.type_);
  char* const data = static_cast<char*>(job.data_);
  auto mod = [P](int i) { return ((i % P) + P) % P; };

  // Segment j of the buffer is reduced by rank j - 1 last and gathered from there (segments differ
  // by one element at most); each is sent in `chunks` pieces of at most chunk_elements.
  const int64_t base = job.count_ / P, extra = job.count_ % P;
  auto segment_begin = [&](int j) { return j * base + std::min<int64_t>(j, extra); };
  auto segment_length = [&](int j) { return base + (j < extra ? 1 : 0); };
  const int64_t longest = base + (extra > 0 ? 1 : 0);
  const int64_t chunk_limit = kChunkBytes / es;
  const int64_t chunks = std::max<int64_t>(1, (longest + chunk_limit - 1) / chunk_limit);
  const int64_t chunk_elements = std::max<int64_t>(1, (longest + chunks - 1) / chunks);
  // Each phase is P - 1 steps; at step t of a phase with offset b, send segment r - t + b and
  // receive r - t - 1 + b, added in (reduce-scatter) or in place (all-gather). A reduce-scatter
  // with b = 0 leaves the sum of segment r + 1 here, which an all-gather with b = 1 passes on first
  // (the all-reduce); with b = -1 it leaves segment r's (the reduce-scatter). An all-gather with
  // b = 0 starts from this rank's own segment. Item i is chunk i % chunks of step i / chunks; send
  // item i is what receive item i - chunks produced, or this rank's own values in the first step.
  struct Phase {
    bool reducing;
    int offset;
  };
  std::vector<Phase> phases;
  if (job.kind_ == Kind::AllReduce) phases = {{true, 0}, {false, 1}};
  if (job.kind_ == Kind::ReduceScatter) phases = {{true, -1}};
  if (job.kind_ == Kind::AllGather) phases = {{false, 0}};
  const int64_t phase_items = (P - 1) * chunks;
  const int64_t items = static_cast<int64_t>(phases.size()) * phase_items;
  struct Range {
    int64_t begin, count;
  };
  auto range = [&](int64_t item, bool sending) {
    const Phase& phase = phases[static_cast<size_t>(item / phase_items)];
    const int t = static_cast<int>((item % phase_items) / chunks);
    const int64_t k = item % chunks;
    const int j = mod(r - t + phase.offset - (sending ? 0 : 1));
    const int64_t offset = k * chunk_elements;
    return Range{segment_begin(j) + offset, std::clamp<int64_t>(segment_length(j) - offset, 0, chunk_elements)};
  };
  auto reducing = [&](int64_t item) { return phases[static_cast<size_t>(item / phase_items)].reducing; };

  JobHeader mine{kJobMagic, sequence, job.count_, static_cast<int32_t>(job.type_), static_cast<int32_t>(job.kind_)};
  JobHeader theirs{};
  int64_t header_sent = 0, header_received = 0;
  int64_t sent_item = 0, sent_bytes = 0;          // the send in progress
  int64_t received_item = 0, received_bytes = 0;  // the receive in progress; earlier ones complete
  const std::string call =
      log::concat(kind_name(static_cast<int32_t>(job.kind_)), " #", sequence, " of group ", label_, " over the TCP ring");
  const int previous = mod(r - 1), next = mod(r + 1);

  auto skip_empty = [&](int64_t& item, bool sending) {
    while (item < items && range(item, sending).count == 0) ++item;
  };
  // Where sending failed (the next rank gone, or failed itself), this rank still receives until its
  // previous rank's side ends too: a header that differs from this rank's says more than the failure.
  std::string send_failure;
  auto sending_failed = [&](std::string why) {
    if (send_failure.empty()) send_failure = std::move(why);
  };
  auto receive_failed = [&](std::string why) { return send_failure.empty() ? why : send_failure; };
  // The header leaves first, so that a neighbour that fails on this rank's job has seen it.
  const ssize_t first = ::send(to_next_, &mine, sizeof mine, MSG_NOSIGNAL);
  if (first > 0) header_sent = first;
  for (;;) {
    bool moved = false;
    // Receive what has arrived first: a neighbour that failed may have sent why (its header).
    for (;;) {
      char* into;
      int64_t bytes;
      if (header_received < static_cast<int64_t>(sizeof theirs)) {
        into = reinterpret_cast<char*>(&theirs) + header_received;
        bytes = static_cast<int64_t>(sizeof theirs) - header_received;
      } else {
        skip_empty(received_item, false);
        if (received_item >= items) break;
        const Range chunk = range(received_item, false);
        into = (reducing(received_item) ? scratch_.data() : data + chunk.begin * es) + received_bytes;
        bytes = chunk.count * es - received_bytes;
      }
      const ssize_t n = ::recv(from_previous_, into, static_cast<size_t>(bytes), 0);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
      if (n == 0) return receive_failed(log::concat(call, ": ", peer_name(previous), " closed the connection"));
      if (n < 0)
        return receive_failed(
            log::concat(call, ": receiving from ", peer_name(previous), " failed: ", std::strerror(errno)));
      moved = true;
      if (header_received < static_cast<int64_t>(sizeof theirs)) {
        if ((header_received += n) < static_cast<int64_t>(sizeof theirs)) continue;
        if (theirs.magic != kJobMagic || theirs.sequence != sequence || theirs.count != job.count_ ||
            theirs.type != mine.type || theirs.kind != mine.kind)
          return log::concat(call, ": ", peer_name(previous), " sent ", kind_name(theirs.kind), " #", theirs.sequence,
                             " of ", theirs.count, " ", type_name(theirs.type), " values, where this rank has ",
                             kind_name(mine.kind), " #", sequence, " of ", job.count_, " ", type_name(mine.type),
                             " values (the ranks submitted different collectives)");
        continue;
      }
      const Range chunk = range(received_item, false);
      if ((received_bytes += n) < chunk.count * es) continue;
      if (reducing(received_item)) {
        if (job.type_ == Type::Float64)
          add_into<double>(data + chunk.begin * es, scratch_.data(), chunk.count);
        else
          add_into<float>(data + chunk.begin * es, scratch_.data(), chunk.count);
      }
      received_bytes = 0;
      ++received_item;
    }
    // Send what is ready.
    while (send_failure.empty()) {
      const char* from;
      int64_t bytes;
      if (header_sent < static_cast<int64_t>(sizeof mine)) {
        from = reinterpret_cast<const char*>(&mine) + header_sent;
        bytes = static_cast<int64_t>(sizeof mine) - header_sent;
      } else {
        skip_empty(sent_item, true);
        if (sent_item >= items || (sent_item >= chunks && received_item <= sent_item - chunks)) break;
        const Range chunk = range(sent_item, true);
        from = data + chunk.begin * es + sent_bytes;
        bytes = chunk.count * es - sent_bytes;
      }
      const ssize_t n = ::send(to_next_, from, static_cast<size_t>(bytes), MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
      if (n < 0) {
        sending_failed(log::concat(call, ": sending to ", peer_name(next), " failed: ", std::strerror(errno)));
        break;
      }
      moved = true;
      if (header_sent < static_cast<int64_t>(sizeof mine)) {
        header_sent += n;
      } else if ((sent_bytes += n) == range(sent_item, true).count * es) {
        sent_bytes = 0;
        ++sent_item;
      }
    }
    skip_empty(sent_item, true);
    skip_empty(received_item, false);
    if (received_item >= items && header_received == sizeof theirs) {
      if (!send_failure.empty()) return send_failure;
      if (sent_item >= items) return "";
    }
    if (moved) continue;
    if (stopping_) return log::concat(call, ": the ring was shut down");
    const bool can_send = send_failure.empty() &&
                          (header_sent < static_cast<int64_t>(sizeof mine) ||
                           (sent_item < items && (sent_item < chunks || received_item > sent_item - chunks)));
    // A negative fd is not polled: once sending failed, its hang-up would wake every poll.
    pollfd fds[2] = {{send_failure.empty() ? to_next_ : -1, static_cast<short>(can_send ? POLLOUT : 0), 0},
                     {from_previous_, POLLIN, 0}};
    if (::poll(fds, 2, 100) < 0 && errno != EINTR)
      return log::concat(call, ": poll failed: ", std::strerror(errno));
    if (fds[1].revents & POLLIN) continue;
    if (fds[1].revents & (POLLERR | POLLNVAL))
      return receive_failed(log::concat(call, ": the connection from ", peer_name(previous), " failed"));
    if (fds[0].revents & (POLLERR | POLLHUP | POLLNVAL))
      sending_failed(log::concat(call, ": the connection to ", peer_name(next), " failed"));
  }
}

}  // namespace ds::comm
