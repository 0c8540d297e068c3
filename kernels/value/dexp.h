// dexp value codec (REFERENCE 1.3): double-exponential fit of the sorted
// magnitudes, y(x) = a e^{p x} + b e^{q x}, by the integral-equation method of
// J. Jacquelin ("Regressions et equations integrales", 2009, section on
// sums of exponentials). CPU and CUDA code; no TF headers.
//
// Sign handling. The values, sorted in descending signed order, split into
// the P values >= 0 (first) and the K - P negative values. Each part is
// fitted separately as a decreasing magnitude curve: the positives in sorted
// order, the negatives' magnitudes in reverse sorted order (largest first).
// A part of n values uses x_j = j / (n - 1) (x_0 = 0 when n == 1). Decoded
// magnitudes are clamped at 0, so every decoded value keeps its sign.
//
// Fit of one part (host code in value_kernels.cc, these are the pieces):
//   1. y is scaled by 1 / max(y) to [0, 1].
//   2. S(x) = int_0^x y, SS(x) = int_0^x S by the trapezoid rule; y'' =
//      (p+q) y' - pq y integrates to y = A SS + B S + C x + D, linear least
//      squares for (A, B, C, D) (Givens QR, lsq.h). p, q are the roots of
//      r^2 - B r - A = 0.
//   3. With p, q fixed (rounded to float32, as sent), (a, b) by linear least
//      squares on e^{px}, e^{qx}.
//   4. Candidates: that fit (when the roots are real and the result finite
//      and within kMaxLogMagnitude) and the constant a = mean(y), p = b = q = 0;
//      the one with the smaller squared error on the float32 coefficients is
//      sent. Complex roots (an oscillating model) thus fall back to the mean.
//
// Payload (after the 16-byte common header):
//   16  u64  P, number of values >= 0 (P <= K)
//   24  f32  a, p, b, q of the positive part
//   40  f32  a, p, b, q of the negative part
//   56  end. Coefficients of an empty part are all 0. All are finite and
//       satisfy log|a| + max(p, 0) <= kMaxLogMagnitude (same for b, q), so a
//       decoded value never overflows float32; the decoder checks both.
#ifndef DEEPREDUCE_KERNELS_VALUE_DEXP_H_
#define DEEPREDUCE_KERNELS_VALUE_DEXP_H_

#include <cmath>
#include <cstdint>

#include "kernels/common/platform.h"
#include "kernels/value/value_format.h"

namespace deepreduce {
namespace value {
namespace dexp {

constexpr int64_t kPayloadBytes = 56;
// ln(FLT_MAX / 2) = 87.72...: two terms each below FLT_MAX / 2.
constexpr double kMaxLogMagnitude = 87.7;

struct Coefs {
  float a, p, b, q;
};

DR_HOST_DEVICE double Abscissa(int64_t j, int64_t n) {
  return n > 1 ? static_cast<double>(j) / static_cast<double>(n - 1) : 0.0;
}

DR_HOST_DEVICE double Eval(const Coefs& c, double x) {
  // DR_DMUL: no FMA contraction on the GPU. The CUDA and glibc exp() may
  // still differ in the last bit of a double, so the CUDA decoder matches
  // the CPU's float results to within 1 ulp, not bit for bit.
  const double y = DR_DMUL(static_cast<double>(c.a), exp(static_cast<double>(c.p) * x)) +
                   DR_DMUL(static_cast<double>(c.b), exp(static_cast<double>(c.q) * x));
  return y > 0.0 ? y : 0.0;
}

DR_HOST_DEVICE bool TermOk(float a, float p) {
  if (!IsFinite(a) || !IsFinite(p)) return false;
  if (a == 0.0f) return true;
  return log(fabs(static_cast<double>(a))) + (p > 0.0f ? static_cast<double>(p) : 0.0) <=
         kMaxLogMagnitude;
}

DR_HOST_DEVICE bool CoefsOk(const Coefs& c) { return TermOk(c.a, c.p) && TermOk(c.b, c.q); }

// Decoded value at sorted position i of K, given the split P.
DR_HOST_DEVICE float DecodeAt(const Coefs& pos, const Coefs& neg, int64_t p_count,
                              int64_t k, int64_t i) {
  if (i < p_count) return static_cast<float>(Eval(pos, Abscissa(i, p_count)));
  const int64_t n = k - p_count;
  const int64_t j = k - 1 - i;  // the most negative value is the neg part's x = 0
  return -static_cast<float>(Eval(neg, Abscissa(j, n)));
}

}  // namespace dexp
}  // namespace value
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_VALUE_DEXP_H_
