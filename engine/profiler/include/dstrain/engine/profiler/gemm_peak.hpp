// The GEMM peak of this process: the FLOP/s a square float32 torch::mm reaches on the intra-op
// threads it has, the ceiling model-FLOPs utilisation (MFU) is measured against. Measured, not read
// from a data sheet, since a CPU's sustained rate depends on its vector units, clocks and memory.
#pragma once

#include <cstdint>

namespace ds::profiler {

// The best of `repeats` timed n×n×n products after one untimed (2·n³ FLOPs each). n = 2048 keeps
// the cores busy on blocks that fit their caches and takes well under a second on a few cores.
double measure_gemm_peak_flops(int64_t n = 2048, int repeats = 3);

}  // namespace ds::profiler
