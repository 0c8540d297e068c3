// The self-checking payload container (format version 1) and the bit-packed
// permutation. Pure C++ (no TF headers), so any code may share it.
//
// A container is ONE flat byte string; every multi-byte integer is
// little-endian:
//
//   offset 0   magic: the 4 bytes 'D' 'R' 'P' 'K'
//   offset 4   format version, u8 (kFormatVersion = 1)
//   offset 5   kind, u8 in [1, 255] (kKindTensor = 1: one tensor,
//              kKindBatch = 2: a batch of payloads; others free for callers)
//   offset 6   varint M, then M varints: the meta values (each < 2^63)
//              varint S, then S varints: the section byte lengths
//              the S sections, concatenated
//   last 4     CRC32C (Castagnoli) of every preceding byte, u32
//
// Varints are unsigned LEB128 (7 bits per byte, low group first, high bit =
// "more follows"), at most kMaxVarintBytes bytes, canonical (no trailing zero
// group, so a value has exactly one encoding), and every decoded value is
// below 2^63 so that it fits an int64 on both sides.
//
// The permutation format (PermEncode/PermDecode): a permutation of 0..K-1 as
// K entries of b = ceil(log2 K) bits each (b = 0 for K <= 1), packed LSB-first
// (kernels/common/bit_io.h) into ceil(K * b / 8) bytes, padding bits zero.
#ifndef DEEPREDUCE_KERNELS_PAYLOAD_PAYLOAD_FORMAT_H_
#define DEEPREDUCE_KERNELS_PAYLOAD_PAYLOAD_FORMAT_H_

#include <cstdint>

#include "kernels/common/bit_io.h"
#include "kernels/common/platform.h"
#include "kernels/common/varint.h"

namespace deepreduce {
namespace payload {

constexpr uint8_t kMagic[4] = {'D', 'R', 'P', 'K'};
constexpr uint8_t kFormatVersion = 1;
constexpr uint8_t kKindTensor = 1;
constexpr uint8_t kKindBatch = 2;
// magic + version + kind.
constexpr int64_t kFixedBytes = 6;
constexpr int64_t kCrcBytes = 4;
// The smallest container: no meta, no sections (M = 0, S = 0).
constexpr int64_t kMinPayloadBytes = kFixedBytes + 1 + 1 + kCrcBytes;

DR_HOST_DEVICE void StoreLE32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
  p[2] = static_cast<uint8_t>(v >> 16);
  p[3] = static_cast<uint8_t>(v >> 24);
}

DR_HOST_DEVICE uint32_t LoadLE32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

// Bits per permutation entry: ceil(log2 k), 0 for k <= 1.
DR_HOST_DEVICE int PermBits(uint64_t k) { return k <= 1 ? 0 : BitWidth64(k - 1); }

// Bytes of a packed permutation of k entries, ceil(k * bits / 8), into
// *bytes; false if that is 2^63 or more (k * bits itself can exceed 64 bits,
// so the product is split).
DR_HOST_DEVICE bool PermBytes(uint64_t k, uint64_t* bytes) {
  const uint64_t b = static_cast<uint64_t>(PermBits(k));
  // ceil(k * b / 8) == (k / 8) * b + ceil((k % 8) * b / 8).
  const uint64_t whole = k / 8;
  if (b != 0 && whole > kMaxVarintValue / b) return false;
  const uint64_t total = whole * b + ((k % 8) * b + 7) / 8;
  if (total > kMaxVarintValue) return false;
  *bytes = total;
  return true;
}

}  // namespace payload
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_PAYLOAD_PAYLOAD_FORMAT_H_
