// CPU kernels of the Bloom-filter index codec: the CPU functors of
// BloomFilterInsert and BloomFilterQuery (whose OpKernels, shared with the
// GPU, are in bloom_kernels.h), the CPU-only BloomFilterSelect with its
// selection policies, and the CPU registrations. The per-element logic
// (hashing, bit layout, random-policy keys) comes from bloom.h and is shared
// with the CUDA kernels; this file adds threading.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

#include "kernels/bloom/bloom.h"
#include "kernels/bloom/bloom_args.h"
#include "kernels/bloom/bloom_decode.h"
#include "kernels/bloom/bloom_kernels.h"
#include "kernels/common/cpu_parallel.h"
#include "kernels/common/devices.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/platform/threadpool.h"

namespace deepreduce {
namespace bloom {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

}  // namespace

// The CPU halves of BloomFilterInsert and BloomFilterQuery (the OpKernels:
// bloom_kernels.h).
namespace functor {

template <typename Tidx>
struct BloomInsert<CpuDevice, Tidx> {
  absl::Status operator()(OpKernelContext* ctx, const BloomLayout& layout, const Tidx* idx,
                          int64_t k, int64_t n, uint32_t* words, InsertCheck* check) const {
    const uint32_t h = layout.num_hashes;
    std::memset(words, 0, NumBytes(layout.num_bits));
    check->first_bad = k;
    if (k == 0) return absl::OkStatus();

    // Duplicates are found with one bit per position (n/8 bytes, 1/32 of the
    // dense float32 tensor the indices came from) unless that bitmap would
    // dwarf the index set itself (a few indices out of a huge n): then a
    // sorted copy of the K indices is checked instead.
    const int64_t seen_words = (n + 63) / 64;
    const bool use_bitmap = seen_words <= 8 * k + 4096;
    Tensor seen_t;
    uint64_t* seen = nullptr;
    if (use_bitmap) {
      TF_RETURN_IF_ERROR(ctx->allocate_temp(tensorflow::DT_UINT64, TensorShape({seen_words}),
                                            &seen_t));
      seen = seen_t.flat<uint64_t>().data();
      std::memset(seen, 0, sizeof(uint64_t) * seen_words);
    } else {
      for (int64_t i = 0; i < k; ++i) {
        const int64_t v = static_cast<int64_t>(idx[i]);
        if (!(v >= 0 && v < n)) {
          return absl::InvalidArgumentError(
              "indices[" + std::to_string(i) + "] = " + std::to_string(v) +
              " is outside [0, universe_size=" + std::to_string(n) + ")");
        }
      }
      Tensor sorted_t;
      TF_RETURN_IF_ERROR(
          ctx->allocate_temp(tensorflow::DT_INT64, TensorShape({k}), &sorted_t));
      int64_t* sorted = sorted_t.flat<int64_t>().data();
      std::copy(idx, idx + k, sorted);
      std::sort(sorted, sorted + k);
      for (int64_t i = 1; i < k; ++i) {
        if (sorted[i] == sorted[i - 1]) {
          return absl::InvalidArgumentError("indices must be distinct, but " +
                                            std::to_string(sorted[i]) +
                                            " occurs more than once");
        }
      }
    }

    std::atomic<int64_t> first_bad{k};
    CpuPool(ctx)->ParallelFor(
        k, /*cost_per_unit=*/20 + 10 * h, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) {
            const int64_t v = static_cast<int64_t>(idx[i]);
            if (seen != nullptr) {
              if (v < 0 || v >= n) {
                AtomicMin(&first_bad, i);
                continue;
              }
              const uint64_t mask = uint64_t{1} << (v & 63);
              if (__atomic_fetch_or(&seen[v >> 6], mask, __ATOMIC_RELAXED) & mask) {
                AtomicMin(&first_bad, i);
                continue;
              }
            }
            const ProbeSeq p = Probes(layout, static_cast<uint64_t>(v));
            for (uint32_t j = 0; j < h; ++j) {
              const uint64_t bit = ProbeBit(layout, p, j);
              __atomic_fetch_or(&words[bit >> 5], uint32_t{1} << (bit & 31),
                                __ATOMIC_RELAXED);
            }
          }
        });
    const int64_t bad = first_bad.load();
    check->first_bad = bad;
    if (bad < k) check->bad_value = static_cast<int64_t>(idx[bad]);
    return absl::OkStatus();
  }
};

template <typename Tidx>
struct BloomQuery<CpuDevice, Tidx> {
  absl::Status LastWord(OpKernelContext* /*ctx*/, const uint8_t* filter,
                        const BloomLayout& layout, uint32_t* last_word) const {
    *last_word = core::LastWord(filter, static_cast<int64_t>(layout.num_bits));
    return absl::OkStatus();
  }

  // Pass 1: one bit per position, and the number of positives per block,
  // turned into each block's output offset.
  absl::Status Count(OpKernelContext* ctx, const BloomLayout& layout, const uint8_t* filter,
                     int64_t n, int64_t* total, uint32_t* last_word) {
    const int64_t num_blocks = (n + kQueryBlock - 1) / kQueryBlock;
    const int64_t num_words = (n + 63) / 64;
    TF_RETURN_IF_ERROR(ctx->allocate_temp(tensorflow::DT_UINT64, TensorShape({num_words}),
                                          &hits_t_));
    TF_RETURN_IF_ERROR(ctx->allocate_temp(tensorflow::DT_INT64,
                                          TensorShape({num_blocks + 1}), &counts_t_));
    uint64_t* hits = hits_t_.flat<uint64_t>().data();
    int64_t* counts = counts_t_.flat<int64_t>().data();
    CpuPool(ctx)->ParallelFor(
        num_blocks, kQueryBlock * 10, [&](int64_t begin, int64_t end) {
          for (int64_t blk = begin; blk < end; ++blk) {
            counts[blk] = core::QueryBlock(layout, filter, n, blk, hits);
          }
        });
    int64_t sum = 0;
    for (int64_t blk = 0; blk < num_blocks; ++blk) {
      const int64_t c = counts[blk];
      counts[blk] = sum;
      sum += c;
    }
    *total = sum;
    return LastWord(ctx, filter, layout, last_word);
  }

  // Pass 2: each block writes its positives at its offset.
  absl::Status Write(OpKernelContext* ctx, int64_t n, Tidx* out) const {
    const int64_t num_blocks = (n + kQueryBlock - 1) / kQueryBlock;
    const uint64_t* hits = hits_t_.flat<uint64_t>().data();
    const int64_t* counts = counts_t_.flat<int64_t>().data();
    CpuPool(ctx)->ParallelFor(
        num_blocks, kQueryBlock / 8, [&](int64_t begin, int64_t end) {
          for (int64_t blk = begin; blk < end; ++blk) {
            core::ExtractBlock(hits, n, blk, counts[blk], out);
          }
        });
    return absl::OkStatus();
  }

  Tensor hits_t_, counts_t_;
};

}  // namespace functor

namespace {

template <typename Tidx>
class BloomFilterSelectOp : public OpKernel {
 public:
  explicit BloomFilterSelectOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::string policy;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("policy", &policy));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("seed", &seed_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("policy_seed", &policy_seed_));
    if (policy == "p0") {
      policy_ = kP0;
    } else if (policy == "leftmost") {
      policy_ = kLeftmost;
    } else if (policy == "random") {
      policy_ = kRandom;
    } else {
      policy_ = kConflictSets;
    }
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& pos_t = ctx->input(1);
    OP_REQUIRES(ctx, pos_t.dims() == 1,
                absl::InvalidArgumentError("positives must be a vector, got shape " +
                                           pos_t.shape().DebugString()));
    BloomLayout layout;
    OP_REQUIRES_OK(ctx, ParseFilter(ctx->input(0), ctx->input(2), ctx->input(3),
                                    seed_, /*check_padding=*/true, &layout));
    int64_t k;
    OP_REQUIRES_OK(ctx, ScalarInt64(ctx->input(4), "k", &k));
    const int64_t num_pos = pos_t.NumElements();
    OP_REQUIRES(ctx, k >= 0,
                absl::InvalidArgumentError("k must be >= 0, got " + std::to_string(k)));
    OP_REQUIRES(ctx, k <= num_pos,
                absl::InvalidArgumentError(
                    "k=" + std::to_string(k) + " exceeds the " +
                    std::to_string(num_pos) +
                    " positives; a filter built from k indices always has at "
                    "least k positives, so k or the filter is wrong"));
    const Tidx* pos = pos_t.flat<Tidx>().data();
    for (int64_t i = 0; i < num_pos; ++i) {
      OP_REQUIRES(ctx, pos[i] >= 0 && (i == 0 || pos[i] > pos[i - 1]),
                  absl::InvalidArgumentError(
                      "positives must be non-negative and strictly increasing "
                      "(the output of BloomFilterQuery); positives[" +
                      std::to_string(i) + "] = " +
                      std::to_string(static_cast<int64_t>(pos[i]))));
    }
    if (policy_ != kConflictSets) {  // conflict_sets checks while it hashes
      const uint8_t* bytes = ctx->input(0).flat<uint8_t>().data();
      std::atomic<int64_t> first_bad{num_pos};
      CpuPool(ctx)->ParallelFor(num_pos, 20 + 8 * layout.num_hashes,
                             [&](int64_t begin, int64_t end) {
                               for (int64_t i = begin; i < end; ++i) {
                                 if (!Contains(layout, bytes, static_cast<uint64_t>(pos[i]))) {
                                   AtomicMin(&first_bad, i);
                                 }
                               }
                             });
      OP_REQUIRES_OK(ctx, NotAPositive(first_bad.load(), pos, num_pos));
    }
    switch (policy_) {
      case kP0:
        ctx->set_output(0, pos_t);
        return;
      case kLeftmost: {
        Tensor* out_t = nullptr;
        OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({k}), &out_t));
        std::copy(pos, pos + k, out_t->flat<Tidx>().data());
        return;
      }
      case kRandom:
        SelectRandom(ctx, pos, num_pos, k);
        return;
      case kConflictSets:
        SelectConflictSets(ctx, layout, pos, num_pos, k);
        return;
    }
  }

 private:
  enum Policy { kP0, kLeftmost, kRandom, kConflictSets };

  static absl::Status NotAPositive(int64_t bad, const Tidx* pos, int64_t num_pos) {
    if (bad >= num_pos) return absl::OkStatus();
    return absl::InvalidArgumentError(
        "positives[" + std::to_string(bad) + "] = " +
        std::to_string(static_cast<int64_t>(pos[bad])) +
        " is not a positive of this filter; pass the output of "
        "BloomFilterQuery for the same filter and seed");
  }

  // Keeps the k positives with the smallest RandomPolicyKey (ties cannot
  // change the result: keys are compared together with the position).
  void SelectRandom(OpKernelContext* ctx, const Tidx* pos, int64_t num_pos,
                    int64_t k) {
    Tensor order_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_UINT64,
                                           TensorShape({2 * num_pos}), &order_t));
    // Interleaved (key, position) pairs.
    auto* pairs = reinterpret_cast<std::pair<uint64_t, uint64_t>*>(
        order_t.flat<uint64_t>().data());
    const uint64_t seed = static_cast<uint64_t>(policy_seed_);
    CpuPool(ctx)->ParallelFor(num_pos, 20, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const uint64_t p = static_cast<uint64_t>(pos[i]);
        pairs[i] = {RandomPolicyKey(seed, p), p};
      }
    });
    if (k < num_pos) std::nth_element(pairs, pairs + k, pairs + num_pos);
    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({k}), &out_t));
    Tidx* out = out_t->flat<Tidx>().data();
    for (int64_t i = 0; i < k; ++i) out[i] = static_cast<Tidx>(pairs[i].second);
    std::sort(out, out + k);
  }

  // REFERENCE 1.1, policy P2. For every set bit, its conflict set is the set
  // of positives that map to it; each such set holds at least one inserted
  // index. Visit the sets in ascending size (ties: lower bit first); from a
  // set none of whose members is selected yet, select the member most likely
  // to be genuine: the one whose own smallest conflict set is smallest (ties:
  // lower position). A positive alone on a bit is certainly genuine and is
  // taken first. If fewer than k are then selected, the remaining positives
  // follow in the same order of likelihood. Every output is a positive.
  //
  // Implementation: the sets are never materialised. Each bit only needs its
  // size and its best member, computed in two scatter passes; the sequential
  // greedy then streams through (bit, best member) pairs sorted by
  // set size and touches only the m-byte `covered` array at random.
  void SelectConflictSets(OpKernelContext* ctx, const BloomLayout& layout,
                          const Tidx* pos, int64_t num_pos, int64_t k) {
    const uint32_t h = layout.num_hashes;
    const uint64_t m = layout.num_bits;
    const uint32_t kNone = ~uint32_t{0};
    OP_REQUIRES(ctx, m < kNone && num_pos < kNone,
                absl::InvalidArgumentError(
                    "conflict_sets supports filters of fewer than 2^32 - 1 bits "
                    "and positives; got filter_bits=" + std::to_string(m) +
                    " and " + std::to_string(num_pos) + " positives"));
    const uint8_t* bytes = ctx->input(0).flat<uint8_t>().data();
    const int64_t pairs = num_pos * h;

    Tensor probe_t, count_t, score_t, best_t, state_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_UINT32,
                                           TensorShape({pairs}), &probe_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_UINT32,
                                           TensorShape({static_cast<int64_t>(m)}),
                                           &count_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_UINT32,
                                           TensorShape({num_pos}), &score_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_UINT64,
                                           TensorShape({static_cast<int64_t>(m)}),
                                           &best_t));
    // Per bit: covered flag; per positive: selected flag.
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(
                            tensorflow::DT_UINT8,
                            TensorShape({static_cast<int64_t>(m) + num_pos}),
                            &state_t));
    uint32_t* probes = probe_t.flat<uint32_t>().data();
    uint32_t* count = count_t.flat<uint32_t>().data();
    uint32_t* score = score_t.flat<uint32_t>().data();
    // best[b] = (score << 32) | member index, minimised over the members of b.
    uint64_t* best = best_t.flat<uint64_t>().data();
    uint8_t* covered = state_t.flat<uint8_t>().data();
    uint8_t* selected = covered + m;
    std::memset(count, 0, sizeof(uint32_t) * m);
    std::memset(covered, 0, m + num_pos);
    std::fill(best, best + m, ~uint64_t{0});
    auto pool = CpuPool(ctx);

    // Distinct bits of every positive (a repeated probe is stored as kNone),
    // and a check that each claimed positive really is one.
    std::atomic<int64_t> first_bad{num_pos};
    pool->ParallelFor(num_pos, 30 + 15 * h, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const ProbeSeq p = Probes(layout, static_cast<uint64_t>(pos[i]));
        uint32_t* row = probes + i * h;
        for (uint32_t j = 0; j < h; ++j) {
          const uint32_t bit = static_cast<uint32_t>(ProbeBit(layout, p, j));
          if (!TestBit(bytes, bit)) AtomicMin(&first_bad, i);
          bool repeat = false;
          for (uint32_t q = 0; q < j; ++q) repeat |= row[q] == bit;
          row[j] = repeat ? kNone : bit;
        }
      }
    });
    OP_REQUIRES_OK(ctx, NotAPositive(first_bad.load(), pos, num_pos));

    // The scatter phases below are sharded by bit range: every shard scans
    // all (positive, bit) pairs but writes only the bits it owns, so no
    // atomics are needed (their lock prefix costs more than the cache miss)
    // and the result does not depend on the number of threads.
    const int64_t shards = std::max(1, pool->NumThreads());
    auto shard_lo = [&](int64_t sh) { return static_cast<uint32_t>(m * sh / shards); };
    auto per_shard = [&](const std::function<void(int64_t)>& fn) {
      pool->ParallelFor(shards, int64_t{1} << 30, [&](int64_t begin, int64_t end) {
        for (int64_t sh = begin; sh < end; ++sh) fn(sh);
      });
    };
    per_shard([&](int64_t sh) {
      const uint32_t lo = shard_lo(sh), hi = shard_lo(sh + 1);
      for (int64_t t = 0; t < pairs; ++t) {
        const uint32_t bit = probes[t];
        if (bit >= lo && bit < hi) ++count[bit];  // kNone is never < hi
      }
    });
    pool->ParallelFor(num_pos, 10 * h, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const uint32_t* row = probes + i * h;
        uint32_t sc = kNone;
        for (uint32_t j = 0; j < h; ++j) {
          if (row[j] != kNone) sc = std::min(sc, count[row[j]]);
        }
        score[i] = sc;
      }
    });
    per_shard([&](int64_t sh) {
      const uint32_t lo = shard_lo(sh), hi = shard_lo(sh + 1);
      for (int64_t i = 0; i < num_pos; ++i) {
        const uint64_t key = (static_cast<uint64_t>(score[i]) << 32) | static_cast<uint64_t>(i);
        const uint32_t* row = probes + i * h;
        for (uint32_t j = 0; j < h; ++j) {
          const uint32_t bit = row[j];
          if (bit >= lo && bit < hi && key < best[bit]) best[bit] = key;
        }
      }
    });

    // Counting sort of the non-empty sets by (size, bit) into (bit, best
    // member) pairs: per-shard histograms, then each shard scatters its own
    // bits to precomputed slots. Set sizes take few distinct values, so the
    // scattered writes go to a few sequential streams.
    uint32_t max_count = 0;
    for (uint64_t b = 0; b < m; ++b) max_count = std::max(max_count, count[b]);
    const int64_t width = int64_t{max_count} + 1;
    Tensor hist_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_INT64,
                                           TensorShape({shards * width}), &hist_t));
    int64_t* hist = hist_t.flat<int64_t>().data();  // hist[sh * width + c]
    std::fill(hist, hist + shards * width, 0);
    per_shard([&](int64_t sh) {
      int64_t* hs = hist + sh * width;
      for (uint32_t b = shard_lo(sh); b < shard_lo(sh + 1); ++b) ++hs[count[b]];
    });
    int64_t slot = 0;
    for (int64_t c = 1; c < width; ++c) {
      for (int64_t sh = 0; sh < shards; ++sh) {
        const int64_t n_c = hist[sh * width + c];
        hist[sh * width + c] = slot;
        slot += n_c;
      }
    }
    const int64_t non_empty = slot;
    Tensor order_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_UINT64,
                                           TensorShape({non_empty}), &order_t));
    uint64_t* order = order_t.flat<uint64_t>().data();  // (bit << 32) | member
    per_shard([&](int64_t sh) {
      int64_t* hs = hist + sh * width;
      for (uint32_t b = shard_lo(sh); b < shard_lo(sh + 1); ++b) {
        if (count[b] != 0) {
          order[hs[count[b]]++] = (uint64_t{b} << 32) | (best[b] & 0xffffffffULL);
        }
      }
    });

    int64_t chosen = 0;
    for (int64_t q = 0; q < non_empty && chosen < k; ++q) {
      if (covered[order[q] >> 32]) continue;
      const int64_t i = static_cast<int64_t>(order[q] & 0xffffffffULL);
      selected[i] = 1;
      ++chosen;
      const uint32_t* row = probes + i * h;
      for (uint32_t j = 0; j < h; ++j) {
        if (row[j] != kNone) covered[row[j]] = 1;
      }
    }
    if (chosen < k) {
      // Fill with the unselected positives by (score, position).
      Tensor rest_t;
      OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_UINT64,
                                             TensorShape({num_pos - chosen}), &rest_t));
      uint64_t* rest = rest_t.flat<uint64_t>().data();
      int64_t r = 0;
      for (int64_t i = 0; i < num_pos; ++i) {
        if (!selected[i]) rest[r++] = (static_cast<uint64_t>(score[i]) << 32) | i;
      }
      const int64_t need = k - chosen;
      std::nth_element(rest, rest + need - 1, rest + r);
      for (int64_t q = 0; q < need; ++q) selected[rest[q] & 0xffffffffULL] = 1;
    }
    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({k}), &out_t));
    Tidx* out = out_t->flat<Tidx>().data();
    int64_t o = 0;
    for (int64_t i = 0; i < num_pos; ++i) {
      if (selected[i]) out[o++] = pos[i];
    }
  }

  Policy policy_;
  int64_t seed_;
  int64_t policy_seed_;
};

#define REGISTER_BLOOM_CPU(T)                                              \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>BloomFilterInsert")            \
                              .Device(::tensorflow::DEVICE_CPU)           \
                              .TypeConstraint<T>("Tidx"),                 \
                          BloomFilterInsertOp<CpuDevice, T>);              \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>BloomFilterQuery")             \
                              .Device(::tensorflow::DEVICE_CPU)           \
                              .TypeConstraint<T>("out_idx"),              \
                          BloomFilterQueryOp<CpuDevice, T>);               \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>BloomFilterSelect")            \
                              .Device(::tensorflow::DEVICE_CPU)           \
                              .TypeConstraint<T>("Tidx"),                 \
                          BloomFilterSelectOp<T>);

REGISTER_BLOOM_CPU(int32_t);
REGISTER_BLOOM_CPU(int64_t);
#undef REGISTER_BLOOM_CPU

}  // namespace
}  // namespace bloom
}  // namespace deepreduce
