#include "dstrain/engine/profiler/gemm_peak.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>

namespace ds::profiler {

double measure_gemm_peak_flops(int64_t n, int repeats) {
  torch::NoGradGuard no_grad;
  const at::Tensor a = torch::rand({n, n});
  const at::Tensor b = torch::rand({n, n});
  at::Tensor c = torch::empty({n, n});
  torch::mm_out(c, a, b);  // the first call pays for page faults and the BLAS threads' start
  double best = 0;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    torch::mm_out(c, a, b);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, 2.0 * n * n * n / seconds);
  }
  return best;
}

}  // namespace ds::profiler
