// exp(z) for fp32 loops that should vectorize: Debian's LibTorch has no SLEEF, so its exp, tanh and
// softmax evaluate libm one element at a time. Call it from DS_BODY loops (cpu_dispatch.hpp), and
// compile the file with -fno-trapping-math: only then do the clamps become vector min/max.
#pragma once

#include <cstdint>

#include "dstrain/engine/kernels/cpu_dispatch.hpp"

namespace ds {

// z clamped to [-87, 88] (beyond, e^z is 0 or overflows in fp32 anyway): Cephes' expf,
// z = n ln 2 + r with |r| <= ln 2 / 2, e^r by a degree-7 polynomial, 2^n by building the exponent
// bits. Branch-free, so the loops around it vectorize.
DS_BODY float exp_clamped(float z) {
  z = z > 88.0f ? 88.0f : z;
  z = z < -87.0f ? -87.0f : z;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float shifted = z * 1.44269504088896341f + kRound;
  const float n = shifted - kRound;
  const float r = (z - n * 0.693359375f) - n * -2.12194440e-4f;  // ln 2 in two parts
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const int32_t exponent = __builtin_bit_cast(int32_t, shifted) - __builtin_bit_cast(int32_t, kRound);
  return (p * r * r + r + 1.0f) * __builtin_bit_cast(float, (exponent + 127) << 23);
}

}  // namespace ds
