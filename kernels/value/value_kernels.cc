// CPU kernels of the value codecs (polyfit, dexp, qsgd, fp16, bf16, deflate).
// Per-element and per-segment logic comes from the codec headers and is
// shared with CUDA code; this file adds validation, sorting, segmentation,
// threading and the payload layout checks. Every decoder checks the header
// and every length against the buffer it holds before reading a section.
#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "external/zlib/zlib.h"  // TF's bundled zlib; libtensorflow_framework exports it
#include "kernels/common/cpu_parallel.h"
#include "kernels/value/dexp.h"
#include "kernels/value/halfcast.h"
#include "kernels/value/lsq.h"
#include "kernels/value/polyfit.h"
#include "kernels/value/qsgd.h"
#include "kernels/value/value_args.h"
#include "kernels/value/value_format.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/platform/threadpool.h"

namespace deepreduce {
namespace value {
namespace {

using ::tensorflow::DataTypeToEnum;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;



// Allocates a scratch buffer of `count` objects of T (trivially copyable).
template <typename T>
absl::Status AllocateScratch(OpKernelContext* ctx, int64_t count, Tensor* t, T** ptr) {
  const int64_t bytes = std::max<int64_t>(1, count * static_cast<int64_t>(sizeof(T)));
  absl::Status s = ctx->allocate_temp(tensorflow::DT_UINT8, TensorShape({bytes}), t);
  if (!s.ok()) return s;
  *ptr = reinterpret_cast<T*>(t->flat<uint8_t>().data());
  return absl::OkStatus();
}

// `values` must be a float32 vector; the lossy codecs also require every
// value to be finite (a fit or a quantizer has no faithful image of NaN/Inf).
absl::Status CheckValues(OpKernelContext* ctx, const Tensor& t, const char* codec,
                         bool require_finite) {
  absl::Status st = CheckValuesShape(t, codec);
  if (!st.ok()) return st;
  const int64_t k = t.NumElements();
  if (!require_finite || k == 0) return absl::OkStatus();
  const float* v = t.flat<float>().data();
  std::atomic<int64_t> first_bad{k};
  CpuPool(ctx)->ParallelFor(k, 2, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if (!std::isfinite(v[i])) {
        AtomicMin(&first_bad, i);
        return;
      }
    }
  });
  const int64_t bad = first_bad.load();
  if (bad < k) return NonFiniteValue(codec, bad, v[bad]);
  return absl::OkStatus();
}

// The common header: magic, codec, version, flags, K. Returns K.
absl::Status ParseHeader(const Tensor& payload, uint8_t codec, uint64_t* k) {
  absl::Status s = CheckPayloadShape(payload, codec);
  if (!s.ok()) return s;
  return ParseHeaderBytes(payload.flat<uint8_t>().data(), payload.NumElements(), codec, k);
}

// ------------------------------------------------------------- sorting --

// Sorts the values in descending signed order (ties by position), writing
// perm (perm[i] = input position of the i-th sorted value) and the sorted
// values y. LSD radix sort over the 32-bit order key, stable, so equal values
// keep position order; 4 passes of 8 bits over (key << 32 | position).
template <typename Tidx>
absl::Status SortDescending(OpKernelContext* ctx, const float* v, int64_t k, Tidx* perm,
                            float* y) {
  Tensor a_t, b_t;
  uint64_t *a, *b;
  absl::Status s = AllocateScratch(ctx, k, &a_t, &a);
  if (!s.ok()) return s;
  s = AllocateScratch(ctx, k, &b_t, &b);
  if (!s.ok()) return s;
  CpuPool(ctx)->ParallelFor(k, 5, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      a[i] = (static_cast<uint64_t>(DescendingKey(v[i])) << 32) | static_cast<uint64_t>(i);
    }
  });
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 32 + 8 * pass;
    int64_t count[257] = {0};
    for (int64_t i = 0; i < k; ++i) ++count[((a[i] >> shift) & 0xff) + 1];
    if (count[((a[0] >> shift) & 0xff) + 1] == k) continue;  // one bucket: no-op pass
    for (int d = 0; d < 256; ++d) count[d + 1] += count[d];
    for (int64_t i = 0; i < k; ++i) b[count[(a[i] >> shift) & 0xff]++] = a[i];
    std::swap(a, b);
  }
  CpuPool(ctx)->ParallelFor(k, 5, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t pos = static_cast<int64_t>(a[i] & 0xffffffffULL);
      perm[i] = static_cast<Tidx>(pos);
      y[i] = v[pos];
    }
  });
  return absl::OkStatus();
}

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

// ------------------------------------------------------------- polyfit --

// Number of values >= 0 in a descending sequence.
int64_t SignSplit(const float* y, int64_t k) {
  return std::partition_point(y, y + k, [](float x) { return x >= 0.0f; }) - y;
}

// Splits `total` segments between the positive and negative parts in
// proportion to their sizes, at least one each when both exist.
void SplitCounts(int64_t total, int64_t pos, int64_t neg, int64_t* sp, int64_t* sn) {
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
int64_t GeometricPart(int64_t length, int64_t segs, bool from_end, int64_t* out) {
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

struct GreedySeg {
  int64_t lo, hi;  // [lo, hi)
  double dist;     // max chord distance inside, 0 if not worth splitting
  int64_t split;   // cut after this position
};

void BestSplit(const float* y, int64_t lo, int64_t hi, int degree, GreedySeg* seg) {
  seg->lo = lo;
  seg->hi = hi;
  seg->dist = 0.0;
  seg->split = -1;
  const int64_t n = hi - lo;
  if (n <= degree + 1 || n < 3) return;  // fitted exactly already
  double best = -1.0;
  for (int64_t j = lo + 1; j < hi - 1; ++j) {
    const double d = polyfit::ChordDistance(y, lo, hi - 1, j);
    if (d > best) {
      best = d;
      seg->split = j;
    }
  }
  seg->dist = best;
}

class PolyfitEncodeBase : public OpKernel {
 public:
  explicit PolyfitEncodeBase(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::string segmentation;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("degree", &degree_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("segmentation", &segmentation));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("segments", &segments_));
    OP_REQUIRES(ctx, degree_ >= 0 && degree_ <= polyfit::kMaxDegree,
                Invalid("degree must lie in [0, " + std::to_string(polyfit::kMaxDegree) +
                        "], got " + std::to_string(degree_)));
    OP_REQUIRES(ctx, segments_ >= 0 && segments_ <= (int64_t{1} << 20),
                Invalid("segments must be 0 (automatic) or in [1, 2^20], got " +
                        std::to_string(segments_)));
    OP_REQUIRES(ctx, segmentation == "greedy" || segmentation == "geometric",
                Invalid("segmentation must be 'greedy' or 'geometric', got '" +
                        segmentation + "'"));
    seg_kind_ = segmentation == "greedy" ? polyfit::kSegGreedy : polyfit::kSegGeometric;
  }

 protected:
  // Segment lengths of the sorted values y into lens (capacity >= max(segs, 2));
  // returns the count.
  absl::Status Segment(OpKernelContext* ctx, const float* y, int64_t k, int64_t segs,
                       int64_t* lens, int64_t* count) const {
    const int64_t p = SignSplit(y, k);
    if (seg_kind_ == polyfit::kSegGeometric) {
      int64_t sp, sn, c = 0;
      SplitCounts(segs, p, k - p, &sp, &sn);
      if (p > 0) c += GeometricPart(p, sp, false, lens);
      if (k - p > 0) c += GeometricPart(k - p, sn, true, lens + c);
      *count = c;
      return absl::OkStatus();
    }
    // Greedy knots (Lemma 1): repeatedly cut the segment whose point farthest
    // from its chord is farthest, at that point. The sign change is always a
    // knot: top-k values jump from +t to -t there.
    const int64_t cap = std::max<int64_t>(segs, 2);
    Tensor seg_t;
    GreedySeg* seg;
    absl::Status s = AllocateScratch(ctx, cap, &seg_t, &seg);
    if (!s.ok()) return s;
    int64_t c = 0;
    if (p > 0 && p < k) {
      BestSplit(y, 0, p, degree_, &seg[c++]);
      BestSplit(y, p, k, degree_, &seg[c++]);
    } else {
      BestSplit(y, 0, k, degree_, &seg[c++]);
    }
    while (c < segs) {
      int64_t i = 0;
      for (int64_t q = 1; q < c; ++q) {
        if (seg[q].dist > seg[i].dist) i = q;
      }
      if (!(seg[i].dist > 0.0)) break;
      const GreedySeg old = seg[i];
      std::copy_backward(seg + i + 1, seg + c, seg + c + 1);
      BestSplit(y, old.lo, old.split + 1, degree_, &seg[i]);
      BestSplit(y, old.split + 1, old.hi, degree_, &seg[i + 1]);
      ++c;
    }
    for (int64_t q = 0; q < c; ++q) lens[q] = seg[q].hi - seg[q].lo;
    *count = c;
    return absl::OkStatus();
  }

  int degree_;
  int64_t segments_;
  uint8_t seg_kind_;
};

// Rows fitted per work item; a long segment is split into blocks whose
// Givens factorizations are merged afterwards.
constexpr int64_t kFitBlock = 8192;

template <typename Tidx>
class PolyfitEncodeOp : public PolyfitEncodeBase {
 public:
  using PolyfitEncodeBase::PolyfitEncodeBase;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& values_t = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckValues(ctx, values_t, "polyfit", true));
    const int64_t k = values_t.NumElements();
    OP_REQUIRES_OK(ctx, CheckSortable<Tidx>("polyfit", k));
    Tensor* perm_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({k}), &perm_t));
    Tensor y_t;
    float* y;
    OP_REQUIRES_OK(ctx, AllocateScratch(ctx, k, &y_t, &y));
    if (k > 0) {
      OP_REQUIRES_OK(ctx, SortDescending(ctx, values_t.flat<float>().data(), k,
                                         perm_t->flat<Tidx>().data(), y));
    }

    int64_t num_segs = 0;
    Tensor lens_t;
    int64_t* lens;
    const int64_t want = k == 0 ? 0 : std::min(k, segments_ > 0 ? segments_
                                                              : polyfit::AutoSegments(k));
    OP_REQUIRES_OK(ctx, AllocateScratch(ctx, std::max<int64_t>(want, 2), &lens_t, &lens));
    if (k > 0) OP_REQUIRES_OK(ctx, Segment(ctx, y, k, want, lens, &num_segs));

    // Blocks of at most kFitBlock rows, never crossing a segment boundary.
    int64_t num_blocks = 0, num_coefs = 0;
    for (int64_t s = 0; s < num_segs; ++s) {
      num_blocks += (lens[s] + kFitBlock - 1) / kFitBlock;
      num_coefs += polyfit::SegmentDegree(degree_, lens[s]) + 1;
    }
    struct Block {
      int64_t seg, start, j0, j1, len;  // rows [j0, j1) of the segment at `start`
    };
    Tensor blocks_t, lsq_t;
    Block* blocks;
    GivensLsq* lsq;
    OP_REQUIRES_OK(ctx, AllocateScratch(ctx, num_blocks, &blocks_t, &blocks));
    OP_REQUIRES_OK(ctx, AllocateScratch(ctx, num_blocks, &lsq_t, &lsq));
    {
      int64_t b = 0, start = 0;
      for (int64_t s = 0; s < num_segs; ++s) {
        for (int64_t j0 = 0; j0 < lens[s]; j0 += kFitBlock) {
          blocks[b++] = {s, start, j0, std::min(lens[s], j0 + kFitBlock), lens[s]};
        }
        start += lens[s];
      }
    }
    const int cols = degree_ + 1;
    CpuPool(ctx)->ParallelFor(num_blocks, kFitBlock * cols * cols * 6,
                           [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        const Block& bl = blocks[b];
        const int deg = polyfit::SegmentDegree(degree_, bl.len);
        lsq[b].Init(deg + 1);
        polyfit::AccumulateRows(y + bl.start + bl.j0, bl.j0, bl.j1, bl.len, deg, &lsq[b]);
      }
    });

    const uint64_t size = polyfit::kFixedBytes + 4 * num_segs + 4 * num_coefs;
    Tensor* payload_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({static_cast<int64_t>(size)}),
                                             &payload_t));
    uint8_t* out = payload_t->flat<uint8_t>().data();
    WriteHeader(out, kCodecPolyfit, static_cast<uint64_t>(k));
    PutU8(out + 16, static_cast<uint8_t>(degree_));
    PutU8(out + 17, seg_kind_);
    PutU16(out + 18, 0);
    PutU32(out + 20, static_cast<uint32_t>(num_segs));
    uint8_t* coef_out = out + polyfit::kFixedBytes + 4 * num_segs;
    int64_t b = 0;
    for (int64_t s = 0; s < num_segs; ++s) {
      PutU32(out + polyfit::kFixedBytes + 4 * s, static_cast<uint32_t>(lens[s]));
      GivensLsq& acc = lsq[b++];
      while (b < num_blocks && blocks[b].seg == s) acc.Merge(lsq[b++]);
      double x[kMaxCols];
      acc.Solve(x, 1e-13);
      double total = 0.0;
      for (int c = 0; c < acc.n; ++c) {
        const float f = static_cast<float>(x[c]);
        OP_REQUIRES(ctx, std::isfinite(f),
                    Invalid("polyfit: the fit of segment " + std::to_string(s) +
                            " has a coefficient beyond float32 range; the values are "
                            "too large (|v| near FLT_MAX) for polyfit"));
        total += std::fabs(static_cast<double>(f));
        PutF32(coef_out, f);
        coef_out += 4;
      }
      OP_REQUIRES(ctx, total <= static_cast<double>(FLT_MAX),
                  Invalid("polyfit: the fit of segment " + std::to_string(s) +
                          " could exceed float32 range when decoded; the values are "
                          "too large (|v| near FLT_MAX) for polyfit"));
    }
  }
};

absl::Status ParsePolyfit(const Tensor& payload, int64_t max_values, PolyfitView* v) {
  absl::Status s = CheckPayloadShape(payload, kCodecPolyfit);
  if (!s.ok()) return s;
  return ParsePolyfitBytes(payload.flat<uint8_t>().data(), payload.NumElements(),
                           max_values, v);
}

class PolyfitDecodeOp : public OpKernel {
 public:
  explicit PolyfitDecodeOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("max_values", &max_values_));
  }

  void Compute(OpKernelContext* ctx) override {
    PolyfitView v;
    OP_REQUIRES_OK(ctx, ParsePolyfit(ctx->input(0), max_values_, &v));
    const int64_t k = static_cast<int64_t>(v.k);
    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({k}), &out_t));
    if (k == 0) return;
    // start[q]: first sorted position of segment q; coef offsets likewise.
    Tensor start_t, coff_t;
    int64_t *start, *coff;
    OP_REQUIRES_OK(ctx, AllocateScratch(ctx, v.num_segs + 1, &start_t, &start));
    OP_REQUIRES_OK(ctx, AllocateScratch(ctx, v.num_segs + 1, &coff_t, &coff));
    PolyfitTables(v, start, coff);
    // Coefficients as float (the payload may be unaligned: copy once).
    Tensor cf_t;
    float* cf;
    OP_REQUIRES_OK(ctx, AllocateScratch(ctx, coff[v.num_segs], &cf_t, &cf));
    std::memcpy(cf, v.coefs, 4 * coff[v.num_segs]);
    float* out = out_t->flat<float>().data();
    const int degree = v.degree;
    const int64_t num_segs = v.num_segs;
    CpuPool(ctx)->ParallelFor(k, 4 * (degree + 2), [&](int64_t begin, int64_t end) {
      int64_t q = std::upper_bound(start, start + num_segs + 1, begin) - start - 1;
      for (int64_t i = begin; i < end; ++i) {
        while (i >= start[q + 1]) ++q;
        const int64_t len = start[q + 1] - start[q];
        out[i] = static_cast<float>(polyfit::ChebEval(cf + coff[q],
                                                      polyfit::SegmentDegree(degree, len),
                                                      polyfit::Abscissa(i - start[q], len)));
      }
    });
  }

 private:
  int64_t max_values_;
};

// ---------------------------------------------------------------- dexp --

// The i-th magnitude of a part: the positives in sorted order, or the
// negatives' magnitudes from the most negative value on.
struct PartView {
  const float* y;
  int64_t n;
  bool negative;  // then y points at the last sorted value, read backwards
  double at(int64_t j) const {
    return negative ? -static_cast<double>(y[-j]) : static_cast<double>(y[j]);
  }
};

double PartSse(const PartView& part, const dexp::Coefs& c) {
  double sse = 0.0;
  for (int64_t j = 0; j < part.n; ++j) {
    const double d = dexp::Eval(c, dexp::Abscissa(j, part.n)) - part.at(j);
    sse += d * d;
  }
  return sse;
}

// Jacquelin's integral-equation fit of one part (see dexp.h).
absl::Status FitPart(const PartView& part, dexp::Coefs* out) {
  *out = {0.0f, 0.0f, 0.0f, 0.0f};
  const int64_t n = part.n;
  if (n == 0) return absl::OkStatus();
  double ymax = 0.0, mean = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    ymax = std::max(ymax, part.at(j));
    mean += part.at(j);
  }
  mean /= static_cast<double>(n);
  dexp::Coefs best = {static_cast<float>(mean), 0.0f, 0.0f, 0.0f};
  if (!dexp::CoefsOk(best)) {
    return Invalid("dexp: the values are too large (mean magnitude " +
                   std::to_string(mean) + " above e^87.7) for the dexp payload");
  }
  *out = best;
  if (n < 5 || ymax <= 0.0) return absl::OkStatus();
  const double inv = 1.0 / ymax;
  const double h = 1.0 / static_cast<double>(n - 1);

  // y = A SS + B S + C x + D.
  GivensLsq lsq;
  lsq.Init(4);
  BlockedLsq rows(&lsq);
  double s = 0.0, ss = 0.0, prev = part.at(0) * inv, prev_s = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    const double yj = part.at(j) * inv;
    if (j > 0) {
      s += 0.5 * (yj + prev) * h;
      ss += 0.5 * (s + prev_s) * h;
    }
    double* row = rows.NextRow();
    row[0] = ss;
    row[1] = s;
    row[2] = static_cast<double>(j) * h;
    row[3] = 1.0;
    rows.Commit(yj);
    prev = yj;
    prev_s = s;
  }
  rows.Flush();
  double abcd[4];
  lsq.Solve(abcd, 1e-12);
  const double disc = abcd[1] * abcd[1] + 4.0 * abcd[0];
  if (!(disc >= 0.0) || !std::isfinite(disc)) return absl::OkStatus();
  const float p = static_cast<float>(0.5 * (abcd[1] + std::sqrt(disc)));
  const float q = static_cast<float>(0.5 * (abcd[1] - std::sqrt(disc)));
  if (!std::isfinite(p) || !std::isfinite(q) || p > 80.0f) return absl::OkStatus();

  // (a, b) for fixed float32 p, q.
  GivensLsq ab;
  ab.Init(2);
  BlockedLsq ab_rows(&ab);
  for (int64_t j = 0; j < n; ++j) {
    const double x = dexp::Abscissa(j, n);
    double* row = ab_rows.NextRow();
    row[0] = std::exp(static_cast<double>(p) * x);
    row[1] = std::exp(static_cast<double>(q) * x);
    ab_rows.Commit(part.at(j) * inv);
  }
  ab_rows.Flush();
  double coef[2];
  ab.Solve(coef, 1e-12);
  const dexp::Coefs cand = {static_cast<float>(coef[0] * ymax), p,
                            static_cast<float>(coef[1] * ymax), q};
  if (!dexp::CoefsOk(cand)) return absl::OkStatus();
  const double sse = PartSse(part, cand);
  if (std::isfinite(sse) && sse < PartSse(part, best)) *out = cand;
  return absl::OkStatus();
}

template <typename Tidx>
class DexpEncodeOp : public OpKernel {
 public:
  explicit DexpEncodeOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& values_t = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckValues(ctx, values_t, "dexp", true));
    const int64_t k = values_t.NumElements();
    OP_REQUIRES_OK(ctx, CheckSortable<Tidx>("dexp", k));
    Tensor* perm_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({k}), &perm_t));
    Tensor y_t;
    float* y;
    OP_REQUIRES_OK(ctx, AllocateScratch(ctx, k, &y_t, &y));
    if (k > 0) {
      OP_REQUIRES_OK(ctx, SortDescending(ctx, values_t.flat<float>().data(), k,
                                         perm_t->flat<Tidx>().data(), y));
    }
    const int64_t p = SignSplit(y, k);
    PartView parts[2] = {{y, p, false}, {k > 0 ? y + k - 1 : y, k - p, true}};
    dexp::Coefs coefs[2];
    absl::Status status[2];
    // The two sign parts are independent fits.
    CpuPool(ctx)->ParallelFor(2, std::max<int64_t>(k, 1) * 200, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) status[i] = FitPart(parts[i], &coefs[i]);
    });
    OP_REQUIRES_OK(ctx, status[0]);
    OP_REQUIRES_OK(ctx, status[1]);
    Tensor* payload_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({dexp::kPayloadBytes}),
                                             &payload_t));
    uint8_t* out = payload_t->flat<uint8_t>().data();
    WriteHeader(out, kCodecDexp, static_cast<uint64_t>(k));
    PutU64(out + 16, static_cast<uint64_t>(p));
    for (int i = 0; i < 2; ++i) {
      PutF32(out + 24 + 16 * i, coefs[i].a);
      PutF32(out + 28 + 16 * i, coefs[i].p);
      PutF32(out + 32 + 16 * i, coefs[i].b);
      PutF32(out + 36 + 16 * i, coefs[i].q);
    }
  }
};

class DexpDecodeOp : public OpKernel {
 public:
  explicit DexpDecodeOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("max_values", &max_values_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& payload = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckPayloadShape(payload, kCodecDexp));
    uint64_t k, pos;
    dexp::Coefs c[2];
    OP_REQUIRES_OK(ctx, ParseDexpBytes(payload.flat<uint8_t>().data(), payload.NumElements(),
                                       max_values_, &k, &pos, c));
    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({static_cast<int64_t>(k)}), &out_t));
    float* out = out_t->flat<float>().data();
    const int64_t kk = static_cast<int64_t>(k), pp = static_cast<int64_t>(pos);
    CpuPool(ctx)->ParallelFor(kk, 60, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] = dexp::DecodeAt(c[0], c[1], pp, kk, i);
    });
  }

 private:
  int64_t max_values_;
};

// ---------------------------------------------------------------- qsgd --

// Elements per work item of the bit packer: a multiple of 8, so every item
// starts on a byte boundary and owns its bytes.
constexpr int64_t kQsgdChunk = 4096;

class QsgdEncodeOp : public OpKernel {
 public:
  explicit QsgdEncodeOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    int64_t levels, bucket;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("levels", &levels));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("bucket_size", &bucket));
    OP_REQUIRES(ctx, levels >= 1 && levels <= qsgd::kMaxLevels,
                Invalid("levels must lie in [1, 255] (1..8 bits), got " +
                        std::to_string(levels)));
    OP_REQUIRES(ctx, bucket >= 1 && bucket <= qsgd::kMaxBucket,
                Invalid("bucket_size must lie in [1, 2^30], got " + std::to_string(bucket)));
    levels_ = static_cast<uint32_t>(levels);
    bucket_ = static_cast<uint32_t>(bucket);
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& values_t = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckValues(ctx, values_t, "qsgd", true));
    const Tensor& seed_t = ctx->input(1);
    OP_REQUIRES(ctx, tensorflow::TensorShapeUtils::IsScalar(seed_t.shape()),
                Invalid("seed must be a scalar, got shape " + seed_t.shape().DebugString()));
    const uint64_t seed_mix = qsgd::SeedMix(static_cast<uint64_t>(seed_t.scalar<int64_t>()()));
    const int64_t k = values_t.NumElements();
    const QsgdLayout l = MakeQsgdLayout(k, levels_, bucket_);
    Tensor* payload_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            0, TensorShape({static_cast<int64_t>(l.size)}), &payload_t));
    uint8_t* out = payload_t->flat<uint8_t>().data();
    WriteHeader(out, kCodecQsgd, static_cast<uint64_t>(k));
    PutU32(out + 16, l.s);
    PutU32(out + 20, l.bucket);
    if (k == 0) return;
    const float* v = values_t.flat<float>().data();
    uint8_t* scales = out + qsgd::kFixedBytes;
    uint8_t* codes = scales + 4 * l.num_buckets;
    const int64_t nb = static_cast<int64_t>(l.num_buckets);
    const int64_t bucket = l.bucket;
    auto pool = CpuPool(ctx);
    pool->ParallelFor(nb, bucket * 2, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        float m = 0.0f;
        const int64_t hi = std::min(k, (b + 1) * bucket);
        for (int64_t i = b * bucket; i < hi; ++i) m = std::max(m, std::fabs(v[i]));
        PutF32(scales + 4 * b, m);
      }
    });
    const int w = l.w;
    const uint32_t s = l.s;
    const int64_t chunks = (k + kQsgdChunk - 1) / kQsgdChunk;
    pool->ParallelFor(chunks, kQsgdChunk * 30, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        const int64_t lo = c * kQsgdChunk, hi = std::min(k, lo + kQsgdChunk);
        uint8_t* dst = codes + lo * w / 8;
        uint64_t acc = 0;
        int nbits = 0;
        int64_t b = lo / bucket, next = (b + 1) * bucket;  // no division per element
        float scale = GetF32(scales + 4 * b);
        for (int64_t i = lo; i < hi; ++i) {
          if (i == next) {
            scale = GetF32(scales + 4 * ++b);
            next += bucket;
          }
          acc |= static_cast<uint64_t>(qsgd::Encode(v[i], scale, s, seed_mix,
                                                    static_cast<uint64_t>(i)))
                 << nbits;
          nbits += w;
          while (nbits >= 8) {
            *dst++ = static_cast<uint8_t>(acc);
            acc >>= 8;
            nbits -= 8;
          }
        }
        if (nbits > 0) *dst = static_cast<uint8_t>(acc);  // only the last chunk
      }
    });
  }

 private:
  uint32_t levels_, bucket_;
};

class QsgdDecodeOp : public OpKernel {
 public:
  explicit QsgdDecodeOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& payload = ctx->input(0);
    uint64_t k;
    OP_REQUIRES_OK(ctx, ParseHeader(payload, kCodecQsgd, &k));
    const int64_t size = payload.NumElements();
    const uint8_t* p = payload.flat<uint8_t>().data();
    QsgdLayout l;
    OP_REQUIRES_OK(ctx, ParseQsgdFixed(p, size, k, &l));
    const uint32_t s = l.s, bucket = l.bucket;
    const uint8_t* scales = p + qsgd::kFixedBytes;
    const uint8_t* codes = scales + 4 * l.num_buckets;
    for (uint64_t b = 0; b < l.num_buckets; ++b) {
      const float m = GetF32(scales + 4 * b);
      OP_REQUIRES(ctx, QsgdScaleOk(m), QsgdBadScale(b, m));
    }
    const int w = l.w;
    OP_REQUIRES(ctx, l.code_bytes == 0 || QsgdPaddingOk(l, codes[l.code_bytes - 1]),
                QsgdBadPadding());
    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({static_cast<int64_t>(k)}), &out_t));
    float* out = out_t->flat<float>().data();
    const int64_t kk = static_cast<int64_t>(k);
    const int64_t chunks = (kk + kQsgdChunk - 1) / kQsgdChunk;
    const uint32_t mask = (uint32_t{1} << w) - 1;
    std::atomic<int64_t> first_bad{kk};
    CpuPool(ctx)->ParallelFor(chunks, kQsgdChunk * 10, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        const int64_t lo = c * kQsgdChunk, hi = std::min(kk, lo + kQsgdChunk);
        const uint8_t* src = codes + lo * w / 8;
        uint64_t acc = 0;
        int nbits = 0;
        int64_t b = lo / bucket, next = (b + 1) * static_cast<int64_t>(bucket);
        float scale = GetF32(scales + 4 * b);
        for (int64_t i = lo; i < hi; ++i) {
          if (i == next) {
            scale = GetF32(scales + 4 * ++b);
            next += bucket;
          }
          while (nbits < w) {
            acc |= static_cast<uint64_t>(*src++) << nbits;
            nbits += 8;
          }
          const uint32_t code = static_cast<uint32_t>(acc) & mask;
          acc >>= w;
          nbits -= w;
          if (!qsgd::Decode(code, scale, s, &out[i])) {
            AtomicMin(&first_bad, i);
            out[i] = 0.0f;
          }
        }
      }
    });
    const int64_t bad = first_bad.load();
    OP_REQUIRES(ctx, bad == kk, QsgdBadCode(bad, s));
  }
};

// ----------------------------------------------------------- fp16/bf16 --

template <uint8_t kCodec>
class HalfEncodeOp : public OpKernel {
 public:
  explicit HalfEncodeOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& values_t = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckValues(ctx, values_t, CodecName(kCodec), false));
    const int64_t k = values_t.NumElements();
    Tensor* payload_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({kHeaderBytes + 2 * k}),
                                             &payload_t));
    uint8_t* out = payload_t->flat<uint8_t>().data();
    WriteHeader(out, kCodec, static_cast<uint64_t>(k));
    const float* v = values_t.flat<float>().data();
    uint8_t* dst = out + kHeaderBytes;
    CpuPool(ctx)->ParallelFor(k, 4, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        PutU16(dst + 2 * i, kCodec == kCodecFp16 ? halfcast::FloatToFp16(v[i])
                                                 : halfcast::FloatToBf16(v[i]));
      }
    });
  }
};

template <uint8_t kCodec>
class HalfDecodeOp : public OpKernel {
 public:
  explicit HalfDecodeOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& payload = ctx->input(0);
    uint64_t k;
    OP_REQUIRES_OK(ctx, ParseHeader(payload, kCodec, &k));
    const int64_t size = payload.NumElements();
    OP_REQUIRES_OK(ctx, CheckHalfSize(kCodec, size, k));
    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({static_cast<int64_t>(k)}), &out_t));
    float* out = out_t->flat<float>().data();
    const uint8_t* src = payload.flat<uint8_t>().data() + kHeaderBytes;
    CpuPool(ctx)->ParallelFor(static_cast<int64_t>(k), 4, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const uint16_t h = GetU16(src + 2 * i);
        out[i] = kCodec == kCodecFp16 ? halfcast::Fp16ToFloat(h) : halfcast::Bf16ToFloat(h);
      }
    });
  }
};

// ------------------------------------------------------------- deflate --
//
// Payload (after the 16-byte common header):
//   16  u8   zlib level used (0..9; informational)
//   17  u8[7] reserved, 0
//   24  u64  C, length of the zlib stream
//   32  u8   zlib stream (RFC 1950) of the K float32 values' little-endian bytes
// CPU only: zlib is a sequential bit stream; there is no CUDA kernel.

constexpr int64_t kDeflateFixedBytes = 32;
// DEFLATE cannot expand by more than 1032:1 (258-byte matches in ~2 bits).
constexpr uint64_t kDeflateMaxRatio = 1032;

class DeflateEncodeOp : public OpKernel {
 public:
  explicit DeflateEncodeOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("level", &level_));
    OP_REQUIRES(ctx, level_ >= 0 && level_ <= 9,
                Invalid("level must lie in [0, 9], got " + std::to_string(level_)));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& values_t = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckValues(ctx, values_t, "deflate", false));
    const int64_t k = values_t.NumElements();
    const uint64_t raw = 4 * static_cast<uint64_t>(k);
    // One stream, fed in pieces of at most 1 GiB (zlib's counters are 32-bit).
    z_stream zs;
    std::memset(&zs, 0, sizeof(zs));
    OP_REQUIRES(ctx, deflateInit(&zs, level_) == Z_OK,
                absl::InternalError("deflate: zlib deflateInit failed"));
    const uint64_t bound = deflateBound(&zs, raw) + 64;
    Tensor buf_t;
    absl::Status st = ctx->allocate_temp(
        tensorflow::DT_UINT8, TensorShape({static_cast<int64_t>(kDeflateFixedBytes + bound)}),
        &buf_t);
    if (!st.ok()) {
      deflateEnd(&zs);
      ctx->CtxFailure(st);
      return;
    }
    uint8_t* out = buf_t.flat<uint8_t>().data();
    const uint8_t* in = reinterpret_cast<const uint8_t*>(values_t.flat<float>().data());
    uint64_t in_left = raw, out_left = bound;
    zs.next_out = out + kDeflateFixedBytes;
    int rc = Z_OK;
    while (rc == Z_OK) {
      const uInt in_step = static_cast<uInt>(std::min<uint64_t>(in_left, 1u << 30));
      const uInt out_step = static_cast<uInt>(std::min<uint64_t>(out_left, 1u << 30));
      zs.next_in = const_cast<Bytef*>(in + (raw - in_left));
      zs.avail_in = in_step;
      zs.avail_out = out_step;
      rc = deflate(&zs, in_left == in_step ? Z_FINISH : Z_NO_FLUSH);
      in_left -= in_step - zs.avail_in;
      out_left -= out_step - zs.avail_out;
      if (rc == Z_OK && out_left == 0) rc = Z_BUF_ERROR;
    }
    const uint64_t clen = bound - out_left;
    deflateEnd(&zs);
    OP_REQUIRES(ctx, rc == Z_STREAM_END,
                absl::InternalError("deflate: zlib failed with code " + std::to_string(rc)));
    WriteHeader(out, kCodecDeflate, static_cast<uint64_t>(k));
    std::memset(out + 16, 0, 8);
    PutU8(out + 16, static_cast<uint8_t>(level_));
    PutU64(out + 24, clen);
    // The payload is a prefix of the scratch buffer: no copy.
    ctx->set_output(0, buf_t.Slice(0, static_cast<int64_t>(kDeflateFixedBytes + clen)));
  }

 private:
  int level_;
};

class DeflateDecodeOp : public OpKernel {
 public:
  explicit DeflateDecodeOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& payload = ctx->input(0);
    uint64_t k;
    OP_REQUIRES_OK(ctx, ParseHeader(payload, kCodecDeflate, &k));
    const int64_t size = payload.NumElements();
    OP_REQUIRES(ctx, size >= kDeflateFixedBytes,
                SizeMismatch("deflate", size, kDeflateFixedBytes, "fixed fields"));
    const uint8_t* p = payload.flat<uint8_t>().data();
    bool reserved_zero = p[16] <= 9;
    for (int i = 17; i < 24; ++i) reserved_zero &= p[i] == 0;
    OP_REQUIRES(ctx, reserved_zero,
                Invalid("deflate payload has level " + std::to_string(p[16]) +
                        " > 9 or nonzero reserved bytes"));
    const uint64_t clen = GetU64(p + 24);
    OP_REQUIRES(ctx, clen == static_cast<uint64_t>(size - kDeflateFixedBytes),
                SizeMismatch("deflate", size, kDeflateFixedBytes + std::min(clen, uint64_t{1} << 62),
                             "stream length " + std::to_string(clen)));
    const uint64_t raw = 4 * k;
    OP_REQUIRES(ctx, raw <= kDeflateMaxRatio * clen + 64,
                Invalid("deflate payload claims K = " + std::to_string(k) +
                        " values (" + std::to_string(raw) + " bytes) from a " +
                        std::to_string(clen) + "-byte stream, beyond DEFLATE's maximum "
                        "ratio of 1032:1; it is corrupted"));
    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({static_cast<int64_t>(k)}), &out_t));
    uint8_t dummy = 0;
    uint8_t* out = k > 0 ? reinterpret_cast<uint8_t*>(out_t->flat<float>().data()) : &dummy;
    z_stream zs;
    std::memset(&zs, 0, sizeof(zs));
    OP_REQUIRES(ctx, inflateInit(&zs) == Z_OK,
                absl::InternalError("deflate: zlib inflateInit failed"));
    const uint8_t* in = p + kDeflateFixedBytes;
    uint64_t in_left = clen, out_left = raw;
    zs.next_out = out;
    int rc = Z_OK;
    while (rc == Z_OK) {
      const uInt in_step = static_cast<uInt>(std::min<uint64_t>(in_left, 1u << 30));
      const uInt out_step = static_cast<uInt>(std::min<uint64_t>(out_left, 1u << 30));
      zs.next_in = const_cast<Bytef*>(in + (clen - in_left));
      zs.avail_in = in_step;
      zs.avail_out = out_step;
      rc = inflate(&zs, Z_NO_FLUSH);
      const uint64_t used_in = in_step - zs.avail_in, used_out = out_step - zs.avail_out;
      in_left -= used_in;
      out_left -= used_out;
      if (rc == Z_OK && used_in == 0 && used_out == 0) rc = Z_BUF_ERROR;
    }
    const std::string zmsg = zs.msg ? std::string(", ") + zs.msg : std::string();
    inflateEnd(&zs);
    OP_REQUIRES(ctx, rc == Z_STREAM_END,
                Invalid(std::string("deflate payload's zlib stream is ") +
                        (rc == Z_BUF_ERROR ? (out_left == 0 ? "longer than K values"
                                                            : "truncated")
                                           : "corrupted") +
                        " (zlib code " + std::to_string(rc) + zmsg + ")"));
    OP_REQUIRES(ctx, out_left == 0,
                Invalid("deflate payload's zlib stream holds " +
                        std::to_string(raw - out_left) + " bytes, not the " +
                        std::to_string(raw) + " of K = " + std::to_string(k) + " values"));
    OP_REQUIRES(ctx, in_left == 0,
                Invalid("deflate payload has " + std::to_string(in_left) +
                        " bytes after the end of its zlib stream"));
  }
};

#define REGISTER_SORTING_CPU(T)                                                      \
  REGISTER_KERNEL_BUILDER(                                                           \
      Name("DeepReduce>PolyfitEncode").Device(::tensorflow::DEVICE_CPU)              \
          .TypeConstraint<T>("out_idx"),                                             \
      PolyfitEncodeOp<T>);                                                           \
  REGISTER_KERNEL_BUILDER(                                                           \
      Name("DeepReduce>DexpEncode").Device(::tensorflow::DEVICE_CPU)                 \
          .TypeConstraint<T>("out_idx"),                                             \
      DexpEncodeOp<T>);

REGISTER_SORTING_CPU(int32_t);
REGISTER_SORTING_CPU(int64_t);
#undef REGISTER_SORTING_CPU

REGISTER_KERNEL_BUILDER(Name("DeepReduce>PolyfitDecode").Device(::tensorflow::DEVICE_CPU),
                        PolyfitDecodeOp);
REGISTER_KERNEL_BUILDER(Name("DeepReduce>DexpDecode").Device(::tensorflow::DEVICE_CPU),
                        DexpDecodeOp);
REGISTER_KERNEL_BUILDER(Name("DeepReduce>QsgdEncode").Device(::tensorflow::DEVICE_CPU),
                        QsgdEncodeOp);
REGISTER_KERNEL_BUILDER(Name("DeepReduce>QsgdDecode").Device(::tensorflow::DEVICE_CPU),
                        QsgdDecodeOp);
REGISTER_KERNEL_BUILDER(Name("DeepReduce>Fp16Encode").Device(::tensorflow::DEVICE_CPU),
                        HalfEncodeOp<kCodecFp16>);
REGISTER_KERNEL_BUILDER(Name("DeepReduce>Fp16Decode").Device(::tensorflow::DEVICE_CPU),
                        HalfDecodeOp<kCodecFp16>);
REGISTER_KERNEL_BUILDER(Name("DeepReduce>Bf16Encode").Device(::tensorflow::DEVICE_CPU),
                        HalfEncodeOp<kCodecBf16>);
REGISTER_KERNEL_BUILDER(Name("DeepReduce>Bf16Decode").Device(::tensorflow::DEVICE_CPU),
                        HalfDecodeOp<kCodecBf16>);
REGISTER_KERNEL_BUILDER(Name("DeepReduce>DeflateEncode").Device(::tensorflow::DEVICE_CPU),
                        DeflateEncodeOp);
REGISTER_KERNEL_BUILDER(Name("DeepReduce>DeflateDecode").Device(::tensorflow::DEVICE_CPU),
                        DeflateDecodeOp);

}  // namespace
}  // namespace value
}  // namespace deepreduce
