#include "dstrain/comm/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "dstrain/runtime/error.hpp"

namespace ds::comm::quant {
namespace {

// max|x| over a block, or NaN when the block holds a NaN or an infinity. Taken on the bits: without
// the sign bit, IEEE floats order as unsigned integers, infinity and NaN above every finite value,
// and an integer max is a reduction the compiler vectorizes (a float max is not, for NaN's sake).
float block_max_abs(const float* x, int64_t n) {
  uint32_t max_bits = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, sizeof bits);
    max_bits = std::max(max_bits, bits & 0x7FFFFFFFu);
  }
  if (max_bits >= 0x7F800000u) return std::numeric_limits<float>::quiet_NaN();
  float max_abs;
  std::memcpy(&max_abs, &max_bits, sizeof max_abs);
  return max_abs;
}

// Adding and subtracting 1.5 * 2^23 rounds a float of magnitude below 2^22 to an integer, to nearest
// with ties to even (the default rounding mode), in plain arithmetic the compiler can vectorize.
constexpr float kRoundingShift = 12582912.0f;

// x * inverse is at most max_code (+ a rounding) for every x of the block; the clamp catches that.
int code_of(float x, float inverse, float max_code) {
  const float v = std::clamp(x * inverse, -max_code, max_code);
  return static_cast<int>((v + kRoundingShift) - kRoundingShift);
}

// int4 values are converted through a buffer of int8 codes this long, so that both loops vectorize.
constexpr int64_t kChunk = 256;

// A nibble's two's-complement value: the nibble moved to the top of a signed byte, shifted back.
int8_t low_nibble(uint8_t byte) { return static_cast<int8_t>(static_cast<int8_t>(byte << 4) >> 4); }
int8_t high_nibble(uint8_t byte) { return static_cast<int8_t>(static_cast<int8_t>(byte) >> 4); }

void check_range(const Layout& layout, int64_t first_block, int64_t end_block) {
  if (first_block < 0 || first_block > end_block || end_block > layout.blocks())
    throw Error("quantize: blocks [" + std::to_string(first_block) + ", " + std::to_string(end_block) +
                ") outside the record's " + std::to_string(layout.blocks()));
}

// Calls emit(i, value) for every value of the blocks [first_block, end_block) of a record.
template <class Emit>
void for_each_value(const uint8_t* record, const Layout& layout, int64_t first_block, int64_t end_block,
                    const Emit& emit) {
  check_range(layout, first_block, end_block);
  for (int64_t b = first_block; b < end_block; ++b) {
    const float scale = block_scale(record, layout, b);
    const int64_t begin = b * layout.block, end = std::min(layout.numel, begin + layout.block);
    if (layout.bits == 8) {
      const auto* codes = reinterpret_cast<const int8_t*>(record);
      for (int64_t i = begin; i < end; ++i) emit(i, static_cast<float>(codes[i]) * scale);
    } else {
      int8_t codes[kChunk];
      for (int64_t chunk = begin; chunk < end; chunk += kChunk) {  // a block, and so a chunk, starts on a byte
        const int64_t length = std::min(kChunk, end - chunk);
        const uint8_t* bytes = record + chunk / 2;
        for (int64_t j = 0; j < (length + 1) / 2; ++j) {
          codes[2 * j] = low_nibble(bytes[j]);
          codes[2 * j + 1] = high_nibble(bytes[j]);
        }
        for (int64_t k = 0; k < length; ++k) emit(chunk + k, static_cast<float>(codes[k]) * scale);
      }
    }
  }
}

}  // namespace

int max_code(int bits) {
  if (bits == 8) return 127;
  if (bits == 4) return 7;
  throw Error("quantization supports 4 or 8 bits, not " + std::to_string(bits));
}

Layout layout_for(int64_t numel, int bits, int64_t block) {
  max_code(bits);
  if (numel < 0) throw Error("quantize: a negative length (" + std::to_string(numel) + ")");
  if (block < 1) throw Error("quantize: the block must hold at least 1 value, not " + std::to_string(block));
  if (bits == 4 && block % 2 != 0)
    throw Error("quantize: at 4 bits the block must be even (two values per byte), not " + std::to_string(block));
  return Layout{numel, block, bits};
}

float block_scale(const uint8_t* record, const Layout& layout, int64_t block_index) {
  float scale;
  std::memcpy(&scale, record + layout.scales_offset() + 4 * block_index, sizeof scale);
  return scale;
}

void quantize(const float* x, const Layout& layout, uint8_t* record, int64_t first_block, int64_t end_block) {
  check_range(layout, first_block, end_block);
  const float max = static_cast<float>(max_code(layout.bits));
  for (int64_t b = first_block; b < end_block; ++b) {
    const int64_t begin = b * layout.block, end = std::min(layout.numel, begin + layout.block);
    const float max_abs = block_max_abs(x + begin, end - begin);
    // Codes are x · max / max|x|: one multiply per value, exact for x = k · scale with a power-of-two
    // scale. Zeros, a max|x| so small that its inverse overflows, and a NaN all store code 0, the
    // first two with scale 0.
    const float inverse = max / max_abs;
    const bool encodable = max_abs > 0.0f && std::isfinite(inverse);
    const float scale = encodable || std::isnan(max_abs) ? max_abs / max : 0.0f;
    // The padding of the codes is written once, by the last block, so that a record's bytes are all defined.
    if (b == layout.blocks() - 1)
      std::memset(record + layout.code_bytes(), 0, layout.scales_offset() - layout.code_bytes());
    if (layout.bits == 8) {
      auto* codes = reinterpret_cast<int8_t*>(record);
      if (!encodable)
        std::memset(codes + begin, 0, end - begin);
      else
        for (int64_t i = begin; i < end; ++i) codes[i] = static_cast<int8_t>(code_of(x[i], inverse, max));
    } else {
      int8_t codes[kChunk];
      for (int64_t chunk = begin; chunk < end; chunk += kChunk) {
        const int64_t length = std::min(kChunk, end - chunk);
        for (int64_t k = 0; k < length; ++k)
          codes[k] = static_cast<int8_t>(encodable ? code_of(x[chunk + k], inverse, max) : 0);
        if (length % 2) codes[length] = 0;  // the high nibble of an odd block's last byte (kChunk is even)
        uint8_t* bytes = record + chunk / 2;
        for (int64_t j = 0; j < (length + 1) / 2; ++j)
          bytes[j] = static_cast<uint8_t>((codes[2 * j] & 0xF) | ((codes[2 * j + 1] & 0xF) << 4));
      }
    }
    std::memcpy(record + layout.scales_offset() + 4 * b, &scale, sizeof scale);
  }
}

void dequantize(const uint8_t* record, const Layout& layout, float* out, int64_t first_block, int64_t end_block) {
  for_each_value(record, layout, first_block, end_block, [out](int64_t i, float value) { out[i] = value; });
}

void dequantize_add(const uint8_t* record, const Layout& layout, float* sum, int64_t first_block, int64_t end_block) {
  for_each_value(record, layout, first_block, end_block, [sum](int64_t i, float value) { sum[i] += value; });
}

void quantize(const float* x, const Layout& layout, uint8_t* record) {
  quantize(x, layout, record, 0, layout.blocks());
}

void dequantize(const uint8_t* record, const Layout& layout, float* out) {
  dequantize(record, layout, out, 0, layout.blocks());
}

void dequantize_add(const uint8_t* record, const Layout& layout, float* sum) {
  dequantize_add(record, layout, sum, 0, layout.blocks());
}

}  // namespace ds::comm::quant
