#include "dstrain/io/crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace ds::io {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78;  // reflected Castagnoli

// Slicing-by-8 tables: table[k][b] is the CRC of byte b followed by k zero bytes.
struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  Tables() {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t crc = b;
      for (int i = 0; i < 8; ++i) crc = (crc >> 1) ^ (kPolynomial & (0u - (crc & 1)));
      t[0][b] = crc;
    }
    for (uint32_t b = 0; b < 256; ++b)
      for (int k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
  }
};

const Tables& tables() {
  static const Tables instance;
  return instance;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(uint32_t crc, const unsigned char* p, size_t size) {
  // Three independent streams over thirds of a large buffer, combined after: the crc32
  // instruction takes 3 cycles but starts one per cycle, so one stream runs at a third of the
  // core's speed (measured here: 9.6 GB/s for one stream).
  if (size >= 3 * 4096) {
    const size_t third = size / 3 / 8 * 8;
    const unsigned char* q = p + third;
    const unsigned char* r = q + third;
    uint64_t a = ~crc, b = 0xFFFFFFFFu, c = 0xFFFFFFFFu;
    for (size_t i = 0; i < third; i += 8) {
      uint64_t wa, wb, wc;
      std::memcpy(&wa, p + i, 8);
      std::memcpy(&wb, q + i, 8);
      std::memcpy(&wc, r + i, 8);
      a = _mm_crc32_u64(a, wa);
      b = _mm_crc32_u64(b, wb);
      c = _mm_crc32_u64(c, wc);
    }
    const uint32_t ab = crc32c_combine(~static_cast<uint32_t>(a), ~static_cast<uint32_t>(b), static_cast<int64_t>(third));
    crc = crc32c_combine(ab, ~static_cast<uint32_t>(c), static_cast<int64_t>(third));
    p += 3 * third;
    size -= 3 * third;
  }
  uint64_t state = ~crc;
  for (; size >= 8; size -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    state = _mm_crc32_u64(state, word);
  }
  uint32_t state32 = static_cast<uint32_t>(state);
  for (; size > 0; --size, ++p) state32 = _mm_crc32_u8(state32, *p);
  return ~state32;
}

bool has_sse42() {
  static const bool yes = __builtin_cpu_supports("sse4.2");
  return yes;
}
#endif

// a * b modulo the polynomial, in the reflected bit order of the CRC (bit 31 is x^0). `a` != 0.
uint32_t multiply_mod_p(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t m = 1u << 31;; m >>= 1) {
    if (a & m) {
      product ^= b;
      if ((a & (m - 1)) == 0) return product;
    }
    b = (b & 1) ? (b >> 1) ^ kPolynomial : b >> 1;
  }
}

// x^(2^k) modulo the polynomial, k = 0..66: a byte count below 2^63 is 3 + 63 bits of exponent.
struct PowersOfX {
  std::array<uint32_t, 67> x2k{};
  PowersOfX() {
    uint32_t p = 1u << 30;  // x^1
    for (uint32_t& power : x2k) {
      power = p;
      p = multiply_mod_p(p, p);
    }
  }
};

// x^(8 * bytes) modulo the polynomial: what a CRC is multiplied by to move it past `bytes` bytes.
uint32_t x_to_bits_of(int64_t bytes) {
  static const PowersOfX powers;
  uint32_t p = 1u << 31;  // x^0
  for (uint64_t n = static_cast<uint64_t>(bytes), k = 3; n; n >>= 1, ++k)
    if (n & 1) p = multiply_mod_p(powers.x2k[k], p);
  return p;
}

}  // namespace

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, int64_t size_b) {
  return multiply_mod_p(x_to_bits_of(size_b), crc_a) ^ crc_b;
}

uint32_t crc32c_of_zeros(int64_t size) {
  // Zero bytes only move the register (preset to all ones) along; the result is inverted.
  return ~multiply_mod_p(x_to_bits_of(size), ~0u);
}

uint32_t crc32c_portable(uint32_t crc, const void* bytes, size_t size) {
  const auto& t = tables().t;
  const auto* p = static_cast<const unsigned char*>(bytes);
  crc = ~crc;
  for (; size >= 8; size -= 8, p += 8) {
    uint32_t low;
    uint32_t high;
    std::memcpy(&low, p, 4);
    std::memcpy(&high, p + 4, 4);
    low ^= crc;  // little-endian byte order, as on every platform dstrain builds for
    crc = t[7][low & 0xFF] ^ t[6][(low >> 8) & 0xFF] ^ t[5][(low >> 16) & 0xFF] ^ t[4][low >> 24] ^
          t[3][high & 0xFF] ^ t[2][(high >> 8) & 0xFF] ^ t[1][(high >> 16) & 0xFF] ^ t[0][high >> 24];
  }
  for (; size > 0; --size, ++p) crc = (crc >> 8) ^ t[0][(crc ^ *p) & 0xFF];
  return ~crc;
}

uint32_t crc32c(uint32_t crc, const void* bytes, size_t size) {
#if defined(__x86_64__)
  if (has_sse42()) return crc32c_sse42(crc, static_cast<const unsigned char*>(bytes), size);
#endif
  return crc32c_portable(crc, bytes, size);
}

}  // namespace ds::io
