// QSGD value codec (REFERENCE 1.4): stochastic quantization to s levels per
// bucket, scaled by the bucket's max |v|. CPU and CUDA code; no TF headers.
//
// Element i of bucket B (scale M = max_{j in B} |v_j|) becomes
//     level = floor(r) + [u_i < r - floor(r)],   r = |v_i| / M * s,
// with u_i in [0, 1) a pure function of (seed, i) (Mix64 counter hash, 53
// bits): reproducible, independent of thread count and device, no RNG state.
// E[level] = r, so the decoded value sign(v) * level * M / s is unbiased, and
// Var = frac(r)(1 - frac(r)) (M/s)^2 <= M^2 / (4 s^2) per element.
// Max scaling (not L2-norm scaling, REFERENCE 3) keeps r in [0, s].
//
// Code of one element: w = LevelBits(s) + 1 bits, level in the low bits and
// the sign in bit w-1; codes are packed LSB first into a bit stream (code i
// occupies stream bits [i w, (i+1) w), stream bit b is bit b % 8 of byte
// b / 8). A level above s, a sign bit on level 0, or a nonzero padding bit
// is rejected by the decoder.
//
// Payload (after the 16-byte common header):
//   16  u32  s, levels (1..kMaxLevels)
//   20  u32  bucket size (1..kMaxBucket)
//   24  f32  scale[ceil(K / bucket)]   finite, >= 0
//   ..  u8   codes[ceil(K * w / 8)]
#ifndef DEEPREDUCE_KERNELS_VALUE_QSGD_H_
#define DEEPREDUCE_KERNELS_VALUE_QSGD_H_

#include <cmath>
#include <cstdint>

#include "kernels/common/hash.h"
#include "kernels/common/platform.h"
#include "kernels/value/value_format.h"

namespace deepreduce {
namespace value {
namespace qsgd {

// The codec's struct (value_format.h's CodecDefaults): ops and kernels of its own.
struct Codec : CodecDefaults {
  static constexpr bool kOwnOps = true;
};

constexpr int64_t kFixedBytes = 24;
constexpr uint32_t kMaxLevels = 255;
constexpr uint32_t kMaxBucket = uint32_t{1} << 30;
constexpr uint64_t kSeedSalt = 0x6a09e667f3bcc909ULL;

DR_HOST_DEVICE int LevelBits(uint32_t s) {
  int b = 0;
  while ((uint32_t{1} << b) <= s) ++b;  // bits to hold 0..s
  return b;
}
DR_HOST_DEVICE int CodeBits(uint32_t s) { return LevelBits(s) + 1; }

DR_HOST_DEVICE uint64_t SeedMix(uint64_t seed) { return Mix64(seed ^ kSeedSalt); }

// Uniform in [0, 1) with 53 random bits, from (seed, element index).
DR_HOST_DEVICE double Uniform(uint64_t seed_mix, uint64_t i) {
  return static_cast<double>(Mix64(i + seed_mix) >> 11) * (1.0 / 9007199254740992.0);
}

DR_HOST_DEVICE uint32_t Encode(float v, float scale, uint32_t s, uint64_t seed_mix,
                               uint64_t i) {
  const int sign_shift = LevelBits(s);
  uint32_t level = 0;
  if (scale > 0.0f) {
    const double r = DR_DMUL(fabs(static_cast<double>(v)) / static_cast<double>(scale),
                             static_cast<double>(s));
    double fl = floor(r);
    if (fl > s) fl = s;
    level = static_cast<uint32_t>(fl);
    if (level < s && Uniform(seed_mix, i) < r - fl) ++level;
  }
  const uint32_t sign = (level != 0 && v < 0.0f) ? 1u : 0u;
  return level | (sign << sign_shift);
}

// Returns false on an invalid code (level > s, or -0).
DR_HOST_DEVICE bool Decode(uint32_t code, float scale, uint32_t s, float* out) {
  const int sign_shift = LevelBits(s);
  const uint32_t level = code & ((uint32_t{1} << sign_shift) - 1);
  const uint32_t sign = code >> sign_shift;
  if (level > s || (sign && level == 0)) return false;
  const float mag = static_cast<float>(static_cast<double>(scale) * level / s);
  *out = sign ? -mag : mag;
  return true;
}

}  // namespace qsgd
}  // namespace value
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_VALUE_QSGD_H_
