// The arithmetic of 1-bit compression with error feedback (DeepSpeed's compressed allreduce), free of
// LibTorch: plain loops over float and byte arrays, split across threads for large arrays.
//
// A value's sign bit is 1 for x >= 0 and 0 for x < 0, so sign(0) = +1 (NaN counts as +1 too, as
// DeepSpeed's sign().add_(1).bool()). Bits are packed 8 per byte, the first value in the most
// significant bit (numpy.packbits); the unused low bits of a last partial byte are 0.
#pragma once

#include <cstdint>

namespace ds::comm::onebit {

constexpr int64_t packed_bytes(int64_t n) { return (n + 7) / 8; }

// The sizes of DeepSpeed's buffers for a compressed allreduce of `numel` values over `world` ranks:
// the buffer is zero-padded to a multiple of 8 * world, and rank j serves chunk j of the padded buffer.
struct Layout {
  int64_t numel;   // the caller's buffer
  int64_t padded;  // worker_error's length
  int64_t chunk;   // padded / world: server_error's length, the values each rank serves
  int world;
  int64_t chunk_bytes() const { return chunk / 8; }
};
Layout layout_for(int64_t numel, int world);
// The layout of a call, after checking that the error buffers have the sizes layout_for prescribes;
// a ds::Error naming both sizes otherwise.
Layout checked_layout(int64_t numel, int64_t worker_error_numel, int64_t server_error_numel, int world);

void pack_signs(const float* x, int64_t n, uint8_t* packed);
// out[i] = +scale where value i's bit is set, -scale where it is not.
void unpack_signs(const uint8_t* packed, int64_t n, float scale, float* out);

// The worker's step. v = x + error; scale = ‖v‖₂/√n (squares summed in float within blocks of 256
// values, in double across blocks); error = v − scale·sign(v); packed = the signs of v.
// Returns scale (0 for n == 0).
float compress_with_feedback(const float* x, float* error, int64_t n, uint8_t* packed);

// The server's step, the same on v[i] = Σ_j ±weights[j] + error[i]: the sum over the count chunks
// of packed signs, chunk j at chunks[j * packed_bytes(n) ...] contributing +weights[j] where its bit
// is set, added in chunk order. The averaged values are made on the fly, never stored.
float compress_sum_with_feedback(const uint8_t* chunks, const float* weights, int count, float* error, int64_t n,
                                 uint8_t* packed);

}  // namespace ds::comm::onebit
