// Self-describing payload header shared by every lossless index codec, plus
// the two baseline codecs (int32, bitmap). No TF headers: CUDA code uses it.
//
// A payload is ONE flat byte string:
//
//   byte 0      kMagic (0xDE)
//   byte 1      codec id (kCodecInt32 = 1, kCodecBitmap = 2, kCodecRle = 3,
//               kCodecGolomb = 4: the codec table, kernels/common/codec_table.h)
//   byte 2      format version of that codec (1 for all four)
//   varint      n, the universe size (0 <= n < 2^63)
//   varint      K, the number of indices (0 <= K <= n)
//   ...         codec-specific fields and body (see each codec's header)
//
// Varints are unsigned LEB128 (7 bits per byte, low group first, high bit =
// "more follows"), at most 9 bytes, canonical: no trailing zero group, so one
// value has exactly one encoding. Every decoder checks that the payload length
// equals exactly the length its header fields imply.
//
// int32  body: K little-endian int32, strictly increasing. Needs n <= 2^31.
// bitmap body: ceil(n / 8) bytes; index i is bit i % 8 of byte i / 8; the
//        padding bits past n are zero and exactly K bits are set.
#ifndef DEEPREDUCE_KERNELS_INDEX_INDEX_FORMAT_H_
#define DEEPREDUCE_KERNELS_INDEX_INDEX_FORMAT_H_

#include <cstdint>

#include "kernels/common/codec_table.h"
#include "kernels/common/platform.h"
#include "kernels/common/varint.h"

namespace deepreduce {
namespace index {

constexpr uint8_t kMagic = 0xDE;
// kCodecInt32, kCodecBitmap, ...: the wire ids of the codec table.
#define DR_INDEX_CODEC_ID(name, Camel, id, kernels) constexpr uint8_t kCodec##Camel = id;
DR_INDEX_PAYLOAD_CODECS(DR_INDEX_CODEC_ID)
#undef DR_INDEX_CODEC_ID
constexpr uint8_t kFormatVersion = 1;
constexpr uint64_t kMaxUniverse = (uint64_t{1} << 63) - 1;
constexpr uint64_t kMaxInt32Universe = uint64_t{1} << 31;

// The shared varint helpers, also under this namespace's names.
using ::deepreduce::kMaxVarintBytes;
using ::deepreduce::PutVarint;
using ::deepreduce::VarintSize;

// True if [*p, end) starts with a valid varint (kernels/common/varint.h);
// advances *p past it.
DR_HOST_DEVICE bool GetVarint(const uint8_t** p, const uint8_t* end, uint64_t* v) {
  return ReadVarint(p, end, v) == VarintStatus::kOk;
}

DR_HOST_DEVICE int CommonHeaderSize(uint64_t n, uint64_t k) {
  return 3 + VarintSize(n) + VarintSize(k);
}

DR_HOST_DEVICE uint8_t* PutCommonHeader(uint8_t* p, uint8_t codec, uint64_t n, uint64_t k) {
  *p++ = kMagic;
  *p++ = codec;
  *p++ = kFormatVersion;
  p = PutVarint(p, n);
  return PutVarint(p, k);
}

struct CommonHeader {
  uint8_t codec;
  uint8_t version;
  uint64_t n;
  uint64_t k;
};

// Parses and checks the common header; on success *body points past it.
// Returns nullptr or a message saying what is wrong.
inline const char* ParseCommonHeader(const uint8_t* begin, const uint8_t* end,
                                     uint8_t expect_codec, CommonHeader* h,
                                     const uint8_t** body) {
  if (end - begin < 5) return "payload is shorter than the smallest header (5 bytes)";
  if (begin[0] != kMagic) return "payload does not start with the index-codec magic byte 0xDE";
  h->codec = begin[1];
  h->version = begin[2];
  if (h->codec != expect_codec) return "payload was written by another index codec";
  if (h->version != kFormatVersion) return "unsupported format version";
  const uint8_t* p = begin + 3;
  if (!GetVarint(&p, end, &h->n)) return "malformed varint for the universe size n";
  if (!GetVarint(&p, end, &h->k)) return "malformed varint for the index count K";
  if (h->k > h->n) return "header claims more indices K than the universe size n";
  *body = p;
  return nullptr;
}

DR_HOST_DEVICE uint64_t BitmapBytes(uint64_t n) { return (n + 7) / 8; }

// The part of a codec's struct <name>::Codec (in kernels/index/<name>.h, one
// per codec of the table with kernels="index") that the family's generated
// registrations read; a codec's struct derives from this and overrides what
// differs. The rest of the struct (docs/codecs.md, "Adding a codec"):
//
//   A codec without OpKernels of its own (the default: its ops run the
//   family's generic CPU OpKernels, index_kernels.h, and the fuzz harness's
//   generic target) declares its TF-free host code, with the K indices
//   sorted, distinct and in [0, n) on the encoding side:
//     // a: the row's attributes (codec_table.h's EncodeArgs; all 0 without).
//     template <typename T> static uint64_t BodyBytes(const T* idx, int64_t k, uint64_t n,
//                                                     const EncodeArgs& a);
//     template <typename T> static void EncodeBody(const T* idx, int64_t k, uint64_t n,
//                                                  const EncodeArgs& a, uint8_t* body);
//     // Before anything is allocated: can a body of `bytes` bytes hold h.k
//     // indices? (At most 8 per byte: the fuzz harness's allocation bound.)
//     static ParseStatus CheckBody(const CommonHeader& h, const uint8_t* body,
//                                  uint64_t bytes);
//     // The h.k indices, or the error for any body that is not exactly the
//     // encoding of a set (the format is canonical: what decodes re-encodes
//     // to the same bytes); the kernel also checks the order after it.
//     template <typename T> static ParseStatus DecodeBody(const CommonHeader& h,
//                                                         const uint8_t* body,
//                                                         uint64_t bytes, T* out);
//     // With attributes in its row: the ones a body was written with (the
//     // fuzz harness re-encodes with them); false if it cannot tell.
//     static bool ArgsOf(const CommonHeader& h, const uint8_t* body, uint64_t bytes,
//                        EncodeArgs* a);
//   Its encode op is generated with the row's attributes ("<name>: int =
//   <default>"), which the generic kernel checks against the row's bounds.
//   A codec with OpKernels of its own (int32, bitmap, rle, golomb: device
//   functors, CUDA kernels) specializes EncodeOp / DecodeOp for its struct in
//   index_kernels.h and FuzzIndexCodec in the fuzz harness instead.
struct CodecDefaults {
  // The payload's length for n and K when it depends on nothing else (the
  // encode op's static output shape), else -1.
  static int64_t StaticPayloadBytes(int64_t /*n*/, int64_t /*k*/) { return -1; }
  // True if the encode op is registered by hand in kernels/ops/index_ops.cc
  // (golomb: its block_size is 0 or a power of two, not a range).
  static constexpr bool kOwnEncodeOp = false;
};

// Little-endian int32 load/store, alignment-free.
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

}  // namespace index
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_INDEX_INDEX_FORMAT_H_
