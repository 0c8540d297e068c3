// Bloom-filter index codec: the layout and per-element logic shared by the CPU
// kernels (bloom_kernels.cc) and the CUDA kernels (bloom_kernels.cu).
//
// Bit layout. A filter of m bits is stored in ceil(m / 32) little-endian
// uint32 words, i.e. as 4 * ceil(m / 32) bytes where bit b lives in byte b / 8
// at position b % 8 (LSB first). Bits at positions >= m are always zero.
//
// Hash scheme (kHashMix64Rot = 1). For an index i and the filter seed s:
//   a = Mix64(i + Mix64(s ^ kSeedSalt)),  b = RotateLeft64(a, 32) | 1,
//   bit_j = MulHi64(a + j * b, m)   for j = 0 .. h-1   (uint64 wrap-around)
// i.e. double hashing (Kirsch & Mitzenmacher) with a division-free range
// reduction. MulHi64 reads the high bits, so b's high half (a's well-mixed
// low half) is independent of the bits that pick bit_0; one Mix64 per index
// keeps the query, which hashes all n positions, cheap. A payload must carry the hash id so a future scheme can coexist.
#ifndef DEEPREDUCE_KERNELS_BLOOM_BLOOM_H_
#define DEEPREDUCE_KERNELS_BLOOM_BLOOM_H_

#include <cmath>
#include <cstdint>

#include "kernels/common/hash.h"
#include "kernels/common/platform.h"

namespace deepreduce {
namespace bloom {

constexpr uint32_t kHashMix64Rot = 1;
constexpr uint32_t kMaxHashes = 32;
constexpr uint64_t kSeedSalt = 0x5851f42d4c957f2dULL;
constexpr uint64_t kSelectSalt = 0x2545f4914f6cdd1dULL;

// Everything that decides which bits an index sets: passed by value to device
// code (cuCollections' "policy as data").
struct BloomLayout {
  uint64_t num_bits;    // m >= 1
  uint32_t num_hashes;  // h in [1, kMaxHashes]
  uint32_t hash_id;     // kHashMix64Rot
  uint64_t seed_mix;    // Mix64(seed ^ kSeedSalt), precomputed once per call
};

inline BloomLayout MakeLayout(uint64_t num_bits, uint32_t num_hashes,
                              uint64_t seed) {
  BloomLayout layout;
  layout.num_bits = num_bits;
  layout.num_hashes = num_hashes;
  layout.hash_id = kHashMix64Rot;
  layout.seed_mix = Mix64(seed ^ kSeedSalt);
  return layout;
}

inline uint64_t NumWords(uint64_t num_bits) { return (num_bits + 31) / 32; }
inline uint64_t NumBytes(uint64_t num_bits) { return 4 * NumWords(num_bits); }

// REFERENCE 1.1 sizing: m = ceil(K ln(1/eps) / ln(2)^2), h = ceil(log2(1/eps)).
// m is at least 1 so that an empty set still yields a valid (all-zero) filter.
inline uint64_t BitsForFpr(int64_t k, double fpr) {
  const double ln2 = 0.69314718055994530942;
  const double m = std::ceil(static_cast<double>(k) * std::log(1.0 / fpr) /
                             (ln2 * ln2));
  return m < 1.0 ? 1 : static_cast<uint64_t>(m);
}
inline uint32_t HashesForFpr(double fpr) {
  const double h = std::ceil(std::log2(1.0 / fpr));
  if (h < 1.0) return 1;
  if (h > kMaxHashes) return kMaxHashes;
  return static_cast<uint32_t>(h);
}

struct ProbeSeq {
  uint64_t a;
  uint64_t b;
};

DR_HOST_DEVICE ProbeSeq Probes(const BloomLayout& layout, uint64_t index) {
  ProbeSeq p;
  p.a = Mix64(index + layout.seed_mix);
  p.b = ((p.a << 32) | (p.a >> 32)) | 1ULL;
  return p;
}

// The j-th bit (0 <= j < h) that `index` sets.
DR_HOST_DEVICE uint64_t ProbeBit(const BloomLayout& layout, const ProbeSeq& p,
                                 uint32_t j) {
  return MulHi64(p.a + static_cast<uint64_t>(j) * p.b, layout.num_bits);
}

DR_HOST_DEVICE bool TestBit(const uint8_t* bytes, uint64_t bit) {
  return (bytes[bit >> 3] >> (bit & 7)) & 1;
}

// Query of one position against a filter given as bytes (alignment-free, so a
// filter sliced out of a payload can be queried in place).
DR_HOST_DEVICE bool Contains(const BloomLayout& layout, const uint8_t* bytes,
                             uint64_t index) {
  const ProbeSeq p = Probes(layout, index);
  for (uint32_t j = 0; j < layout.num_hashes; ++j) {
    if (!TestBit(bytes, ProbeBit(layout, p, j))) return false;
  }
  return true;
}

// Sort key of the `random` policy: the K positives with the smallest keys are
// kept. A pure function of (seed, position): every worker, thread count and
// device picks the same set, and no global RNG state is touched.
DR_HOST_DEVICE uint64_t RandomPolicyKey(uint64_t seed, uint64_t position) {
  return Mix64(position + Mix64(seed ^ kSelectSalt));
}

}  // namespace bloom
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_BLOOM_BLOOM_H_
