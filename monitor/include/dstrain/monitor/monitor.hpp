// Monitor: where the trainer's scalar events go, as DeepSpeed's Monitor. An event is a name in
// DeepSpeed's style ("Train/Samples/train_loss") and a value; a call writes the events of one x,
// DeepSpeed's global samples, and leaves them on disk before it returns, so a killed run keeps
// every step it reported.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ds::monitor {

struct Event {
  std::string name;
  double value = 0;
};

class Monitor {
 public:
  virtual ~Monitor() = default;
  // Throws ds::Error naming the file when it cannot be written.
  virtual void write_events(int64_t step, const std::vector<Event>& events) = 0;
};

}  // namespace ds::monitor
