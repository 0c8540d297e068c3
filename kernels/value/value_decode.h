// TensorFlow-free payload parsers and per-range decoders of the value codecs
// (polyfit, dexp, qsgd; the element-wise codecs' host functions; deflate, fp16
// and bf16 follow the convention: deflate.h, fp16.h, bf16.h): the
// code the CPU kernels (value_kernels.cc) run, also compiled without TF by
// the fuzz harness (kernels/fuzz/). Parsers check a payload held in host
// memory and return ParseStatus with the text of the kernels'
// InvalidArgumentError; decoders write into a caller-provided buffer whose
// size the parser returned, so callers allocate only after the checks.
// value_args.h wraps the parsers as absl::Status for the CPU and GPU kernels.
#ifndef DEEPREDUCE_KERNELS_VALUE_VALUE_DECODE_H_
#define DEEPREDUCE_KERNELS_VALUE_VALUE_DECODE_H_

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/common/parse_status.h"
#include "kernels/value/dexp.h"
#include "kernels/value/halfcast.h"
#include "kernels/value/polyfit.h"
#include "kernels/value/qsgd.h"
#include "kernels/value/value_format.h"

namespace deepreduce {
namespace value {

// The layout of a qsgd payload (sizes derived from K, s and the bucket size).
struct QsgdLayout {
  uint32_t s, bucket;
  int w;
  uint64_t k, num_buckets, code_bytes, size;
};

// Parsed view of a polyfit payload; all fields checked against the buffer.
struct PolyfitView {
  uint64_t k;
  int degree;
  int64_t num_segs;
  const uint8_t* lens;   // u32[num_segs]
  const uint8_t* coefs;  // f32[...]
};

// The parsers and decoders live in namespace core so that the absl::Status
// wrappers of value_args.h can keep their names.
namespace core {

inline ParseStatus Invalid(const std::string& message) { return ParseStatus::Invalid(message); }

// The common header: magic, codec, version, flags, K. `p` holds the first
// min(size, kHeaderBytes) bytes of a payload of `size` bytes. Returns K.
inline ParseStatus ParseHeaderBytes(const uint8_t* p, int64_t size, uint8_t codec,
                                    uint64_t* k) {
  const std::string name = CodecName(codec);
  if (size < kHeaderBytes) {
    return Invalid(name + " payload of " + std::to_string(size) +
                   " bytes is shorter than the 16-byte header; it is truncated");
  }
  if (p[0] != kMagic0 || p[1] != kMagic1) {
    return Invalid(name + " payload does not start with the magic \"DV\" (got bytes " +
                   std::to_string(p[0]) + ", " + std::to_string(p[1]) +
                   "); it is not a value-codec payload or is corrupted");
  }
  if (p[2] != codec) {
    return Invalid("payload holds codec id " + std::to_string(p[2]) + " (" +
                   CodecName(p[2]) + "), not " + name + " (id " +
                   std::to_string(codec) + ")");
  }
  if (p[3] != kFormatVersion) {
    return Invalid(name + " payload has format version " + std::to_string(p[3]) +
                   "; this library reads version " + std::to_string(kFormatVersion));
  }
  if (GetU32(p + 4) != 0) {
    return Invalid(name + " payload has reserved flags " + std::to_string(GetU32(p + 4)) +
                   " set; it is corrupted or from a newer format");
  }
  *k = GetU64(p + 8);
  if (*k > kMaxWireValues) {
    return Invalid(name + " payload claims K = " + std::to_string(*k) +
                   " values, beyond the format's limit of 2^48; it is corrupted");
  }
  return ParseStatus();
}

inline ParseStatus SizeMismatch(const char* codec, int64_t have, uint64_t want,
                                const std::string& why) {
  return Invalid(std::string(codec) + " payload holds " + std::to_string(have) +
                 " bytes but its header (" + why + ") implies exactly " +
                 std::to_string(want) + "; it is truncated, extended or corrupted");
}

inline ParseStatus CheckMaxValues(const char* codec, uint64_t k, int64_t max_values) {
  if (k > static_cast<uint64_t>(max_values)) {
    return Invalid(std::string(codec) + " payload claims K = " + std::to_string(k) +
                   " values, more than max_values = " + std::to_string(max_values) +
                   "; raise max_values if this is genuine");
  }
  return ParseStatus();
}

// ---------------------------------------------------------------- qsgd --

inline QsgdLayout MakeQsgdLayout(uint64_t k, uint32_t s, uint32_t bucket) {
  QsgdLayout l;
  l.k = k;
  l.s = s;
  l.bucket = bucket;
  l.w = qsgd::CodeBits(s);
  l.num_buckets = (k + bucket - 1) / bucket;
  l.code_bytes = (k * static_cast<uint64_t>(l.w) + 7) / 8;
  l.size = qsgd::kFixedBytes + 4 * l.num_buckets + l.code_bytes;
  return l;
}

// Fixed fields and size of a qsgd payload whose header gave K; `p` holds at
// least the first min(size, qsgd::kFixedBytes) bytes.
inline ParseStatus ParseQsgdFixed(const uint8_t* p, int64_t size, uint64_t k, QsgdLayout* l) {
  if (size < qsgd::kFixedBytes) {
    return SizeMismatch("qsgd", size, qsgd::kFixedBytes, "fixed fields");
  }
  const uint32_t s = GetU32(p + 16), bucket = GetU32(p + 20);
  if (!(s >= 1 && s <= qsgd::kMaxLevels)) {
    return Invalid("qsgd payload has levels s = " + std::to_string(s) +
                   ", outside [1, 255]");
  }
  if (!(bucket >= 1 && bucket <= qsgd::kMaxBucket)) {
    return Invalid("qsgd payload has bucket size " + std::to_string(bucket) +
                   ", outside [1, 2^30]");
  }
  *l = MakeQsgdLayout(k, s, bucket);
  if (l->size != static_cast<uint64_t>(size)) {
    return SizeMismatch("qsgd", size, l->size,
                        "K = " + std::to_string(k) + ", s = " + std::to_string(s) +
                            ", bucket = " + std::to_string(bucket));
  }
  return ParseStatus();
}

inline bool QsgdScaleOk(float m) { return IsFinite(m) && m >= 0.0f; }

inline ParseStatus QsgdBadScale(uint64_t b, float m) {
  return Invalid("qsgd payload has bucket scale " + std::to_string(m) + " (bucket " +
                 std::to_string(b) + "); scales are finite and >= 0");
}

// The padding bits after the last code (in the last code byte) must be 0.
inline bool QsgdPaddingOk(const QsgdLayout& l, uint8_t last_code_byte) {
  const uint64_t used_bits = l.k * static_cast<uint64_t>(l.w);
  return used_bits % 8 == 0 || (last_code_byte >> (used_bits % 8)) == 0;
}

inline ParseStatus QsgdBadPadding() {
  return Invalid("qsgd payload has nonzero padding bits after the last code");
}

inline ParseStatus QsgdBadCode(int64_t bad, uint32_t s) {
  return Invalid("qsgd payload has an invalid code for value " + std::to_string(bad) +
                 " (level above s = " + std::to_string(s) + " or a negative zero)");
}

// The sections of a qsgd payload `p` of layout l (ParseQsgdFixed): every
// bucket scale, then the padding bits.
inline ParseStatus CheckQsgdSections(const uint8_t* p, const QsgdLayout& l) {
  const uint8_t* scales = p + qsgd::kFixedBytes;
  const uint8_t* codes = scales + 4 * l.num_buckets;
  for (uint64_t b = 0; b < l.num_buckets; ++b) {
    const float m = GetF32(scales + 4 * b);
    if (!QsgdScaleOk(m)) return QsgdBadScale(b, m);
  }
  if (l.code_bytes != 0 && !QsgdPaddingOk(l, codes[l.code_bytes - 1])) return QsgdBadPadding();
  return ParseStatus();
}

// Elements per work item of the qsgd bit packer and unpacker: a multiple of
// 8, so every item starts on a byte boundary and owns its bytes.
constexpr int64_t kQsgdChunk = 4096;

// Decodes chunks [c_begin, c_end) of kQsgdChunk values of a checked qsgd
// payload `p` into out; returns the first value with an invalid code (its
// output is 0), or K if there is none.
inline int64_t DecodeQsgdChunks(const uint8_t* p, const QsgdLayout& l, int64_t c_begin,
                                int64_t c_end, float* out) {
  const uint8_t* scales = p + qsgd::kFixedBytes;
  const uint8_t* codes = scales + 4 * l.num_buckets;
  const int64_t kk = static_cast<int64_t>(l.k);
  const uint32_t s = l.s, bucket = l.bucket;
  const int w = l.w;
  const uint32_t mask = (uint32_t{1} << w) - 1;
  int64_t first_bad = kk;
  for (int64_t c = c_begin; c < c_end; ++c) {
    const int64_t lo = c * kQsgdChunk, hi = kk < lo + kQsgdChunk ? kk : lo + kQsgdChunk;
    const uint8_t* src = codes + lo * w / 8;
    uint64_t acc = 0;
    int nbits = 0;
    int64_t b = lo / bucket, next = (b + 1) * static_cast<int64_t>(bucket);
    float scale = GetF32(scales + 4 * b);
    for (int64_t i = lo; i < hi; ++i) {
      if (i == next) {
        scale = GetF32(scales + 4 * ++b);
        next += bucket;
      }
      while (nbits < w) {
        acc |= static_cast<uint64_t>(*src++) << nbits;
        nbits += 8;
      }
      const uint32_t code = static_cast<uint32_t>(acc) & mask;
      acc >>= w;
      nbits -= w;
      if (!qsgd::Decode(code, scale, s, &out[i])) {
        if (i < first_bad) first_bad = i;
        out[i] = 0.0f;
      }
    }
  }
  return first_bad;
}

// ------------------------------------------------------------- polyfit --

// Parses and checks a whole polyfit payload held in host memory (p, size).
inline ParseStatus ParsePolyfitBytes(const uint8_t* p, int64_t size, int64_t max_values,
                                     PolyfitView* v) {
  DR_RETURN_IF_PARSE_ERROR(ParseHeaderBytes(p, size, kCodecPolyfit, &v->k));
  if (size < polyfit::kFixedBytes) {
    return SizeMismatch("polyfit", size, polyfit::kFixedBytes, "fixed fields");
  }
  v->degree = p[16];
  if (v->degree > polyfit::kMaxDegree) {
    return Invalid("polyfit payload has degree " + std::to_string(v->degree) +
                   ", beyond the maximum " + std::to_string(polyfit::kMaxDegree));
  }
  if (p[17] > polyfit::kSegGreedy || GetU16(p + 18) != 0) {
    return Invalid("polyfit payload has an unknown segmentation id " +
                   std::to_string(p[17]) + " or nonzero reserved bytes");
  }
  v->num_segs = GetU32(p + 20);
  const uint64_t k = v->k;
  if ((k == 0) != (v->num_segs == 0) || static_cast<uint64_t>(v->num_segs) > k) {
    return Invalid("polyfit payload has " + std::to_string(v->num_segs) +
                   " segments for K = " + std::to_string(k) +
                   " values; need 1..K segments (0 iff K = 0)");
  }
  const uint64_t lens_end = polyfit::kFixedBytes + 4 * static_cast<uint64_t>(v->num_segs);
  if (lens_end > static_cast<uint64_t>(size)) {
    return SizeMismatch("polyfit", size, lens_end,
                        std::to_string(v->num_segs) + " segment lengths");
  }
  v->lens = p + polyfit::kFixedBytes;
  uint64_t total = 0, num_coefs = 0;
  for (int64_t q = 0; q < v->num_segs; ++q) {
    const uint32_t len = GetU32(v->lens + 4 * q);
    if (len == 0) {
      return Invalid("polyfit payload has an empty segment (" + std::to_string(q) + ")");
    }
    total += len;
    num_coefs += polyfit::SegmentDegree(v->degree, len) + 1;
  }
  if (total != k) {
    return Invalid("polyfit payload's segment lengths sum to " + std::to_string(total) +
                   " but K = " + std::to_string(k));
  }
  const uint64_t want = lens_end + 4 * num_coefs;
  if (want != static_cast<uint64_t>(size)) {
    return SizeMismatch("polyfit", size, want,
                        "K = " + std::to_string(k) + ", " + std::to_string(v->num_segs) +
                            " segments of degree <= " + std::to_string(v->degree));
  }
  DR_RETURN_IF_PARSE_ERROR(CheckMaxValues("polyfit", k, max_values));
  v->coefs = p + lens_end;
  // Finite coefficients with sum |c| <= FLT_MAX per segment: every decoded
  // value is then finite (|T_k| <= 1 on [-1, 1]).
  const uint8_t* c = v->coefs;
  for (int64_t q = 0; q < v->num_segs; ++q) {
    const int n = polyfit::SegmentDegree(v->degree, GetU32(v->lens + 4 * q)) + 1;
    double sum = 0.0;
    for (int j = 0; j < n; ++j, c += 4) {
      const float f = GetF32(c);
      if (!std::isfinite(f)) {
        return Invalid("polyfit payload has a non-finite coefficient (" +
                       std::to_string(f) + ") in segment " + std::to_string(q));
      }
      sum += std::fabs(static_cast<double>(f));
    }
    if (sum > static_cast<double>(FLT_MAX)) {
      return Invalid("polyfit payload's segment " + std::to_string(q) +
                     " has coefficients whose magnitudes sum beyond FLT_MAX; decoded "
                     "values could overflow, so the payload is rejected");
    }
  }
  return ParseStatus();
}

// Segment tables of a parsed polyfit payload: start[q] is the first sorted
// position of segment q and coff[q] the index of its first coefficient
// (q = 0..num_segs; start[num_segs] = K, coff[num_segs] = number of coefs).
inline void PolyfitTables(const PolyfitView& v, int64_t* start, int64_t* coff) {
  start[0] = coff[0] = 0;
  for (int64_t q = 0; q < v.num_segs; ++q) {
    const int64_t len = GetU32(v.lens + 4 * q);
    start[q + 1] = start[q] + len;
    coff[q + 1] = coff[q] + polyfit::SegmentDegree(v.degree, len) + 1;
  }
}

// Values [begin, end) of a parsed polyfit payload, from its tables
// (PolyfitTables) and its coefficients copied to floats `cf`.
inline void DecodePolyfitRange(const PolyfitView& v, const int64_t* start, const int64_t* coff,
                               const float* cf, int64_t begin, int64_t end, float* out) {
  const int64_t num_segs = v.num_segs;
  int64_t q = std::upper_bound(start, start + num_segs + 1, begin) - start - 1;
  for (int64_t i = begin; i < end; ++i) {
    while (i >= start[q + 1]) ++q;
    const int64_t len = start[q + 1] - start[q];
    out[i] = static_cast<float>(polyfit::ChebEval(cf + coff[q],
                                                  polyfit::SegmentDegree(v.degree, len),
                                                  polyfit::Abscissa(i - start[q], len)));
  }
}

// ---------------------------------------------------------------- dexp --

// Parses and checks a whole dexp payload held in host memory (p, size):
// K, the sign split P and both parts' coefficients.
inline ParseStatus ParseDexpBytes(const uint8_t* p, int64_t size, int64_t max_values,
                                  uint64_t* k, uint64_t* pos, dexp::Coefs c[2]) {
  DR_RETURN_IF_PARSE_ERROR(ParseHeaderBytes(p, size, kCodecDexp, k));
  if (size != dexp::kPayloadBytes) {
    return SizeMismatch("dexp", size, dexp::kPayloadBytes, "fixed layout");
  }
  *pos = GetU64(p + 16);
  if (*pos > *k) {
    return Invalid("dexp payload's sign split P = " + std::to_string(*pos) +
                   " exceeds K = " + std::to_string(*k));
  }
  DR_RETURN_IF_PARSE_ERROR(CheckMaxValues("dexp", *k, max_values));
  for (int i = 0; i < 2; ++i) {
    c[i] = {GetF32(p + 24 + 16 * i), GetF32(p + 28 + 16 * i), GetF32(p + 32 + 16 * i),
            GetF32(p + 36 + 16 * i)};
    if (!dexp::CoefsOk(c[i])) {
      return Invalid(std::string("dexp payload's ") + (i ? "negative" : "positive") +
                     " part has non-finite coefficients or ones that overflow "
                     "float32 (a=" + std::to_string(c[i].a) + ", p=" +
                     std::to_string(c[i].p) + ", b=" + std::to_string(c[i].b) +
                     ", q=" + std::to_string(c[i].q) + ")");
    }
    const uint64_t n = i == 0 ? *pos : *k - *pos;
    if (!(n > 0 || (c[i].a == 0.0f && c[i].p == 0.0f && c[i].b == 0.0f &&
                    c[i].q == 0.0f))) {
      return Invalid(std::string("dexp payload's empty ") + (i ? "negative" : "positive") +
                     " part has nonzero coefficients");
    }
  }
  return ParseStatus();
}

// Values [begin, end) of a parsed dexp payload.
inline void DecodeDexpRange(const dexp::Coefs c[2], uint64_t pos, uint64_t k, int64_t begin,
                            int64_t end, float* out) {
  const int64_t kk = static_cast<int64_t>(k), pp = static_cast<int64_t>(pos);
  for (int64_t i = begin; i < end; ++i) out[i] = dexp::DecodeAt(c[0], c[1], pp, kk, i);
}

}  // namespace core

// ---------------------------------------------------------- element-wise --

// The host functions of an element-wise codec (value_format.h's kValueBytes),
// derived from its struct's EncodeRange and DecodeRange:
//   struct Codec : ElementwiseCodec<Codec, kCodec<Camel>, 2> { ... };
// The body is exactly kBytes bytes per value; any such body decodes.
template <typename Derived, uint8_t kId, int64_t kBytes>
struct ElementwiseCodec : CodecDefaults {
  static constexpr int64_t kValueBytes = kBytes;
  static constexpr uint64_t kValuesPerByte = 1;

  static ParseStatus BodyBytes(const float* /*v*/, int64_t k, const EncodeArgs& /*a*/,
                               uint64_t* bytes) {
    *bytes = static_cast<uint64_t>(kBytes) * static_cast<uint64_t>(k);
    return ParseStatus();
  }
  static ParseStatus EncodeBody(const float* v, int64_t k, const EncodeArgs& /*a*/,
                                uint8_t* body, uint64_t /*capacity*/, uint64_t* written) {
    Derived::EncodeRange(v, 0, k, body);
    *written = static_cast<uint64_t>(kBytes) * static_cast<uint64_t>(k);
    return ParseStatus();
  }
  // k <= kMaxWireValues (the header's check): no overflow.
  static ParseStatus CheckBody(uint64_t k, const uint8_t* /*body*/, uint64_t bytes) {
    const uint64_t want = static_cast<uint64_t>(kBytes) * k;
    if (want != bytes) {
      return core::SizeMismatch(CodecName(kId), static_cast<int64_t>(kHeaderBytes + bytes),
                          kHeaderBytes + want, "K = " + std::to_string(k));
    }
    return ParseStatus();
  }
  static ParseStatus DecodeBody(uint64_t k, const uint8_t* body, uint64_t /*bytes*/,
                                float* out) {
    Derived::DecodeRange(body, 0, static_cast<int64_t>(k), out);
    return ParseStatus();
  }
};

}  // namespace value
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_VALUE_VALUE_DECODE_H_
