// Wire format shared by every value codec (CPU and CUDA code; no TF headers).
//
// A payload is ONE flat uint8 vector, little-endian throughout:
//
//   offset  size  field
//   0       2     magic "DV"
//   2       1     codec id (kCodec* below: the codec table,
//                 kernels/common/codec_table.h)
//   3       1     format version of that codec (kFormatVersion)
//   4       4     flags, must be 0 (reserved)
//   8       8     K, the number of values (uint64)
//   16      ...   codec-specific fixed fields and sections (see each codec's
//                 header: polyfit.h, dexp.h, qsgd.h, halfcast.h,
//                 deflate.h)
//
// Every decoder recomputes the exact payload size from the header fields and
// requires it to equal the buffer size, so truncated or extended payloads are
// rejected before any section is read.
#ifndef DEEPREDUCE_KERNELS_VALUE_VALUE_FORMAT_H_
#define DEEPREDUCE_KERNELS_VALUE_VALUE_FORMAT_H_

#include <cstdint>
#include <cstring>

#include "kernels/common/codec_table.h"
#include "kernels/common/platform.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the value-codec wire format is written with memcpy on little-endian hosts only"
#endif

namespace deepreduce {
namespace value {

constexpr uint8_t kMagic0 = 'D';
constexpr uint8_t kMagic1 = 'V';
constexpr uint8_t kFormatVersion = 1;
constexpr int64_t kHeaderBytes = 16;

// kCodecPolyfit, kCodecDexp, ...: the wire ids of the codec table.
enum CodecId : uint8_t {
#define DR_VALUE_CODEC_ID(name, Camel, id, kernels) kCodec##Camel = id,
  DR_VALUE_PAYLOAD_CODECS(DR_VALUE_CODEC_ID)
#undef DR_VALUE_CODEC_ID
};

// The name of a payload codec id, "unknown" for any other byte.
inline const char* CodecName(uint8_t id) {
  switch (id) {
#define DR_VALUE_CODEC_NAME(name, Camel, id, kernels) \
  case kCodec##Camel:                                 \
    return #name;
    DR_VALUE_PAYLOAD_CODECS(DR_VALUE_CODEC_NAME)
#undef DR_VALUE_CODEC_NAME
    default: return "unknown";
  }
}

// Largest K any payload may claim (2^48 values, 1 PiB of float32): keeps all
// size arithmetic below far from uint64 overflow.
constexpr uint64_t kMaxWireValues = uint64_t{1} << 48;

DR_HOST_DEVICE void PutU8(uint8_t* p, uint8_t v) { p[0] = v; }
DR_HOST_DEVICE void PutU16(uint8_t* p, uint16_t v) { memcpy(p, &v, 2); }
DR_HOST_DEVICE void PutU32(uint8_t* p, uint32_t v) { memcpy(p, &v, 4); }
DR_HOST_DEVICE void PutU64(uint8_t* p, uint64_t v) { memcpy(p, &v, 8); }
DR_HOST_DEVICE void PutF32(uint8_t* p, float v) { memcpy(p, &v, 4); }
DR_HOST_DEVICE uint16_t GetU16(const uint8_t* p) { uint16_t v; memcpy(&v, p, 2); return v; }
DR_HOST_DEVICE uint32_t GetU32(const uint8_t* p) { uint32_t v; memcpy(&v, p, 4); return v; }
DR_HOST_DEVICE uint64_t GetU64(const uint8_t* p) { uint64_t v; memcpy(&v, p, 8); return v; }
DR_HOST_DEVICE float GetF32(const uint8_t* p) { float v; memcpy(&v, p, 4); return v; }

DR_HOST_DEVICE void WriteHeader(uint8_t* p, uint8_t codec, uint64_t k) {
  p[0] = kMagic0;
  p[1] = kMagic1;
  p[2] = codec;
  p[3] = kFormatVersion;
  PutU32(p + 4, 0);
  PutU64(p + 8, k);
}

// IntAttr, kMaxAttrs, EncodeArgs and OpArgsOf: kernels/common/codec_table.h,
// generated from the codec table.

// The header's 16 bytes by value: what a GPU encoder writes at the start of
// the payload (device code copies them; no host buffer to keep alive).
struct HeaderBytes {
  uint8_t bytes[kHeaderBytes];
};
DR_HOST_DEVICE HeaderBytes MakeHeader(uint8_t codec, uint64_t k) {
  HeaderBytes h;
  WriteHeader(h.bytes, codec, k);
  return h;
}
DR_HOST_DEVICE void CopyHeader(const HeaderBytes& h, uint8_t* payload) {
  for (int64_t j = 0; j < kHeaderBytes; ++j) payload[j] = h.bytes[j];
}

// The part of a codec's struct <name>::Codec (in kernels/value/<name>.h, one
// per codec of the table with kernels="value") that the family's generated
// registrations read; a codec's struct derives from this. By default a codec's
// ops are generated from its table row:
//   DeepReduce><Camel>Encode(values: float[, seed: int64]) -> payload: uint8
//       with one attribute "<name>: int = <default>" per row attr
//   DeepReduce><Camel>Decode(payload: uint8) -> values: float
// run by the family's generic OpKernels (value_kernels.h: EncodeOp, DecodeOp,
// one class for every device; their CPU functors in value_kernels.cc, GPU
// functors in value_kernels_gpu.cc) and the fuzz harness's generic target over
// the struct's TF-free host code, K values after the 16-byte header
// (WriteHeader):
//   // The bytes to reserve for the body of these K values: its exact length
//   // or a bound (a compressor's), or the error for values the format cannot
//   // hold (NaN/Inf in a lossy model). On the GPU v is nullptr: the size of
//   // a GPU codec's body depends on K and the arguments only, and is exact.
//   static ParseStatus BodyBytes(const float* v, int64_t k, const EncodeArgs& a,
//                                uint64_t* bytes);
//   // Writes the body into those `capacity` bytes; *written: its length.
//   static ParseStatus EncodeBody(const float* v, int64_t k, const EncodeArgs& a,
//                                 uint8_t* body, uint64_t capacity, uint64_t* written);
//   // Before anything is allocated: can a body of `bytes` bytes hold k
//   // values? (At most kValuesPerByte per byte, plus 16: the fuzz harness's
//   // allocation bound.) On the GPU `body` holds only the first
//   // min(bytes, kCheckBytes) bytes (copied to the host).
//   static ParseStatus CheckBody(uint64_t k, const uint8_t* body, uint64_t bytes);
//   static ParseStatus DecodeBody(uint64_t k, const uint8_t* body, uint64_t bytes,
//                                 float* out);
//   // True if every payload it accepts re-encodes to exactly its bytes, once
//   // Canonicalize has run over its body (the fuzz harness checks it, with
//   // the arguments ArgsOf reads from the body:
//   // static bool ArgsOf(uint64_t k, const uint8_t* body, uint64_t bytes,
//   //                    EncodeArgs* a); needed only by a canonical codec with
//   // attributes or a seed).
//   static constexpr bool kCanonical = ...;
// An element-wise codec (fp16, bf16) sets kValueBytes: its body is exactly
// kValueBytes bytes per value, and its struct also has
//   static void EncodeRange(const float* v, int64_t begin, int64_t end, uint8_t* body);
//   static void DecodeRange(const uint8_t* body, int64_t begin, int64_t end, float* out);
// (value i's bytes at body + kValueBytes * i; value_decode.h's
// ElementwiseCodec derives the four functions above from them), which the
// generic CPU kernels run on the thread pool; the generated shape functions
// know its payload's size.
// A codec whose table row says gpu=True also declares, TF-free and CUDA-free,
// the launchers of its CUDA kernels, defined in kernels/value/<name>.cu (no TF
// headers; kernels/common/gpu_launch.h's helpers), which the generic GPU
// functors call on the op's stream, without synchronizing:
//   // The whole payload: `header` (MakeHeader) and the body of body_bytes
//   // (BodyBytes) bytes, from the k values at d_values.
//   static gpu_launch::GpuStatus EncodeGpu(const float* d_values, int64_t k,
//       const EncodeArgs& a, const HeaderBytes& header, uint8_t* d_payload,
//       uint64_t body_bytes, void* stream);
//   // The k values of a body that CheckBody accepted (every such body
//   // decodes: data checks that need the body belong to CheckBody).
//   static gpu_launch::GpuStatus DecodeGpu(uint64_t k, const uint8_t* d_body,
//       uint64_t bytes, float* d_out, void* stream);
// and reads at most kCheckBytes of the body in CheckBody.
// A codec whose ops take other inputs or outputs (polyfit, dexp: perm), whose
// decoder checks data on the device (qsgd: scales, codes and padding) or whose
// GPU encoder needs the host between steps (polyfit, dexp) sets kOwnOps: its
// ops and OpKernels are registered by hand in kernels/ops/value_ops.cc and
// value_kernels*.cc (GPU: value_kernels_gpu.cc, value_kernels.cu, value_gpu.h),
// its fuzz target specializes FuzzValueCodec.
struct CodecDefaults {
  static constexpr bool kOwnOps = false;
  static constexpr uint64_t kValuesPerByte = 8;
  static constexpr int64_t kValueBytes = 0;
  static constexpr uint64_t kCheckBytes = 0;
  static void Canonicalize(uint64_t /*k*/, uint8_t* /*body*/, uint64_t /*bytes*/) {}
};

// Finite test by bits: identical on host and device, immune to fast-math.
DR_HOST_DEVICE bool IsFinite(float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  return (u & 0x7f800000u) != 0x7f800000u;
}

// Order key of the descending signed sort used by polyfit and dexp: ascending
// keys are descending values; -0.0 sorts as +0.0. Inputs are finite.
DR_HOST_DEVICE uint32_t DescendingKey(float v) {
  uint32_t u;
  if (v == 0.0f) v = 0.0f;
  memcpy(&u, &v, 4);
  const uint32_t asc = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return ~asc;
}

}  // namespace value
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_VALUE_VALUE_FORMAT_H_
