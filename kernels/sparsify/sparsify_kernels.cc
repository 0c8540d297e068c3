// CPU kernels of the sparsifiers. The keys (magnitude bits, random-k hash)
// and the radix-level layout come from sparsify.h and are shared with the
// CUDA kernels; this file adds validation, threading and the selection.
//
// Top-k and random-k run one radix select (SelectLargest) over a key functor:
//   pass 1  histogram of the level-0 digit of every key (per-worker
//           histograms, merged) -> bucket B holding the k-th largest key;
//   pass 2  per block of kBlock elements: how many keys lie above B and in B;
//           the keys in B are copied, block by block, to a candidate buffer
//           (the block is re-read from cache, so this is one streaming pass);
//   refine  the lower levels' histograms over the candidates only (a few
//           thousand keys for real gradients) -> the exact k-th key T and how
//           many keys equal to T are taken (the lowest-index ones);
//   pass 3  per-block output offsets by prefix sum, then every block writes
//           its selected indices and values in ascending index order.
// Three streaming passes over the input, O(n + candidates), and the result
// does not depend on the number of threads or on how the blocks are shared.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "kernels/sparsify/sparsify.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/types.h"
#include "tensorflow/core/platform/threadpool.h"

namespace deepreduce {
namespace sparsify {
namespace {

using ::tensorflow::DataTypeToEnum;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ThreadPool = ::tensorflow::thread::ThreadPool;

// Elements per work item: 64 KiB of float32, so that pass 2 re-reads a block
// from L2 and a block's candidates are one contiguous run.
constexpr int64_t kBlock = 16384;
// Histogram counters are uint32 per worker.
constexpr int64_t kMaxElements = (int64_t{1} << 32) - 1;

ThreadPool* Pool(OpKernelContext* ctx) {
  return ctx->device()->tensorflow_cpu_worker_threads()->workers;
}

template <typename T>
struct FloatOf;
template <>
struct FloatOf<Eigen::half> {
  using F = Half;
};
template <>
struct FloatOf<Eigen::bfloat16> {
  using F = BFloat16;
};
template <>
struct FloatOf<float> {
  using F = Float32;
};
template <>
struct FloatOf<double> {
  using F = Float64;
};

// Key functors: key(i) of position i, and how many of its bits can be set.
template <typename F>
struct MagnitudeKeys {
  using U = typename F::U;
  const U* bits;
  int KeyBits() const { return MagnitudeKeyBits<F>(); }
  U operator()(int64_t i) const { return MagnitudeKey<F>(bits[i]); }
};

struct RandomKeys {
  using U = uint64_t;
  uint64_t seed_mix;
  int KeyBits() const { return 64; }
  U operator()(int64_t i) const {
    return RandomKKey(seed_mix, static_cast<uint64_t>(i));
  }
};

absl::Status ScalarInt64(const Tensor& t, const char* name, int64_t* out) {
  if (!tensorflow::TensorShapeUtils::IsScalar(t.shape())) {
    return absl::InvalidArgumentError(std::string(name) +
                                      " must be a scalar, got shape " +
                                      t.shape().DebugString());
  }
  *out = t.scalar<int64_t>()();
  return absl::OkStatus();
}

// n = number of elements of x; it must fit the counters and the index type.
template <typename Tidx>
absl::Status CheckSize(const Tensor& x, int64_t* n) {
  *n = x.NumElements();
  if (*n > kMaxElements) {
    return absl::InvalidArgumentError(
        "x has " + std::to_string(*n) +
        " elements; the sparsifiers support at most 2^32 - 1");
  }
  if (DataTypeToEnum<Tidx>::v() == tensorflow::DT_INT32 &&
      *n > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        "x has " + std::to_string(*n) +
        " elements, more than int32 indices can address; use out_idx=tf.int64");
  }
  return absl::OkStatus();
}

absl::Status CheckK(int64_t k, int64_t n) {
  if (k < 0 || k > n) {
    return absl::InvalidArgumentError("k must lie in [0, n] where n=" +
                                      std::to_string(n) +
                                      " is the number of elements of x, got k=" +
                                      std::to_string(k));
  }
  return absl::OkStatus();
}

// Adds fn's counts of work units [0, num_units) into `merged` (num_buckets
// uint32, zeroed here). fn(begin, end, hist) adds units [begin, end) to hist.
// Each pool worker owns one histogram, zeroed on first use.
template <typename Fn>
absl::Status ParallelHistogram(OpKernelContext* ctx, int64_t num_units,
                               int64_t unit_cost, int64_t num_buckets, Fn fn,
                               uint32_t* merged) {
  ThreadPool* pool = Pool(ctx);
  const int64_t workers = pool->NumThreads() + 1;
  Tensor hist_t, used_t;
  TF_RETURN_IF_ERROR(ctx->allocate_temp(
      tensorflow::DT_UINT32, TensorShape({workers * num_buckets}), &hist_t));
  TF_RETURN_IF_ERROR(ctx->allocate_temp(tensorflow::DT_UINT8,
                                        TensorShape({workers}), &used_t));
  uint32_t* hist = hist_t.flat<uint32_t>().data();
  uint8_t* used = used_t.flat<uint8_t>().data();
  std::memset(used, 0, workers);
  pool->ParallelForWithWorkerId(
      num_units, ThreadPool::SchedulingParams::Adaptive(unit_cost),
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

// Writes positions [0, n) and all values (k == n).
template <typename T, typename Tidx>
void SelectAll(OpKernelContext* ctx, int64_t n, const T* x, Tidx* out_idx,
               T* out_val) {
  Pool(ctx)->ParallelFor(n, ThreadPool::SchedulingParams::Adaptive(2),
                         [&](int64_t begin, int64_t end) {
                           for (int64_t i = begin; i < end; ++i) {
                             out_idx[i] = static_cast<Tidx>(i);
                           }
                           std::copy(x + begin, x + end, out_val + begin);
                         });
}

// Selects the k largest keys of positions [0, n) (ties: lower index first)
// and writes their positions in ascending order to out_idx and x at those
// positions to out_val (both of length k). 0 < k < n.
template <typename Keys, typename T, typename Tidx>
absl::Status SelectLargest(OpKernelContext* ctx, const Keys& keys, int64_t n,
                           int64_t k, const T* x, Tidx* out_idx, T* out_val) {
  using U = typename Keys::U;
  ThreadPool* pool = Pool(ctx);
  const RadixPlan plan = MakeRadixPlan(keys.KeyBits());
  const int shift0 = plan.Shift(0);
  const int64_t num_buckets0 = int64_t{1} << plan.DigitBits(0);
  const int64_t num_blocks = (n + kBlock - 1) / kBlock;

  // Pass 1: level-0 histogram.
  Tensor hist_t;
  TF_RETURN_IF_ERROR(ctx->allocate_temp(
      tensorflow::DT_UINT32, TensorShape({int64_t{1} << kLevelBits}), &hist_t));
  uint32_t* hist = hist_t.flat<uint32_t>().data();
  TF_RETURN_IF_ERROR(ParallelHistogram(
      ctx, num_blocks, kBlock * 3, num_buckets0,
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
  TF_RETURN_IF_ERROR(ctx->allocate_temp(tensorflow::DT_INT64,
                                        TensorShape({num_blocks * 5}), &blk_t));
  int64_t* blk = blk_t.flat<int64_t>().data();
  Tensor cand_t;
  TF_RETURN_IF_ERROR(ctx->allocate_temp(DataTypeToEnum<U>::v(),
                                        TensorShape({refine ? in_bucket : 0}),
                                        &cand_t));
  U* cand = cand_t.flat<U>().data();
  std::atomic<int64_t> cursor{0};

  // Pass 2: per-block counts; the bucket's keys, each block's as one run.
  pool->ParallelFor(
      num_blocks, ThreadPool::SchedulingParams::Adaptive(kBlock * 3),
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
    for (int level = 1; level < plan.num_levels; ++level) {
      const int64_t num_buckets = int64_t{1} << plan.DigitBits(level);
      const U prefix = threshold;
      const int64_t num_chunks = (in_bucket + kBlock - 1) / kBlock;
      TF_RETURN_IF_ERROR(ParallelHistogram(
          ctx, num_chunks, kBlock * 2, num_buckets,
          [&](int64_t begin, int64_t end, uint32_t* h) {
            const int64_t hi = std::min(in_bucket, end * kBlock);
            for (int64_t j = begin * kBlock; j < hi; ++j) {
              const U key = cand[j];
              if (HasPrefix(plan, level, key, prefix)) ++h[Digit(plan, level, key)];
            }
          },
          hist));
      uint32_t digit;
      int64_t above_digit;
      FindBucket(hist, num_buckets, need, &digit, &above_digit);
      need -= above_digit;
      threshold = static_cast<U>((prefix << plan.DigitBits(level)) | digit);
    }
    // Exact counts per block from its candidate run.
    pool->ParallelFor(
        num_blocks, ThreadPool::SchedulingParams::Adaptive(64),
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

  // Output offsets, and which keys equal to T are taken: the first `need`
  // of them in index order.
  int64_t offset = 0, eq_before = 0;
  for (int64_t b = 0; b < num_blocks; ++b) {
    int64_t* r = blk + 5 * b;
    const int64_t take_eq = std::max<int64_t>(0, std::min(r[1], need - eq_before));
    eq_before += r[1];
    r[3] = offset;
    r[4] = take_eq;
    offset += r[0] + take_eq;
  }
  if (offset != k) {
    return absl::InternalError("top-k selection counted " + std::to_string(offset) +
                               " elements instead of k=" + std::to_string(k));
  }

  // Pass 3: write positions and values in ascending order.
  pool->ParallelFor(
      num_blocks, ThreadPool::SchedulingParams::Adaptive(kBlock * 3),
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
              out_idx[o] = static_cast<Tidx>(i);
              out_val[o] = x[i];
              ++o;
            }
          }
        }
      });
  return absl::OkStatus();
}

template <typename T, typename Tidx>
class TopKOp : public OpKernel {
 public:
  explicit TopKOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x_t = ctx->input(0);
    int64_t n, k;
    OP_REQUIRES_OK(ctx, CheckSize<Tidx>(x_t, &n));
    OP_REQUIRES_OK(ctx, ScalarInt64(ctx->input(1), "k", &k));
    OP_REQUIRES_OK(ctx, CheckK(k, n));
    Tensor *idx_t = nullptr, *val_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({k}), &idx_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({k}), &val_t));
    if (k == 0) return;
    const T* x = x_t.flat<T>().data();
    Tidx* out_idx = idx_t->flat<Tidx>().data();
    T* out_val = val_t->flat<T>().data();
    if (k == n) {
      SelectAll(ctx, n, x, out_idx, out_val);
      return;
    }
    using F = typename FloatOf<T>::F;
    const MagnitudeKeys<F> keys{reinterpret_cast<const typename F::U*>(x)};
    OP_REQUIRES_OK(ctx, SelectLargest(ctx, keys, n, k, x, out_idx, out_val));
  }
};

template <typename T, typename Tidx>
class RandomKOp : public OpKernel {
 public:
  explicit RandomKOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x_t = ctx->input(0);
    int64_t n, k, seed;
    OP_REQUIRES_OK(ctx, CheckSize<Tidx>(x_t, &n));
    OP_REQUIRES_OK(ctx, ScalarInt64(ctx->input(1), "k", &k));
    OP_REQUIRES_OK(ctx, ScalarInt64(ctx->input(2), "seed", &seed));
    OP_REQUIRES_OK(ctx, CheckK(k, n));
    Tensor *idx_t = nullptr, *val_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({k}), &idx_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({k}), &val_t));
    if (k == 0) return;
    const T* x = x_t.flat<T>().data();
    Tidx* out_idx = idx_t->flat<Tidx>().data();
    T* out_val = val_t->flat<T>().data();
    if (k == n) {
      SelectAll(ctx, n, x, out_idx, out_val);
      return;
    }
    const RandomKeys keys{SeedMix(static_cast<uint64_t>(seed))};
    OP_REQUIRES_OK(ctx, SelectLargest(ctx, keys, n, k, x, out_idx, out_val));
  }
};

template <typename T, typename Tidx>
class ThresholdSelectOp : public OpKernel {
 public:
  explicit ThresholdSelectOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    using F = typename FloatOf<T>::F;
    using U = typename F::U;
    const Tensor& x_t = ctx->input(0);
    const Tensor& t_t = ctx->input(1);
    int64_t n;
    OP_REQUIRES_OK(ctx, CheckSize<Tidx>(x_t, &n));
    OP_REQUIRES(ctx, tensorflow::TensorShapeUtils::IsScalar(t_t.shape()),
                absl::InvalidArgumentError("threshold must be a scalar, got shape " +
                                           t_t.shape().DebugString()));
    const T t = t_t.scalar<T>()();
    const double td = static_cast<double>(t);
    OP_REQUIRES(ctx, td >= 0.0,
                absl::InvalidArgumentError(
                    "threshold must be a non-negative number (not NaN), got " +
                    std::to_string(td)));
    U t_bits;
    std::memcpy(&t_bits, &t, sizeof(U));
    const U t_key = MagnitudeKey<F>(t_bits);  // -0.0 -> 0
    const MagnitudeKeys<F> keys{reinterpret_cast<const U*>(x_t.flat<T>().data())};
    const T* x = x_t.flat<T>().data();

    const int64_t num_blocks = (n + kBlock - 1) / kBlock;
    Tensor off_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_INT64,
                                           TensorShape({num_blocks}), &off_t));
    int64_t* off = off_t.flat<int64_t>().data();
    ThreadPool* pool = Pool(ctx);
    pool->ParallelFor(num_blocks, ThreadPool::SchedulingParams::Adaptive(kBlock * 2),
                      [&](int64_t begin, int64_t end) {
                        for (int64_t b = begin; b < end; ++b) {
                          const int64_t hi = std::min(n, (b + 1) * kBlock);
                          int64_t c = 0;
                          for (int64_t i = b * kBlock; i < hi; ++i) c += keys(i) >= t_key;
                          off[b] = c;
                        }
                      });
    int64_t total = 0;
    for (int64_t b = 0; b < num_blocks; ++b) {
      const int64_t c = off[b];
      off[b] = total;
      total += c;
    }
    Tensor *idx_t = nullptr, *val_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({total}), &idx_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({total}), &val_t));
    if (total == 0) return;
    Tidx* out_idx = idx_t->flat<Tidx>().data();
    T* out_val = val_t->flat<T>().data();
    pool->ParallelFor(num_blocks, ThreadPool::SchedulingParams::Adaptive(kBlock * 3),
                      [&](int64_t begin, int64_t end) {
                        for (int64_t b = begin; b < end; ++b) {
                          const int64_t hi = std::min(n, (b + 1) * kBlock);
                          const int64_t stop = b + 1 < num_blocks ? off[b + 1] : total;
                          int64_t o = off[b];
                          if (o == stop) continue;
                          for (int64_t i = b * kBlock; i < hi; ++i) {
                            if (keys(i) >= t_key) {
                              out_idx[o] = static_cast<Tidx>(i);
                              out_val[o] = x[i];
                              ++o;
                            }
                          }
                        }
                      });
  }
};

#define REGISTER_SPARSIFY_CPU(T, Tidx)                                       \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>TopK")                           \
                              .Device(::tensorflow::DEVICE_CPU)             \
                              .TypeConstraint<T>("T")                       \
                              .TypeConstraint<Tidx>("out_idx"),             \
                          TopKOp<T, Tidx>);                                  \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>RandomK")                        \
                              .Device(::tensorflow::DEVICE_CPU)             \
                              .TypeConstraint<T>("T")                       \
                              .TypeConstraint<Tidx>("out_idx"),             \
                          RandomKOp<T, Tidx>);                               \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>ThresholdSelect")                \
                              .Device(::tensorflow::DEVICE_CPU)             \
                              .TypeConstraint<T>("T")                       \
                              .TypeConstraint<Tidx>("out_idx"),             \
                          ThresholdSelectOp<T, Tidx>);

#define REGISTER_SPARSIFY_CPU_ALL_IDX(T) \
  REGISTER_SPARSIFY_CPU(T, int32_t)      \
  REGISTER_SPARSIFY_CPU(T, int64_t)

REGISTER_SPARSIFY_CPU_ALL_IDX(Eigen::half);
REGISTER_SPARSIFY_CPU_ALL_IDX(Eigen::bfloat16);
REGISTER_SPARSIFY_CPU_ALL_IDX(float);
REGISTER_SPARSIFY_CPU_ALL_IDX(double);
#undef REGISTER_SPARSIFY_CPU_ALL_IDX
#undef REGISTER_SPARSIFY_CPU

}  // namespace
}  // namespace sparsify
}  // namespace deepreduce
