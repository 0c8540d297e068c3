// CUDA kernels of the value codecs with ops of their own (qsgd; polyfit and
// dexp encode and decode; fp16 and bf16 have theirs in fp16.cu, bf16.cu),
// behind the plain C++ launchers of value_gpu.h. No TensorFlow headers:
// memory and the stream come from the caller. The per-element and
// per-segment logic is that of qsgd.h, polyfit.h, lsq.h and dexp.h, shared
// with the CPU kernels, so both write the same bytes (dexp: see dexp.h and
// DexpDecode).
//
// polyfit/dexp encode: CUB's stable radix sort on the CPU's sort key; the
// fits in the fixed blocked order of polyfit.h / dexp.h (one thread per block
// of rows, one thread per segment or part for the in-order merges), so the
// floating-point operations are the CPU's, one for one.
#include <cstdint>
#include <cstring>

// This library's CUB lives in its own namespace (see bloom_kernels.cu).
#define CUB_WRAPPED_NAMESPACE deepreduce_cub
#include <cub/device/device_radix_sort.cuh>
#include <cuda_runtime.h>

#include "kernels/value/lsq.h"

#include "kernels/value/dexp.h"
#include "kernels/value/polyfit.h"
#include "kernels/value/qsgd.h"
#include "kernels/value/value_format.h"
#include "kernels/value/value_gpu.h"

namespace deepreduce {
namespace value {
namespace gpu {
namespace {

// Launch sizes (kThreads, GridSize: at most one full occupancy wave, the
// grid-stride loops do the rest), kWarp, kFullMask: kernels/common/gpu_launch.h.
// qsgd: elements per bucket-max work item (one warp), so that one huge
// bucket is still spread over many warps.
constexpr int64_t kSliceElems = 8192;
// qsgd: elements per bit-packing work item (one thread). 8 codes of w bits
// are exactly w bytes, so every item starts on a byte boundary and owns its
// bytes (the CPU packs 4096-element chunks: the same bit stream).
constexpr int64_t kGroup = 8;

// Up to 24 bytes of fixed payload fields, built on the host and written by
// thread 0 of the first kernel (passed by value: no host buffer to keep
// alive, no extra copy).
struct Prefix {
  uint8_t bytes[24];
  int n;
};

__device__ __forceinline__ void WritePrefix(const Prefix& p, uint8_t* out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    for (int j = 0; j < p.n; ++j) out[j] = p.bytes[j];
  }
}

// ---------------------------------------------------------------- qsgd --

// Error records in the scratch buffer; ~0 = nothing found.
struct QsgdRecords {
  unsigned long long first_bad_value;  // encode: first non-finite value
  unsigned long long first_bad_scale;  // decode: first bad bucket scale
  unsigned long long first_bad_code;   // decode: first invalid code
};

// Bucket maxima. Work item = slice c of bucket b: positions
// [b * bucket + c * kSliceElems, min(that + kSliceElems, end of bucket, k)),
// with spb = ceil(min(bucket, k) / kSliceElems) slices per bucket. One warp
// per item (grid-stride over items by warps, so the loop bounds are
// warp-uniform and the shuffles are safe): lane l reads positions lo + l,
// lo + l + 32, ... (coalesced), the warp reduces the max of |v|, and lane 0
// raises the bucket's scale with atomicMax on its bits (non-negative floats
// order like their bit patterns; the scales start at +0). The max of a set
// is exact whatever the order, so the scale equals the CPU's. Also records
// the first non-finite value. Thread 0 writes the 24 fixed bytes.
__global__ void __launch_bounds__(kThreads)
    QsgdBucketMaxKernel(const float* __restrict__ v, int64_t k, int64_t bucket,
                        int64_t spb, int64_t num_items, Prefix fixed,
                        uint8_t* __restrict__ payload, unsigned int* __restrict__ scale_bits,
                        unsigned long long* __restrict__ first_bad) {
  WritePrefix(fixed, payload);
  const int lane = threadIdx.x % kWarp;
  const int64_t warp = GlobalThread() / kWarp;
  const int64_t num_warps = GridThreads() / kWarp;
  for (int64_t item = warp; item < num_items; item += num_warps) {
    const int64_t b = item / spb, c = item % spb;
    const int64_t bucket_end = (b + 1) * bucket < k ? (b + 1) * bucket : k;
    const int64_t lo = b * bucket + c * kSliceElems;
    const int64_t hi = lo + kSliceElems < bucket_end ? lo + kSliceElems : bucket_end;
    unsigned int m = 0;  // bits of +0.0f
    for (int64_t i = lo + lane; i < hi; i += kWarp) {
      const float x = v[i];
      if (!IsFinite(x)) atomicMin(first_bad, static_cast<unsigned long long>(i));
      unsigned int u;
      const float a = fabsf(x);
      memcpy(&u, &a, 4);
      m = u > m ? u : m;
    }
    for (int d = kWarp / 2; d > 0; d /= 2) {
      const unsigned int o = __shfl_xor_sync(kFullMask, m, d);
      m = o > m ? o : m;
    }
    if (lane == 0 && lo < hi) atomicMax(&scale_bits[b], m);
  }
}

// Bit packing. Grid-stride over groups of kGroup values: thread t packs
// values [8g, 8g + 8) for g = t, t + stride, ... into code bytes
// [g * w, g * w + ceil(n * w / 8)), n = values in the group, LSB first, as the
// CPU does (qsgd.h). Codes are masked to w bits: only non-finite input (an
// error the caller reports) could produce wider ones.
__global__ void __launch_bounds__(kThreads)
    QsgdPackKernel(const float* __restrict__ v, int64_t k, int64_t bucket, uint32_t s,
                   int w, uint64_t seed_mix, const uint8_t* __restrict__ scales,
                   uint8_t* __restrict__ codes) {
  const int64_t num_groups = (k + kGroup - 1) / kGroup;
  const uint32_t mask = (uint32_t{1} << w) - 1;
  for (int64_t g = GlobalThread(); g < num_groups; g += GridThreads()) {
    const int64_t lo = g * kGroup, hi = lo + kGroup < k ? lo + kGroup : k;
    uint8_t* dst = codes + g * w;
    uint64_t acc = 0;
    int nbits = 0;
    int64_t b = lo / bucket, next = (b + 1) * bucket;
    float scale = GetF32(scales + 4 * b);
    for (int64_t i = lo; i < hi; ++i) {
      if (i == next) {
        scale = GetF32(scales + 4 * ++b);
        next += bucket;
      }
      const uint32_t code =
          qsgd::Encode(v[i], scale, s, seed_mix, static_cast<uint64_t>(i)) & mask;
      acc |= static_cast<uint64_t>(code) << nbits;
      nbits += w;
      while (nbits >= 8) {
        *dst++ = static_cast<uint8_t>(acc);
        acc >>= 8;
        nbits -= 8;
      }
    }
    if (nbits > 0) *dst = static_cast<uint8_t>(acc);  // only the last group
  }
}

// Grid-stride over the buckets: records the first scale that is not finite
// and >= 0.
__global__ void __launch_bounds__(kThreads)
    QsgdScaleCheckKernel(const uint8_t* __restrict__ scales, int64_t num_buckets,
                         unsigned long long* __restrict__ first_bad) {
  for (int64_t b = GlobalThread(); b < num_buckets; b += GridThreads()) {
    const float m = GetF32(scales + 4 * b);
    if (!(IsFinite(m) && m >= 0.0f)) atomicMin(first_bad, static_cast<unsigned long long>(b));
  }
}

// Unpacking. Grid-stride over groups of kGroup values as in QsgdPackKernel:
// thread t reads exactly the ceil(n * w / 8) code bytes of group g and
// decodes its n values; an invalid code lowers *first_bad to its position.
__global__ void __launch_bounds__(kThreads)
    QsgdUnpackKernel(const uint8_t* __restrict__ scales, const uint8_t* __restrict__ codes,
                     int64_t k, int64_t bucket, uint32_t s, int w, float* __restrict__ out,
                     unsigned long long* __restrict__ first_bad) {
  const int64_t num_groups = (k + kGroup - 1) / kGroup;
  const uint32_t mask = (uint32_t{1} << w) - 1;
  for (int64_t g = GlobalThread(); g < num_groups; g += GridThreads()) {
    const int64_t lo = g * kGroup, hi = lo + kGroup < k ? lo + kGroup : k;
    const uint8_t* src = codes + g * w;
    uint64_t acc = 0;
    int nbits = 0;
    int64_t b = lo / bucket, next = (b + 1) * bucket;
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
      float x;
      if (!qsgd::Decode(code, scale, s, &x)) {
        atomicMin(first_bad, static_cast<unsigned long long>(i));
        x = 0.0f;
      }
      out[i] = x;
    }
  }
}

// ------------------------------------------------------------- polyfit --

struct PolyfitTablesView {
  const int64_t* start;  // [num_segs + 1]
  const int64_t* coff;   // [num_segs + 1]
  const float* coefs;    // [num_coefs]
};

PolyfitTablesView TableLayout(const void* base, int64_t num_segs) {
  const char* p = static_cast<const char*>(base);
  PolyfitTablesView t;
  t.start = reinterpret_cast<const int64_t*>(p);
  t.coff = reinterpret_cast<const int64_t*>(p + 8 * (num_segs + 1));
  t.coefs = reinterpret_cast<const float*>(p + 16 * (num_segs + 1));
  return t;
}

// Grid-stride over the K sorted positions: thread t evaluates positions
// t, t + stride, ...; the segment q of position i (start[q] <= i <
// start[q + 1]) is found by binary search in start[0..num_segs], reading only
// entries 0..num_segs.
__global__ void __launch_bounds__(kThreads)
    PolyfitDecodeKernel(const int64_t* __restrict__ start, const int64_t* __restrict__ coff,
                        const float* __restrict__ coefs, int64_t num_segs, int degree,
                        float* __restrict__ out) {
  const int64_t k = start[num_segs];
  for (int64_t i = GlobalThread(); i < k; i += GridThreads()) {
    int64_t lo = 0, hi = num_segs;  // start[lo] <= i < start[hi]
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (start[mid] <= i) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    const int64_t len = start[lo + 1] - start[lo];
    out[i] = static_cast<float>(polyfit::ChebEval(coefs + coff[lo],
                                                  polyfit::SegmentDegree(degree, len),
                                                  polyfit::Abscissa(i - start[lo], len)));
  }
}

// ---------------------------------------------------------------- dexp --

// Grid-stride over the k sorted positions: thread t evaluates positions
// t, t + stride, ... with dexp.h's DecodeAt.
__global__ void __launch_bounds__(kThreads)
    DexpDecodeKernel(dexp::Coefs pos, dexp::Coefs neg, int64_t p_count, int64_t k,
                     float* __restrict__ out) {
  for (int64_t i = GlobalThread(); i < k; i += GridThreads()) {
    out[i] = dexp::DecodeAt(pos, neg, p_count, k, i);
  }
}

// ------------------------------------------------ polyfit / dexp encode --

// Carves consecutive aligned sub-buffers out of one scratch allocation (or,
// with base == nullptr, only adds up their sizes).
struct Carver {
  char* base;
  size_t used;
  template <typename T>
  T* take(size_t count) {
    T* p = base ? reinterpret_cast<T*>(base + used) : nullptr;
    used += AlignUp(count * sizeof(T) > 0 ? count * sizeof(T) : 1);
    return p;
  }
};

// Threads per block of the one-thread-per-segment kernels (polyfit's
// finish): few, so that a few hundred items still spread over many SMs.
constexpr int kItemThreads = 64;
static_assert(kItemThreads % kWarp == 0, "kItemThreads must be whole warps");
// Threads per block of the kernels that run one least-squares fit per thread
// (polyfit's fit blocks, dexp's row steps). A thread's factorization and row
// buffer (~6.6 KB, FitShared) live in shared memory while it works, and the
// factorization is copied out once: kept in global memory, 64 threads'
// buffers per SM overflowed L1 and the fit's sequential accesses went to L2.
// Few threads per block also spread the ~100 fits over as many SMs.
constexpr int kFitThreads = 4;
struct FitShared {
  GivensLsq lsq;
  BlockedLsq work;
};
// Threads of the single-block greedy segmentation kernel.
constexpr int kGreedyThreads = 1024;
static_assert(kGreedyThreads % kWarp == 0, "kGreedyThreads must be whole warps");

struct SortRecords {
  unsigned long long first_bad;  // first non-finite value; ~0 = none
  unsigned long long p_count;    // values >= 0; 0 unless a boundary is found
};

// Grid-stride over the k values: thread t writes the sort keys and
// positions of values t, t + stride, ... and records the first NaN/Inf.
__global__ void __launch_bounds__(kThreads)
    SortKeysKernel(const float* __restrict__ v, int64_t k, uint32_t* __restrict__ keys,
                   uint32_t* __restrict__ pos, unsigned long long* __restrict__ first_bad) {
  for (int64_t i = GlobalThread(); i < k; i += GridThreads()) {
    const float x = v[i];
    if (!IsFinite(x)) atomicMin(first_bad, static_cast<unsigned long long>(i));
    keys[i] = DescendingKey(x);
    pos[i] = static_cast<uint32_t>(i);
  }
}

// Grid-stride over the k sorted positions: thread t gathers perm and y of
// positions t, t + stride, ...; the one position i with y[i] >= 0 > y[i + 1]
// (or i = k - 1) records the sign split i + 1.
template <typename Tidx>
__global__ void __launch_bounds__(kThreads)
    GatherSortedKernel(const float* __restrict__ v, const uint32_t* __restrict__ order,
                       int64_t k, Tidx* __restrict__ perm, float* __restrict__ y,
                       unsigned long long* __restrict__ p_count) {
  for (int64_t i = GlobalThread(); i < k; i += GridThreads()) {
    const uint32_t src = order[i];
    const float x = v[src];
    perm[i] = static_cast<Tidx>(src);
    y[i] = x;
    if (x >= 0.0f && (i + 1 == k || v[order[i + 1]] < 0.0f)) {
      *p_count = static_cast<unsigned long long>(i + 1);
    }
  }
}

// Block-wide argmax of (d, j) by polyfit::Better (largest d, then smallest
// j). Every thread of the block must call it; all get the result.
__device__ void BlockArgmax(double* d, int64_t* j) {
  __shared__ double sd[kGreedyThreads / kWarp];
  __shared__ long long sj[kGreedyThreads / kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  double bd = *d;
  long long bj = *j;
  for (int off = kWarp / 2; off > 0; off /= 2) {
    const double od = __shfl_xor_sync(kFullMask, bd, off);
    const long long oj = __shfl_xor_sync(kFullMask, bj, off);
    if (polyfit::Better(od, oj, bd, bj)) {
      bd = od;
      bj = oj;
    }
  }
  if (lane == 0) {
    sd[warp] = bd;
    sj[warp] = bj;
  }
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x / kWarp;
    bd = lane < warps ? sd[lane] : -1.0;
    bj = lane < warps ? sj[lane] : INT64_MAX;
    for (int off = kWarp / 2; off > 0; off /= 2) {
      const double od = __shfl_xor_sync(kFullMask, bd, off);
      const long long oj = __shfl_xor_sync(kFullMask, bj, off);
      if (polyfit::Better(od, oj, bd, bj)) {
        bd = od;
        bj = oj;
      }
    }
    if (lane == 0) {
      sd[0] = bd;
      sj[0] = bj;
    }
  }
  __syncthreads();
  *d = sd[0];
  *j = sj[0];
  __syncthreads();  // sd/sj are reused by the next call
}

// polyfit::BestSplitSerial by the whole block: thread t tries the knots
// lo + 1 + t, lo + 1 + t + blockDim, ...; the argmax keeps the first j of the
// largest distance, as the serial loop does.
__device__ void BlockBestSplit(const float* __restrict__ y, int64_t lo, int64_t hi, int degree,
                               polyfit::GreedySeg* seg) {
  double bd = -1.0;
  int64_t bj = INT64_MAX;
  const bool splittable = polyfit::Splittable(hi - lo, degree);
  if (splittable) {
    for (int64_t j = lo + 1 + threadIdx.x; j < hi - 1; j += blockDim.x) {
      const double d = polyfit::ChordDistance(y, lo, hi - 1, j);
      if (polyfit::Better(d, j, bd, bj)) {
        bd = d;
        bj = j;
      }
    }
  }
  BlockArgmax(&bd, &bj);
  if (threadIdx.x == 0) {
    seg->lo = lo;
    seg->hi = hi;
    seg->dist = splittable ? bd : 0.0;
    seg->split = splittable ? bj : -1;
  }
  __syncthreads();
}

// The greedy segmentation of value_kernels.cc's PolyfitEncodeBase::Segment,
// on one block of kGreedyThreads: the same segment list in position order,
// the same choice per pass (largest dist, first on ties, by a block argmax
// over the list), the same cut, the halves' knots by BlockBestSplit. Every
// loop bound is block-uniform (read from shared or global memory after a
// barrier). Writes lens[0..count) and *count.
__global__ void __launch_bounds__(kGreedyThreads)
    PolyfitGreedyKernel(const float* __restrict__ y, int64_t k, int64_t p_count, int64_t segs,
                        int degree, polyfit::GreedySeg* __restrict__ seg,
                        int64_t* __restrict__ lens, int64_t* __restrict__ count) {
  __shared__ polyfit::GreedySeg old;
  int64_t c = 0;
  if (p_count > 0 && p_count < k) {
    BlockBestSplit(y, 0, p_count, degree, &seg[0]);
    BlockBestSplit(y, p_count, k, degree, &seg[1]);
    c = 2;
  } else {
    BlockBestSplit(y, 0, k, degree, &seg[0]);
    c = 1;
  }
  while (c < segs) {
    double bd = -1.0;
    int64_t bi = INT64_MAX;
    for (int64_t q = threadIdx.x; q < c; q += blockDim.x) {
      if (polyfit::Better(seg[q].dist, q, bd, bi)) {
        bd = seg[q].dist;
        bi = q;
      }
    }
    BlockArgmax(&bd, &bi);
    if (!(bd > 0.0)) break;
    if (threadIdx.x == 0) old = seg[bi];
    // seg[bi + 1 .. c) moves up by one, top chunk first: each chunk is read
    // completely before it is written one slot higher.
    for (int64_t top = c; top > bi + 1; top -= blockDim.x) {
      const int64_t lo = top - blockDim.x > bi + 1 ? top - blockDim.x : bi + 1;
      const int64_t q = lo + threadIdx.x;
      polyfit::GreedySeg tmp;
      if (q < top) tmp = seg[q];
      __syncthreads();
      if (q < top) seg[q + 1] = tmp;
      __syncthreads();
    }
    __syncthreads();
    const polyfit::GreedySeg cut = old;
    BlockBestSplit(y, cut.lo, cut.split + 1, degree, &seg[bi]);
    BlockBestSplit(y, cut.split + 1, cut.hi, degree, &seg[bi + 1]);
    ++c;
  }
  for (int64_t q = threadIdx.x; q < c; q += blockDim.x) lens[q] = seg[q].hi - seg[q].lo;
  if (threadIdx.x == 0) *count = c;
}

// One thread per fit block (grid-stride): block b's rows into lsq[b],
// factorized in the thread's shared FitShared.
__global__ void __launch_bounds__(kFitThreads)
    PolyfitBlocksKernel(const float* __restrict__ y, const polyfit::FitBlock* __restrict__ blocks,
                        int64_t num_blocks, int degree, GivensLsq* __restrict__ lsq) {
  __shared__ FitShared fit[kFitThreads];
  FitShared& mine = fit[threadIdx.x];
  for (int64_t b = GlobalThread(); b < num_blocks; b += GridThreads()) {
    polyfit::FitBlockRows(y, blocks[b], degree, &mine.lsq, &mine.work);
    lsq[b] = mine.lsq;
  }
}

// One thread per segment (grid-stride): merge, solve and write segment s
// (polyfit::FinishSegment); the smallest failing s is recorded as
// (s << 2) | code. Thread 0 writes the 24 fixed bytes.
__global__ void __launch_bounds__(kItemThreads)
    PolyfitFinishKernel(const polyfit::SegPlan* __restrict__ plan, int64_t num_segs,
                        GivensLsq* __restrict__ lsq, Prefix fixed, uint8_t* __restrict__ payload,
                        unsigned long long* __restrict__ bad) {
  WritePrefix(fixed, payload);
  for (int64_t s = GlobalThread(); s < num_segs; s += GridThreads()) {
    const int code = polyfit::FinishSegment(plan[s], s, num_segs, lsq + plan[s].first_block,
                                            payload);
    if (code != polyfit::kSegOk) {
      atomicMin(bad, (static_cast<unsigned long long>(s) << 2) |
                         static_cast<unsigned long long>(code));
    }
  }
}

// dexp: the per-block steps and the combines of dexp.h. Work item t < nb0 is
// block t of the positive part, item nb0 + b block b of the negative part;
// every per-part array is laid out the same way.
enum DexpStep { kDexpMoments, kDexpIntegral, kDexpRows, kDexpExp, kDexpSse, kDexpWrite };

struct DexpArrays {
  dexp::PartFit* fit;  // [2]
  dexp::BlockMoments* moments;
  dexp::BlockIntegral* integral;
  double* s0;
  double* ss0;
  dexp::BlockSse* sse;
  GivensLsq* lsq;
};

// One thread per (part, block) item, grid-stride; items of a finished part
// do nothing. The row steps factorize in the thread's shared FitShared.
template <int kStep>
__global__ void __launch_bounds__(kFitThreads)
    DexpBlocksKernel(const float* __restrict__ y, int64_t k, int64_t p_count, int64_t nb0,
                     int64_t items, DexpArrays a) {
  __shared__ FitShared fit[kFitThreads];
  FitShared& mine = fit[threadIdx.x];
  for (int64_t t = GlobalThread(); t < items; t += GridThreads()) {
    const int which = t < nb0 ? 0 : 1;
    const int64_t b = which == 0 ? t : t - nb0;
    const dexp::Part part = dexp::MakePart(y, k, p_count, which);
    const dexp::PartFit& f = a.fit[which];
    if (kStep == kDexpMoments) {
      a.moments[t] = dexp::Moments(part, b);
      continue;
    }
    if (!f.running) continue;
    if (kStep == kDexpIntegral) a.integral[t] = dexp::Integral(part, b, f);
    if (kStep == kDexpRows) {
      dexp::IntegralRows(part, b, f, a.s0[t], a.ss0[t], &mine.lsq, &mine.work);
      a.lsq[t] = mine.lsq;
    }
    if (kStep == kDexpExp) {
      dexp::ExpRows(part, b, f, &mine.lsq, &mine.work);
      a.lsq[t] = mine.lsq;
    }
    if (kStep == kDexpSse) a.sse[t] = dexp::Sse(part, b, f);
  }
}

// The combine after step kStep: thread `which` (0, 1) of one block runs it
// for its part over the part's blocks in order. kDexpWrite: thread 0 writes
// the payload.
template <int kStep>
__global__ void DexpCombineKernel(const float* __restrict__ y, int64_t k, int64_t p_count,
                                  int64_t nb0, int64_t nb1, DexpArrays a,
                                  uint8_t* __restrict__ payload) {
  const int which = threadIdx.x;
  if (kStep == kDexpWrite) {
    if (which == 0) {
      dexp::WritePayload(payload, static_cast<uint64_t>(k), static_cast<uint64_t>(p_count),
                         a.fit[0].out, a.fit[1].out);
    }
    return;
  }
  if (which > 1) return;
  const int64_t base = which == 0 ? 0 : nb0, nb = which == 0 ? nb0 : nb1;
  const dexp::Part part = dexp::MakePart(y, k, p_count, which);
  dexp::PartFit* f = &a.fit[which];
  if (kStep == kDexpMoments) {
    dexp::Start(part, a.moments + base, nb, f);
    return;
  }
  if (!f->running) return;
  if (kStep == kDexpIntegral) dexp::IntegralStarts(a.integral + base, nb, *f, a.s0 + base, a.ss0 + base);
  if (kStep == kDexpRows) dexp::Roots(a.lsq + base, nb, f);
  if (kStep == kDexpExp) dexp::Amplitudes(a.lsq + base, nb, f);
  if (kStep == kDexpSse) dexp::Choose(a.sse + base, nb, f);
}

}  // namespace

size_t QsgdScratchBytes() { return sizeof(QsgdRecords); }

GpuStatus QsgdEncode(const float* d_values, int64_t k, uint32_t s, uint32_t bucket,
                     uint64_t seed, uint8_t* d_payload, int64_t payload_bytes,
                     void* d_scratch, size_t scratch_bytes, void* stream,
                     QsgdEncodeResult* result) {
  cudaStream_t st = AsStream(stream);
  result->first_bad = k;
  result->bad_value = 0.0f;
  const int w = qsgd::CodeBits(s);
  const int64_t nb = CeilDiv(k, bucket);
  const int64_t code_bytes = CeilDiv(k * w, 8);
  if (payload_bytes != qsgd::kFixedBytes + 4 * nb + code_bytes) {
    return Fail(cudaErrorInvalidValue, "qsgd encode: payload_bytes does not match K, s, bucket");
  }
  if (scratch_bytes < sizeof(QsgdRecords)) {
    return Fail(cudaErrorInvalidValue, "qsgd scratch is smaller than QsgdScratchBytes()");
  }
  if (reinterpret_cast<uintptr_t>(d_payload) % 4 != 0) {
    return Fail(cudaErrorInvalidValue, "qsgd encode: the payload must be 4-byte aligned");
  }
  QsgdRecords* rec = static_cast<QsgdRecords*>(d_scratch);
  uint8_t* scales = d_payload + qsgd::kFixedBytes;
  Prefix fixed;
  fixed.n = static_cast<int>(qsgd::kFixedBytes);
  WriteHeader(fixed.bytes, kCodecQsgd, static_cast<uint64_t>(k));
  PutU32(fixed.bytes + 16, s);
  PutU32(fixed.bytes + 20, bucket);
  DR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(rec, 0xff, sizeof(QsgdRecords), st),
                          "clearing the error records");
  if (nb > 0) {
    DR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(scales, 0, 4 * nb, st), "clearing the scales");
  }
  const int64_t b_eff = bucket < k ? static_cast<int64_t>(bucket) : k;
  const int64_t spb = b_eff > 0 ? CeilDiv(b_eff, kSliceElems) : 1;
  const int64_t items = nb * spb;
  int grid = 0;
  DR_CUDA_RETURN_IF_ERROR(
      GridSize(QsgdBucketMaxKernel, CeilDiv(items, kThreads / kWarp), &grid),
      "sizing the bucket-max grid");
  QsgdBucketMaxKernel<<<grid, kThreads, 0, st>>>(
      d_values, k, bucket, spb, items, fixed, d_payload,
      reinterpret_cast<unsigned int*>(scales), &rec->first_bad_value);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching QsgdBucketMaxKernel");
  if (k > 0) {
    DR_CUDA_RETURN_IF_ERROR(
        GridSize(QsgdPackKernel, CeilDiv(CeilDiv(k, kGroup), kThreads), &grid),
        "sizing the pack grid");
    QsgdPackKernel<<<grid, kThreads, 0, st>>>(d_values, k, bucket, s, w, qsgd::SeedMix(seed),
                                              scales, scales + 4 * nb);
    DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching QsgdPackKernel");
  }
  unsigned long long bad = 0;
  DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&bad, &rec->first_bad_value, sizeof(bad),
                                          cudaMemcpyDeviceToHost, st),
                          "copying the error record to the host");
  DR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st), "running the qsgd encoder");
  if (bad < static_cast<unsigned long long>(k)) {
    float x = 0.0f;
    DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&x, d_values + bad, sizeof(x),
                                            cudaMemcpyDeviceToHost, st),
                            "copying the bad value to the host");
    DR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st), "copying the bad value");
    result->first_bad = static_cast<int64_t>(bad);
    result->bad_value = x;
  }
  return Ok();
}

GpuStatus QsgdDecode(const uint8_t* d_payload, int64_t payload_bytes, int64_t k, uint32_t s,
                     uint32_t bucket, float* d_out, void* d_scratch, size_t scratch_bytes,
                     void* stream, QsgdDecodeResult* result) {
  cudaStream_t st = AsStream(stream);
  const int w = qsgd::CodeBits(s);
  const int64_t nb = CeilDiv(k, bucket);
  const int64_t code_bytes = CeilDiv(k * w, 8);
  result->first_bad_scale = nb;
  result->bad_scale = 0.0f;
  result->last_code_byte = 0;
  result->first_bad_code = k;
  if (payload_bytes != qsgd::kFixedBytes + 4 * nb + code_bytes) {
    return Fail(cudaErrorInvalidValue, "qsgd decode: payload_bytes does not match K, s, bucket");
  }
  if (k == 0) return Ok();
  if (scratch_bytes < sizeof(QsgdRecords)) {
    return Fail(cudaErrorInvalidValue, "qsgd scratch is smaller than QsgdScratchBytes()");
  }
  QsgdRecords* rec = static_cast<QsgdRecords*>(d_scratch);
  const uint8_t* scales = d_payload + qsgd::kFixedBytes;
  const uint8_t* codes = scales + 4 * nb;
  DR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(rec, 0xff, sizeof(QsgdRecords), st),
                          "clearing the error records");
  int grid = 0;
  DR_CUDA_RETURN_IF_ERROR(GridSize(QsgdScaleCheckKernel, CeilDiv(nb, kThreads), &grid),
                          "sizing the scale-check grid");
  QsgdScaleCheckKernel<<<grid, kThreads, 0, st>>>(scales, nb, &rec->first_bad_scale);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching QsgdScaleCheckKernel");
  DR_CUDA_RETURN_IF_ERROR(
      GridSize(QsgdUnpackKernel, CeilDiv(CeilDiv(k, kGroup), kThreads), &grid),
      "sizing the unpack grid");
  QsgdUnpackKernel<<<grid, kThreads, 0, st>>>(scales, codes, k, bucket, s, w, d_out,
                                              &rec->first_bad_code);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching QsgdUnpackKernel");
  QsgdRecords host;
  DR_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(&host, rec, sizeof(host), cudaMemcpyDeviceToHost, st),
      "copying the error records to the host");
  uint8_t last = 0;
  DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&last, codes + code_bytes - 1, 1,
                                          cudaMemcpyDeviceToHost, st),
                          "copying the last code byte to the host");
  DR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st), "running the qsgd decoder");
  result->last_code_byte = last;
  if (host.first_bad_code < static_cast<unsigned long long>(k)) {
    result->first_bad_code = static_cast<int64_t>(host.first_bad_code);
  }
  if (host.first_bad_scale < static_cast<unsigned long long>(nb)) {
    uint8_t bytes[4];
    DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(bytes, scales + 4 * host.first_bad_scale, 4,
                                            cudaMemcpyDeviceToHost, st),
                            "copying the bad scale to the host");
    DR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st), "copying the bad scale");
    result->first_bad_scale = static_cast<int64_t>(host.first_bad_scale);
    result->bad_scale = GetF32(bytes);
  }
  return Ok();
}

size_t PolyfitTableBytes(int64_t num_segs, int64_t num_coefs) {
  return static_cast<size_t>(16 * (num_segs + 1) + 4 * num_coefs);
}

GpuStatus PolyfitUploadTables(const int64_t* start, const int64_t* coff, const uint8_t* coefs,
                              int64_t num_segs, int64_t num_coefs, void* d_tables,
                              size_t table_bytes, void* stream) {
  cudaStream_t st = AsStream(stream);
  if (table_bytes < PolyfitTableBytes(num_segs, num_coefs)) {
    return Fail(cudaErrorInvalidValue, "polyfit tables are smaller than PolyfitTableBytes()");
  }
  char* base = static_cast<char*>(d_tables);
  const size_t n = static_cast<size_t>(8 * (num_segs + 1));
  DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(base, start, n, cudaMemcpyHostToDevice, st),
                          "uploading the segment starts");
  DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(base + n, coff, n, cudaMemcpyHostToDevice, st),
                          "uploading the coefficient offsets");
  if (num_coefs > 0) {
    DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(base + 2 * n, coefs, 4 * num_coefs,
                                            cudaMemcpyHostToDevice, st),
                            "uploading the coefficients");
  }
  DR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st), "uploading the polyfit tables");
  return Ok();
}

GpuStatus PolyfitDecode(const void* d_tables, int64_t num_segs, int degree, int64_t k,
                        float* d_out, void* stream) {
  if (num_segs == 0 || k == 0) return Ok();
  cudaStream_t st = AsStream(stream);
  const PolyfitTablesView t = TableLayout(d_tables, num_segs);
  int grid = 0;
  DR_CUDA_RETURN_IF_ERROR(GridSize(PolyfitDecodeKernel, CeilDiv(k, kThreads), &grid),
                          "sizing the polyfit grid");
  PolyfitDecodeKernel<<<grid, kThreads, 0, st>>>(t.start, t.coff, t.coefs, num_segs, degree,
                                                 d_out);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching PolyfitDecodeKernel");
  return Ok();
}

GpuStatus DexpDecode(const dexp::Coefs& pos, const dexp::Coefs& neg, int64_t p_count,
                     int64_t k, float* d_out, void* stream) {
  if (k == 0) return Ok();
  cudaStream_t st = AsStream(stream);
  int grid = 0;
  DR_CUDA_RETURN_IF_ERROR(GridSize(DexpDecodeKernel, CeilDiv(k, kThreads), &grid),
                          "sizing the dexp grid");
  DexpDecodeKernel<<<grid, kThreads, 0, st>>>(pos, neg, p_count, k, d_out);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching DexpDecodeKernel");
  return Ok();
}

// ------------------------------------------------ polyfit / dexp encode --

namespace {

struct SortScratch {
  uint32_t *keys_in, *keys_out, *pos_in, *pos_out;
  void* cub_temp;
  size_t cub_bytes;
  SortRecords* rec;
  size_t total;
};

cudaError_t SortLayout(int64_t k, void* base, SortScratch* s) {
  s->cub_bytes = 0;
  cudaError_t e = deepreduce_cub::cub::DeviceRadixSort::SortPairs(
      nullptr, s->cub_bytes, static_cast<const uint32_t*>(nullptr),
      static_cast<uint32_t*>(nullptr), static_cast<const uint32_t*>(nullptr),
      static_cast<uint32_t*>(nullptr), k);
  if (e != cudaSuccess) return e;
  Carver c{static_cast<char*>(base), 0};
  const size_t n = static_cast<size_t>(k);
  s->keys_in = c.take<uint32_t>(n);
  s->keys_out = c.take<uint32_t>(n);
  s->pos_in = c.take<uint32_t>(n);
  s->pos_out = c.take<uint32_t>(n);
  s->cub_temp = c.take<char>(s->cub_bytes);
  s->rec = c.take<SortRecords>(1);
  s->total = c.used;
  return cudaSuccess;
}

struct FitScratch {
  polyfit::FitBlock* blocks;
  polyfit::SegPlan* plan;
  GivensLsq* lsq;
  unsigned long long* bad;
  size_t total;
};

FitScratch FitLayout(int64_t num_segs, int64_t num_blocks, void* base) {
  Carver c{static_cast<char*>(base), 0};
  FitScratch s;
  s.blocks = c.take<polyfit::FitBlock>(num_blocks);
  s.plan = c.take<polyfit::SegPlan>(num_segs);
  s.lsq = c.take<GivensLsq>(num_blocks);
  s.bad = c.take<unsigned long long>(1);
  s.total = c.used;
  return s;
}

DexpArrays DexpLayout(int64_t k, void* base, size_t* total) {
  // At most one partial block per part more than k / kFitBlock.
  const size_t items = static_cast<size_t>(CeilDiv(k, dexp::kFitBlock) + 2);
  Carver c{static_cast<char*>(base), 0};
  DexpArrays a;
  a.fit = c.take<dexp::PartFit>(2);
  a.moments = c.take<dexp::BlockMoments>(items);
  a.integral = c.take<dexp::BlockIntegral>(items);
  a.s0 = c.take<double>(items);
  a.ss0 = c.take<double>(items);
  a.sse = c.take<dexp::BlockSse>(items);
  a.lsq = c.take<GivensLsq>(items);
  *total = c.used;
  return a;
}

template <int kStep>
GpuStatus DexpStep(const float* d_y, int64_t k, int64_t p_count, int64_t nb0, int64_t nb1,
                   const DexpArrays& a, uint8_t* d_payload, cudaStream_t st) {
  if (kStep != kDexpWrite && nb0 + nb1 > 0) {
    int grid = 0;
    DR_CUDA_RETURN_IF_ERROR(GridSize(DexpBlocksKernel<kStep>, CeilDiv(nb0 + nb1, kFitThreads),
                                     &grid, kFitThreads),
                            "sizing a dexp block grid");
    DexpBlocksKernel<kStep><<<grid, kFitThreads, 0, st>>>(d_y, k, p_count, nb0, nb0 + nb1, a);
    DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching DexpBlocksKernel");
  }
  DexpCombineKernel<kStep><<<1, kWarp, 0, st>>>(d_y, k, p_count, nb0, nb1, a, d_payload);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching DexpCombineKernel");
  return Ok();
}

}  // namespace

size_t SortScratchBytes(int64_t k) {
  SortScratch s;
  if (SortLayout(k, nullptr, &s) != cudaSuccess) return 0;  // SortDescending reports it
  return s.total;
}

GpuStatus SortDescending(const float* d_values, int64_t k, bool perm64, void* d_perm,
                         float* d_y, void* d_scratch, size_t scratch_bytes, void* stream,
                         SortResult* result) {
  cudaStream_t st = AsStream(stream);
  result->first_bad = k;
  result->bad_value = 0.0f;
  result->p_count = 0;
  if (k == 0) return Ok();
  if (k > int64_t{0xffffffffLL}) {
    return Fail(cudaErrorInvalidValue, "sort: more than 2^32 - 1 values");
  }
  SortScratch s;
  DR_CUDA_RETURN_IF_ERROR(SortLayout(k, d_scratch, &s), "sizing the CUB radix sort");
  if (scratch_bytes < s.total) {
    return Fail(cudaErrorInvalidValue, "sort scratch is smaller than SortScratchBytes()");
  }
  DR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(&s.rec->first_bad, 0xff, sizeof(s.rec->first_bad), st),
                          "clearing the error record");
  DR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(&s.rec->p_count, 0, sizeof(s.rec->p_count), st),
                          "clearing the sign split");
  int grid = 0;
  DR_CUDA_RETURN_IF_ERROR(GridSize(SortKeysKernel, CeilDiv(k, kThreads), &grid),
                          "sizing the sort-key grid");
  SortKeysKernel<<<grid, kThreads, 0, st>>>(d_values, k, s.keys_in, s.pos_in,
                                            &s.rec->first_bad);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching SortKeysKernel");
  DR_CUDA_RETURN_IF_ERROR(deepreduce_cub::cub::DeviceRadixSort::SortPairs(
                              s.cub_temp, s.cub_bytes, s.keys_in, s.keys_out, s.pos_in,
                              s.pos_out, k, 0, 32, st),
                          "sorting the values (CUB radix sort)");
  if (perm64) {
    DR_CUDA_RETURN_IF_ERROR(GridSize(GatherSortedKernel<int64_t>, CeilDiv(k, kThreads), &grid),
                            "sizing the gather grid");
    GatherSortedKernel<int64_t><<<grid, kThreads, 0, st>>>(
        d_values, s.pos_out, k, static_cast<int64_t*>(d_perm), d_y, &s.rec->p_count);
  } else {
    DR_CUDA_RETURN_IF_ERROR(GridSize(GatherSortedKernel<int32_t>, CeilDiv(k, kThreads), &grid),
                            "sizing the gather grid");
    GatherSortedKernel<int32_t><<<grid, kThreads, 0, st>>>(
        d_values, s.pos_out, k, static_cast<int32_t*>(d_perm), d_y, &s.rec->p_count);
  }
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching GatherSortedKernel");
  SortRecords host;
  DR_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(&host, s.rec, sizeof(host), cudaMemcpyDeviceToHost, st),
      "copying the sort records to the host");
  DR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st), "sorting the values");
  result->p_count = static_cast<int64_t>(host.p_count);
  if (host.first_bad < static_cast<unsigned long long>(k)) {
    float x = 0.0f;
    DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&x, d_values + host.first_bad, sizeof(x),
                                            cudaMemcpyDeviceToHost, st),
                            "copying the bad value to the host");
    DR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st), "copying the bad value");
    result->first_bad = static_cast<int64_t>(host.first_bad);
    result->bad_value = x;
  }
  return Ok();
}

size_t PolyfitGreedyScratchBytes(int64_t segs) {
  const size_t cap = static_cast<size_t>(segs > 2 ? segs : 2);
  Carver c{nullptr, 0};
  c.take<polyfit::GreedySeg>(cap);
  c.take<int64_t>(cap + 1);
  return c.used;
}

GpuStatus PolyfitGreedy(const float* d_y, int64_t k, int64_t p_count, int64_t segs,
                        int degree, void* d_scratch, size_t scratch_bytes, void* stream,
                        int64_t* lens, int64_t* count) {
  cudaStream_t st = AsStream(stream);
  *count = 0;
  if (k < 1 || segs < 1) return Fail(cudaErrorInvalidValue, "polyfit greedy: K and segments must be >= 1");
  if (scratch_bytes < PolyfitGreedyScratchBytes(segs)) {
    return Fail(cudaErrorInvalidValue, "greedy scratch is smaller than PolyfitGreedyScratchBytes()");
  }
  const size_t cap = static_cast<size_t>(segs > 2 ? segs : 2);
  Carver c{static_cast<char*>(d_scratch), 0};
  polyfit::GreedySeg* seg = c.take<polyfit::GreedySeg>(cap);
  int64_t* d_lens = c.take<int64_t>(cap + 1);  // the count, then the lengths
  PolyfitGreedyKernel<<<1, kGreedyThreads, 0, st>>>(d_y, k, p_count, segs, degree, seg,
                                                    d_lens + 1, d_lens);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching PolyfitGreedyKernel");
  int64_t n = 0;
  DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&n, d_lens, sizeof(n), cudaMemcpyDeviceToHost, st),
                          "copying the segment count to the host");
  DR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st), "running the greedy segmentation");
  if (n < 1 || n > static_cast<int64_t>(cap)) {
    return Fail(cudaErrorUnknown, "polyfit greedy: segment count out of range");
  }
  DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(lens, d_lens + 1, sizeof(int64_t) * n,
                                          cudaMemcpyDeviceToHost, st),
                          "copying the segment lengths to the host");
  DR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st), "copying the segment lengths");
  *count = n;
  return Ok();
}

size_t PolyfitFitScratchBytes(int64_t num_segs, int64_t num_blocks) {
  return FitLayout(num_segs, num_blocks, nullptr).total;
}

GpuStatus PolyfitFit(const float* d_y, int64_t k, int degree, uint8_t seg_kind,
                     const polyfit::FitBlock* blocks, int64_t num_blocks,
                     const polyfit::SegPlan* plan, int64_t num_segs, uint8_t* d_payload,
                     int64_t payload_bytes, void* d_scratch, size_t scratch_bytes,
                     void* stream, PolyfitFitResult* result) {
  cudaStream_t st = AsStream(stream);
  result->bad_segment = num_segs;
  result->code = polyfit::kSegOk;
  int64_t num_coefs = 0;
  for (int64_t s = 0; s < num_segs; ++s) {
    num_coefs += polyfit::SegmentDegree(degree, plan[s].len) + 1;
  }
  if (payload_bytes != polyfit::PayloadBytes(num_segs, num_coefs)) {
    return Fail(cudaErrorInvalidValue, "polyfit encode: payload_bytes does not match the plan");
  }
  const FitScratch s = FitLayout(num_segs, num_blocks, d_scratch);
  if (scratch_bytes < s.total) {
    return Fail(cudaErrorInvalidValue, "polyfit scratch is smaller than PolyfitFitScratchBytes()");
  }
  if (num_blocks > 0) {
    DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.blocks, blocks, sizeof(*blocks) * num_blocks,
                                            cudaMemcpyHostToDevice, st),
                            "uploading the fit blocks");
  }
  if (num_segs > 0) {
    DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.plan, plan, sizeof(*plan) * num_segs,
                                            cudaMemcpyHostToDevice, st),
                            "uploading the segment plan");
  }
  DR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(s.bad, 0xff, sizeof(*s.bad), st),
                          "clearing the error record");
  int grid = 0;
  if (num_blocks > 0) {
    DR_CUDA_RETURN_IF_ERROR(GridSize(PolyfitBlocksKernel, CeilDiv(num_blocks, kFitThreads),
                                     &grid, kFitThreads),
                            "sizing the polyfit block grid");
    PolyfitBlocksKernel<<<grid, kFitThreads, 0, st>>>(d_y, s.blocks, num_blocks, degree, s.lsq);
    DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching PolyfitBlocksKernel");
  }
  Prefix fixed;
  fixed.n = static_cast<int>(polyfit::kFixedBytes);
  polyfit::WriteFixed(fixed.bytes, static_cast<uint64_t>(k), degree, seg_kind, num_segs);
  DR_CUDA_RETURN_IF_ERROR(GridSize(PolyfitFinishKernel, CeilDiv(num_segs, kItemThreads), &grid,
                                   kItemThreads),
                          "sizing the polyfit segment grid");
  PolyfitFinishKernel<<<grid, kItemThreads, 0, st>>>(s.plan, num_segs, s.lsq, fixed, d_payload,
                                                     s.bad);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching PolyfitFinishKernel");
  unsigned long long bad = 0;
  DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&bad, s.bad, sizeof(bad), cudaMemcpyDeviceToHost, st),
                          "copying the error record to the host");
  DR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st), "fitting the polyfit segments");
  if (bad != ~0ULL) {
    result->bad_segment = static_cast<int64_t>(bad >> 2);
    result->code = static_cast<int>(bad & 3);
  }
  return Ok();
}

size_t DexpScratchBytes(int64_t k) {
  size_t total = 0;
  DexpLayout(k, nullptr, &total);
  return total;
}

GpuStatus DexpFit(const float* d_y, int64_t k, int64_t p_count, uint8_t* d_payload,
                  void* d_scratch, size_t scratch_bytes, void* stream, DexpFitResult* result) {
  cudaStream_t st = AsStream(stream);
  result->bad_part = -1;
  result->mean = 0.0;
  if (p_count < 0 || p_count > k) return Fail(cudaErrorInvalidValue, "dexp: p_count outside [0, K]");
  size_t total = 0;
  const DexpArrays a = DexpLayout(k, d_scratch, &total);
  if (scratch_bytes < total) {
    return Fail(cudaErrorInvalidValue, "dexp scratch is smaller than DexpScratchBytes()");
  }
  const int64_t nb0 = dexp::NumBlocks(p_count), nb1 = dexp::NumBlocks(k - p_count);
  GpuStatus g = DexpStep<kDexpMoments>(d_y, k, p_count, nb0, nb1, a, d_payload, st);
  if (g.ok()) g = DexpStep<kDexpIntegral>(d_y, k, p_count, nb0, nb1, a, d_payload, st);
  if (g.ok()) g = DexpStep<kDexpRows>(d_y, k, p_count, nb0, nb1, a, d_payload, st);
  if (g.ok()) g = DexpStep<kDexpExp>(d_y, k, p_count, nb0, nb1, a, d_payload, st);
  if (g.ok()) g = DexpStep<kDexpSse>(d_y, k, p_count, nb0, nb1, a, d_payload, st);
  if (g.ok()) g = DexpStep<kDexpWrite>(d_y, k, p_count, nb0, nb1, a, d_payload, st);
  if (!g.ok()) return g;
  dexp::PartFit fit[2];
  DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(fit, a.fit, sizeof(fit), cudaMemcpyDeviceToHost, st),
                          "copying the dexp fit records to the host");
  DR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st), "fitting the dexp parts");
  for (int i = 0; i < 2; ++i) {
    if (fit[i].error) {
      result->bad_part = i;
      result->mean = fit[i].mean;
      break;
    }
  }
  return Ok();
}

}  // namespace gpu
}  // namespace value
}  // namespace deepreduce
