// Seeded test inputs: every rank can build every other rank's tensor, so multi-rank tests compute
// the expected reduction locally.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <random>

namespace ds::test {

// Uniform in [-1, 1) for floating dtypes, integers in [0, 16) for integer dtypes. (Small integers
// converted to bfloat16 or float16 are held and summed exactly.)
inline at::Tensor seeded_tensor(uint64_t seed, int64_t n, at::ScalarType dtype = at::kFloat) {
  std::mt19937_64 rng(seed);
  at::Tensor values = at::empty({n}, at::kDouble);
  double* data = values.data_ptr<double>();
  const bool integral = !at::isFloatingType(dtype);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::uniform_int_distribution<int> small(0, 15);
  for (int64_t i = 0; i < n; ++i) data[i] = integral ? small(rng) : uniform(rng);
  return values.to(dtype);
}

// The seed of `rank`'s input in test `test_id`.
inline uint64_t seed_of(int test_id, int rank) { return 1000003ull * test_id + rank; }

}  // namespace ds::test
