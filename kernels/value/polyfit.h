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

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/common/platform.h"
#include "kernels/value/lsq.h"
#include "kernels/value/value_format.h"

namespace deepreduce {
namespace value {
namespace polyfit {

// The codec's struct (value_format.h's CodecDefaults): ops and kernels of its own.
struct Codec : CodecDefaults {
  static constexpr bool kOwnOps = true;
};

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
  for (int k = 2; k <= deg; ++k) out[k] = DR_DMUL(2.0 * t, out[k - 1]) - out[k - 2];
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

// Adds rows [j0, j1) of a segment of length len (values y[j0..j1)) to lsq,
// with `work` as the row buffer.
DR_HOST_DEVICE void AccumulateRows(const float* y, int64_t j0, int64_t j1,
                                   int64_t len, int deg, GivensLsq* lsq, BlockedLsq* work) {
  work->Attach(lsq);
  for (int64_t j = j0; j < j1; ++j) {
    ChebRow(Abscissa(j, len), deg, work->NextRow());
    work->Commit(static_cast<double>(y[j - j0]));
  }
  work->Flush();
}

// Vertical distance of sorted value y[j] from the chord of segment [lo, hi]
// (inclusive end points): the greedy knot criterion of the paper's Lemma 1.
DR_HOST_DEVICE double ChordDistance(const float* y, int64_t lo, int64_t hi,
                                    int64_t j) {
  const double f = static_cast<double>(j - lo) / static_cast<double>(hi - lo);
  const double chord =
      static_cast<double>(y[lo]) +
      DR_DMUL(static_cast<double>(y[hi]) - static_cast<double>(y[lo]), f);
  return fabs(static_cast<double>(y[j]) - chord);
}

// ------------------------------------------------------------ greedy knots --
//
// The segment list of the greedy segmentation, in position order. Each pass
// cuts the segment with the largest `dist` (the first one on ties) after its
// `split`; the two halves get new BestSplit()s. The CPU computes BestSplit in
// one loop, the GPU by a block-wide argmax with the same tie rule (the first
// j of the largest distance), so both find the same knots.
struct GreedySeg {
  int64_t lo, hi;  // [lo, hi)
  double dist;     // max chord distance inside, 0 if not worth splitting
  int64_t split;   // cut after this position
};

// A segment of n values is fitted exactly by degree `degree` already, or is
// too short to cut: no candidate knot.
DR_HOST_DEVICE bool Splittable(int64_t n, int degree) { return !(n <= degree + 1 || n < 3); }

// Candidate knots of [lo, hi): positions lo + 1 .. hi - 2.
DR_HOST_DEVICE void BestSplitSerial(const float* y, int64_t lo, int64_t hi, int degree,
                                    GreedySeg* seg) {
  seg->lo = lo;
  seg->hi = hi;
  seg->dist = 0.0;
  seg->split = -1;
  if (!Splittable(hi - lo, degree)) return;
  double best = -1.0;
  for (int64_t j = lo + 1; j < hi - 1; ++j) {
    const double d = ChordDistance(y, lo, hi - 1, j);
    if (d > best) {
      best = d;
      seg->split = j;
    }
  }
  seg->dist = best;
}

// (d, j) beats (best_d, best_j) in the argmax: larger distance, then the
// smaller position.
DR_HOST_DEVICE bool Better(double d, int64_t j, double best_d, int64_t best_j) {
  return d > best_d || (d == best_d && j < best_j);
}

// ------------------------------------------------------------ fit plan --
//
// Every segment's rows are fitted in blocks of kFitBlock rows (the last one
// shorter), each block into its own GivensLsq, and the blocks of a segment are
// merged into its first block's in block order. This fixed order is the
// CPU's (one thread-pool work item per block) and the GPU's (one thread per
// block, one thread per segment for the merge), so both round alike.
constexpr int64_t kFitBlock = 2048;

struct FitBlock {
  int64_t start;   // sorted position of the segment's first value
  int64_t j0, j1;  // rows [j0, j1) of the segment
  int64_t len;     // segment length
};

struct SegPlan {
  int64_t len;
  int64_t first_block, num_blocks;
  int64_t coef_offset;  // index of c_0 among all coefficients
};

// Host: number of fit blocks and of coefficients of a segmentation.
inline void PlanSizes(const int64_t* lens, int64_t num_segs, int degree, int64_t* num_blocks,
                      int64_t* num_coefs) {
  *num_blocks = 0;
  *num_coefs = 0;
  for (int64_t s = 0; s < num_segs; ++s) {
    *num_blocks += (lens[s] + kFitBlock - 1) / kFitBlock;
    *num_coefs += SegmentDegree(degree, lens[s]) + 1;
  }
}

// Host: the block and segment tables (sizes from PlanSizes).
inline void MakePlan(const int64_t* lens, int64_t num_segs, int degree, FitBlock* blocks,
                     SegPlan* segs) {
  int64_t b = 0, start = 0, coef = 0;
  for (int64_t s = 0; s < num_segs; ++s) {
    segs[s] = {lens[s], b, 0, coef};
    for (int64_t j0 = 0; j0 < lens[s]; j0 += kFitBlock) {
      blocks[b++] = {start, j0, std::min(lens[s], j0 + kFitBlock), lens[s]};
      ++segs[s].num_blocks;
    }
    start += lens[s];
    coef += SegmentDegree(degree, lens[s]) + 1;
  }
}

// Payload size of a plan.
DR_HOST_DEVICE int64_t PayloadBytes(int64_t num_segs, int64_t num_coefs) {
  return kFixedBytes + 4 * num_segs + 4 * num_coefs;
}

// Fits one block's rows (y: all sorted values) into *lsq.
DR_HOST_DEVICE void FitBlockRows(const float* y, const FitBlock& bl, int degree, GivensLsq* lsq,
                                 BlockedLsq* work) {
  const int deg = SegmentDegree(degree, bl.len);
  lsq->Init(deg + 1);
  AccumulateRows(y + bl.start + bl.j0, bl.j0, bl.j1, bl.len, deg, lsq, work);
}

// Outcome of FinishSegment.
constexpr int kSegOk = 0;
constexpr int kSegCoefOverflow = 1;  // a coefficient is beyond float32 range
constexpr int kSegSumOverflow = 2;   // sum |c_k| > FLT_MAX: decoding could overflow

// Merges the segment's block factorizations (lsq[0 .. num_blocks), in place
// into lsq[0]), solves, and writes its length and float32 coefficients into
// the payload. Stops at the first bad coefficient, as the CPU always did.
DR_HOST_DEVICE int FinishSegment(const SegPlan& sp, int64_t seg, int64_t num_segs,
                                 GivensLsq* lsq, uint8_t* payload) {
  PutU32(payload + kFixedBytes + 4 * seg, static_cast<uint32_t>(sp.len));
  for (int64_t b = 1; b < sp.num_blocks; ++b) lsq[0].Merge(lsq[b]);
  double x[kMaxCols];
  lsq[0].Solve(x, 1e-13);
  uint8_t* out = payload + kFixedBytes + 4 * num_segs + 4 * sp.coef_offset;
  double total = 0.0;
  for (int c = 0; c < lsq[0].n; ++c) {
    const float f = static_cast<float>(x[c]);
    if (!IsFinite(f)) return kSegCoefOverflow;
    total += fabs(static_cast<double>(f));
    PutF32(out + 4 * c, f);
  }
  // FLT_MAX, spelled out: <cfloat> is not needed by the device code.
  return total <= 3.4028234663852886e+38 ? kSegOk : kSegSumOverflow;
}

// The 24 fixed bytes (header included) of a payload.
inline void WriteFixed(uint8_t* out, uint64_t k, int degree, uint8_t seg_kind,
                       int64_t num_segs) {
  WriteHeader(out, kCodecPolyfit, k);
  PutU8(out + 16, static_cast<uint8_t>(degree));
  PutU8(out + 17, seg_kind);
  PutU16(out + 18, 0);
  PutU32(out + 20, static_cast<uint32_t>(num_segs));
}

// ------------------------------------------------- host-only segmentation --

// Number of values >= 0 in a descending sequence.
inline int64_t SignSplit(const float* y, int64_t k) {
  return std::partition_point(y, y + k, [](float x) { return x >= 0.0f; }) - y;
}

// Splits `total` segments between the positive and negative parts in
// proportion to their sizes, at least one each when both exist.
inline void SplitCounts(int64_t total, int64_t pos, int64_t neg, int64_t* sp, int64_t* sn) {
  if (pos == 0 || neg == 0) {
    *sp = neg == 0 ? total : 0;
    *sn = neg == 0 ? 0 : total;
    return;
  }
  total = std::max<int64_t>(total, 2);
  int64_t p = static_cast<int64_t>(std::nearbyint(static_cast<double>(total) * pos /
                                                  static_cast<double>(pos + neg)));
  p = std::min(std::max<int64_t>(p, 1), total - 1);
  *sp = p;
  *sn = total - p;
}

// Geometric layout of one sign part of `length` values in `segs` segments:
// boundaries round((length + 1)^(j / segs)) - 1, so segment lengths grow by a
// constant factor away from the extreme end, where the sorted magnitudes
// change fastest. from_end puts the short segments at the end (negatives).
// Writes the lengths to out and returns their count.
inline int64_t GeometricPart(int64_t length, int64_t segs, bool from_end, int64_t* out) {
  segs = std::max<int64_t>(1, std::min(segs, length));
  int64_t prev = 0;
  for (int64_t j = 1; j <= segs; ++j) {
    int64_t x = static_cast<int64_t>(std::nearbyint(
                    std::pow(static_cast<double>(length) + 1.0,
                             static_cast<double>(j) / static_cast<double>(segs)))) - 1;
    x = std::max(x, prev + 1);
    x = std::min(x, length - (segs - j));
    if (j == segs) x = length;
    out[j - 1] = x - prev;
    prev = x;
  }
  if (from_end) std::reverse(out, out + segs);
  return segs;
}

// The geometric segmentation of k sorted values of which p_count are >= 0:
// a function of (k, p_count, segs) only, computed on the host by both the
// CPU and the GPU kernel. lens needs max(segs, 2) entries; returns the count.
inline int64_t GeometricLayout(int64_t k, int64_t p_count, int64_t segs, int64_t* lens) {
  int64_t sp, sn, c = 0;
  SplitCounts(segs, p_count, k - p_count, &sp, &sn);
  if (p_count > 0) c += GeometricPart(p_count, sp, false, lens);
  if (k - p_count > 0) c += GeometricPart(k - p_count, sn, true, lens + c);
  return c;
}

// The greedy segmentation (host; the CPU kernel's, and the reference of the
// CUDA one): knots (Lemma 1) by repeatedly cutting the segment whose point
// farthest from its chord is farthest, at that point, until `segs` segments
// or nothing is worth cutting. The sign change is always a knot: top-k values
// jump from +t to -t there. seg: scratch of max(segs, 2) entries; lens gets
// the lengths; returns their count.
inline int64_t GreedyLayout(const float* y, int64_t k, int64_t p_count, int64_t segs,
                            int degree, GreedySeg* seg, int64_t* lens) {
  int64_t c = 0;
  if (p_count > 0 && p_count < k) {
    BestSplitSerial(y, 0, p_count, degree, &seg[c++]);
    BestSplitSerial(y, p_count, k, degree, &seg[c++]);
  } else {
    BestSplitSerial(y, 0, k, degree, &seg[c++]);
  }
  while (c < segs) {
    int64_t i = 0;
    for (int64_t q = 1; q < c; ++q) {
      if (seg[q].dist > seg[i].dist) i = q;
    }
    if (!(seg[i].dist > 0.0)) break;
    const GreedySeg old = seg[i];
    std::copy_backward(seg + i + 1, seg + c, seg + c + 1);
    BestSplitSerial(y, old.lo, old.split + 1, degree, &seg[i]);
    BestSplitSerial(y, old.split + 1, old.hi, degree, &seg[i + 1]);
    ++c;
  }
  for (int64_t q = 0; q < c; ++q) lens[q] = seg[q].hi - seg[q].lo;
  return c;
}

// Default number of segments: about the original GPU code's 10 at K = 10k
// and 16 at K = 250k (REFERENCE 1.3).
inline int64_t AutoSegments(int64_t k) {
  if (k <= 1) return 1;
  const int64_t s = static_cast<int64_t>(std::nearbyint(1.3 * std::log2(static_cast<double>(k)))) - 7;
  return s < 1 ? 1 : s;
}

// The number of segments to cut k values into: `segments` (1..2^20), or
// AutoSegments(k) for 0; never more than k.
inline int64_t WantedSegments(int64_t k, int64_t segments) {
  if (k == 0) return 0;
  return std::min(k, segments > 0 ? segments : AutoSegments(k));
}

}  // namespace polyfit
}  // namespace value
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_VALUE_POLYFIT_H_
