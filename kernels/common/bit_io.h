// Bounded LSB-first bit streams shared by CPU and CUDA code.
//
// Bit order: bit j of a stream is bit (j % 8) of byte (j / 8), so a value of
// w bits written at bit position p occupies bits p .. p+w-1 with its least
// significant bit first. Both sides only ever touch bytes inside [begin, end):
// the writer because its caller sized the range exactly, the reader because
// it refills one byte at a time and reports running out instead of reading on.
#ifndef DEEPREDUCE_KERNELS_COMMON_BIT_IO_H_
#define DEEPREDUCE_KERNELS_COMMON_BIT_IO_H_

#include <cstdint>

#include "kernels/common/platform.h"

namespace deepreduce {

DR_HOST_DEVICE int CountTrailingZeros64(uint64_t x) {  // x != 0
#if defined(__CUDA_ARCH__)
  return __ffsll(static_cast<long long>(x)) - 1;
#else
  return __builtin_ctzll(x);
#endif
}

// Number of bits needed to write v (0 for v == 0).
DR_HOST_DEVICE int BitWidth64(uint64_t x) {
#if defined(__CUDA_ARCH__)
  return 64 - __clzll(static_cast<long long>(x));
#else
  return x == 0 ? 0 : 64 - __builtin_clzll(x);
#endif
}

DR_HOST_DEVICE uint64_t LowMask64(int bits) {  // 0 <= bits <= 64
  return bits >= 64 ? ~uint64_t{0} : ((uint64_t{1} << bits) - 1);
}

// Appends bits to a byte range whose size the caller computed exactly.
struct BitWriter {
  uint8_t* p;
  uint64_t acc;  // pending bits, LSB first; fewer than 8 between calls
  int n;

  DR_HOST_DEVICE explicit BitWriter(uint8_t* out) : p(out), acc(0), n(0) {}

  // Writes the low `bits` bits of v, 0 <= bits <= 56.
  DR_HOST_DEVICE void Put(uint64_t v, int bits) {
    acc |= (v & LowMask64(bits)) << n;
    n += bits;
    while (n >= 8) {
      *p++ = static_cast<uint8_t>(acc);
      acc >>= 8;
      n -= 8;
    }
  }
  // Any width up to 64 bits.
  DR_HOST_DEVICE void PutWide(uint64_t v, int bits) {
    if (bits > 32) {
      Put(v, 32);
      Put(v >> 32, bits - 32);
    } else {
      Put(v, bits);
    }
  }
  DR_HOST_DEVICE void PutZeros(uint64_t count) {
    while (count > 0) {
      const int c = count > 56 ? 56 : static_cast<int>(count);
      Put(0, c);
      count -= c;
    }
  }
  // Pads the last byte with zero bits.
  DR_HOST_DEVICE void Flush() {
    if (n > 0) {
      *p++ = static_cast<uint8_t>(acc);
      acc = 0;
      n = 0;
    }
  }
};

// Reads bits from [p, end). Every read reports failure instead of reading
// past end; bits of `buf` above `n` are always zero.
struct BitReader {
  const uint8_t* p;
  const uint8_t* end;
  uint64_t buf;
  int n;

  DR_HOST_DEVICE BitReader(const uint8_t* begin, const uint8_t* stop)
      : p(begin), end(stop), buf(0), n(0) {}

  DR_HOST_DEVICE void Refill() {
    while (n <= 56 && p < end) {
      buf |= static_cast<uint64_t>(*p++) << n;
      n += 8;
    }
  }
  // Reads `bits` bits (0 <= bits <= 56) into *v.
  DR_HOST_DEVICE bool Get(int bits, uint64_t* v) {
    if (n < bits) Refill();
    if (n < bits) return false;
    *v = buf & LowMask64(bits);
    buf = bits >= 64 ? 0 : buf >> bits;
    n -= bits;
    return true;
  }
  DR_HOST_DEVICE bool GetWide(int bits, uint64_t* v) {
    if (bits <= 32) return Get(bits, v);
    uint64_t lo, hi;
    if (!Get(32, &lo) || !Get(bits - 32, &hi)) return false;
    *v = lo | (hi << 32);
    return true;
  }
  // Counts zero bits up to and including the next one bit: *q = the zeros.
  // Fails if the stream ends first or more than `limit` zeros come.
  DR_HOST_DEVICE bool GetUnary(uint64_t limit, uint64_t* q) {
    uint64_t zeros = 0;
    for (;;) {
      Refill();
      if (n == 0) return false;
      if (buf == 0) {
        zeros += static_cast<uint64_t>(n);
        n = 0;
        if (zeros > limit) return false;
        continue;
      }
      const int z = CountTrailingZeros64(buf);
      zeros += static_cast<uint64_t>(z);
      if (zeros > limit) return false;
      buf >>= z;
      buf >>= 1;
      n -= z + 1;
      *q = zeros;
      return true;
    }
  }
  // True if what is left is at most the zero padding of the last byte
  // (call Refill() first so that no whole byte is left unread).
  DR_HOST_DEVICE bool AtPaddedEnd() const { return p == end && n < 8 && buf == 0; }
};

}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_COMMON_BIT_IO_H_
