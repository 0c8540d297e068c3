// `rle` index codec: run-length coding of the gaps, one byte-aligned varint
// per index. Shared by CPU and CUDA code (no TF headers).
//
// Format (version 1), after the common header (index_format.h):
//   K varints, the i-th being the run of zeros before index i:
//     gap_0 = idx_0,  gap_i = idx_i - idx_{i-1} - 1.
//   Nothing else: the body ends exactly after the K-th varint.
//
// The gap varint is the byte-oriented prefix varint of SQLite4 (first byte
// says the length), in the spirit of the original's "floor(L/255) bytes of
// 255, then L mod 255" but bounded at 9 bytes for any gap, and lossless for
// every run length (the original dropped runs whose length was a power of
// two). At 1 % density it costs 8.7 bits/index like the original's 8.65,
// at 0.1 % 15 instead of ~39:
//   A0 <= 240              v = A0                                   1 byte
//   241 <= A0 <= 248       v = 240 + 256 * (A0 - 241) + A1          2 bytes
//   A0 == 249              v = 2288 + 256 * A1 + A2                 3 bytes
//   A0 == 250 + j, j=0..5  v = the next 3 + j bytes, big-endian     4..9 bytes
// Only the shortest form of each value is accepted, so every index set has
// exactly one encoding.
#ifndef DEEPREDUCE_KERNELS_INDEX_RLE_H_
#define DEEPREDUCE_KERNELS_INDEX_RLE_H_

#include <cstdint>

#include "kernels/common/platform.h"

namespace deepreduce {
namespace index {
namespace rle {

DR_HOST_DEVICE int GapSize(uint64_t v) {
  if (v <= 240) return 1;
  if (v <= 2287) return 2;
  if (v <= 67823) return 3;
  int bytes = 3;
  while (bytes < 8 && (v >> (8 * bytes)) != 0) ++bytes;
  return 1 + bytes;
}

DR_HOST_DEVICE uint8_t* PutGap(uint8_t* p, uint64_t v) {
  if (v <= 240) {
    *p++ = static_cast<uint8_t>(v);
  } else if (v <= 2287) {
    const uint64_t w = v - 240;
    *p++ = static_cast<uint8_t>(241 + (w >> 8));
    *p++ = static_cast<uint8_t>(w);
  } else if (v <= 67823) {
    const uint64_t w = v - 2288;
    *p++ = 249;
    *p++ = static_cast<uint8_t>(w >> 8);
    *p++ = static_cast<uint8_t>(w);
  } else {
    const int bytes = GapSize(v) - 1;
    *p++ = static_cast<uint8_t>(250 + bytes - 3);
    for (int i = bytes - 1; i >= 0; --i) *p++ = static_cast<uint8_t>(v >> (8 * i));
  }
  return p;
}

// Reads one gap from [*p, end); false on truncation or a non-shortest form.
DR_HOST_DEVICE bool GetGap(const uint8_t** p, const uint8_t* end, uint64_t* v) {
  const uint8_t* q = *p;
  if (q >= end) return false;
  const uint8_t a0 = *q++;
  if (a0 <= 240) {
    *v = a0;
  } else if (a0 <= 248) {
    if (q >= end) return false;
    *v = 240 + 256 * static_cast<uint64_t>(a0 - 241) + *q++;
  } else if (a0 == 249) {
    if (end - q < 2) return false;
    *v = 2288 + 256 * static_cast<uint64_t>(q[0]) + q[1];
    q += 2;
  } else {
    const int bytes = a0 - 250 + 3;
    if (end - q < bytes) return false;
    uint64_t w = 0;
    for (int i = 0; i < bytes; ++i) w = (w << 8) | q[i];
    q += bytes;
    // Shortest form: 3 bytes only above the 3-byte class, more only if the
    // value needs them.
    if (bytes == 3 ? w <= 67823 : (w >> (8 * (bytes - 1))) == 0) return false;
    *v = w;
  }
  *p = q;
  return true;
}

}  // namespace rle
}  // namespace index
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_INDEX_RLE_H_
