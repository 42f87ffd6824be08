// The units the NVMe swappers count in: fp32 elements per O_DIRECT alignment, sizes rounded up to
// it, and the clock their transfers are timed with (io::SwapStats).
#pragma once

#include <chrono>
#include <cstdint>

#include "dstrain/io/aio_settings.hpp"

namespace ds::io {

// A swapped range that starts and ends on a multiple of this many fp32 elements goes O_DIRECT.
inline constexpr int64_t kAlignElements = kDirectIoAlignment / sizeof(float);

inline int64_t round_up(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

// Seconds on the steady clock.
inline double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace ds::io
