// Argument and payload validation of the value codecs, for their OpKernels
// (value_kernels.h, one class per op for the CPU and the GPU) and the
// generic kernels of the convention (value_kernels.cc), so that every device rejects the same input with
// the same InvalidArgumentError text.
//
// The payload parsers work on host bytes: on the CPU the tensor's buffer, on
// the GPU a copy of the payload's prefix (the header and fixed fields; all of
// it for the small polyfit and dexp payloads). Checks
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

#include "kernels/common/parse_status_tf.h"
#include "kernels/value/dexp.h"
#include "kernels/value/polyfit.h"
#include "kernels/value/qsgd.h"
#include "kernels/value/value_decode.h"
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

// The byte-level parsers live in value_decode.h (TF-free, shared with the
// fuzz harness); these wrappers return their result as an absl::Status.
using core::MakeQsgdLayout;
using core::PolyfitTables;
using core::QsgdPaddingOk;
using core::QsgdScaleOk;

// The common header: magic, codec, version, flags, K. `p` holds the first
// min(size, kHeaderBytes) bytes of a payload of `size` bytes. Returns K.
inline absl::Status ParseHeaderBytes(const uint8_t* p, int64_t size, uint8_t codec,
                                     uint64_t* k) {
  return ToAbsl(core::ParseHeaderBytes(p, size, codec, k));
}

inline absl::Status SizeMismatch(const char* codec, int64_t have, uint64_t want,
                                 const std::string& why) {
  return ToAbsl(core::SizeMismatch(codec, have, want, why));
}

inline absl::Status CheckMaxValues(const char* codec, uint64_t k, int64_t max_values) {
  return ToAbsl(core::CheckMaxValues(codec, k, max_values));
}

// Fixed fields and size of a qsgd payload whose header gave K; `p` holds at
// least the first min(size, qsgd::kFixedBytes) bytes.
inline absl::Status ParseQsgdFixed(const uint8_t* p, int64_t size, uint64_t k,
                                   QsgdLayout* l) {
  return ToAbsl(core::ParseQsgdFixed(p, size, k, l));
}

inline absl::Status QsgdBadScale(uint64_t b, float m) {
  return ToAbsl(core::QsgdBadScale(b, m));
}

inline absl::Status QsgdBadPadding() { return ToAbsl(core::QsgdBadPadding()); }

inline absl::Status QsgdBadCode(int64_t bad, uint32_t s) {
  return ToAbsl(core::QsgdBadCode(bad, s));
}

// Parses and checks a whole polyfit payload held in host memory (p, size).
inline absl::Status ParsePolyfitBytes(const uint8_t* p, int64_t size, int64_t max_values,
                                      PolyfitView* v) {
  return ToAbsl(core::ParsePolyfitBytes(p, size, max_values, v));
}

// Parses and checks a whole dexp payload held in host memory (p, size):
// K, the sign split P and both parts' coefficients.
inline absl::Status ParseDexpBytes(const uint8_t* p, int64_t size, int64_t max_values,
                                   uint64_t* k, uint64_t* pos, dexp::Coefs c[2]) {
  return ToAbsl(core::ParseDexpBytes(p, size, max_values, k, pos, c));
}

}  // namespace value
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_VALUE_VALUE_ARGS_H_
