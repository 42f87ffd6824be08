// Named wall-clock timers, as DeepSpeed's wall_clock_breakdown: start/stop accumulate time under a
// name. Their owner fills them (EngineCore's phases under wall_clock_breakdown, the pipeline
// executor's instructions); the reader resets them after reading (the trainer, every
// steps_per_print steps). One registry per owner, no globals.
#pragma once

#include <chrono>
#include <map>
#include <string>

namespace ds {

class TimerRegistry {
 public:
  void start(const std::string& name);
  void stop(const std::string& name);  // throws ds::Error if the timer is not running
  double elapsed_ms(const std::string& name) const;  // accumulated; 0 for an unknown name
  std::map<std::string, double> elapsed_all_ms() const;
  void reset();

 private:
  using Clock = std::chrono::steady_clock;
  struct Timer {
    double accumulated_ms = 0;
    bool running = false;
    Clock::time_point started;
  };
  std::map<std::string, Timer> timers_;
};

// Times one scope into a registry entry; a null registry times nothing.
class ScopedTimer {
 public:
  ScopedTimer(TimerRegistry* registry, std::string name);
  ~ScopedTimer();
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  TimerRegistry* registry_;
  std::string name_;
};

}  // namespace ds
