// The median wall time of `repeats` calls of fn, after one untimed warm-up call (first touch of
// the pages, the thread pool's start).
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

inline double median_seconds(int repeats, const std::function<void()>& fn) {
  fn();
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

inline double median_ms(int repeats, const std::function<void()>& fn) { return 1e3 * median_seconds(repeats, fn); }
