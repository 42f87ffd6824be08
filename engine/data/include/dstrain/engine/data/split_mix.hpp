// SplitMix64 (Steele, Lea and Flood, 2014): the random numbers behind the built-in data sources.
// It is specified bit for bit, unlike the standard library's distributions, so a batch is the same
// on every machine and every rank.
#pragma once

#include <cstdint>

namespace ds::data {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound); the modulo bias, below bound / 2^64, is irrelevant here.
  uint64_t below(uint64_t bound) { return next() % bound; }
  // Uniform in [0, 1), from the top 53 bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

// The seed of sample `index` of step `step`'s global batch: every sample has its own stream.
inline uint64_t sample_seed(uint64_t seed, uint64_t step, uint64_t index) {
  uint64_t h = SplitMix64(seed).next();
  h = SplitMix64(h ^ step).next();
  return SplitMix64(h ^ index).next();
}

}  // namespace ds::data
