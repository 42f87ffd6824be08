#include "dstrain/comm/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "dstrain/runtime/error.hpp"

namespace ds::comm::quant {
namespace {

// max|x| over a block, or NaN when the block holds a NaN or an infinity.
float block_max_abs(const float* x, int64_t n) {
  float max_abs = 0.0f;
  bool finite = true;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    finite &= a <= std::numeric_limits<float>::max();  // false for NaN too
    max_abs = std::max(max_abs, a);
  }
  return finite ? max_abs : std::numeric_limits<float>::quiet_NaN();
}

int code_of(float x, float scale, int max_code) {
  const long code = std::lrint(x / scale);  // the default rounding mode: to nearest, ties to even
  return static_cast<int>(std::clamp<long>(code, -max_code, max_code));
}

// The code of value i of an int4 record: its nibble, sign-extended.
int int4_code(const uint8_t* codes, int64_t i) {
  const int nibble = (codes[i / 2] >> (4 * (i % 2))) & 0xF;
  return nibble >= 8 ? nibble - 16 : nibble;
}

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
      for (int64_t i = begin; i < end; ++i) emit(i, static_cast<float>(int4_code(record, i)) * scale);
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
  const int max = max_code(layout.bits);
  for (int64_t b = first_block; b < end_block; ++b) {
    const int64_t begin = b * layout.block, end = std::min(layout.numel, begin + layout.block);
    const float scale = block_max_abs(x + begin, end - begin) / static_cast<float>(max);
    // The padding of the codes is written once, by the last block, so that a record's bytes are all defined.
    if (b == layout.blocks() - 1)
      std::memset(record + layout.code_bytes(), 0, layout.scales_offset() - layout.code_bytes());
    // A zero scale (zeros, or values too small for a nonzero one) and a NaN scale both store code 0.
    const bool encodable = scale > 0.0f;
    if (layout.bits == 8) {
      auto* codes = reinterpret_cast<int8_t*>(record);
      for (int64_t i = begin; i < end; ++i) codes[i] = static_cast<int8_t>(encodable ? code_of(x[i], scale, max) : 0);
    } else {
      for (int64_t i = begin; i < end; i += 2) {
        const int low = encodable ? code_of(x[i], scale, max) : 0;
        const int high = encodable && i + 1 < end ? code_of(x[i + 1], scale, max) : 0;
        record[i / 2] = static_cast<uint8_t>((low & 0xF) | ((high & 0xF) << 4));
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
