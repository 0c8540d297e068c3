// Unsigned LEB128 varints shared by the index-codec and payload formats: 7
// bits per byte, low group first, high bit = "more follows"; canonical (no
// trailing zero group) and below 2^63, so at most 9 bytes when valid; the
// reader looks at up to kMaxVarintBytes = 10 bytes to say why a longer one
// is refused. Host and device code.
#ifndef DEEPREDUCE_KERNELS_COMMON_VARINT_H_
#define DEEPREDUCE_KERNELS_COMMON_VARINT_H_

#include <cstdint>

#include "kernels/common/platform.h"

namespace deepreduce {

constexpr int kMaxVarintBytes = 10;
constexpr uint64_t kMaxVarintValue = (uint64_t{1} << 63) - 1;

DR_HOST_DEVICE int VarintSize(uint64_t v) {
  int s = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++s;
  }
  return s;
}

DR_HOST_DEVICE uint8_t* PutVarint(uint8_t* p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<uint8_t>(v);
  return p;
}

enum class VarintStatus {
  kOk,
  kTruncated,     // the buffer ends inside the varint
  kOverlong,      // more than kMaxVarintBytes bytes
  kNonCanonical,  // a trailing zero group: not the minimal encoding
  kTooLarge,      // value >= 2^63
};

inline const char* VarintStatusText(VarintStatus s) {
  switch (s) {
    case VarintStatus::kOk: return "ok";
    case VarintStatus::kTruncated: return "the payload ends inside it";
    case VarintStatus::kOverlong: return "it is longer than 10 bytes";
    case VarintStatus::kNonCanonical: return "it is not minimally encoded";
    case VarintStatus::kTooLarge: return "its value is >= 2^63";
  }
  return "unknown";
}

// Reads one varint from [*p, end) and advances *p on success. Never reads at
// or past end.
DR_HOST_DEVICE VarintStatus ReadVarint(const uint8_t** p, const uint8_t* end, uint64_t* v) {
  const uint8_t* q = *p;
  uint64_t value = 0;
  for (int i = 0; i < kMaxVarintBytes; ++i) {
    if (q >= end) return VarintStatus::kTruncated;
    const uint8_t b = *q++;
    const uint64_t group = b & 0x7f;
    // Group 9 holds bit 63 and up: any non-zero bit there is >= 2^63.
    if (i == 9 && group != 0) return VarintStatus::kTooLarge;
    value |= group << (7 * i);
    if ((b & 0x80) == 0) {
      if (b == 0 && i > 0) return VarintStatus::kNonCanonical;
      if (value > kMaxVarintValue) return VarintStatus::kTooLarge;
      *v = value;
      *p = q;
      return VarintStatus::kOk;
    }
  }
  return VarintStatus::kOverlong;
}

}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_COMMON_VARINT_H_
