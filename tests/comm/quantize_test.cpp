// The blockwise quantizers (int8 and int4, one fp32 scale per block) against a plain reference
// computed here in double: each value within scale/2 of itself, with scale = max|x| / max_code of
// its block; exact on values k * scale the format holds; zeros, constant blocks, short last blocks,
// NaN and infinities; the record's size in closed form. Torch-free, also built under ASan/UBSan.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "dstrain/comm/quantize.hpp"
#include "dstrain/runtime/error.hpp"

namespace quant = ds::comm::quant;

namespace {

std::vector<float> uniform_values(uint64_t seed, int64_t n, double range) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(-range, range);
  std::vector<float> x(n);
  for (float& v : x) v = static_cast<float>(uniform(rng));
  return x;
}

struct RoundTrip {
  std::vector<uint8_t> record;
  std::vector<float> values;
};

RoundTrip round_trip(const std::vector<float>& x, const quant::Layout& layout) {
  RoundTrip out{std::vector<uint8_t>(layout.bytes(), 0xAB), std::vector<float>(x.size())};
  quant::quantize(x.data(), layout, out.record.data());
  quant::dequantize(out.record.data(), layout, out.values.data());
  return out;
}

// The reference scale of block b: max|x| over it / max_code, in double.
double reference_scale(const std::vector<float>& x, int64_t block, int64_t b, int max_code) {
  double max_abs = 0;
  const int64_t end = std::min<int64_t>(x.size(), (b + 1) * block);
  for (int64_t i = b * block; i < end; ++i) max_abs = std::max(max_abs, std::fabs(double(x[i])));
  return max_abs / max_code;
}

// The code of value i as stored: int8 bytes, or sign-extended nibbles (low nibble first).
int stored_code(const std::vector<uint8_t>& record, int bits, int64_t i) {
  if (bits == 8) return static_cast<int8_t>(record[i]);
  const int nibble = (record[i / 2] >> (4 * (i % 2))) & 0xF;
  return nibble >= 8 ? nibble - 16 : nibble;
}

}  // namespace

TEST_CASE("a record is the codes padded to 4 bytes, then one fp32 scale per block", "[quantize]") {
  CHECK(quant::layout_for(5000, 8).bytes() == 5000 + 4 * 3);  // blocks of 2048: 2048, 2048, 904
  CHECK(quant::layout_for(5001, 8).bytes() == 5004 + 4 * 3);  // codes padded to 5004
  CHECK(quant::layout_for(5001, 4).bytes() == 2504 + 4 * 3);  // 2501 bytes of nibbles, padded
  CHECK(quant::layout_for(4096, 4).bytes() == 2048 + 4 * 2);
  CHECK(quant::layout_for(0, 8).bytes() == 0);
  CHECK(quant::layout_for(10, 8, 3).blocks() == 4);
  CHECK(quant::max_code(8) == 127);
  CHECK(quant::max_code(4) == 7);
  CHECK_THROWS_WITH(quant::layout_for(10, 5), Catch::Contains("4 or 8 bits, not 5"));
  CHECK_THROWS_WITH(quant::layout_for(10, 4, 3), Catch::Contains("even"));
  CHECK_THROWS_WITH(quant::layout_for(10, 8, 0), Catch::Contains("at least 1"));
}

TEST_CASE("each value comes back within scale/2 of its block, for lengths not a multiple of the block", "[quantize]") {
  for (int bits : {8, 4}) {
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{2048}, int64_t{2049}, int64_t{3 * 2048 + 1001}}) {
      for (int64_t block : {quant::kDefaultBlock, int64_t{64}}) {
        CAPTURE(bits, n, block);
        // Blocks of very different magnitudes, so a scale shared across blocks would fail the bound.
        std::vector<float> x = uniform_values(n * 31 + bits, n, 1.0);
        for (int64_t i = 0; i < n; ++i) x[i] *= std::pow(10.0f, static_cast<float>((i / block) % 5) - 2);
        const quant::Layout layout = quant::layout_for(n, bits, block);
        const RoundTrip back = round_trip(x, layout);
        for (int64_t b = 0; b < layout.blocks(); ++b) {
          const double scale = reference_scale(x, block, b, quant::max_code(bits));
          CHECK(quant::block_scale(back.record.data(), layout, b) == Approx(scale).epsilon(1e-6));
          const int64_t end = std::min(n, (b + 1) * block);
          double worst = 0;
          for (int64_t i = b * block; i < end; ++i) worst = std::max(worst, std::fabs(double(back.values[i]) - x[i]));
          CHECK(worst <= scale / 2 * (1 + 1e-5));
        }
      }
    }
  }
}

TEST_CASE("values the format holds (k * scale, power-of-two scale) come back exactly", "[quantize]") {
  for (int bits : {8, 4}) {
    const int max = quant::max_code(bits);
    const int64_t n = 2 * 2048 + 300;
    std::mt19937_64 rng(17 + bits);
    std::uniform_int_distribution<int> code(-max, max);
    std::vector<int> k(n);
    std::vector<float> x(n);
    const quant::Layout layout = quant::layout_for(n, bits);
    for (int64_t i = 0; i < n; ++i) {
      k[i] = code(rng);
      if (i % 2048 == 5) k[i] = (i / 2048) % 2 ? -max : max;                         // every block reaches ±max_code
      x[i] = std::ldexp(static_cast<float>(k[i]), -3 - static_cast<int>(i / 2048));  // scale 2^-3, 2^-4, 2^-5
    }
    const RoundTrip back = round_trip(x, layout);
    CAPTURE(bits);
    CHECK(back.values == x);
    for (int64_t i = 0; i < n; ++i) REQUIRE(stored_code(back.record, bits, i) == k[i]);
    for (int64_t b = 0; b < layout.blocks(); ++b)
      CHECK(quant::block_scale(back.record.data(), layout, b) == std::ldexp(1.0f, -3 - static_cast<int>(b)));
  }
}

TEST_CASE("zeros, a block of one value, and a single value", "[quantize]") {
  for (int bits : {8, 4}) {
    CAPTURE(bits);
    const int max = quant::max_code(bits);
    const std::vector<float> zeros(3000, 0.0f);
    const quant::Layout layout = quant::layout_for(zeros.size(), bits);
    RoundTrip back = round_trip(zeros, layout);
    CHECK(back.values == zeros);
    CHECK(quant::block_scale(back.record.data(), layout, 0) == 0.0f);

    // A constant block: every code is ±max_code, every value within scale/2 = |c| / (2 max_code).
    for (float c : {0.3f, -1e-20f, 6.5e4f}) {
      const std::vector<float> same(2048, c);
      back = round_trip(same, quant::layout_for(same.size(), bits));
      for (int64_t i = 0; i < 2048; ++i) {
        REQUIRE(stored_code(back.record, bits, i) == (c > 0 ? max : -max));
        REQUIRE(std::fabs(double(back.values[i]) - c) <= std::fabs(double(c)) / max / 2);
      }
    }
    // Tiny blocks: normal floats keep the scale/2 bound; below max_code / FLT_MAX they come back as zeros.
    const std::vector<float> tiny(100, -1e-30f), tinier(100, 1e-38f);
    back = round_trip(tiny, quant::layout_for(tiny.size(), bits));
    CHECK(std::fabs(double(back.values[7]) + 1e-30) <= 1e-30 / max / 2 * (1 + 1e-5));
    back = round_trip(tinier, quant::layout_for(tinier.size(), bits));
    CHECK(back.values == std::vector<float>(100, 0.0f));
    CHECK(quant::block_scale(back.record.data(), quant::layout_for(tinier.size(), bits), 0) == 0.0f);

    // One value alone is its block's max: code -max_code, back up to the rounding of its scale.
    back = round_trip({-2.5f}, quant::layout_for(1, bits));
    CHECK(stored_code(back.record, bits, 0) == -max);
    CHECK(back.values[0] == Approx(-2.5).epsilon(1e-6));
  }
}

TEST_CASE("a block holding NaN or an infinity comes back all NaN; the other blocks are untouched", "[quantize]") {
  const float bad_values[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity()};
  for (int bits : {8, 4}) {
    for (float bad : bad_values) {
      CAPTURE(bits, bad);
      std::vector<float> x = uniform_values(5, 3 * 64, 1.0);
      x[64 + 10] = bad;  // block 1 of 3
      const quant::Layout layout = quant::layout_for(x.size(), bits, 64);
      const RoundTrip back = round_trip(x, layout);
      CHECK(std::isnan(quant::block_scale(back.record.data(), layout, 1)));
      for (int64_t i = 0; i < 3 * 64; ++i) {
        if (i / 64 == 1) {
          REQUIRE(std::isnan(back.values[i]));
        } else {
          REQUIRE(std::fabs(double(back.values[i]) - x[i]) <=
                  reference_scale(x, 64, i / 64, quant::max_code(bits)) / 2 * (1 + 1e-5));
        }
      }
      std::vector<float> sum(x.size(), 1.0f);
      quant::dequantize_add(back.record.data(), layout, sum.data());
      CHECK(std::isnan(sum[64]));
      CHECK(std::isfinite(sum[0]));
    }
  }
}

TEST_CASE("dequantize_add adds the dequantized values in fp32; block ranges compose to the whole", "[quantize]") {
  for (int bits : {8, 4}) {
    CAPTURE(bits);
    const int64_t n = 5 * 100 + 37;
    const std::vector<float> x = uniform_values(99 + bits, n, 3.0);
    const quant::Layout layout = quant::layout_for(n, bits, 100);
    std::vector<uint8_t> whole(layout.bytes()), pieces(layout.bytes(), 0xCD);
    quant::quantize(x.data(), layout, whole.data());
    quant::quantize(x.data(), layout, pieces.data(), 3, layout.blocks());
    quant::quantize(x.data(), layout, pieces.data(), 0, 3);
    CHECK(pieces == whole);  // padding included: every byte of a record is written

    std::vector<float> values(n), sum = uniform_values(7, n, 1.0), expected = sum;
    quant::dequantize(whole.data(), layout, values.data());
    for (int64_t i = 0; i < n; ++i) expected[i] += values[i];
    quant::dequantize_add(whole.data(), layout, sum.data(), 0, 2);
    quant::dequantize_add(whole.data(), layout, sum.data(), 2, layout.blocks());
    CHECK(sum == expected);
    CHECK_THROWS_WITH(quant::dequantize(whole.data(), layout, values.data(), 2, layout.blocks() + 1),
                      Catch::Contains("outside the record's 6"));
  }
}
