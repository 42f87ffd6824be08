#include "dstrain/comm/onebit_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"
#include "dstrain/runtime/rank_env.hpp"

namespace ds::comm::onebit {
namespace {

// Below this many elements per thread, starting a thread costs more than it saves.
constexpr int64_t kMinPerThread = int64_t{1} << 18;
// Values are produced, squared, and packed a block at a time in a buffer that stays in L1.
constexpr int64_t kBlock = 256;

// The cores this process may use: ranks sharing a node (mpirun's local size) share its cores, and a
// rank that oversubscribes them slows down the ranks it then waits for.
int64_t threads_available() {
  static const int64_t threads = std::max<int64_t>(
      1, int64_t(std::thread::hardware_concurrency()) / std::max(1, rank_env_from_environment().local_size));
  return threads;
}

// Calls body(begin, end, t) over [0, n) split into at most threads_available() ranges whose
// boundaries are multiples of 8, so that no two threads write the same packed byte. Range t is
// always the same for a given n, which keeps per-thread partial sums deterministic.
template <class Body>
void parallel_ranges(int64_t n, const Body& body) {
  const int64_t threads = std::clamp<int64_t>(n / kMinPerThread, 1, threads_available());
  if (threads == 1) {
    body(0, n, 0);
    return;
  }
  const int64_t per_thread = ((n + threads - 1) / threads + 7) / 8 * 8;  // the ranges cover all of n
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (int64_t t = 1; t < threads; ++t) {
    const int64_t begin = std::min(n, t * per_thread), end = std::min(n, begin + per_thread);
    pool.emplace_back([&body, begin, end, t] { body(begin, end, t); });
  }
  body(0, std::min(n, per_thread), 0);
  for (auto& thread : pool) thread.join();
}

inline bool sign_bit(float x) { return !(x < 0.0f); }

// Sum of squares of one block: in float over 8 independent accumulators (at most 32 terms each, so
// the loop vectorizes without reassociation flags and stays accurate), returned as double so that
// blocks and threads add up in double.
double sum_of_squares(const float* v, int64_t length) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= length; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += v[i + k] * v[i + k];
  for (; i < length; ++i) acc[0] += v[i] * v[i];
  double total = 0;
  for (float a : acc) total += a;
  return total;
}

// Packs the signs of v[0, length), length <= kBlock, into packed[0, packed_bytes(length)). First one
// flag byte per value, a loop that vectorizes; then each 8 flags become one byte by a multiplication
// that moves flag k (byte k of a little-endian word) to bit 63 − k, no two partial products
// overlapping.
void pack_block(const float* v, int64_t length, uint8_t* packed) {
  uint8_t flags[kBlock];
  for (int64_t j = 0; j < length; ++j) flags[j] = sign_bit(v[j]);
  std::fill(flags + length, flags + packed_bytes(length) * 8, uint8_t{0});  // a last partial byte
  for (int64_t j = 0; j < length; j += 8) {
    uint64_t spread;
    std::memcpy(&spread, flags + j, 8);
    packed[j / 8] = uint8_t((spread * 0x8040201008040201ull) >> 56);
  }
}

// The 8 values ±weight that each byte of packed signs stands for.
struct DecodeTable {
  float values[256][8];
  explicit DecodeTable(float weight) {
    for (int byte = 0; byte < 256; ++byte)
      for (int k = 0; k < 8; ++k) values[byte][k] = (byte >> (7 - k)) & 1 ? weight : -weight;
  }
};

// The step worker and server share, over values produced a block at a time by
// fill(begin, length, v): v = value + error. The scale needs every value, so the values are made
// twice (pass 1: sum of squares; pass 2: error and signs) rather than stored.
template <class Fill>
float compress_values(const Fill& fill, float* error, int64_t n, uint8_t* packed) {
  if (n == 0) return 0.0f;
  std::vector<double> partial(threads_available(), 0.0);
  parallel_ranges(n, [&](int64_t begin, int64_t end, int64_t t) {
    float v[kBlock];
    for (int64_t block = begin; block < end; block += kBlock) {
      const int64_t length = std::min(kBlock, end - block);
      fill(block, length, v);
      partial[t] += sum_of_squares(v, length);
    }
  });
  double sum = 0;
  for (double p : partial) sum += p;
  const float scale = float(std::sqrt(sum) / std::sqrt(double(n)));
  parallel_ranges(n, [&](int64_t begin, int64_t end, int64_t) {
    float v[kBlock];
    for (int64_t block = begin; block < end; block += kBlock) {
      const int64_t length = std::min(kBlock, end - block);
      fill(block, length, v);
      for (int64_t j = 0; j < length; ++j) error[block + j] = v[j] - (sign_bit(v[j]) ? scale : -scale);
      pack_block(v, length, packed + block / 8);
    }
  });
  return scale;
}

}  // namespace

Layout layout_for(int64_t numel, int world) {
  if (world < 1) throw Error(log::concat("compressed allreduce: world size ", world, " is not positive"));
  const int64_t unit = int64_t{8} * world;
  const int64_t padded = (numel + unit - 1) / unit * unit;
  return Layout{numel, padded, padded / world, world};
}

Layout checked_layout(int64_t numel, int64_t worker_error_numel, int64_t server_error_numel, int world) {
  const Layout layout = layout_for(numel, world);
  if (worker_error_numel != layout.padded || server_error_numel != layout.chunk)
    throw Error(log::concat("compressed allreduce of ", numel, " values over ", world, " ranks needs worker_error of ",
                            layout.padded, " and server_error of ", layout.chunk,
                            " values (the buffer padded to a multiple of ", 8 * world, ", and that / world), got ",
                            worker_error_numel, " and ", server_error_numel));
  return layout;
}

void pack_signs(const float* x, int64_t n, uint8_t* packed) {
  parallel_ranges(n, [&](int64_t begin, int64_t end, int64_t) {
    for (int64_t block = begin; block < end; block += kBlock)
      pack_block(x + block, std::min(kBlock, end - block), packed + block / 8);
  });
}

void unpack_signs(const uint8_t* packed, int64_t n, float scale, float* out) {
  const DecodeTable table(scale);
  parallel_ranges(n, [&](int64_t begin, int64_t end, int64_t) {
    int64_t i = begin;
    for (; i + 8 <= end; i += 8) std::memcpy(out + i, table.values[packed[i / 8]], 8 * sizeof(float));
    for (int k = 0; i < end; ++i, ++k) out[i] = table.values[packed[i / 8]][k];
  });
}

float compress_with_feedback(const float* x, float* error, int64_t n, uint8_t* packed) {
  return compress_values(
      [&](int64_t begin, int64_t length, float* v) {
        for (int64_t j = 0; j < length; ++j) v[j] = x[begin + j] + error[begin + j];
      },
      error, n, packed);
}

float compress_sum_with_feedback(const uint8_t* chunks, const float* weights, int count, float* error, int64_t n,
                                 uint8_t* packed) {
  const int64_t stride = packed_bytes(n);
  const std::vector<DecodeTable> tables(weights, weights + count);
  return compress_values(
      [&](int64_t begin, int64_t length, float* v) {
        for (int64_t q = 0; q < packed_bytes(length); ++q) {
          // The 8 sums of one byte position stay in registers while the chunks are added.
          float sums[8] = {};
          for (int j = 0; j < count; ++j) {
            const float* values = tables[j].values[chunks[j * stride + begin / 8 + q]];
            for (int k = 0; k < 8; ++k) sums[k] += values[k];
          }
          std::memcpy(v + 8 * q, sums, sizeof(sums));
        }
        for (int64_t j = 0; j < length; ++j) v[j] += error[begin + j];
      },
      error, n, packed);
}

}  // namespace ds::comm::onebit
