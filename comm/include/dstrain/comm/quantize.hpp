// Blockwise symmetric quantization, the wire format of ZeRO++'s quantized weights (qwZ) and
// quantized gradients (qgZ), free of LibTorch: plain loops over float and byte arrays.
//
// A tensor of `numel` floats is cut into blocks of `block` values (the last one shorter when numel
// is not a multiple). Each block has one fp32 scale = max|x| / max_code(bits), and each value the
// integer code round(x · max_code / max|x|) (to nearest, ties to even) in [-max_code, max_code]:
// 127 for int8, 7 for int4 (symmetric: -128 and -8 are never used, so no value is clamped by more
// than scale/2). A value comes back as code * scale, within scale/2 of what it was; a value that is
// k * scale with |k| <= max_code and a power-of-two scale comes back exactly.
//
// Special blocks: all zeros, or all below max_code / FLT_MAX in magnitude (about 4e-37 at int8,
// 2e-38 at int4, where the inverse of the scale overflows), give scale 0 and come back as zeros; a
// block holding a NaN or an infinity gets a NaN scale and comes back as all NaN, so a non-finite
// gradient still trips the overflow check after the collective.
//
// A quantized tensor is one record of bytes: the codes (int8: one byte each; int4: two per byte,
// value 2i in the low nibble of byte i, two's complement), padded to a multiple of 4 bytes, then
// the blocks' fp32 scales, so records laid end to end keep their scales 4-byte aligned.
#pragma once

#include <cstdint>

namespace ds::comm::quant {

// Values per block. DeepSpeed's CUDAQuantizer picks a group count per tensor so that groups stay
// under 8000 values (4096 being its "optimal"); a fixed block keeps the layout independent of the
// tensor's shape, and 2048 is the group size ZeRO++ integrations commonly configure (wq/gq_group_size).
inline constexpr int64_t kDefaultBlock = 2048;

int max_code(int bits);  // 127 for 8, 7 for 4; a ds::Error for any other width

struct Layout {
  int64_t numel = 0;
  int64_t block = kDefaultBlock;
  int bits = 8;

  int64_t blocks() const { return (numel + block - 1) / block; }
  int64_t code_bytes() const { return bits == 8 ? numel : (numel + 1) / 2; }
  int64_t scales_offset() const { return (code_bytes() + 3) / 4 * 4; }
  int64_t bytes() const { return scales_offset() + 4 * blocks(); }
};

// The record layout of `numel` values; a ds::Error for bits other than 4 or 8, a block below 1, or
// an odd block at 4 bits (a block must start on a byte so that blocks can be written in parallel).
Layout layout_for(int64_t numel, int bits, int64_t block = kDefaultBlock);

// Each works on the blocks [first_block, end_block) of a record, so that disjoint ranges may run on
// different threads; the overloads without a range do all blocks.
void quantize(const float* x, const Layout& layout, uint8_t* record, int64_t first_block, int64_t end_block);
void dequantize(const uint8_t* record, const Layout& layout, float* out, int64_t first_block, int64_t end_block);
// sum[i] += the dequantized value i (the reduction step of qgZ, in fp32).
void dequantize_add(const uint8_t* record, const Layout& layout, float* sum, int64_t first_block, int64_t end_block);

void quantize(const float* x, const Layout& layout, uint8_t* record);
void dequantize(const uint8_t* record, const Layout& layout, float* out);
void dequantize_add(const uint8_t* record, const Layout& layout, float* sum);

// Block b's scale as stored in a record.
float block_scale(const uint8_t* record, const Layout& layout, int64_t block_index);

}  // namespace ds::comm::quant
