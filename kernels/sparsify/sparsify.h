// Sparsifiers (top-k by magnitude, threshold, random-k): the per-element logic
// shared by the CPU kernels (sparsify_kernels.cc) and the CUDA kernels
// (sparsify_kernels.cu). No TensorFlow headers.
//
// Selection keys. Every sparsifier is "keep the elements with the largest
// keys", where a key is an unsigned integer computed from one element:
//
//   * top-k / threshold: the IEEE bit pattern of |x| (sign bit cleared), read
//     as an unsigned integer of the float's width. For non-negative floats
//     this order is the numeric order (+0 < subnormals < normals < inf), and
//     -0.0 and +0.0 get the same key 0. Every NaN gets the single key
//     inf_bits + 1: NaN counts as larger than +inf, and all NaNs tie (so the
//     lower index wins, as for any tie). NaN is kept rather than rejected so
//     that a non-finite gradient reaches the all-reduce, where mixed-precision
//     loss scaling looks for it, instead of failing the step or hiding in the
//     residual.
//   * random-k: Mix64(i + Mix64(seed ^ kRandomKSalt)) for position i. Mix64 is
//     a bijection, so distinct positions have distinct keys (no ties); the k
//     largest keys are a uniformly random k-subset that depends on (seed, n,
//     k) only: the same on every worker, thread count and device.
//
// Ties. Among equal keys the lower index is selected first; the result is
// deterministic and independent of how the work is split.
//
// Segmented selection (SegmentedTopK, SegmentedRandomK). x is a
// bucket of S segments, segment i = x[offsets[i], offsets[i+1]), and segment
// i gets exactly what the per-tensor op gives on that slice with k[i]: the
// same keys, computed from the position WITHIN the segment (j = p -
// offsets[i]), and the same tie rule; the output holds every segment's
// selection in segment order, as flat positions p into x (so ascending).
// Random-k runs segment i with the seed SegmentSeed(seed, i) = seed ^
// Mix64(i) (as uint64): its keys are Mix64(j + SeedMix(seed ^ Mix64(i))), a
// pure function of (seed, i, segment length, k[i]). Mix64(0) == 0, so segment
// 0 selects what RandomK selects on it with `seed` itself; Mix64 is a
// bijection, so distinct segments of one call get distinct seeds. The CUDA
// kernels (sparsify_kernels.cu) run the same radix select over every segment
// of the bucket at once.
//
// Selection is a radix select: a histogram of the key's top bits (level 0,
// kLevel0Bits wide) finds the bucket holding the k-th largest key; further
// levels refine within that bucket until the exact k-th key T is known; the
// output is then every element with key > T plus the lowest-index elements
// with key == T, written in ascending index order.
#ifndef DEEPREDUCE_KERNELS_SPARSIFY_SPARSIFY_H_
#define DEEPREDUCE_KERNELS_SPARSIFY_SPARSIFY_H_

#include <cstdint>
#include <cstring>

#include "kernels/common/hash.h"
#include "kernels/common/platform.h"

namespace deepreduce {
namespace sparsify {

constexpr uint64_t kRandomKSalt = 0x9fb21c651e98df25ULL;

// Width (bits) of each radix level on the CPU: 65536 counters per thread.
constexpr int kLevelBits = 16;

// Bit layouts of the supported float types, stored as the unsigned type U.
// float16: 1 sign, 5 exponent, 10 mantissa bits.
struct Half {
  using U = uint16_t;
  static constexpr U kAbsMask = 0x7fff;
  static constexpr U kInf = 0x7c00;
};
// bfloat16: 1 sign, 8 exponent, 7 mantissa bits.
struct BFloat16 {
  using U = uint16_t;
  static constexpr U kAbsMask = 0x7fff;
  static constexpr U kInf = 0x7f80;
};
struct Float32 {
  using U = uint32_t;
  static constexpr U kAbsMask = 0x7fffffffu;
  static constexpr U kInf = 0x7f800000u;
};
struct Float64 {
  using U = uint64_t;
  static constexpr U kAbsMask = 0x7fffffffffffffffULL;
  static constexpr U kInf = 0x7ff0000000000000ULL;
};

// Magnitude key of a float given by its raw bits (see the file comment).
template <typename F>
DR_HOST_DEVICE typename F::U MagnitudeKey(typename F::U bits) {
  const typename F::U a = bits & F::kAbsMask;
  const typename F::U nan_key = F::kInf + 1;
  return a < nan_key ? a : nan_key;
}

// Largest key a magnitude can have (NaN's).
template <typename F>
DR_HOST_DEVICE typename F::U MaxMagnitudeKey() {
  return F::kInf + 1;
}

// Number of key bits that can be non-zero: 15 / 31 / 63 for magnitudes
// (the sign bit is always clear), 64 for random-k keys.
template <typename F>
DR_HOST_DEVICE int MagnitudeKeyBits() {
  return static_cast<int>(sizeof(typename F::U)) * 8 - 1;
}

// Random-k key of position i.
DR_HOST_DEVICE uint64_t SeedMix(uint64_t seed) { return Mix64(seed ^ kRandomKSalt); }
DR_HOST_DEVICE uint64_t RandomKKey(uint64_t seed_mix, uint64_t i) {
  return Mix64(i + seed_mix);
}

// Seed of segment `segment` of a segmented random-k (see the file comment).
DR_HOST_DEVICE uint64_t SegmentSeed(uint64_t seed, uint64_t segment) {
  return seed ^ Mix64(segment);
}

// The radix levels of a key of `key_bits` significant bits: level 0 covers
// the top min(level_bits, key_bits) bits, each later level the next
// level_bits (the last one possibly fewer). Shift(l) is the right shift that
// brings level l's digit (together with all higher digits) to the bottom.
// The CPU uses kLevelBits (per-thread histograms in cache); the GPU uses
// kGpuLevelBits (a histogram in shared memory).
constexpr int kGpuLevelBits = 11;

struct RadixPlan {
  int key_bits;
  int level_bits;
  int num_levels;
  DR_HOST_DEVICE int Shift(int level) const {
    const int s = key_bits - (level + 1) * level_bits;
    return s < 0 ? 0 : s;
  }
  DR_HOST_DEVICE int DigitBits(int level) const {
    const int hi = key_bits - level * level_bits;
    return hi - Shift(level);
  }
};

DR_HOST_DEVICE RadixPlan MakeRadixPlan(int key_bits, int level_bits = kLevelBits) {
  RadixPlan p;
  p.key_bits = key_bits;
  p.level_bits = level_bits;
  p.num_levels = (key_bits + level_bits - 1) / level_bits;
  return p;
}

// Digit of `key` at `level` (the bits below the higher levels' prefix).
template <typename U>
DR_HOST_DEVICE uint32_t Digit(const RadixPlan& plan, int level, U key) {
  const U shifted = key >> plan.Shift(level);
  return static_cast<uint32_t>(shifted & ((U{1} << plan.DigitBits(level)) - 1));
}

// True if `key` agrees with `prefix` on every level above `level`; prefix is
// (key >> Shift(level - 1)) of the keys being refined.
template <typename U>
DR_HOST_DEVICE bool HasPrefix(const RadixPlan& plan, int level, U key, U prefix) {
  if (level == 0) return true;
  return (key >> plan.Shift(level - 1)) == prefix;
}

}  // namespace sparsify
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_SPARSIFY_SPARSIFY_H_
