// Hash and range-reduction primitives shared by CPU and CUDA code.
//
// Every bit that a CPU kernel writes must be the bit a CUDA kernel writes for
// the same input, so both sides call these functions and nothing else.
#ifndef DEEPREDUCE_KERNELS_COMMON_HASH_H_
#define DEEPREDUCE_KERNELS_COMMON_HASH_H_

#include <cstdint>

#include "kernels/common/platform.h"

namespace deepreduce {

// The 64-bit finaliser of MurmurHash3 (fmix64): a bijection on uint64 with
// full avalanche, cheap on both CPU and GPU.
DR_HOST_DEVICE uint64_t Mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

// High 64 bits of the 128-bit product a*b. Maps a uniform 64-bit hash onto
// [0, m) as MulHi64(h, m) without a division (Lemire's reduction).
DR_HOST_DEVICE uint64_t MulHi64(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(a, b);
#else
  return static_cast<uint64_t>((static_cast<unsigned __int128>(a) * b) >> 64);
#endif
}

constexpr uint64_t kGolden64 = 0x9e3779b97f4a7c15ULL;

}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_COMMON_HASH_H_
