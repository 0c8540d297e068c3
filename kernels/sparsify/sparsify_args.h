// Argument validation of the sparsifiers' OpKernels (sparsify_kernels.h,
// shared by the CPU and the GPU; host code, TF headers). Every message names
// the argument and the value.
#ifndef DEEPREDUCE_KERNELS_SPARSIFY_SPARSIFY_ARGS_H_
#define DEEPREDUCE_KERNELS_SPARSIFY_SPARSIFY_ARGS_H_

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "kernels/sparsify/sparsify.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"

namespace deepreduce {
namespace sparsify {

// Per-thread histogram counters are uint32 (CPU and GPU).
constexpr int64_t kMaxElements = (int64_t{1} << 32) - 1;

template <typename T>
struct FloatOf;
template <>
struct FloatOf<Eigen::half> {
  using F = Half;
};
template <>
struct FloatOf<Eigen::bfloat16> {
  using F = BFloat16;
};
template <>
struct FloatOf<float> {
  using F = Float32;
};
template <>
struct FloatOf<double> {
  using F = Float64;
};

inline absl::Status ScalarInt64(const tensorflow::Tensor& t, const char* name,
                                int64_t* out) {
  if (!tensorflow::TensorShapeUtils::IsScalar(t.shape())) {
    return absl::InvalidArgumentError(std::string(name) +
                                      " must be a scalar, got shape " +
                                      t.shape().DebugString());
  }
  *out = t.scalar<int64_t>()();
  return absl::OkStatus();
}

// n = number of elements of x; it must fit the counters and the index type.
template <typename Tidx>
absl::Status CheckSize(const tensorflow::Tensor& x, int64_t* n) {
  *n = x.NumElements();
  if (*n > kMaxElements) {
    return absl::InvalidArgumentError(
        "x has " + std::to_string(*n) +
        " elements; the sparsifiers support at most 2^32 - 1");
  }
  if (tensorflow::DataTypeToEnum<Tidx>::v() == tensorflow::DT_INT32 &&
      *n > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        "x has " + std::to_string(*n) +
        " elements, more than int32 indices can address; use out_idx=tf.int64");
  }
  return absl::OkStatus();
}

inline absl::Status CheckK(int64_t k, int64_t n) {
  if (k < 0 || k > n) {
    return absl::InvalidArgumentError("k must lie in [0, n] where n=" +
                                      std::to_string(n) +
                                      " is the number of elements of x, got k=" +
                                      std::to_string(k));
  }
  return absl::OkStatus();
}

// The threshold's key: a scalar >= 0 (-0.0 allowed, maps to key 0), not NaN.
template <typename T>
absl::Status ThresholdKey(const tensorflow::Tensor& t_t,
                          typename FloatOf<T>::F::U* key) {
  using F = typename FloatOf<T>::F;
  if (!tensorflow::TensorShapeUtils::IsScalar(t_t.shape())) {
    return absl::InvalidArgumentError("threshold must be a scalar, got shape " +
                                      t_t.shape().DebugString());
  }
  const T t = t_t.scalar<T>()();
  const double td = static_cast<double>(t);
  if (!(td >= 0.0)) {
    return absl::InvalidArgumentError(
        "threshold must be a non-negative number (not NaN), got " + std::to_string(td));
  }
  typename F::U bits;
  std::memcpy(&bits, &t, sizeof(bits));
  *key = MagnitudeKey<F>(bits);
  return absl::OkStatus();
}

// --------------------------------------------------- segmented ops --
// The validated segmentation: S segments, segment i = [offsets[i],
// offsets[i+1]) of x's n elements, k[i] of them selected, total_k in all.
struct Segments {
  int64_t n = 0;
  int64_t num_segments = 0;
  int64_t total_k = 0;
  const int64_t* offsets = nullptr;
  const int64_t* k = nullptr;
};

inline absl::Status CheckSegments(const tensorflow::Tensor& x_t,
                                  const tensorflow::Tensor& offsets_t,
                                  const tensorflow::Tensor& k_t, Segments* seg) {
  if (!tensorflow::TensorShapeUtils::IsVector(offsets_t.shape()) || offsets_t.NumElements() == 0) {
    return absl::InvalidArgumentError(
        "offsets must be a vector of S+1 >= 1 segment boundaries, got shape " +
        offsets_t.shape().DebugString());
  }
  if (!tensorflow::TensorShapeUtils::IsVector(k_t.shape())) {
    return absl::InvalidArgumentError("k must be a vector of S per-segment counts, got shape " +
                                      k_t.shape().DebugString());
  }
  const int64_t num_segments = offsets_t.NumElements() - 1;
  if (k_t.NumElements() != num_segments) {
    return absl::InvalidArgumentError(
        "k has " + std::to_string(k_t.NumElements()) + " elements but offsets has " +
        std::to_string(num_segments + 1) + ", i.e. S=" + std::to_string(num_segments) +
        " segments; k needs one element per segment");
  }
  int64_t n;
  TF_RETURN_IF_ERROR(CheckSize<int64_t>(x_t, &n));
  const int64_t* off = offsets_t.flat<int64_t>().data();
  const int64_t* k = k_t.flat<int64_t>().data();
  if (off[0] != 0) {
    return absl::InvalidArgumentError("offsets[0] must be 0, got " + std::to_string(off[0]));
  }
  for (int64_t i = 1; i <= num_segments; ++i) {
    if (off[i] < off[i - 1]) {
      return absl::InvalidArgumentError(
          "offsets must be non-decreasing, got offsets[" + std::to_string(i) +
          "]=" + std::to_string(off[i]) + " < offsets[" + std::to_string(i - 1) +
          "]=" + std::to_string(off[i - 1]));
    }
  }
  if (off[num_segments] != n) {
    return absl::InvalidArgumentError(
        "offsets[S] must equal n=" + std::to_string(n) +
        ", the number of elements of x, got offsets[" + std::to_string(num_segments) +
        "]=" + std::to_string(off[num_segments]));
  }
  int64_t total = 0;
  for (int64_t i = 0; i < num_segments; ++i) {
    const int64_t len = off[i + 1] - off[i];
    if (k[i] < 0 || k[i] > len) {
      return absl::InvalidArgumentError(
          "k[" + std::to_string(i) + "] must lie in [0, " + std::to_string(len) +
          "], the length of segment " + std::to_string(i) + ", got k[" +
          std::to_string(i) + "]=" + std::to_string(k[i]));
    }
    total += k[i];  // <= n: no overflow
  }
  seg->n = n;
  seg->num_segments = num_segments;
  seg->total_k = total;
  seg->offsets = off;
  seg->k = k;
  return absl::OkStatus();
}

}  // namespace sparsify
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_SPARSIFY_SPARSIFY_ARGS_H_
