// The 1-bit kernels against plain, one-element-at-a-time computations of the same definitions.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "dstrain/comm/onebit_kernels.hpp"
#include "dstrain/runtime/error.hpp"

namespace onebit = ds::comm::onebit;

namespace {

std::vector<float> seeded_values(uint64_t seed, int64_t n) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(n);
  for (auto& v : values) v = uniform(rng);
  return values;
}

bool positive_sign(float x) { return std::isnan(x) || x >= 0.0f; }

bool bit_of(const std::vector<uint8_t>& packed, int64_t i) { return (packed[i / 8] >> (7 - i % 8)) & 1; }

// Lengths around byte boundaries, and one large enough to be split across threads.
// The long lengths split over threads: 2^19 + 1 leaves one value past two ranges of 2^18 (two threads),
// 2^20 + 3 three values past four (four or more threads).
const std::vector<int64_t> kLengths = {0, 1, 7, 8, 9, 15, 17, 63, 1001, (int64_t{1} << 19) + 1, (int64_t{1} << 20) + 3};

// What a compression step must do to values v (already including the error): the scale from a
// plain double sum, then the error and the signs one value at a time.
void check_compression(const std::vector<float>& v, float scale, const std::vector<float>& error,
                       const std::vector<uint8_t>& packed) {
  const int64_t n = v.size();
  double sum = 0;
  for (float value : v) sum += double(value) * double(value);
  REQUIRE(scale == Approx(std::sqrt(sum) / std::sqrt(double(n))).epsilon(1e-6));
  for (int64_t i = 0; i < n; ++i) {
    const float sign = positive_sign(v[i]) ? 1.0f : -1.0f;
    if (error[i] != v[i] - scale * sign || bit_of(packed, i) != positive_sign(v[i]))
      FAIL("element " << i << ": error " << error[i] << ", expected " << v[i] - scale * sign);
  }
  for (int64_t i = n; i < onebit::packed_bytes(n) * 8; ++i) REQUIRE_FALSE(bit_of(packed, i));
}

}  // namespace

TEST_CASE("pack_signs puts the first value in the most significant bit, sign(0) = +1") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {1.0f, -1.0f, 0.0f, -2.0f, -0.0f, -0.5f, nan, -7.0f, /* next byte */ -3.0f, 4.0f};
  std::vector<uint8_t> packed(onebit::packed_bytes(x.size()));
  onebit::pack_signs(x.data(), x.size(), packed.data());
  REQUIRE(packed.size() == 2);
  CHECK(packed[0] == 0b10101010);
  CHECK(packed[1] == 0b01000000);  // unused low bits of the last byte are 0
}

TEST_CASE("pack then unpack gives ±scale by sign at every length") {
  for (int64_t n : kLengths) {
    CAPTURE(n);
    const auto x = seeded_values(n, n);
    std::vector<uint8_t> packed(onebit::packed_bytes(n), 0xAB);
    onebit::pack_signs(x.data(), n, packed.data());
    for (int64_t i = 0; i < n; ++i)
      if (bit_of(packed, i) != positive_sign(x[i])) FAIL("bit " << i << " wrong for value " << x[i]);
    for (int64_t i = n; i < onebit::packed_bytes(n) * 8; ++i) REQUIRE_FALSE(bit_of(packed, i));

    std::vector<float> decoded(n);
    onebit::unpack_signs(packed.data(), n, 0.25f, decoded.data());
    for (int64_t i = 0; i < n; ++i)
      if (decoded[i] != (positive_sign(x[i]) ? 0.25f : -0.25f)) FAIL("value " << i << " decoded as " << decoded[i]);
  }
}

TEST_CASE("compress_with_feedback compresses x + error and leaves the rest in error") {
  for (int64_t n : kLengths) {
    if (n == 0) continue;
    CAPTURE(n);
    const auto x = seeded_values(n + 1, n);
    const auto error_in = seeded_values(n + 2, n);
    std::vector<float> error = error_in;
    std::vector<uint8_t> packed(onebit::packed_bytes(n));
    const float scale = onebit::compress_with_feedback(x.data(), error.data(), n, packed.data());
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = x[i] + error_in[i];
    check_compression(v, scale, error, packed);
  }
  std::vector<float> nothing;
  CHECK(onebit::compress_with_feedback(nothing.data(), nothing.data(), 0, nullptr) == 0.0f);
}

TEST_CASE("compress_sum_with_feedback compresses the weighted sum of the chunks' signs plus error") {
  for (int64_t n : kLengths) {
    if (n == 0) continue;
    CAPTURE(n);
    const int count = 3;
    const int64_t stride = onebit::packed_bytes(n);
    std::vector<uint8_t> chunks(count * stride);
    std::vector<std::vector<float>> sources;
    for (int j = 0; j < count; ++j) {
      sources.push_back(seeded_values(100 * n + j, n));
      onebit::pack_signs(sources[j].data(), n, chunks.data() + j * stride);
    }
    const std::vector<float> weights = {0.5f, 0.125f, 3.0f};
    const auto error_in = seeded_values(n + 3, n);
    std::vector<float> error = error_in;
    std::vector<uint8_t> packed(onebit::packed_bytes(n));
    const float scale =
        onebit::compress_sum_with_feedback(chunks.data(), weights.data(), count, error.data(), n, packed.data());

    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) {
      float sum = 0.0f;
      for (int j = 0; j < count; ++j) sum += positive_sign(sources[j][i]) ? weights[j] : -weights[j];
      v[i] = sum + error_in[i];
    }
    check_compression(v, scale, error, packed);
  }
}

TEST_CASE("layout pads to a multiple of 8 x world and checks the error buffers") {
  const auto layout = onebit::layout_for(10, 3);  // 8 * 3 = 24
  CHECK(layout.padded == 24);
  CHECK(layout.chunk == 8);
  CHECK(layout.chunk_bytes() == 1);
  CHECK(onebit::layout_for(48, 3).padded == 48);
  CHECK(onebit::layout_for(49, 3).padded == 72);
  CHECK(onebit::layout_for(0, 4).padded == 0);

  CHECK_NOTHROW(onebit::checked_layout(10, 24, 8, 3));
  CHECK_THROWS_WITH(onebit::checked_layout(10, 10, 8, 3), Catch::Contains("worker_error of 24") && Catch::Contains("got 10"));
  CHECK_THROWS_AS(onebit::checked_layout(10, 24, 10, 3), ds::Error);
}
