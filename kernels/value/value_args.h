// Argument and payload validation of the value codecs, shared by the CPU
// kernels (value_kernels.cc) and the GPU kernels (value_kernels_gpu.cc) so
// that both reject the same input with the same InvalidArgumentError text.
//
// The payload parsers work on host bytes: the CPU kernels pass the tensor's
// buffer, the GPU kernels a copy of the payload's prefix (the header and
// fixed fields; all of it for the small polyfit and dexp payloads). Checks
// that need the sections of a large payload (qsgd's scales and codes) or the
// values (finiteness) run where the data is; only their messages are here.
// Uses TensorFlow headers: not for CUDA translation units.
#ifndef DEEPREDUCE_KERNELS_VALUE_VALUE_ARGS_H_
#define DEEPREDUCE_KERNELS_VALUE_VALUE_ARGS_H_

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "kernels/value/dexp.h"
#include "kernels/value/polyfit.h"
#include "kernels/value/qsgd.h"
#include "kernels/value/value_format.h"
#include "tensorflow/core/framework/tensor.h"

namespace deepreduce {
namespace value {

inline absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

// `values` must be a float32 vector of at most 2^48 elements. The finiteness
// check of the lossy codecs is the caller's (NonFiniteValue names the first
// offender).
inline absl::Status CheckValuesShape(const tensorflow::Tensor& t, const char* codec) {
  if (t.dims() != 1) {
    return Invalid(std::string(codec) + ": values must be a vector, got shape " +
                   t.shape().DebugString());
  }
  const int64_t k = t.NumElements();
  if (static_cast<uint64_t>(k) > kMaxWireValues) {
    return Invalid(std::string(codec) + ": " + std::to_string(k) +
                   " values exceed the format's limit of 2^48");
  }
  return absl::OkStatus();
}

inline absl::Status NonFiniteValue(const char* codec, int64_t bad, float v) {
  return Invalid(std::string(codec) + " cannot encode non-finite values: values[" +
                 std::to_string(bad) + "] = " + std::to_string(v) +
                 " (use fp16, bf16 or deflate to transmit NaN/Inf)");
}

// The polyfit encoder's attributes, parsed and checked once per kernel.
struct PolyfitAttrs {
  int degree;
  int64_t segments;  // 0: automatic
  uint8_t seg_kind;  // polyfit::kSegGreedy or kSegGeometric
};

template <typename Construction>
absl::Status ParsePolyfitAttrs(Construction* ctx, PolyfitAttrs* a) {
  std::string segmentation;
  absl::Status s = ctx->GetAttr("degree", &a->degree);
  if (s.ok()) s = ctx->GetAttr("segmentation", &segmentation);
  if (s.ok()) s = ctx->GetAttr("segments", &a->segments);
  if (!s.ok()) return s;
  if (a->degree < 0 || a->degree > polyfit::kMaxDegree) {
    return Invalid("degree must lie in [0, " + std::to_string(polyfit::kMaxDegree) +
                   "], got " + std::to_string(a->degree));
  }
  if (a->segments < 0 || a->segments > (int64_t{1} << 20)) {
    return Invalid("segments must be 0 (automatic) or in [1, 2^20], got " +
                   std::to_string(a->segments));
  }
  if (segmentation != "greedy" && segmentation != "geometric") {
    return Invalid("segmentation must be 'greedy' or 'geometric', got '" + segmentation + "'");
  }
  a->seg_kind = segmentation == "greedy" ? polyfit::kSegGreedy : polyfit::kSegGeometric;
  return absl::OkStatus();
}

// K must fit the perm dtype (and the GPU sort's 32-bit positions).
template <typename Tidx>
absl::Status CheckSortable(const char* codec, int64_t k) {
  const int64_t limit = std::is_same<Tidx, int32_t>::value
                            ? int64_t{std::numeric_limits<int32_t>::max()}
                            : int64_t{0xffffffffLL};
  if (k > limit) {
    return Invalid(std::string(codec) + ": " + std::to_string(k) +
                   " values exceed the limit of " + std::to_string(limit) +
                   " for out_idx " +
                   (std::is_same<Tidx, int32_t>::value ? "int32" : "int64"));
  }
  return absl::OkStatus();
}

// polyfit::FinishSegment's failures.
inline absl::Status PolyfitSegmentError(int64_t seg, int code) {
  if (code == polyfit::kSegCoefOverflow) {
    return Invalid("polyfit: the fit of segment " + std::to_string(seg) +
                   " has a coefficient beyond float32 range; the values are "
                   "too large (|v| near FLT_MAX) for polyfit");
  }
  return Invalid("polyfit: the fit of segment " + std::to_string(seg) +
                 " could exceed float32 range when decoded; the values are "
                 "too large (|v| near FLT_MAX) for polyfit");
}

// dexp::Start's failure.
inline absl::Status DexpMeanTooLarge(double mean) {
  return Invalid("dexp: the values are too large (mean magnitude " + std::to_string(mean) +
                 " above e^87.7) for the dexp payload");
}

inline absl::Status CheckPayloadShape(const tensorflow::Tensor& payload, uint8_t codec) {
  if (payload.dims() != 1) {
    return Invalid(std::string(CodecName(codec)) +
                   " payload must be a uint8 vector, got shape " +
                   payload.shape().DebugString());
  }
  return absl::OkStatus();
}

// The common header: magic, codec, version, flags, K. `p` holds the first
// min(size, kHeaderBytes) bytes of a payload of `size` bytes. Returns K.
inline absl::Status ParseHeaderBytes(const uint8_t* p, int64_t size, uint8_t codec,
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
  return absl::OkStatus();
}

inline absl::Status SizeMismatch(const char* codec, int64_t have, uint64_t want,
                                 const std::string& why) {
  return Invalid(std::string(codec) + " payload holds " + std::to_string(have) +
                 " bytes but its header (" + why + ") implies exactly " +
                 std::to_string(want) + "; it is truncated, extended or corrupted");
}

inline absl::Status CheckMaxValues(const char* codec, uint64_t k, int64_t max_values) {
  if (k > static_cast<uint64_t>(max_values)) {
    return Invalid(std::string(codec) + " payload claims K = " + std::to_string(k) +
                   " values, more than max_values = " + std::to_string(max_values) +
                   "; raise max_values if this is genuine");
  }
  return absl::OkStatus();
}

// ------------------------------------------------------------ fp16/bf16 --

// Size check of a half payload whose header gave K.
inline absl::Status CheckHalfSize(uint8_t codec, int64_t size, uint64_t k) {
  const uint64_t want = kHeaderBytes + 2 * k;
  if (want != static_cast<uint64_t>(size)) {
    return SizeMismatch(CodecName(codec), size, want, "K = " + std::to_string(k));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- qsgd --

struct QsgdLayout {
  uint32_t s, bucket;
  int w;
  uint64_t k, num_buckets, code_bytes, size;
};

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
inline absl::Status ParseQsgdFixed(const uint8_t* p, int64_t size, uint64_t k,
                                   QsgdLayout* l) {
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
  return absl::OkStatus();
}

inline bool QsgdScaleOk(float m) { return IsFinite(m) && m >= 0.0f; }

inline absl::Status QsgdBadScale(uint64_t b, float m) {
  return Invalid("qsgd payload has bucket scale " + std::to_string(m) + " (bucket " +
                 std::to_string(b) + "); scales are finite and >= 0");
}

// The padding bits after the last code (in the last code byte) must be 0.
inline bool QsgdPaddingOk(const QsgdLayout& l, uint8_t last_code_byte) {
  const uint64_t used_bits = l.k * static_cast<uint64_t>(l.w);
  return used_bits % 8 == 0 || (last_code_byte >> (used_bits % 8)) == 0;
}

inline absl::Status QsgdBadPadding() {
  return Invalid("qsgd payload has nonzero padding bits after the last code");
}

inline absl::Status QsgdBadCode(int64_t bad, uint32_t s) {
  return Invalid("qsgd payload has an invalid code for value " + std::to_string(bad) +
                 " (level above s = " + std::to_string(s) + " or a negative zero)");
}

// ------------------------------------------------------------- polyfit --

// Parsed view of a polyfit payload; all fields checked against the buffer.
struct PolyfitView {
  uint64_t k;
  int degree;
  int64_t num_segs;
  const uint8_t* lens;   // u32[num_segs]
  const uint8_t* coefs;  // f32[...]
};

// Parses and checks a whole polyfit payload held in host memory (p, size).
inline absl::Status ParsePolyfitBytes(const uint8_t* p, int64_t size, int64_t max_values,
                                      PolyfitView* v) {
  absl::Status s = ParseHeaderBytes(p, size, kCodecPolyfit, &v->k);
  if (!s.ok()) return s;
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
  s = CheckMaxValues("polyfit", k, max_values);
  if (!s.ok()) return s;
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
  return absl::OkStatus();
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

// ---------------------------------------------------------------- dexp --

// Parses and checks a whole dexp payload held in host memory (p, size):
// K, the sign split P and both parts' coefficients.
inline absl::Status ParseDexpBytes(const uint8_t* p, int64_t size, int64_t max_values,
                                   uint64_t* k, uint64_t* pos, dexp::Coefs c[2]) {
  absl::Status s = ParseHeaderBytes(p, size, kCodecDexp, k);
  if (!s.ok()) return s;
  if (size != dexp::kPayloadBytes) {
    return SizeMismatch("dexp", size, dexp::kPayloadBytes, "fixed layout");
  }
  *pos = GetU64(p + 16);
  if (*pos > *k) {
    return Invalid("dexp payload's sign split P = " + std::to_string(*pos) +
                   " exceeds K = " + std::to_string(*k));
  }
  s = CheckMaxValues("dexp", *k, max_values);
  if (!s.ok()) return s;
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
  return absl::OkStatus();
}

}  // namespace value
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_VALUE_VALUE_ARGS_H_
