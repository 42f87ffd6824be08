// dstrain_adam_bench CASES: the fused CUDA AdamW's step time (fused_adam_cuda.hpp) on cuda:0, for
// adam_vs_torch.sh. CASES holds one case a line: its name, then the element count of each of its
// tensors. Each case's tensors are allocated apart, as a model's parameters are, and stepped as
// ranges in one call. Prints "name elements median_ms" a line: the median of kTimed steps after
// kWarmup, each timed with CUDA events on the current stream.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "dstrain/engine/kernels/fused_adam_cuda.hpp"

namespace {

constexpr int kWarmup = 5;
constexpr int kTimed = 20;

struct Case {
  std::string name;
  std::vector<int64_t> numels;
};

std::vector<Case> read_cases(const char* path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(std::string("cannot read ") + path);
  std::vector<Case> cases;
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    Case c;
    if (!(words >> c.name)) continue;
    for (int64_t n; words >> n;) c.numels.push_back(n);
    cases.push_back(std::move(c));
  }
  return cases;
}

void check(cudaError_t status) {
  if (status != cudaSuccess) throw std::runtime_error(cudaGetErrorString(status));
}

// torch.optim.AdamW's defaults but for the decay, as adam_torch.py sets them.
ds::fused::AdamStep adamw_step(int step) {
  ds::fused::AdamStep s;
  s.lr = 1e-3;
  s.weight_decay = 0.01;
  s.decoupled = true;
  s.bias_correction1 = 1 - std::pow(s.beta1, step);
  s.bias_correction2 = 1 - std::pow(s.beta2, step);
  return s;
}

double median_step_ms(const Case& c) {
  const auto opts = at::dtype(at::kFloat).device(at::kCUDA);
  std::vector<at::Tensor> tensors;
  std::vector<ds::fused::cuda::AdamRange> ranges;
  for (const int64_t n : c.numels) {
    at::Tensor p = at::randn({n}, opts), g = at::randn({n}, opts), m = at::zeros({n}, opts), v = at::zeros({n}, opts);
    ranges.push_back({p.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), n});
    tensors.insert(tensors.end(), {p, g, m, v});
  }
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  std::vector<cudaEvent_t> start(kWarmup + kTimed), end(kWarmup + kTimed);
  for (int i = 0; i < kWarmup + kTimed; ++i) {
    check(cudaEventCreate(&start[i]));
    check(cudaEventCreate(&end[i]));
    check(cudaEventRecord(start[i], stream));
    ds::fused::cuda::adam(ranges.data(), static_cast<int64_t>(ranges.size()), adamw_step(i + 1), stream);
    check(cudaEventRecord(end[i], stream));
  }
  check(cudaStreamSynchronize(stream));
  std::vector<float> ms(kTimed);
  for (int i = 0; i < kTimed; ++i) check(cudaEventElapsedTime(&ms[i], start[kWarmup + i], end[kWarmup + i]));
  for (int i = 0; i < kWarmup + kTimed; ++i) {
    check(cudaEventDestroy(start[i]));
    check(cudaEventDestroy(end[i]));
  }
  std::nth_element(ms.begin(), ms.begin() + kTimed / 2, ms.end());
  return ms[kTimed / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CASES\n", argv[0]);
    return 2;
  }
  try {
    for (const Case& c : read_cases(argv[1])) {
      int64_t elements = 0;
      for (const int64_t n : c.numels) elements += n;
      std::printf("%s %lld %.4f\n", c.name.c_str(), static_cast<long long>(elements), median_step_ms(c));
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dstrain_adam_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
