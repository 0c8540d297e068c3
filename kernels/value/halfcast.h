// fp16 / bf16 value codecs (REFERENCE 1.4): float32 -> 16-bit casts with
// round to nearest, ties to even, bit-exact on CPU and CUDA (no intrinsics,
// no TF headers). NaN stays NaN (quiet, sign and top payload bits kept), +-Inf
// stays +-Inf, finite values beyond the 16-bit range become +-Inf (IEEE
// overflow under round-to-nearest), and fp16 subnormals are produced.
//
// Payload (after the 16-byte common header): u16 value[K], little-endian.
// Every 16-bit pattern decodes to a float32 exactly, so the decoder only
// checks the header and the size.
#ifndef DEEPREDUCE_KERNELS_VALUE_HALFCAST_H_
#define DEEPREDUCE_KERNELS_VALUE_HALFCAST_H_

#include <cstdint>
#include <cstring>

#include "kernels/common/platform.h"

namespace deepreduce {
namespace value {
namespace halfcast {

DR_HOST_DEVICE uint32_t FloatBits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
DR_HOST_DEVICE float BitsFloat(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

DR_HOST_DEVICE uint16_t FloatToBf16(float f) {
  const uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

DR_HOST_DEVICE float Bf16ToFloat(uint16_t h) { return BitsFloat(static_cast<uint32_t>(h) << 16); }

// IEEE binary16, round to nearest even (after numpy's npy_floatbits_to_halfbits).
DR_HOST_DEVICE uint16_t FloatToFp16(float f) {
  const uint32_t u = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u & 0x80000000u) >> 16);
  uint32_t exp = u & 0x7f800000u;
  uint32_t sig;
  if (exp >= 0x47800000u) {  // |f| >= 65536, Inf or NaN
    if (exp == 0x7f800000u && (u & 0x007fffffu) != 0) {
      return static_cast<uint16_t>(sign | 0x7e00u | ((u & 0x007fffffu) >> 13));
    }
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (exp <= 0x38000000u) {  // |f| < 2^-14: fp16 subnormal or zero
    if (exp < 0x33000000u) return sign;  // below half the smallest subnormal
    exp >>= 23;
    sig = 0x00800000u + (u & 0x007fffffu);
    sig >>= (113 - exp);
    // Round to nearest even at bit 13; the shift dropped up to 11 low bits of
    // u, which decide a tie (u & 0x7ff).
    if ((sig & 0x00003fffu) != 0x00001000u || (u & 0x000007ffu)) sig += 0x00001000u;
    return static_cast<uint16_t>(sign | (sig >> 13));
  }
  exp = exp - 0x38000000u;
  sig = u & 0x007fffffu;
  if ((sig & 0x00003fffu) != 0x00001000u) sig += 0x00001000u;
  // A carry out of sig increments the exponent, up to Inf: correct rounding.
  return static_cast<uint16_t>(sign + ((exp + sig) >> 13));
}

DR_HOST_DEVICE float Fp16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1fu) return BitsFloat(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return BitsFloat(sign);
    // Subnormal: normalise.
    int e = -1;
    do {
      ++e;
      man <<= 1;
    } while ((man & 0x400u) == 0);
    return BitsFloat(sign | ((112u - e) << 23) | ((man & 0x3ffu) << 13));
  }
  return BitsFloat(sign | ((exp + 112u) << 23) | (man << 13));
}

}  // namespace halfcast
}  // namespace value
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_VALUE_HALFCAST_H_
