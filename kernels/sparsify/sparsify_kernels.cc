// CPU kernels of the sparsifiers: the CPU functors of the OpKernels (which
// are shared with the GPU: sparsify_kernels.h, validation in sparsify_args.h)
// and the CPU registrations. The keys (magnitude bits, random-k hash) and the
// radix-level layout come from sparsify.h and are shared with the CUDA
// kernels; this file adds threading and the selection.
//
// Top-k and random-k select the k largest keys (SelectLargest) of a key
// functor, by one of two exact methods:
//
// Sampled bounds (n >= 2^16; the usual case): a sample of n/32 keys (4096 to
// 65536) gives keys lo <= hi that bracket the k-th largest key with high
// probability. ONE
// streaming pass over x marks every key >= lo in a bitmap (1 bit/position),
// counts the keys > hi per block and copies the keys in [lo, hi] (the
// candidates, ~2 % of n at K = 1 %) block by block. A radix select over the
// candidates gives the exact k-th key T; per-block counts and a prefix sum
// give output offsets; the output is written from the bitmap, reading x only
// at the marked positions. When lo == hi (the k-th key sits in a large group
// of equal keys) nothing needs copying: the k-th key is lo. If the bracket
// missed (unrepresentative sample, or more candidates than the buffer holds),
// nothing has been written yet and the exact radix select below runs instead.
//
// Exact radix select (any n):
//   pass 1  histogram of the level-0 digit (top 16 bits; 8-11 for small n)
//           (per-worker histograms, merged) -> bucket B of the k-th key;
//   pass 2  per block of kBlock elements: keys above B and in B; the keys in
//           B are copied, block by block, to a candidate buffer (the block
//           is re-read from cache);
//   refine  the lower levels' histograms over the candidates only -> the
//           exact k-th key T and how many keys equal to T are taken (the
//           lowest-index ones);
//   pass 3  per-block output offsets by prefix sum, then every block writes
//           its selected indices and values in ascending index order.
//
// Both give the same answer, which does not depend on the number of threads
// or on how the blocks are shared among them.
//
// The segmented ops (SegmentedTopK, SegmentedRandomK; at the end of the file)
// run the same selection on each segment of a bucket, long segments over the
// pool and short ones many at a time, one per worker.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "kernels/common/cpu_parallel.h"
#include "kernels/common/devices.h"
#include "kernels/sparsify/sparsify.h"
#include "kernels/sparsify/sparsify_args.h"
#include "kernels/sparsify/sparsify_kernels.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/types.h"
#include "tensorflow/core/platform/threadpool.h"

namespace deepreduce {
namespace sparsify {
namespace {

using ::tensorflow::DataTypeToEnum;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ThreadPool = ::tensorflow::thread::ThreadPool;

#define DR_ALWAYS_INLINE inline __attribute__((always_inline))

// Elements per work item: 64 KiB of float32, so that pass 2 re-reads a block
// from L2 and a block's candidates are one contiguous run.
constexpr int64_t kBlock = 16384;

// Key functors: key(i) of position i, and how many of its bits can be set.
template <typename F>
struct MagnitudeKeys {
  using U = typename F::U;
  const U* bits;
  int KeyBits() const { return MagnitudeKeyBits<F>(); }
  DR_ALWAYS_INLINE U operator()(int64_t i) const { return MagnitudeKey<F>(bits[i]); }
};

struct RandomKeys {
  using U = uint64_t;
  uint64_t seed_mix;
  int KeyBits() const { return 64; }
  DR_ALWAYS_INLINE U operator()(int64_t i) const {
    return RandomKKey(seed_mix, static_cast<uint64_t>(i));
  }
};

// 64 bytes of 0/1 -> 64 bits (bit t = byte t). The multiplication moves bit
// 0 of each of 8 bytes into the top byte without carries.
DR_ALWAYS_INLINE uint64_t PackBytes(const uint8_t* bytes) {
  uint64_t word = 0;
  for (int g = 0; g < 8; ++g) {
    uint64_t v;
    std::memcpy(&v, bytes + 8 * g, 8);
    word |= ((v * 0x0102040810204080ULL) >> 56) << (8 * g);
  }
  return word;
}

// For the keys of positions [w0, w0 + len), len <= 64: the bitmap of
// key >= lo and the bitmap of key > hi. Written as byte loops over a fixed
// 64 so that the compiler vectorises the key computation and the compares.
template <typename Keys>
DR_ALWAYS_INLINE void MarkWord(const Keys& keys, int64_t w0, int len, typename Keys::U lo,
                     typename Keys::U hi, uint64_t* ge_lo, uint64_t* gt_hi) {
  using U = typename Keys::U;
  alignas(64) uint8_t ge[64];
  alignas(64) uint8_t gt[64];
  if (len == 64) {
    for (int t = 0; t < 64; ++t) {
      const U key = keys(w0 + t);
      ge[t] = key >= lo;
      gt[t] = key > hi;
    }
  } else {
    for (int t = 0; t < 64; ++t) {
      const U key = t < len ? keys(w0 + t) : U{0};
      ge[t] = t < len && key >= lo;
      gt[t] = t < len && key > hi;
    }
  }
  *ge_lo = PackBytes(ge);
  *gt_hi = PackBytes(gt);
}

// Marks positions [lo_i, hi_i) (one block) into m: bit = key >= lo; counts
// the marked keys and those > hi. Compiled twice, for the baseline x86-64
// that TensorFlow's flags target and for AVX2, and picked at run time: the
// wider compares (and, for random-k, the hash) are most of this pass.
template <typename Keys>
DR_ALWAYS_INLINE void MarkBlockBody(const Keys& keys, int64_t lo_i, int64_t hi_i,
                                    typename Keys::U lo, typename Keys::U hi,
                                    uint64_t* m, int64_t* above, int64_t* marked) {
  int64_t a = 0, c = 0;
  for (int64_t w0 = lo_i; w0 < hi_i; w0 += 64) {
    const int len = static_cast<int>(std::min<int64_t>(64, hi_i - w0));
    uint64_t word, gt_word;
    MarkWord(keys, w0, len, lo, hi, &word, &gt_word);
    a += __builtin_popcountll(gt_word);
    c += __builtin_popcountll(word);
    m[(w0 - lo_i) >> 6] = word;
  }
  *above = a;
  *marked = c;
}

#if defined(__x86_64__) && defined(__GNUC__)
template <typename Keys>
__attribute__((target("avx2,bmi,bmi2,popcnt"))) void MarkBlockAvx2(
    const Keys& keys, int64_t lo_i, int64_t hi_i, typename Keys::U lo,
    typename Keys::U hi, uint64_t* m, int64_t* above, int64_t* marked) {
  MarkBlockBody(keys, lo_i, hi_i, lo, hi, m, above, marked);
}
inline bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi2");
  return has;
}
#endif

template <typename Keys>
void MarkBlock(const Keys& keys, int64_t lo_i, int64_t hi_i, typename Keys::U lo,
               typename Keys::U hi, uint64_t* m, int64_t* above, int64_t* marked) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (HasAvx2()) {
    MarkBlockAvx2(keys, lo_i, hi_i, lo, hi, m, above, marked);
    return;
  }
#endif
  MarkBlockBody(keys, lo_i, hi_i, lo, hi, m, above, marked);
}

// Where a selection runs its loops and gets its temporaries. The selection
// routines below are templates over it, so that one routine serves both:
//
//   PoolExec    the device's thread pool and allocate_temp: one tensor, or
//               one large segment of a segmented op;
//   InlineExec  the calling thread and a slice of a preallocated arena: one
//               of many small segments, which are themselves spread over the
//               pool (a pool worker must not start a ParallelFor on its own
//               pool, and allocate_temp is not called from workers).
//
// For(units, unit_cost, fn) calls fn(begin, end) over [0, units);
// ForWithWorkerId passes a worker id in [0, NumWorkers()) as well; Temp
// gives an array of `count` V that lives as long as `holder` (PoolExec) or
// until the next Reset (InlineExec).
class PoolExec {
 public:
  explicit PoolExec(OpKernelContext* ctx) : ctx_(ctx), pool_(CpuPool(ctx)) {}
  int64_t NumWorkers() const { return pool_->NumThreads() + 1; }
  template <typename Fn>
  void For(int64_t units, int64_t unit_cost, const Fn& fn) const {
    pool_->ParallelFor(units, ThreadPool::SchedulingParams::Adaptive(unit_cost), fn);
  }
  template <typename Fn>
  void ForWithWorkerId(int64_t units, int64_t unit_cost, const Fn& fn) const {
    pool_->ParallelForWithWorkerId(
        units, ThreadPool::SchedulingParams::Adaptive(unit_cost), fn);
  }
  template <typename V>
  absl::Status Temp(int64_t count, Tensor* holder, V** out) const {
    TF_RETURN_IF_ERROR(ctx_->allocate_temp(DataTypeToEnum<V>::v(),
                                           TensorShape({count}), holder));
    *out = holder->flat<V>().data();
    return absl::OkStatus();
  }

 private:
  OpKernelContext* const ctx_;
  ThreadPool* const pool_;
};

constexpr int64_t kArenaAlign = 64;

class InlineExec {
 public:
  InlineExec(uint8_t* arena, int64_t bytes) : arena_(arena), bytes_(bytes) {}
  int64_t NumWorkers() const { return 1; }
  template <typename Fn>
  void For(int64_t units, int64_t /*unit_cost*/, const Fn& fn) const {
    if (units > 0) fn(0, units);
  }
  template <typename Fn>
  void ForWithWorkerId(int64_t units, int64_t /*unit_cost*/, const Fn& fn) const {
    if (units > 0) fn(0, units, 0);
  }
  template <typename V>
  absl::Status Temp(int64_t count, Tensor* /*holder*/, V** out) {
    const int64_t start = (used_ + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
    const int64_t size = count * static_cast<int64_t>(sizeof(V));
    if (start + size > bytes_) {  // ExactScratchBytes is wrong: a bug
      return absl::InternalError("segment selection needs more than its " +
                                 std::to_string(bytes_) + "-byte scratch arena");
    }
    *out = reinterpret_cast<V*>(arena_ + start);
    used_ = start + size;
    return absl::OkStatus();
  }
  void Reset() { used_ = 0; }

 private:
  uint8_t* const arena_;
  const int64_t bytes_;
  int64_t used_ = 0;
};

// Adds fn's counts of work units [0, num_units) into `merged` (num_buckets
// uint32, zeroed here). fn(begin, end, hist) adds units [begin, end) to hist.
// Each worker owns one histogram, zeroed on first use.
template <typename Exec, typename Fn>
absl::Status ParallelHistogram(Exec& exec, int64_t num_units, int64_t unit_cost,
                               int64_t num_buckets, Fn fn, uint32_t* merged) {
  const int64_t workers = exec.NumWorkers();
  Tensor hist_t, used_t;
  uint32_t* hist = nullptr;
  uint8_t* used = nullptr;
  TF_RETURN_IF_ERROR(exec.Temp(workers * num_buckets, &hist_t, &hist));
  TF_RETURN_IF_ERROR(exec.Temp(workers, &used_t, &used));
  std::memset(used, 0, workers);
  exec.ForWithWorkerId(
      num_units, unit_cost,
      [&](int64_t begin, int64_t end, int worker) {
        uint32_t* h = hist + worker * num_buckets;
        if (!used[worker]) {
          std::memset(h, 0, sizeof(uint32_t) * num_buckets);
          used[worker] = 1;
        }
        fn(begin, end, h);
      });
  std::memset(merged, 0, sizeof(uint32_t) * num_buckets);
  for (int64_t w = 0; w < workers; ++w) {
    if (!used[w]) continue;
    const uint32_t* h = hist + w * num_buckets;
    for (int64_t b = 0; b < num_buckets; ++b) merged[b] += h[b];
  }
  return absl::OkStatus();
}

// The bucket holding the need-th largest key (1 <= need <= sum of hist), and
// the number of keys in higher buckets.
void FindBucket(const uint32_t* hist, int64_t num_buckets, int64_t need,
                uint32_t* bucket, int64_t* above) {
  int64_t acc = 0;
  for (int64_t b = num_buckets - 1; b >= 0; --b) {
    if (acc + hist[b] >= need) {
      *bucket = static_cast<uint32_t>(b);
      *above = acc;
      return;
    }
    acc += hist[b];
  }
  *bucket = 0;  // unreachable for a valid need
  *above = acc;
}

// Radix digit width of the exact path: 16 bits (few passes) for large
// inputs; narrower for small ones, whose cost is dominated by clearing and
// merging the per-worker histograms (2^bits counters each).
int LevelBitsFor(int64_t n) {
  if (n <= 4096) return 8;
  if (n <= 65536) return 11;
  return kLevelBits;
}

// Radix select over a candidate array: finds the need-th largest key among
// the candidates that share the digits above `level` with *prefix (all of
// them when level == 0). On return *prefix is that key and *need the number
// of candidates equal to it that are taken (the lowest-index ones).
template <typename Exec, typename U>
absl::Status RefineKthKey(Exec& exec, const RadixPlan& plan, const U* cand,
                          int64_t count, int level, U* prefix, int64_t* need) {
  Tensor hist_t;
  uint32_t* hist = nullptr;
  TF_RETURN_IF_ERROR(exec.Temp(int64_t{1} << plan.level_bits, &hist_t, &hist));
  const int64_t num_chunks = (count + kBlock - 1) / kBlock;
  for (; level < plan.num_levels; ++level) {
    const int64_t num_buckets = int64_t{1} << plan.DigitBits(level);
    const U p = *prefix;
    TF_RETURN_IF_ERROR(ParallelHistogram(
        exec, num_chunks, kBlock * 2, num_buckets,
        [&](int64_t begin, int64_t end, uint32_t* h) {
          const int64_t hi = std::min(count, end * kBlock);
          for (int64_t j = begin * kBlock; j < hi; ++j) {
            const U key = cand[j];
            if (HasPrefix(plan, level, key, p)) ++h[Digit(plan, level, key)];
          }
        },
        hist));
    uint32_t digit;
    int64_t above_digit;
    FindBucket(hist, num_buckets, *need, &digit, &above_digit);
    *need -= above_digit;
    *prefix = level == 0 ? static_cast<U>(digit)
                         : static_cast<U>((p << plan.DigitBits(level)) | digit);
  }
  return absl::OkStatus();
}

// Per-block output offsets ([3]) from the counts above T ([0]) and equal to
// T ([1]), and how many of the block's keys equal to T are taken ([4]): the
// first `need_eq` of them in index order.
absl::Status AssignOffsets(int64_t* blk, int64_t num_blocks, int64_t need_eq,
                           int64_t k) {
  int64_t offset = 0, eq_before = 0;
  for (int64_t b = 0; b < num_blocks; ++b) {
    int64_t* r = blk + 5 * b;
    const int64_t take_eq = std::max<int64_t>(0, std::min(r[1], need_eq - eq_before));
    eq_before += r[1];
    r[3] = offset;
    r[4] = take_eq;
    offset += r[0] + take_eq;
  }
  if (offset != k) {
    return absl::InternalError("top-k selection counted " + std::to_string(offset) +
                               " elements instead of k=" + std::to_string(k));
  }
  return absl::OkStatus();
}

// Writes positions base + [0, n) and all values (k == n).
template <typename Exec, typename T, typename Tidx>
void SelectAll(Exec& exec, int64_t n, const T* x, Tidx* out_idx, T* out_val,
               int64_t base) {
  exec.For(n, 2, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out_idx[i] = static_cast<Tidx>(base + i);
    std::copy(x + begin, x + end, out_val + begin);
  });
}

// Selects the k largest keys of positions [0, n) (ties: lower index first)
// and writes their positions plus `base` in ascending order to out_idx and x
// at those positions to out_val (both of length k). 0 < k < n. keys(i) and
// x[i] describe position i; base only shifts the written indices (a segment's
// offset in its bucket). The exact radix select of the file comment, for any
// input.
template <typename Exec, typename Keys, typename T, typename Tidx>
absl::Status SelectLargestExact(Exec& exec, const Keys& keys, int64_t n, int64_t k,
                                const T* x, Tidx* out_idx, T* out_val, int64_t base) {
  using U = typename Keys::U;
  const RadixPlan plan = MakeRadixPlan(keys.KeyBits(), LevelBitsFor(n));
  const int shift0 = plan.Shift(0);
  const int64_t num_buckets0 = int64_t{1} << plan.DigitBits(0);
  const int64_t num_blocks = (n + kBlock - 1) / kBlock;

  // Pass 1: level-0 histogram.
  Tensor hist_t;
  uint32_t* hist = nullptr;
  TF_RETURN_IF_ERROR(exec.Temp(int64_t{1} << plan.level_bits, &hist_t, &hist));
  TF_RETURN_IF_ERROR(ParallelHistogram(
      exec, num_blocks, kBlock * 3, num_buckets0,
      [&](int64_t begin, int64_t end, uint32_t* h) {
        const int64_t lo = begin * kBlock;
        const int64_t hi = std::min(n, end * kBlock);
        for (int64_t i = lo; i < hi; ++i) ++h[keys(i) >> shift0];
      },
      hist));
  uint32_t bucket0;
  int64_t above;
  FindBucket(hist, num_buckets0, k, &bucket0, &above);
  const int64_t in_bucket = hist[bucket0];
  const bool refine = plan.num_levels > 1;

  // Per block: [0] keys above T (so far: above the bucket), [1] keys equal to
  // T (so far: in the bucket), [2] start of its candidates, [3] output offset,
  // [4] how many of its keys equal to T are taken.
  Tensor blk_t;
  int64_t* blk = nullptr;
  TF_RETURN_IF_ERROR(exec.Temp(num_blocks * 5, &blk_t, &blk));
  Tensor cand_t;
  U* cand = nullptr;
  TF_RETURN_IF_ERROR(exec.Temp(refine ? in_bucket : 0, &cand_t, &cand));
  std::atomic<int64_t> cursor{0};

  // Pass 2: per-block counts; the bucket's keys, each block's as one run.
  exec.For(
      num_blocks, kBlock * 3,
      [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          const int64_t lo = b * kBlock;
          const int64_t hi = std::min(n, lo + kBlock);
          int64_t gt = 0, eq = 0;
          for (int64_t i = lo; i < hi; ++i) {
            const U d = keys(i) >> shift0;
            gt += d > bucket0;
            eq += d == bucket0;
          }
          int64_t* r = blk + 5 * b;
          r[0] = gt;
          r[1] = eq;
          r[2] = 0;
          if (refine && eq > 0) {
            const int64_t start = cursor.fetch_add(eq, std::memory_order_relaxed);
            r[2] = start;
            U* c = cand + start;
            for (int64_t i = lo; i < hi; ++i) {
              const U key = keys(i);
              if ((key >> shift0) == bucket0) *c++ = key;
            }
          }
        }
      });

  // Refinement over the candidates: prefix grows by one digit per level.
  int64_t need = k - above;  // keys still to take from the current prefix
  U threshold = static_cast<U>(bucket0);
  if (refine) {
    TF_RETURN_IF_ERROR(RefineKthKey(exec, plan, cand, in_bucket, /*level=*/1,
                                    &threshold, &need));
    // Exact counts per block from its candidate run.
    exec.For(
        num_blocks, 64,
        [&](int64_t begin, int64_t end) {
          for (int64_t b = begin; b < end; ++b) {
            int64_t* r = blk + 5 * b;
            const U* c = cand + r[2];
            int64_t gt = 0, eq = 0;
            for (int64_t j = 0; j < r[1]; ++j) {
              gt += c[j] > threshold;
              eq += c[j] == threshold;
            }
            r[0] += gt;
            r[1] = eq;
          }
        });
  }

  TF_RETURN_IF_ERROR(AssignOffsets(blk, num_blocks, need, k));

  // Pass 3: write positions and values in ascending order.
  exec.For(
      num_blocks, kBlock * 3,
      [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          const int64_t* r = blk + 5 * b;
          if (r[0] + r[4] == 0) continue;
          int64_t o = r[3];
          int64_t take_eq = r[4];
          const int64_t lo = b * kBlock;
          const int64_t hi = std::min(n, lo + kBlock);
          for (int64_t i = lo; i < hi; ++i) {
            const U key = keys(i);
            bool sel = key > threshold;
            if (key == threshold && take_eq > 0) {
              --take_eq;
              sel = true;
            }
            if (sel) {
              out_idx[o] = static_cast<Tidx>(base + i);
              out_val[o] = x[i];
              ++o;
            }
          }
        }
      });
  return absl::OkStatus();
}

// Sampled bounds (sample select): from a sample of the keys, two keys lo <= hi
// are chosen so that, with high probability, fewer than k keys exceed hi and
// at least k are >= lo. One streaming pass then counts the keys above hi per
// block, marks every key >= lo in a bitmap (one bit per position) and copies
// the keys in [lo, hi] (the candidates, a few per cent of n at most) block by
// block; the exact k-th key is found among the candidates; and the output is
// written from the bitmap, reading x only at marked positions. One full pass
// over x instead of three. If the bounds were wrong (the sample was
// unrepresentative, or a huge group of equal keys lies between them) nothing
// has been written and *done is false: the caller runs the exact path.
//
// The sample is 1/32 of n in chunks of kSampleChunkLen keys, at least
// kMinSampleChunks and at most kMaxSampleChunks chunks (4096 to 65536 keys):
// a fixed 65536-key sample cost two single-threaded nth_element calls over
// it per call, which dominated a bucket of many mid-sized segments (ResNet-50's 3x3
// convolutions). A smaller sample only widens the bracket (more candidates,
// still a few per cent of n at K = 1 %), never the answer.
constexpr int64_t kSampleMinN = int64_t{1} << 16;
constexpr int64_t kSampleChunkLen = 128;
constexpr int64_t kMinSampleChunks = 32;   // 4096 keys
constexpr int64_t kMaxSampleChunks = 512;  // 65536 keys

int64_t SampleChunksFor(int64_t n) {
  return std::clamp<int64_t>(n / (32 * kSampleChunkLen), kMinSampleChunks, kMaxSampleChunks);
}

template <typename Exec, typename Keys, typename T, typename Tidx>
absl::Status SelectLargestSampled(Exec& exec, const Keys& keys, int64_t n, int64_t k,
                                  const T* x, Tidx* out_idx, T* out_val, int64_t base,
                                  bool* done) {
  using U = typename Keys::U;
  *done = false;
  const int64_t chunks = SampleChunksFor(n);
  const int64_t S = chunks * kSampleChunkLen;

  // Sample: evenly spaced contiguous chunks (cheap to read, and gradients
  // are laid out layer by layer, so every part of the tensor is represented).
  Tensor sample_t;
  U* sample = nullptr;
  TF_RETURN_IF_ERROR(exec.Temp(S, &sample_t, &sample));
  exec.For(chunks, kSampleChunkLen * 4, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const int64_t start = c * (n - kSampleChunkLen) / (chunks - 1);
      for (int64_t j = 0; j < kSampleChunkLen; ++j) {
        sample[c * kSampleChunkLen + j] = keys(start + j);
      }
    }
  });
  // Expected number of sample keys above the k-th largest key, and a margin
  // of 5 binomial standard deviations (+8) on each side.
  const double r = static_cast<double>(k) * S / static_cast<double>(n);
  const double margin = 5.0 * std::sqrt(r * (1.0 - r / S)) + 8.0;
  const int64_t hi_rank = static_cast<int64_t>(std::floor(r - margin));
  const int64_t lo_rank = static_cast<int64_t>(std::ceil(r + margin));
  U hi = std::numeric_limits<U>::max();
  U lo = 0;
  auto by_desc = [](U a, U b) { return a > b; };
  // lo first: it leaves the lo_rank largest keys in front, where hi lies.
  int64_t front = S;
  if (lo_rank < S) {
    std::nth_element(sample, sample + lo_rank, sample + S, by_desc);
    lo = sample[lo_rank];
    front = lo_rank;
  }
  if (hi_rank >= 0) {
    std::nth_element(sample, sample + hi_rank, sample + front, by_desc);
    hi = sample[hi_rank];
  }
  // Room for the candidates: twice their expected number, plus 4096.
  const int64_t expected_cand =
      static_cast<int64_t>(static_cast<double>(n) * (lo_rank - hi_rank + 1) / S);
  const int64_t cap = std::min<int64_t>(n, 2 * expected_cand + 4096);

  const int64_t num_blocks = (n + kBlock - 1) / kBlock;
  constexpr int64_t kWordsPerBlock = kBlock / 64;
  const int64_t num_words = (n + 63) / 64;
  Tensor blk_t, mark_t, cand_t;
  // Per block: [0] keys above T (first: above hi), [1] candidates equal to T
  // (first: all its candidates), [2] start of its candidates, [3] output
  // offset, [4] how many of its keys equal to T are taken.
  int64_t* blk = nullptr;
  uint64_t* mark = nullptr;
  U* cand = nullptr;
  TF_RETURN_IF_ERROR(exec.Temp(num_blocks * 5, &blk_t, &blk));
  TF_RETURN_IF_ERROR(exec.Temp(num_words, &mark_t, &mark));
  TF_RETURN_IF_ERROR(exec.Temp(cap, &cand_t, &cand));
  std::atomic<int64_t> cursor{0};
  // lo == hi: every candidate equals lo (typically a large group of equal
  // magnitudes), so none is copied and the k-th key is lo if the bracket holds.
  const bool single = lo == hi;

  // The one full pass.
  exec.For(
      num_blocks, kBlock * 4,
      [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          const int64_t lo_i = b * kBlock;
          const int64_t hi_i = std::min(n, lo_i + kBlock);
          int64_t above = 0, marked = 0;
          uint64_t* m = mark + b * kWordsPerBlock;
          MarkBlock(keys, lo_i, hi_i, lo, hi, m, &above, &marked);
          int64_t* r = blk + 5 * b;
          const int64_t nc = marked - above;
          r[0] = above;
          r[1] = nc;
          r[2] = 0;
          if (nc == 0 || single) continue;
          const int64_t start = cursor.fetch_add(nc, std::memory_order_relaxed);
          if (start + nc > cap) continue;  // overflow: detected below
          r[2] = start;
          U* c = cand + start;
          for (int64_t w = 0; lo_i + 64 * w < hi_i; ++w) {
            uint64_t word = m[w];
            while (word) {
              const U key = keys(lo_i + 64 * w + __builtin_ctzll(word));
              word &= word - 1;
              if (key <= hi) *c++ = key;
            }
          }
        }
      });
  int64_t above_total = 0, num_cand = 0;
  for (int64_t b = 0; b < num_blocks; ++b) {
    above_total += blk[5 * b];
    num_cand += blk[5 * b + 1];
  }
  if ((!single && num_cand > cap) || above_total >= k || above_total + num_cand < k) {
    return absl::OkStatus();  // bounds missed: *done stays false
  }

  U threshold = lo;
  int64_t need = k - above_total;
  if (!single) {
    // Digits as narrow as the candidates are few: a 2^16-counter histogram
    // per worker and level would cost more than the candidates themselves.
    const RadixPlan plan = MakeRadixPlan(keys.KeyBits(), LevelBitsFor(num_cand));
    TF_RETURN_IF_ERROR(RefineKthKey(exec, plan, cand, num_cand, /*level=*/0,
                                    &threshold, &need));
  }
  if (!single) {
    exec.For(num_blocks, 64, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        int64_t* r = blk + 5 * b;
        const U* c = cand + r[2];
        int64_t gt = 0, eq = 0;
        for (int64_t j = 0; j < r[1]; ++j) {
          gt += c[j] > threshold;
          eq += c[j] == threshold;
        }
        r[0] += gt;
        r[1] = eq;
      }
    });
  }
  TF_RETURN_IF_ERROR(AssignOffsets(blk, num_blocks, need, k));

  // Output from the bitmap: x is read only at marked positions (>= lo).
  exec.For(
      num_blocks, kBlock / 4,
      [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          const int64_t* r = blk + 5 * b;
          int64_t o = r[3];
          int64_t take_eq = r[4];
          const int64_t lo_i = b * kBlock;
          const int64_t hi_i = std::min(n, lo_i + kBlock);
          const uint64_t* m = mark + b * kWordsPerBlock;
          for (int64_t w = 0; lo_i + 64 * w < hi_i; ++w) {
            uint64_t word = m[w];
            while (word) {
              const int64_t i = lo_i + 64 * w + __builtin_ctzll(word);
              word &= word - 1;
              const U key = keys(i);
              if (key > threshold || (key == threshold && take_eq-- > 0)) {
                out_idx[o] = static_cast<Tidx>(base + i);
                out_val[o] = x[i];
                ++o;
              }
            }
          }
        }
      });
  *done = true;
  return absl::OkStatus();
}

// The per-tensor selection (0 < k < n): the sampled bounds when n is large
// enough and they hold, else the exact radix select. Same arguments as
// SelectLargestExact.
template <typename Exec, typename Keys, typename T, typename Tidx>
absl::Status SelectLargest(Exec& exec, const Keys& keys, int64_t n, int64_t k,
                           const T* x, Tidx* out_idx, T* out_val, int64_t base) {
  if (n >= kSampleMinN) {
    bool done;
    TF_RETURN_IF_ERROR(
        SelectLargestSampled(exec, keys, n, k, x, out_idx, out_val, base, &done));
    if (done) return absl::OkStatus();
  }
  return SelectLargestExact(exec, keys, n, k, x, out_idx, out_val, base);
}

// --------------------------------------------------------------------------
// Segmented selection: x is a bucket of S segments (segment i = x[offsets[i],
// offsets[i+1])), and segment i gets what the per-tensor op gives on its
// slice with k[i] (sparsify.h). Segments of kInlineMaxLen elements or more
// run one after another, each over the whole pool (PoolExec, the same path as
// a tensor of that size). Shorter ones, which would spread over at most 4
// workers, run whole on one worker each (InlineExec), many at once: one
// ParallelFor over the concatenation of the short segments, where each
// segment goes to the shard that holds its first element, so that shards get
// similar numbers of elements however the lengths vary. Each worker has its
// own scratch arena, sized for the longest short segment. Total work: O(n),
// plus per short segment one histogram of 2^8 (len <= 4096) or 2^11 counters
// per radix level (LevelBitsFor), cleared and scanned.

constexpr int64_t kInlineMaxLen = 4 * kBlock;
static_assert(kInlineMaxLen <= kSampleMinN,
              "short segments must take the exact path: their arena is sized for it");

// Cost-model units per element of a short segment run inline: the exact
// select's passes over the keys, the candidate copy and the output.
constexpr int64_t kInlineCostPerElement = 10;

// Bytes of InlineExec arena that SelectLargestExact takes for n keys of
// key_bytes bytes with key_bits significant bits: every Temp it asks for,
// each padded to kArenaAlign. Counted from SelectLargestExact, RefineKthKey
// and ParallelHistogram (InlineExec::Temp fails loudly if it is too small).
int64_t ExactScratchBytes(int key_bits, int64_t key_bytes, int64_t n) {
  const RadixPlan plan = MakeRadixPlan(key_bits, LevelBitsFor(n));
  const int64_t levels = plan.num_levels;
  const int64_t hist_bytes = int64_t{sizeof(uint32_t)} << plan.level_bits;
  const int64_t num_blocks = (n + kBlock - 1) / kBlock;
  // uint32 histograms: pass 1's merged and per-worker ones, RefineKthKey's
  // merged one and a per-worker one per refined level (levels + 2); a 1-byte
  // "used" flag per ParallelHistogram (levels); the block table; the
  // candidates (at most n keys).
  const int64_t num_temps = (levels + 2) + levels + 2;
  return (levels + 2) * hist_bytes + levels + num_blocks * 5 * int64_t{sizeof(int64_t)} +
         n * key_bytes + num_temps * kArenaAlign;
}

// One segment of len elements at x (k of them to select; positions written
// as base + j). k == len takes everything, without a selection.
template <typename Exec, typename Keys, typename T>
absl::Status SelectSegment(Exec& exec, const Keys& keys, int64_t len, int64_t k,
                           const T* x, int64_t* out_idx, T* out_val, int64_t base) {
  if (k == 0) return absl::OkStatus();
  if (k == len) {
    SelectAll(exec, len, x, out_idx, out_val, base);
    return absl::OkStatus();
  }
  return SelectLargest(exec, keys, len, k, x, out_idx, out_val, base);
}

// Fills the outputs (total_k entries each), segment by segment. keys_of(i)
// is the key functor of segment i, over the positions within the segment.
template <typename T, typename KeysOf>
absl::Status SelectSegments(OpKernelContext* ctx, const Segments& seg, const T* x,
                            int64_t* out_idx, T* out_val, const KeysOf& keys_of) {
  using Keys = decltype(keys_of(int64_t{0}));
  const int64_t S = seg.num_segments;
  const int64_t* off = seg.offsets;
  const int64_t* k = seg.k;

  // out_off[i]: where segment i's selection starts in the output. short_seg:
  // the short segments with k > 0, and short_start their first elements in
  // the concatenation of those segments (plus its length at the end).
  Tensor table_t;
  TF_RETURN_IF_ERROR(
      ctx->allocate_temp(tensorflow::DT_INT64, TensorShape({3 * S + 2}), &table_t));
  int64_t* out_off = table_t.flat<int64_t>().data();
  int64_t* short_seg = out_off + S + 1;
  int64_t* short_start = short_seg + S;
  int64_t num_short = 0, short_total = 0, arena_bytes = 0, o = 0;
  for (int64_t i = 0; i < S; ++i) {
    out_off[i] = o;
    o += k[i];
    const int64_t len = off[i + 1] - off[i];
    if (k[i] == 0 || len >= kInlineMaxLen) continue;
    short_seg[num_short] = i;
    short_start[num_short] = short_total;
    short_total += len;
    ++num_short;
    if (k[i] < len) {
      arena_bytes = std::max(arena_bytes,
                             ExactScratchBytes(keys_of(i).KeyBits(),
                                               int64_t{sizeof(typename Keys::U)}, len));
    }
  }
  out_off[S] = o;
  short_start[num_short] = short_total;

  // Long segments: one at a time, each over the whole pool.
  PoolExec pool_exec(ctx);
  for (int64_t i = 0; i < S; ++i) {
    const int64_t len = off[i + 1] - off[i];
    if (k[i] == 0 || len < kInlineMaxLen) continue;
    TF_RETURN_IF_ERROR(SelectSegment(pool_exec, keys_of(i), len, k[i], x + off[i],
                                     out_idx + out_off[i], out_val + out_off[i], off[i]));
  }
  if (num_short == 0) return absl::OkStatus();

  // Short segments: many at once, each whole on one worker.
  const int64_t stride = (arena_bytes + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
  Tensor arena_t;
  TF_RETURN_IF_ERROR(ctx->allocate_temp(
      tensorflow::DT_UINT8, TensorShape({pool_exec.NumWorkers() * stride}), &arena_t));
  uint8_t* arena = arena_t.flat<uint8_t>().data();
  auto run_short = [&](int64_t j, InlineExec& exec) {
    const int64_t i = short_seg[j];
    exec.Reset();
    return SelectSegment(exec, keys_of(i), off[i + 1] - off[i], k[i], x + off[i],
                         out_idx + out_off[i], out_val + out_off[i], off[i]);
  };
  std::atomic<int64_t> first_failed{num_short};
  pool_exec.ForWithWorkerId(
      short_total, kInlineCostPerElement, [&](int64_t begin, int64_t end, int worker) {
        InlineExec exec(arena + worker * stride, stride);
        for (int64_t j = std::lower_bound(short_start, short_start + num_short, begin) -
                         short_start;
             j < num_short && short_start[j] < end; ++j) {
          if (!run_short(j, exec).ok()) AtomicMin(&first_failed, j);
        }
      });
  const int64_t failed = first_failed.load();
  if (failed < num_short) {
    // A failure here is a bug (the selection's own consistency checks, or the
    // arena's size). Run that segment again, here, for its message.
    InlineExec exec(arena, stride);
    TF_RETURN_IF_ERROR(run_short(failed, exec));
    return absl::InternalError("segment " + std::to_string(short_seg[failed]) +
                               ": selection failed on a worker only");
  }
  return absl::OkStatus();
}

}  // namespace

// The CPU halves of the sparsifiers' OpKernels (sparsify_kernels.h).
namespace functor {

template <typename T, typename Tidx, bool kRandom>
struct SelectK<CpuDevice, T, Tidx, kRandom> {
  absl::Status operator()(OpKernelContext* ctx, const T* x, int64_t n, int64_t k,
                          uint64_t seed, Tidx* out_idx, T* out_val) const {
    PoolExec exec(ctx);
    if (k == n) {
      SelectAll(exec, n, x, out_idx, out_val, /*base=*/0);
      return absl::OkStatus();
    }
    if constexpr (kRandom) {
      const RandomKeys keys{SeedMix(seed)};
      return SelectLargest(exec, keys, n, k, x, out_idx, out_val, /*base=*/0);
    } else {
      using F = typename FloatOf<T>::F;
      const MagnitudeKeys<F> keys{reinterpret_cast<const typename F::U*>(x)};
      return SelectLargest(exec, keys, n, k, x, out_idx, out_val, /*base=*/0);
    }
  }
};

// Count marks the selected positions in a bitmap and counts them per block
// (turned into each block's output offset); Write writes them from the
// bitmap, reading x only there.
template <typename T, typename Tidx>
struct ThresholdSelect<CpuDevice, T, Tidx> {
  using F = typename FloatOf<T>::F;
  using U = typename F::U;
  static constexpr int64_t kWordsPerBlock = kBlock / 64;

  absl::Status Count(OpKernelContext* ctx, const T* x, int64_t n, U t_key, int64_t* total) {
    const U* bits = reinterpret_cast<const U*>(x);
    const int64_t num_blocks = (n + kBlock - 1) / kBlock;
    TF_RETURN_IF_ERROR(
        ctx->allocate_temp(tensorflow::DT_INT64, TensorShape({num_blocks}), &off_t_));
    TF_RETURN_IF_ERROR(
        ctx->allocate_temp(tensorflow::DT_UINT64, TensorShape({(n + 63) / 64}), &mark_t_));
    int64_t* off = off_t_.flat<int64_t>().data();
    uint64_t* mark = mark_t_.flat<uint64_t>().data();
    CpuPool(ctx)->ParallelFor(
        num_blocks, ThreadPool::SchedulingParams::Adaptive(kBlock * 2),
        [&](int64_t begin, int64_t end) {
          const MagnitudeKeys<F> keys{bits};
          for (int64_t b = begin; b < end; ++b) {
            const int64_t lo = b * kBlock;
            const int64_t hi = std::min(n, lo + kBlock);
            uint64_t* m = mark + b * kWordsPerBlock;
            int64_t c = 0, unused = 0;
            MarkBlock(keys, lo, hi, t_key, std::numeric_limits<U>::max(), m, &unused, &c);
            off[b] = c;
          }
        });
    int64_t sum = 0;
    for (int64_t b = 0; b < num_blocks; ++b) {
      const int64_t c = off[b];
      off[b] = sum;
      sum += c;
    }
    *total = sum;
    return absl::OkStatus();
  }

  absl::Status Write(OpKernelContext* ctx, const T* x, int64_t n, Tidx* out_idx,
                     T* out_val) const {
    const int64_t num_blocks = (n + kBlock - 1) / kBlock;
    const int64_t* off = off_t_.flat<int64_t>().data();
    const uint64_t* mark = mark_t_.flat<uint64_t>().data();
    CpuPool(ctx)->ParallelFor(
        num_blocks, ThreadPool::SchedulingParams::Adaptive(kBlock / 4),
        [&](int64_t begin, int64_t end) {
          for (int64_t b = begin; b < end; ++b) {
            const int64_t lo = b * kBlock;
            const int64_t hi = std::min(n, lo + kBlock);
            const uint64_t* m = mark + b * kWordsPerBlock;
            int64_t o = off[b];
            for (int64_t w = 0; lo + 64 * w < hi; ++w) {
              uint64_t word = m[w];
              while (word) {
                const int64_t i = lo + 64 * w + __builtin_ctzll(word);
                word &= word - 1;
                out_idx[o] = static_cast<Tidx>(i);
                out_val[o] = x[i];
                ++o;
              }
            }
          }
        });
    return absl::OkStatus();
  }

  Tensor off_t_, mark_t_;
};

template <typename T, bool kRandom>
struct SegmentedSelect<CpuDevice, T, kRandom> {
  absl::Status operator()(OpKernelContext* ctx, const Segments& seg, const T* x,
                          uint64_t seed, int64_t* idx, T* val) const {
    const int64_t* off = seg.offsets;
    if constexpr (kRandom) {
      return SelectSegments(ctx, seg, x, idx, val, [seed](int64_t i) {
        return RandomKeys{SeedMix(SegmentSeed(seed, static_cast<uint64_t>(i)))};
      });
    } else {
      using F = typename FloatOf<T>::F;
      const typename F::U* bits = reinterpret_cast<const typename F::U*>(x);
      return SelectSegments(ctx, seg, x, idx, val, [bits, off](int64_t i) {
        return MagnitudeKeys<F>{bits + off[i]};
      });
    }
  }
};
}  // namespace functor

namespace {

#define REGISTER_SPARSIFY_CPU(T, Tidx)                                       \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>TopK")                           \
                              .Device(::tensorflow::DEVICE_CPU)             \
                              .TypeConstraint<T>("T")                       \
                              .TypeConstraint<Tidx>("out_idx"),             \
                          SelectKOp<CpuDevice, T, Tidx, false>);             \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>RandomK")                        \
                              .Device(::tensorflow::DEVICE_CPU)             \
                              .TypeConstraint<T>("T")                       \
                              .TypeConstraint<Tidx>("out_idx"),             \
                          SelectKOp<CpuDevice, T, Tidx, true>);              \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>ThresholdSelect")                \
                              .Device(::tensorflow::DEVICE_CPU)             \
                              .TypeConstraint<T>("T")                       \
                              .TypeConstraint<Tidx>("out_idx"),             \
                          ThresholdSelectOp<CpuDevice, T, Tidx>);

#define REGISTER_SPARSIFY_CPU_ALL_IDX(T) \
  REGISTER_SPARSIFY_CPU(T, int32_t)      \
  REGISTER_SPARSIFY_CPU(T, int64_t)

REGISTER_SPARSIFY_CPU_ALL_IDX(Eigen::half);
REGISTER_SPARSIFY_CPU_ALL_IDX(Eigen::bfloat16);
REGISTER_SPARSIFY_CPU_ALL_IDX(float);
REGISTER_SPARSIFY_CPU_ALL_IDX(double);
#undef REGISTER_SPARSIFY_CPU_ALL_IDX
#undef REGISTER_SPARSIFY_CPU

// Segmented ops: int64 indices only (positions in a bucket of many
// variables).
#define REGISTER_SEGMENTED_CPU(T)                                            \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>SegmentedTopK")                  \
                              .Device(::tensorflow::DEVICE_CPU)             \
                              .TypeConstraint<T>("T"),                      \
                          SegmentedSelectOp<CpuDevice, T, false>);           \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>SegmentedRandomK")               \
                              .Device(::tensorflow::DEVICE_CPU)             \
                              .TypeConstraint<T>("T"),                      \
                          SegmentedSelectOp<CpuDevice, T, true>);

REGISTER_SEGMENTED_CPU(Eigen::half);
REGISTER_SEGMENTED_CPU(Eigen::bfloat16);
REGISTER_SEGMENTED_CPU(float);
REGISTER_SEGMENTED_CPU(double);
#undef REGISTER_SEGMENTED_CPU

}  // namespace
}  // namespace sparsify
}  // namespace deepreduce
