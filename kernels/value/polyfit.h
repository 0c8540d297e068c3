// polyfit value codec (REFERENCE 1.3): piecewise polynomial fit of the values
// sorted in descending signed order. Per-element and per-segment logic shared
// by the CPU kernels and CUDA code (no TF headers).
//
// Model. Segment s holds len_s consecutive sorted values y_0..y_{len-1}. Its
// polynomial has degree d_s = min(degree, len_s - 1) and is written in the
// Chebyshev basis on the scaled abscissa
//     t_j = (2j - (len - 1)) / (len - 1)  in [-1, 1]   (t_0 = 0 if len == 1),
// i.e. y_j ~ sum_k c_k T_k(t_j). Scaling the abscissae to [-1, 1] and using
// the Chebyshev basis keeps the design matrix well conditioned (REFERENCE 3:
// unscaled 1..len monomials lost a factor 20 in accuracy) and makes float32
// coefficients safe: |T_k| <= 1, so a coefficient rounding error e moves
// every decoded value by at most e, and |p(t)| <= sum |c_k| bounds the output.
// The fit is least squares by Givens QR in double (lsq.h).
//
// Payload (after the 16-byte common header of value_format.h):
//   16  u8   degree (0..kMaxDegree)
//   17  u8   segmentation (0 geometric, 1 greedy; informational)
//   18  u16  reserved, 0
//   20  u32  S, number of segments (0 iff K == 0)
//   24  u32  len[S]      each >= 1, sum == K
//   ..  f32  coef[sum_s (d_s + 1)], segment after segment, c_0 first
// All coefficients are finite and every segment has sum |c_k| <= FLT_MAX, so
// every decoded value is finite; the decoder rejects anything else.
#ifndef DEEPREDUCE_KERNELS_VALUE_POLYFIT_H_
#define DEEPREDUCE_KERNELS_VALUE_POLYFIT_H_

#include <cmath>
#include <cstdint>

#include "kernels/common/platform.h"
#include "kernels/value/lsq.h"

namespace deepreduce {
namespace value {
namespace polyfit {

constexpr int kMaxDegree = kMaxCols - 1;
constexpr int64_t kFixedBytes = 24;
constexpr uint8_t kSegGeometric = 0;
constexpr uint8_t kSegGreedy = 1;

DR_HOST_DEVICE int SegmentDegree(int degree, int64_t len) {
  return len - 1 < degree ? static_cast<int>(len - 1) : degree;
}

DR_HOST_DEVICE double Abscissa(int64_t j, int64_t len) {
  return len > 1 ? (2.0 * static_cast<double>(j) - static_cast<double>(len - 1)) /
                       static_cast<double>(len - 1)
                 : 0.0;
}

// T_0(t) .. T_deg(t) into out.
DR_HOST_DEVICE void ChebRow(double t, int deg, double* out) {
  out[0] = 1.0;
  if (deg >= 1) out[1] = t;
  for (int k = 2; k <= deg; ++k) out[k] = 2.0 * t * out[k - 1] - out[k - 2];
}

// sum_k c_k T_k(t) by Clenshaw's recurrence. The products are DR_DMUL so
// that the CUDA decoder computes the same bits (no FMA contraction); 2.0 * t
// and the abscissa's 2.0 * j are exact and need no guard.
DR_HOST_DEVICE double ChebEval(const float* c, int deg, double t) {
  double b1 = 0.0, b2 = 0.0;
  for (int k = deg; k >= 1; --k) {
    const double b0 = DR_DMUL(2.0 * t, b1) - b2 + static_cast<double>(c[k]);
    b2 = b1;
    b1 = b0;
  }
  return DR_DMUL(t, b1) - b2 + static_cast<double>(c[0]);
}

// Adds rows [j0, j1) of a segment of length len (values y[j0..j1)) to lsq.
DR_HOST_DEVICE void AccumulateRows(const float* y, int64_t j0, int64_t j1,
                                   int64_t len, int deg, GivensLsq* lsq) {
  BlockedLsq blocked(lsq);
  for (int64_t j = j0; j < j1; ++j) {
    ChebRow(Abscissa(j, len), deg, blocked.NextRow());
    blocked.Commit(static_cast<double>(y[j - j0]));
  }
  blocked.Flush();
}

// Vertical distance of sorted value y[j] from the chord of segment [lo, hi]
// (inclusive end points): the greedy knot criterion of the paper's Lemma 1.
DR_HOST_DEVICE double ChordDistance(const float* y, int64_t lo, int64_t hi,
                                    int64_t j) {
  const double f = static_cast<double>(j - lo) / static_cast<double>(hi - lo);
  const double chord = static_cast<double>(y[lo]) +
                       (static_cast<double>(y[hi]) - static_cast<double>(y[lo])) * f;
  return fabs(static_cast<double>(y[j]) - chord);
}

// Default number of segments: about the original GPU code's 10 at K = 10k
// and 16 at K = 250k (REFERENCE 1.3).
inline int64_t AutoSegments(int64_t k) {
  if (k <= 1) return 1;
  const int64_t s = static_cast<int64_t>(std::nearbyint(1.3 * std::log2(static_cast<double>(k)))) - 7;
  return s < 1 ? 1 : s;
}

}  // namespace polyfit
}  // namespace value
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_VALUE_POLYFIT_H_
