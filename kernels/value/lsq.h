// Streaming least squares by orthogonal updates of R (CPU and CUDA; no TF
// headers).
//
// Rows are folded into an upper-triangular R (QR without storing Q or the
// design matrix), in double precision: one at a time by Givens rotations, or
// in blocks of kBlockRows by Householder reflections of [R; block]. This is backward
// stable, needs O(n^2) memory for n <= kMaxCols unknowns regardless of the
// number of rows, and two partial factorizations of disjoint row blocks merge
// exactly by rotating the rows of one R into the other, which is how the CPU
// kernel fits one long segment on several threads. No normal equations: the
// conditioning of the problem is that of the design matrix, not its square.
//
// Every product that meets an addition is spelled DR_DMUL (platform.h), so
// that nvcc cannot contract it into an FMA: the CUDA polyfit encoder runs the
// same operation sequence and produces the same bits as the CPU kernel.
// Division and sqrt are correctly rounded in double on both.
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
      const double h = sqrt(DR_DMUL(rii, rii) + DR_DMUL(a, a));
      const double c = rii / h, s = a / h;
      r[i][i] = h;
      for (int j = i + 1; j < n; ++j) {
        const double t = r[i][j];
        r[i][j] = DR_DMUL(c, t) + DR_DMUL(s, row[j]);
        row[j] = DR_DMUL(c, row[j]) - DR_DMUL(s, t);
      }
      const double t = qty[i];
      qty[i] = DR_DMUL(c, t) + DR_DMUL(s, y);
      y = DR_DMUL(c, y) - DR_DMUL(s, t);
    }
    rss += DR_DMUL(y, y);
  }

  // Adds m equations at once (rows b[0..m), right-hand sides yb; both are
  // overwritten) by Householder reflections of the stacked [R; b]: one sqrt
  // per column per block instead of one per rotation, and inner loops over
  // the m rows that vectorize. Same factorization up to rounding (and row
  // signs) as m calls of AddRow.
  DR_HOST_DEVICE void AddRows(double (*b)[kMaxCols], double* yb, int m) {
    for (int i = 0; i < n; ++i) {
      double sigma = 0.0;
      for (int k = 0; k < m; ++k) sigma += DR_DMUL(b[k][i], b[k][i]);
      if (sigma == 0.0) continue;
      const double alpha = r[i][i];
      const double mu = sqrt(DR_DMUL(alpha, alpha) + sigma);
      // v = [1; b[:, i] / beta], H = I - tau v v^T maps [alpha; b[:, i]] to
      // [mu; 0] (Golub & Van Loan, Alg. 5.1.1, cancellation-free beta).
      const double beta = alpha <= 0.0 ? alpha - mu : -sigma / (alpha + mu);
      const double tau = DR_DMUL(2.0 * beta, beta) / (sigma + DR_DMUL(beta, beta));
      const double inv_beta = 1.0 / beta;
      for (int k = 0; k < m; ++k) b[k][i] *= inv_beta;
      r[i][i] = mu;
      for (int j = i + 1; j <= n; ++j) {  // j == n: the right-hand side
        double dot = j < n ? r[i][j] : qty[i];
        for (int k = 0; k < m; ++k) dot += DR_DMUL(b[k][i], j < n ? b[k][j] : yb[k]);
        const double f = DR_DMUL(tau, dot);
        if (j < n) {
          r[i][j] -= f;
          for (int k = 0; k < m; ++k) b[k][j] -= DR_DMUL(f, b[k][i]);
        } else {
          qty[i] -= f;
          for (int k = 0; k < m; ++k) yb[k] -= DR_DMUL(f, b[k][i]);
        }
      }
    }
    for (int k = 0; k < m; ++k) rss += DR_DMUL(yb[k], yb[k]);
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
      for (int j = i + 1; j < n; ++j) acc -= DR_DMUL(r[i][j], x[j]);
      x[i] = acc / r[i][i];
    }
    return dropped;
  }
};

// Buffers rows and feeds them to GivensLsq::AddRows kBlockRows at a time.
// The block size is part of the arithmetic (it decides which rows are
// reflected together), so CPU and GPU use this one. ~4 KB: the CUDA kernels
// keep it, with the GivensLsq it feeds, in shared memory (a few threads per
// block) rather than in per-thread local memory.
constexpr int kBlockRows = 32;
struct BlockedLsq {
  GivensLsq* lsq;
  int m;
  double b[kBlockRows][kMaxCols];
  double yb[kBlockRows];

  BlockedLsq() = default;
  DR_HOST_DEVICE explicit BlockedLsq(GivensLsq* target) : lsq(target), m(0) {}
  DR_HOST_DEVICE void Attach(GivensLsq* target) {
    lsq = target;
    m = 0;
  }
  DR_HOST_DEVICE double* NextRow() { return b[m]; }
  DR_HOST_DEVICE void Commit(double y) {
    yb[m++] = y;
    if (m == kBlockRows) Flush();
  }
  DR_HOST_DEVICE void Flush() {
    if (m > 0) lsq->AddRows(b, yb, m);
    m = 0;
  }
};

}  // namespace value
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_VALUE_LSQ_H_
