// The GEMM peak of this process: the FLOP/s a square float32 torch::mm reaches on the intra-op
// threads it has, the ceiling model-FLOPs utilisation (MFU) is measured against. Measured, not read
// from a data sheet, since a CPU's sustained rate depends on its vector units, clocks and memory.
#pragma once

#include <cstdint>

namespace ds::profiler {

// The best of `repeats` timed n×n×n products after one untimed (2·n³ FLOPs each). On this
// machine's cores n = 1024 reached the rate of 2048 and 3072 (docs/performance.md) at a seventh of
// their time; the best of several keeps a moment of contention from lowering the peak.
double measure_gemm_peak_flops(int64_t n = 1024, int repeats = 5);

}  // namespace ds::profiler
