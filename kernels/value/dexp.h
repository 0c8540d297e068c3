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
// Fit of one part:
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
// Execution order (shared by the CPU kernel and the CUDA encoder). A part is
// cut into blocks of kFitBlock values; each step is a per-block function
// (run in parallel: thread-pool items on the CPU, one GPU thread per block)
// followed by a sequential combine over the blocks in block order (one
// thread): Moments/Start (max, mean), Integral/IntegralStarts (each block's
// trapezoid totals, then the S and SS values entering every block),
// IntegralRows/Roots (step 2: the blocks' QR factorizations merged in block
// order), ExpRows/Amplitudes (step 3), Sse/Choose (step 4). Products that
// meet an addition are DR_DMUL, so the only arithmetic that differs between
// the CPU and the GPU is exp() (and log() in CoefsOk): CUDA's and glibc's may
// differ in the last bit of a double. p and q never depend on exp() and are
// the same on both; a and b can differ by a float ulp, and where the two
// candidates' errors tie to within that, the choice between them can differ.
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
#include "kernels/value/lsq.h"
#include "kernels/value/value_format.h"

namespace deepreduce {
namespace value {
namespace dexp {

// The codec's struct (value_format.h's CodecDefaults): ops and kernels of its own.
struct Codec : CodecDefaults {
  static constexpr bool kOwnOps = true;
};

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

// ------------------------------------------------------------ the fit --

constexpr int64_t kFitBlock = 2048;

DR_HOST_DEVICE bool IsFiniteD(double v) {
  uint64_t u;
  memcpy(&u, &v, 8);
  return (u & 0x7ff0000000000000ULL) != 0x7ff0000000000000ULL;
}

// One sign part: the i-th magnitude is the positives in sorted order, or the
// negatives' magnitudes from the most negative value on.
struct Part {
  const float* y;  // negative: points at the last sorted value, read backwards
  int64_t n;
  bool negative;
  DR_HOST_DEVICE double at(int64_t j) const {
    return negative ? -static_cast<double>(y[-j]) : static_cast<double>(y[j]);
  }
};

// Part 0 (values >= 0) or 1 (negatives) of k sorted values, p_count >= 0.
DR_HOST_DEVICE Part MakePart(const float* y, int64_t k, int64_t p_count, int which) {
  if (which == 0) return Part{y, p_count, false};
  return Part{k > 0 ? y + k - 1 : y, k - p_count, true};
}

DR_HOST_DEVICE int64_t NumBlocks(int64_t n) { return (n + kFitBlock - 1) / kFitBlock; }

// The fit of one part between the steps.
struct PartFit {
  bool running;  // false once `out` is final
  bool error;    // the mean magnitude is too large for the payload
  double ymax, mean, inv, h;
  float p, q;
  Coefs best, cand, out;
};

struct BlockMoments {
  double ymax, sum;
};
struct BlockIntegral {
  double ds, dss, m;  // block totals of S and SS from a zero start; m increments
};
struct BlockSse {
  double best, cand;
};

DR_HOST_DEVICE BlockMoments Moments(const Part& part, int64_t b) {
  const int64_t j0 = b * kFitBlock, j1 = j0 + kFitBlock < part.n ? j0 + kFitBlock : part.n;
  BlockMoments r = {0.0, 0.0};
  for (int64_t j = j0; j < j1; ++j) {
    const double v = part.at(j);
    r.ymax = v > r.ymax ? v : r.ymax;
    r.sum += v;
  }
  return r;
}

// Step 1 (and the fallback candidate).
DR_HOST_DEVICE void Start(const Part& part, const BlockMoments* m, int64_t nb, PartFit* f) {
  f->running = false;
  f->error = false;
  f->ymax = 0.0;
  f->mean = 0.0;
  f->p = f->q = 0.0f;
  f->out = Coefs{0.0f, 0.0f, 0.0f, 0.0f};
  if (part.n == 0) return;
  double sum = 0.0;
  for (int64_t b = 0; b < nb; ++b) {
    f->ymax = m[b].ymax > f->ymax ? m[b].ymax : f->ymax;
    sum += m[b].sum;
  }
  f->mean = sum / static_cast<double>(part.n);
  f->best = Coefs{static_cast<float>(f->mean), 0.0f, 0.0f, 0.0f};
  if (!CoefsOk(f->best)) {
    f->error = true;
    return;
  }
  f->out = f->best;
  if (part.n < 5 || f->ymax <= 0.0) return;
  f->inv = 1.0 / f->ymax;
  f->h = 1.0 / static_cast<double>(part.n - 1);
  f->running = true;
}

// Trapezoid recurrence of rows [j0, j1) from S = s, SS = ss at row j0 - 1
// (row 0 has no increment). Calls row(j, s, ss, yj) for every row.
template <typename Row>
DR_HOST_DEVICE void Trapezoid(const Part& part, int64_t j0, int64_t j1, const PartFit& f,
                              double s, double ss, Row&& row) {
  double prev = DR_DMUL(part.at(j0 > 0 ? j0 - 1 : 0), f.inv), prev_s = s;
  for (int64_t j = j0; j < j1; ++j) {
    const double yj = DR_DMUL(part.at(j), f.inv);
    if (j > 0) {
      s += DR_DMUL(0.5 * (yj + prev), f.h);
      ss += DR_DMUL(0.5 * (s + prev_s), f.h);
    }
    row(j, s, ss, yj);
    prev = yj;
    prev_s = s;
  }
}

DR_HOST_DEVICE void BlockRange(const Part& part, int64_t b, int64_t* j0, int64_t* j1) {
  *j0 = b * kFitBlock;
  *j1 = *j0 + kFitBlock < part.n ? *j0 + kFitBlock : part.n;
}

DR_HOST_DEVICE BlockIntegral Integral(const Part& part, int64_t b, const PartFit& f) {
  int64_t j0, j1;
  BlockRange(part, b, &j0, &j1);
  BlockIntegral r = {0.0, 0.0, 0.0};
  Trapezoid(part, j0, j1, f, 0.0, 0.0, [&](int64_t j, double s, double ss, double) {
    r.ds = s;
    r.dss = ss;
    if (j > 0) r.m += 1.0;
  });
  return r;
}

// S and SS entering every block (s0[b], ss0[b]: their values at row
// b * kFitBlock - 1; 0 for block 0). With S = S_in + s_local inside a block,
// SS grows by m * S_in * h + (the block's SS from a zero start).
DR_HOST_DEVICE void IntegralStarts(const BlockIntegral* in, int64_t nb, const PartFit& f,
                                   double* s0, double* ss0) {
  double s = 0.0, ss = 0.0;
  for (int64_t b = 0; b < nb; ++b) {
    s0[b] = s;
    ss0[b] = ss;
    ss = ss + DR_DMUL(DR_DMUL(in[b].m, s), f.h) + in[b].dss;
    s = s + in[b].ds;
  }
}

// Step 2 rows of block b: y = A SS + B S + C x + D.
DR_HOST_DEVICE void IntegralRows(const Part& part, int64_t b, const PartFit& f, double s0,
                                 double ss0, GivensLsq* lsq, BlockedLsq* work) {
  int64_t j0, j1;
  BlockRange(part, b, &j0, &j1);
  lsq->Init(4);
  work->Attach(lsq);
  Trapezoid(part, j0, j1, f, s0, ss0, [&](int64_t j, double s, double ss, double yj) {
    double* row = work->NextRow();
    row[0] = ss;
    row[1] = s;
    row[2] = static_cast<double>(j) * f.h;
    row[3] = 1.0;
    work->Commit(yj);
  });
  work->Flush();
}

// Merges the blocks' factorizations into lsq[0], in block order.
DR_HOST_DEVICE void MergeBlocks(GivensLsq* lsq, int64_t nb) {
  for (int64_t b = 1; b < nb; ++b) lsq[0].Merge(lsq[b]);
}

// End of step 2: the exponents p, q, or the end of the fit.
DR_HOST_DEVICE void Roots(GivensLsq* lsq, int64_t nb, PartFit* f) {
  MergeBlocks(lsq, nb);
  double abcd[4];
  lsq[0].Solve(abcd, 1e-12);
  const double disc = DR_DMUL(abcd[1], abcd[1]) + 4.0 * abcd[0];
  if (!(disc >= 0.0) || !IsFiniteD(disc)) {
    f->running = false;
    return;
  }
  f->p = static_cast<float>(0.5 * (abcd[1] + sqrt(disc)));
  f->q = static_cast<float>(0.5 * (abcd[1] - sqrt(disc)));
  if (!IsFinite(f->p) || !IsFinite(f->q) || f->p > 80.0f) f->running = false;
}

// Step 3 rows of block b: y = a e^{px} + b e^{qx} for the float32 p, q.
DR_HOST_DEVICE void ExpRows(const Part& part, int64_t b, const PartFit& f, GivensLsq* lsq,
                            BlockedLsq* work) {
  int64_t j0, j1;
  BlockRange(part, b, &j0, &j1);
  lsq->Init(2);
  work->Attach(lsq);
  for (int64_t j = j0; j < j1; ++j) {
    const double x = Abscissa(j, part.n);
    double* row = work->NextRow();
    row[0] = exp(static_cast<double>(f.p) * x);
    row[1] = exp(static_cast<double>(f.q) * x);
    work->Commit(DR_DMUL(part.at(j), f.inv));
  }
  work->Flush();
}

// End of step 3: the candidate, or the end of the fit.
DR_HOST_DEVICE void Amplitudes(GivensLsq* lsq, int64_t nb, PartFit* f) {
  MergeBlocks(lsq, nb);
  double coef[2];
  lsq[0].Solve(coef, 1e-12);
  f->cand = Coefs{static_cast<float>(coef[0] * f->ymax), f->p,
                  static_cast<float>(coef[1] * f->ymax), f->q};
  if (!CoefsOk(f->cand)) f->running = false;
}

// Step 4: both candidates' squared errors over block b.
DR_HOST_DEVICE BlockSse Sse(const Part& part, int64_t b, const PartFit& f) {
  int64_t j0, j1;
  BlockRange(part, b, &j0, &j1);
  BlockSse r = {0.0, 0.0};
  for (int64_t j = j0; j < j1; ++j) {
    const double x = Abscissa(j, part.n), v = part.at(j);
    const double db = Eval(f.best, x) - v, dc = Eval(f.cand, x) - v;
    r.best += DR_DMUL(db, db);
    r.cand += DR_DMUL(dc, dc);
  }
  return r;
}

DR_HOST_DEVICE void Choose(const BlockSse* in, int64_t nb, PartFit* f) {
  double best = 0.0, cand = 0.0;
  for (int64_t b = 0; b < nb; ++b) {
    best += in[b].best;
    cand += in[b].cand;
  }
  if (IsFiniteD(cand) && cand < best) f->out = f->cand;
  f->running = false;
}

// Host: per-block result arrays of one part (NumBlocks(n) entries each).
struct HostScratch {
  BlockMoments* moments;
  BlockIntegral* integral;
  double* s0;
  double* ss0;
  GivensLsq* lsq;
  BlockSse* sse;
};

// Host: the whole fit of one part. for_blocks(fn) must call fn(b, work) for
// every block b in [0, NumBlocks(n)), in any order and on any threads, each
// thread with its own BlockedLsq* work. On return f->out is the result, or
// f->error is set.
template <typename ForBlocks>
void FitPartHost(const Part& part, const HostScratch& s, ForBlocks&& for_blocks, PartFit* f) {
  const int64_t nb = NumBlocks(part.n);
  for_blocks([&](int64_t b, BlockedLsq*) { s.moments[b] = Moments(part, b); });
  Start(part, s.moments, nb, f);
  if (f->running) {
    for_blocks([&](int64_t b, BlockedLsq*) { s.integral[b] = Integral(part, b, *f); });
    IntegralStarts(s.integral, nb, *f, s.s0, s.ss0);
    for_blocks([&](int64_t b, BlockedLsq* w) {
      IntegralRows(part, b, *f, s.s0[b], s.ss0[b], &s.lsq[b], w);
    });
    Roots(s.lsq, nb, f);
  }
  if (f->running) {
    for_blocks([&](int64_t b, BlockedLsq* w) { ExpRows(part, b, *f, &s.lsq[b], w); });
    Amplitudes(s.lsq, nb, f);
  }
  if (f->running) {
    for_blocks([&](int64_t b, BlockedLsq*) { s.sse[b] = Sse(part, b, *f); });
    Choose(s.sse, nb, f);
  }
}

// The 56-byte payload.
DR_HOST_DEVICE void WritePayload(uint8_t* out, uint64_t k, uint64_t p_count, const Coefs& pos,
                                 const Coefs& neg) {
  WriteHeader(out, kCodecDexp, k);
  PutU64(out + 16, p_count);
  const Coefs* c[2] = {&pos, &neg};
  for (int i = 0; i < 2; ++i) {
    PutF32(out + 24 + 16 * i, c[i]->a);
    PutF32(out + 28 + 16 * i, c[i]->p);
    PutF32(out + 32 + 16 * i, c[i]->b);
    PutF32(out + 36 + 16 * i, c[i]->q);
  }
}

}  // namespace dexp
}  // namespace value
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_VALUE_DEXP_H_
