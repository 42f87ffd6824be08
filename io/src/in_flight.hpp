// The requests of one direction in flight in this process, over every handle: the union of their
// queue-to-completion times (io/transfer_time.hpp).
#pragma once

#include <chrono>
#include <mutex>

#include "file_request.hpp"

namespace ds::io {

class InFlight {
 public:
  using Clock = std::chrono::steady_clock;

  void begin();  // a request was queued
  void end();    // its last piece is done
  double seconds() const;

 private:
  mutable std::mutex mutex_;
  int count_ = 0;
  Clock::time_point since_;  // when count_ last went from 0 to 1
  Clock::duration total_{0};  // of the periods that have ended
};

InFlight& in_flight(Direction direction);

}  // namespace ds::io
