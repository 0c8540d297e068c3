// Argument validation shared by the CPU and GPU OpKernels of the sparsifiers
// (host code, TF headers). Every message names the argument and the value.
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

}  // namespace sparsify
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_SPARSIFY_SPARSIFY_ARGS_H_
