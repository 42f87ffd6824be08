#include "in_flight.hpp"

#include "dstrain/io/transfer_time.hpp"

namespace ds::io {

void InFlight::begin() {
  std::lock_guard lock(mutex_);
  if (count_++ == 0) since_ = Clock::now();
}

void InFlight::end() {
  std::lock_guard lock(mutex_);
  if (--count_ == 0) total_ += Clock::now() - since_;
}

double InFlight::seconds() const {
  std::lock_guard lock(mutex_);
  const Clock::duration open = count_ > 0 ? Clock::now() - since_ : Clock::duration{0};
  return std::chrono::duration<double>(total_ + open).count();
}

InFlight& in_flight(Direction direction) {
  // Never destroyed: a handle that a static object owns may still finish requests at exit.
  static InFlight& reads = *new InFlight;
  static InFlight& writes = *new InFlight;
  return direction == Direction::Read ? reads : writes;
}

double reading_seconds() { return in_flight(Direction::Read).seconds(); }
double writing_seconds() { return in_flight(Direction::Write).seconds(); }

}  // namespace ds::io
