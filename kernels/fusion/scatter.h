// Scatter of a step's decoded values into a bucket, in update order: the
// cores of the ScatterSum and ScatterSubtract ops (kernels/fusion/
// scatter_kernels.cc). TensorFlow's ScatterNd / TensorScatterSub spend ~80 ns
// per update on the CPU (an Eigen chip per element); these loops are plain
// indexed adds. Updates apply strictly in order, so duplicate positions (the
// same position in several workers' payloads) sum as (0 + a) + b + ..., the
// bits of decoding each payload and adding them in order. TF-free.
#ifndef DEEPREDUCE_KERNELS_FUSION_SCATTER_H_
#define DEEPREDUCE_KERNELS_FUSION_SCATTER_H_

#include <cstdint>

namespace deepreduce {
namespace fusion {

// The first i with positions[i] outside [0, n), or -1: checked before any
// write, so a bad position leaves the output untouched.
inline int64_t FirstBadPosition(const int64_t* positions, int64_t m, int64_t n) {
  for (int64_t i = 0; i < m; ++i) {
    if (positions[i] < 0 || positions[i] >= n) return i;
  }
  return -1;
}

// out[positions[i]] += values[i] (kSubtract: -=) for i in [0, m), in order.
template <bool kSubtract, typename T>
void ScatterInOrder(T* out, const int64_t* positions, const T* values, int64_t m) {
  for (int64_t i = 0; i < m; ++i) {
    T& o = out[positions[i]];
    o = kSubtract ? static_cast<T>(o - values[i]) : static_cast<T>(o + values[i]);
  }
}

}  // namespace fusion
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_FUSION_SCATTER_H_
