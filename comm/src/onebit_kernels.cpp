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

// The cores this process may use: ranks sharing a node (mpirun's local size) share its cores, and a
// rank that oversubscribes them slows down the ranks it then waits for.
int64_t threads_available() {
  static const int64_t threads =
      std::max<int64_t>(1, int64_t(std::thread::hardware_concurrency()) / std::max(1, rank_env_from_environment().local_size));
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
  const int64_t per_thread = (n / threads + 7) / 8 * 8;
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

// Sum of squares in double with independent accumulators, so the loop vectorizes without
// reassociation flags.
double sum_of_squares(const float* x, int64_t begin, int64_t end) {
  double acc[8] = {};
  int64_t i = begin;
  for (; i + 8 <= end; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += double(x[i + k]) * double(x[i + k]);
  for (; i < end; ++i) acc[0] += double(x[i]) * double(x[i]);
  double total = 0;
  for (double a : acc) total += a;
  return total;
}

// Packs the signs of x[begin, end), begin a multiple of 8, calling visit(i, positive) on each
// value on the way (the error update rides along). Works in blocks: first one flag byte per value,
// a loop that vectorizes; then each 8 flags become one byte by a multiplication that moves flag k
// (byte k of a little-endian word) to bit 63 − k without any two partial products overlapping.
template <class Visit>
void pack_range(const float* x, int64_t begin, int64_t end, uint8_t* packed, const Visit& visit) {
  constexpr int64_t kBlock = 256;
  uint8_t flags[kBlock];
  for (int64_t block = begin; block < end; block += kBlock) {
    const int64_t length = std::min(kBlock, end - block);
    for (int64_t j = 0; j < length; ++j) {
      const bool positive = sign_bit(x[block + j]);
      flags[j] = positive;
      visit(block + j, positive);
    }
    std::fill(flags + length, flags + packed_bytes(length) * 8, uint8_t{0});  // a last partial byte
    for (int64_t j = 0; j < length; j += 8) {
      uint64_t spread;
      std::memcpy(&spread, flags + j, 8);
      packed[(block + j) / 8] = uint8_t((spread * 0x8040201008040201ull) >> 56);
    }
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

// out[i] = ±weight over [begin, end), begin a multiple of 8.
void decode_range(const uint8_t* packed, const DecodeTable& table, int64_t begin, int64_t end, float* out) {
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) std::memcpy(out + i, table.values[packed[i / 8]], 8 * sizeof(float));
  for (int k = 0; i < end; ++i, ++k) out[i] = table.values[packed[i / 8]][k];
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
                            layout.padded, " and server_error of ", layout.chunk, " values (the buffer padded to a multiple of ",
                            8 * world, ", and that / world), got ", worker_error_numel, " and ", server_error_numel));
  return layout;
}

void pack_signs(const float* x, int64_t n, uint8_t* packed) {
  parallel_ranges(n, [&](int64_t begin, int64_t end, int64_t) { pack_range(x, begin, end, packed, [](int64_t, bool) {}); });
}

void unpack_signs(const uint8_t* packed, int64_t n, float scale, float* out) {
  const DecodeTable table(scale);
  parallel_ranges(n, [&](int64_t begin, int64_t end, int64_t) { decode_range(packed, table, begin, end, out); });
}

float compress_with_feedback(float* x, float* error, int64_t n, uint8_t* packed) {
  if (n == 0) return 0.0f;
  std::vector<double> partial(threads_available(), 0.0);
  parallel_ranges(n, [&](int64_t begin, int64_t end, int64_t t) {
    for (int64_t i = begin; i < end; ++i) x[i] += error[i];
    partial[t] = sum_of_squares(x, begin, end);
  });
  double sum = 0;
  for (double p : partial) sum += p;
  const float scale = float(std::sqrt(sum) / std::sqrt(double(n)));
  parallel_ranges(n, [&](int64_t begin, int64_t end, int64_t) {
    pack_range(x, begin, end, packed, [&](int64_t i, bool positive) { error[i] = x[i] - (positive ? scale : -scale); });
  });
  return scale;
}

void sum_decoded(const uint8_t* packed, const float* weights, int count, int64_t n, float* out) {
  const int64_t stride = packed_bytes(n);
  const std::vector<DecodeTable> tables(weights, weights + count);
  // One pass over out: the 8 sums of a byte position stay in registers while the chunks are added.
  parallel_ranges(n, [&](int64_t begin, int64_t end, int64_t) {
    for (int64_t i = begin; i < end; i += 8) {
      float sums[8] = {};
      for (int j = 0; j < count; ++j) {
        const float* values = tables[j].values[packed[j * stride + i / 8]];
        for (int k = 0; k < 8; ++k) sums[k] += values[k];
      }
      std::copy(sums, sums + std::min<int64_t>(8, end - i), out + i);
    }
  });
}

}  // namespace ds::comm::onebit
