#include "dstrain/runtime/timers.hpp"

#include "dstrain/runtime/error.hpp"

namespace ds {

void TimerRegistry::start(const std::string& name) {
  Timer& timer = timers_[name];
  timer.running = true;
  timer.started = Clock::now();
}

void TimerRegistry::stop(const std::string& name) {
  auto it = timers_.find(name);
  if (it == timers_.end() || !it->second.running) throw Error("timer '" + name + "' stopped while not running");
  Timer& timer = it->second;
  timer.accumulated_ms += std::chrono::duration<double, std::milli>(Clock::now() - timer.started).count();
  timer.running = false;
}

double TimerRegistry::elapsed_ms(const std::string& name) const {
  auto it = timers_.find(name);
  return it == timers_.end() ? 0.0 : it->second.accumulated_ms;
}

std::map<std::string, double> TimerRegistry::elapsed_all_ms() const {
  std::map<std::string, double> out;
  for (const auto& [name, timer] : timers_) out[name] = timer.accumulated_ms;
  return out;
}

void TimerRegistry::reset() {
  for (auto& [name, timer] : timers_) timer.accumulated_ms = 0;
}

ScopedTimer::ScopedTimer(TimerRegistry* registry, std::string name) : registry_(registry), name_(std::move(name)) {
  if (registry_) registry_->start(name_);
}

ScopedTimer::~ScopedTimer() {
  if (registry_) registry_->stop(name_);
}

}  // namespace ds
