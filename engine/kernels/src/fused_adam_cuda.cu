#include "dstrain/engine/kernels/fused_adam_cuda.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "adam_scalars.hpp"
#include "dstrain/runtime/error.hpp"

// Every operation is an explicitly rounded intrinsic (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn,
// __fmaf_rn): nvcc would otherwise contract a multiply and an add into an fma wherever it likes,
// and the results would no longer be the CPU kernel's bits.
namespace ds::fused::cuda {
namespace {

// Elements per chunk: a block's unit of work, a multiple of 4 so that every chunk after a range's
// unaligned head starts 16-byte aligned.
constexpr int64_t kChunk = 1 << 14;
constexpr int kThreads = 256;

// One range as the kernel sees it: `head` leading elements stepped one by one until the four
// pointers are 16-byte aligned (0 when they never align together), then chunks of kChunk from
// there; `first_chunk` numbers the range's chunks within the launch.
struct Range {
  float* p;
  const float* g;
  float* m;
  float* v;
  int64_t n;
  int64_t first_chunk;
  int32_t head;
  int32_t vector;
};

struct Table {
  Range ranges[kMaxRangesPerLaunch];
  int count;
  int64_t chunks;
  AdamScalars k;
};
static_assert(sizeof(Table) <= 32764, "a kernel's arguments hold at most 32764 bytes (CUDA 12.1+)");

__device__ __forceinline__ void step(float& p, const float g, float& m, float& v, const AdamScalars& k) {
  const float grad = __fmaf_rn(k.l2, p, g);
  const float param = __fmul_rn(p, k.decay);
  const float mi = __fmaf_rn(k.one_minus_beta1, grad, __fmul_rn(m, k.beta1));
  const float vi = __fmaf_rn(__fmul_rn(k.one_minus_beta2, grad), grad, __fmul_rn(v, k.beta2));
  m = mi;
  v = vi;
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), k.sqrt_bias2), k.eps);
  p = __fadd_rn(param, __fdiv_rn(__fmul_rn(k.neg_step, mi), denom));
}

__device__ __forceinline__ void step_scalar(const Range& r, int64_t i, const AdamScalars& k) {
  float p = r.p[i], m = r.m[i], v = r.v[i];
  step(p, r.g[i], m, v, k);
  r.p[i] = p;
  r.m[i] = m;
  r.v[i] = v;
}

__device__ __forceinline__ void step_vector(const Range& r, int64_t i, const AdamScalars& k) {
  float4 p = *reinterpret_cast<const float4*>(r.p + i);
  const float4 g = *reinterpret_cast<const float4*>(r.g + i);
  float4 m = *reinterpret_cast<const float4*>(r.m + i);
  float4 v = *reinterpret_cast<const float4*>(r.v + i);
  step(p.x, g.x, m.x, v.x, k);
  step(p.y, g.y, m.y, v.y, k);
  step(p.z, g.z, m.z, v.z, k);
  step(p.w, g.w, m.w, v.w, k);
  *reinterpret_cast<float4*>(r.p + i) = p;
  *reinterpret_cast<float4*>(r.m + i) = m;
  *reinterpret_cast<float4*>(r.v + i) = v;
}

// The range holding chunk c: the last whose first_chunk <= c.
__device__ __forceinline__ int range_of(const Table& t, int64_t c) {
  int lo = 0, hi = t.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (t.ranges[mid].first_chunk <= c)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// __grid_constant__: the table is read in place from the argument space, never copied per thread.
__global__ void __launch_bounds__(kThreads) adam_kernel(const __grid_constant__ Table t) {
  for (int64_t c = blockIdx.x; c < t.chunks; c += gridDim.x) {
    const Range& r = t.ranges[range_of(t, c)];
    const int64_t local = c - r.first_chunk;
    const int64_t begin = r.head + local * kChunk;
    const int64_t end = begin + kChunk < r.n ? begin + kChunk : r.n;
    if (local == 0)
      for (int64_t i = threadIdx.x; i < r.head; i += blockDim.x) step_scalar(r, i, t.k);
    if (r.vector) {
      const int64_t vector_end = begin + (end - begin) / 4 * 4;
      for (int64_t i = begin + 4 * static_cast<int64_t>(threadIdx.x); i < vector_end; i += 4 * blockDim.x)
        step_vector(r, i, t.k);
      for (int64_t i = vector_end + threadIdx.x; i < end; i += blockDim.x) step_scalar(r, i, t.k);
    } else {
      for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) step_scalar(r, i, t.k);
    }
  }
}

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw Error(std::string("fused CUDA Adam: ") + what + ": " + cudaGetErrorString(status));
}

// Enough resident blocks to fill every SM; the grid strides over the chunks beyond.
int64_t resident_blocks() {
  int device = 0, sms = 0, per_sm = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "multiprocessor count");
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, adam_kernel, kThreads, 0), "occupancy");
  return static_cast<int64_t>(sms) * std::max(per_sm, 1);
}

Range kernel_range(const AdamRange& r) {
  const auto misalignment = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16; };
  const uintptr_t a = misalignment(r.params);
  Range out{r.params, r.grads, r.exp_avg, r.exp_avg_sq, r.n, 0, 0, 0};
  // fp32 pointers are 4-byte aligned, so a shared misalignment is a whole number of elements.
  out.vector = a % 4 == 0 && misalignment(r.grads) == a && misalignment(r.exp_avg) == a &&
               misalignment(r.exp_avg_sq) == a;
  if (out.vector) out.head = static_cast<int32_t>(std::min<int64_t>((16 - a) % 16 / 4, r.n));
  return out;
}

void launch(const Table& table, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>(std::min(table.chunks, resident_blocks()));
  adam_kernel<<<blocks, kThreads, 0, stream>>>(table);
  check(cudaGetLastError(), "kernel launch");
}

}  // namespace

void adam(const AdamRange* ranges, int64_t count, const AdamStep& step, void* stream) {
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  Table table;
  table.k = scalars_of(step);
  table.count = 0;
  table.chunks = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (ranges[i].n == 0) continue;
    Range r = kernel_range(ranges[i]);
    r.first_chunk = table.chunks;
    table.ranges[table.count++] = r;
    table.chunks += std::max<int64_t>(1, (r.n - r.head + kChunk - 1) / kChunk);
    if (table.count == kMaxRangesPerLaunch) {
      launch(table, cuda_stream);
      table.count = 0;
      table.chunks = 0;
    }
  }
  if (table.count > 0) launch(table, cuda_stream);
}

}  // namespace ds::fused::cuda
