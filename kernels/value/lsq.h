// Streaming least squares by Givens rotations (CPU and CUDA; no TF headers).
//
// Rows are rotated one at a time into an upper-triangular R (QR without
// storing Q or the design matrix), in double precision. This is backward
// stable, needs O(n^2) memory for n <= kMaxCols unknowns regardless of the
// number of rows, and two partial factorizations of disjoint row blocks merge
// exactly by rotating the rows of one R into the other, which is how the CPU
// kernel fits one long segment on several threads. No normal equations: the
// conditioning of the problem is that of the design matrix, not its square.
#ifndef DEEPREDUCE_KERNELS_VALUE_LSQ_H_
#define DEEPREDUCE_KERNELS_VALUE_LSQ_H_

#include <cmath>
#include <cstdint>

#include "kernels/common/platform.h"

namespace deepreduce {
namespace value {

constexpr int kMaxCols = 16;

struct GivensLsq {
  int n;                          // unknowns, 1..kMaxCols
  double r[kMaxCols][kMaxCols];   // upper triangle used
  double qty[kMaxCols];           // Q^T y, first n entries
  double rss;                     // residual sum of squares so far

  DR_HOST_DEVICE void Init(int cols) {
    n = cols;
    for (int i = 0; i < kMaxCols; ++i) {
      qty[i] = 0.0;
      for (int j = 0; j < kMaxCols; ++j) r[i][j] = 0.0;
    }
    rss = 0.0;
  }

  // Adds the equation row . x = y. `row` is overwritten.
  DR_HOST_DEVICE void AddRow(double* row, double y) {
    for (int i = 0; i < n; ++i) {
      const double a = row[i];
      if (a == 0.0) continue;
      const double rii = r[i][i];
      const double h = sqrt(rii * rii + a * a);
      const double c = rii / h, s = a / h;
      r[i][i] = h;
      for (int j = i + 1; j < n; ++j) {
        const double t = r[i][j];
        r[i][j] = c * t + s * row[j];
        row[j] = c * row[j] - s * t;
      }
      const double t = qty[i];
      qty[i] = c * t + s * y;
      y = c * y - s * t;
    }
    rss += y * y;
  }

  // Folds another factorization (of other rows, same unknowns) into this one.
  DR_HOST_DEVICE void Merge(const GivensLsq& o) {
    double row[kMaxCols];
    for (int i = 0; i < o.n; ++i) {
      for (int j = 0; j < n; ++j) row[j] = j >= i ? o.r[i][j] : 0.0;
      AddRow(row, o.qty[i]);
    }
    rss += o.rss;
  }

  // Back substitution. An unknown whose pivot is below rel_tol times the
  // largest pivot is set to 0 (rank-deficient design); returns their count.
  DR_HOST_DEVICE int Solve(double* x, double rel_tol) const {
    double big = 0.0;
    for (int i = 0; i < n; ++i) big = fmax(big, fabs(r[i][i]));
    int dropped = 0;
    for (int i = n - 1; i >= 0; --i) {
      if (!(fabs(r[i][i]) > rel_tol * big)) {
        x[i] = 0.0;
        ++dropped;
        continue;
      }
      double acc = qty[i];
      for (int j = i + 1; j < n; ++j) acc -= r[i][j] * x[j];
      x[i] = acc / r[i][i];
    }
    return dropped;
  }
};

}  // namespace value
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_VALUE_LSQ_H_
