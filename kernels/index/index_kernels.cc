// CPU kernels of the lossless index codecs (int32, bitmap, rle, golomb). The
// byte formats and per-element / per-block logic live in the codec headers
// (index_format.h, rle.h, golomb.h), shared with the CUDA kernels; this file
// adds validation, threading and memory management.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>

#include "kernels/common/bit_io.h"
#include "kernels/common/cpu_parallel.h"
#include "kernels/common/parse_status_tf.h"
#include "kernels/index/golomb.h"
#include "kernels/index/index_args.h"
#include "kernels/index/index_decode.h"
#include "kernels/index/index_format.h"
#include "kernels/index/rle.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/platform/threadpool.h"

namespace deepreduce {
namespace index {
namespace {

using ::tensorflow::DataTypeToEnum;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

// Indices per work item of the rle encoder and bytes per work item of the
// bitmap decoder: large enough to amortise scheduling, small enough to split
// a 25 M-position tensor across the pool.
constexpr int64_t kRleChunk = 16384;
constexpr int64_t kBitmapChunkBytes = 8192;



// indices must lie in [0, n) and increase strictly.
template <typename T>
absl::Status ValidateSorted(OpKernelContext* ctx, const T* idx, int64_t k, int64_t n,
                            const char* name) {
  std::atomic<int64_t> first_bad{k};
  CpuPool(ctx)->ParallelFor(k, 4, [&](int64_t begin, int64_t end) {
    const int64_t bad = core::FirstUnsorted(idx, begin, end, n);
    if (bad < end) AtomicMin(&first_bad, bad);
  });
  const int64_t bad = first_bad.load();
  if (bad == k) return absl::OkStatus();
  return SortedError(name, bad, bad > 0 ? static_cast<int64_t>(idx[bad - 1]) : 0,
                     static_cast<int64_t>(idx[bad]), n);
}

// ---------------------------------------------------------------------------
// Encoders: shared validation, then the codec's Encode().

template <typename Tidx>
class EncodeBase : public OpKernel {
 public:
  explicit EncodeBase(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    int64_t n = 0;
    OP_REQUIRES_OK(ctx, ParseUniverse(ctx->input(1), &n));
    const Tensor& indices_t = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckIndicesShape(indices_t, n));
    const int64_t k = indices_t.NumElements();
    const Tidx* idx = indices_t.flat<Tidx>().data();
    OP_REQUIRES_OK(ctx, ValidateSorted(ctx, idx, k, n, "indices"));
    Encode(ctx, idx, k, n);
  }

 protected:
  virtual void Encode(OpKernelContext* ctx, const Tidx* idx, int64_t k, int64_t n) = 0;

  // Allocates the payload and writes the common header; returns the body.
  uint8_t* AllocatePayload(OpKernelContext* ctx, uint8_t codec, int64_t n, int64_t k,
                           int64_t extra_header, int64_t body_bytes) {
    const int64_t hdr = CommonHeaderSize(n, k);
    Tensor* out = nullptr;
    absl::Status s = ctx->allocate_output(0, TensorShape({hdr + extra_header + body_bytes}),
                                          &out);
    if (!s.ok()) {
      ctx->CtxFailure(s);
      return nullptr;
    }
    return PutCommonHeader(out->flat<uint8_t>().data(), codec, n, k);
  }
};

template <typename Tidx>
class EncodeInt32Op : public EncodeBase<Tidx> {
 public:
  using EncodeBase<Tidx>::EncodeBase;

 protected:
  void Encode(OpKernelContext* ctx, const Tidx* idx, int64_t k, int64_t n) override {
    OP_REQUIRES(ctx, static_cast<uint64_t>(n) <= kMaxInt32Universe,
                Invalid("the int32 index codec cannot address universe_size=" +
                        std::to_string(n) + " > 2^31; use golomb, rle or bitmap"));
    uint8_t* body = this->AllocatePayload(ctx, kCodecInt32, n, k, 0, 4 * k);
    if (body == nullptr) return;
    CpuPool(ctx)->ParallelFor(k, 2, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        StoreLE32(body + 4 * i, static_cast<uint32_t>(idx[i]));
      }
    });
  }
};

template <typename Tidx>
class EncodeBitmapOp : public EncodeBase<Tidx> {
 public:
  using EncodeBase<Tidx>::EncodeBase;

 protected:
  void Encode(OpKernelContext* ctx, const Tidx* idx, int64_t k, int64_t n) override {
    const int64_t bytes = static_cast<int64_t>(BitmapBytes(n));
    uint8_t* body = this->AllocatePayload(ctx, kCodecBitmap, n, k, 0, bytes);
    if (body == nullptr) return;
    std::memset(body, 0, bytes);
    // Indices are sorted, so only the bytes at the two ends of a work item can
    // be shared with a neighbouring item; those take an atomic OR.
    CpuPool(ctx)->ParallelFor(k, 3, [&](int64_t begin, int64_t end) {
      const uint64_t lo = static_cast<uint64_t>(idx[begin]) >> 3;
      const uint64_t hi = static_cast<uint64_t>(idx[end - 1]) >> 3;
      for (int64_t i = begin; i < end; ++i) {
        const uint64_t v = static_cast<uint64_t>(idx[i]);
        const uint8_t bit = static_cast<uint8_t>(1u << (v & 7));
        if ((v >> 3) == lo || (v >> 3) == hi) {
          __atomic_fetch_or(&body[v >> 3], bit, __ATOMIC_RELAXED);
        } else {
          body[v >> 3] |= bit;
        }
      }
    });
  }
};

template <typename Tidx>
class EncodeRleOp : public EncodeBase<Tidx> {
 public:
  using EncodeBase<Tidx>::EncodeBase;

 protected:
  void Encode(OpKernelContext* ctx, const Tidx* idx, int64_t k, int64_t n) override {
    const int64_t chunks = (k + kRleChunk - 1) / kRleChunk;
    Tensor off_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_INT64, TensorShape({chunks + 1}),
                                           &off_t));
    int64_t* off = off_t.flat<int64_t>().data();
    auto gap = [idx](int64_t i) -> uint64_t {
      return i == 0 ? static_cast<uint64_t>(idx[0])
                    : static_cast<uint64_t>(idx[i]) - static_cast<uint64_t>(idx[i - 1]) - 1;
    };
    // Pass 1: bytes per chunk; pass 2: each chunk writes at its prefix sum.
    CpuPool(ctx)->ParallelFor(chunks, kRleChunk * 4, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        int64_t bytes = 0;
        for (int64_t i = c * kRleChunk, e = std::min(k, i + kRleChunk); i < e; ++i) {
          bytes += rle::GapSize(gap(i));
        }
        off[c] = bytes;
      }
    });
    int64_t total = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t b = off[c];
      off[c] = total;
      total += b;
    }
    uint8_t* body = this->AllocatePayload(ctx, kCodecRle, n, k, 0, total);
    if (body == nullptr) return;
    CpuPool(ctx)->ParallelFor(chunks, kRleChunk * 6, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        uint8_t* p = body + off[c];
        for (int64_t i = c * kRleChunk, e = std::min(k, i + kRleChunk); i < e; ++i) {
          p = rle::PutGap(p, gap(i));
        }
      }
    });
  }
};

template <typename Tidx>
class EncodeGolombOp : public EncodeBase<Tidx> {
 public:
  explicit EncodeGolombOp(OpKernelConstruction* ctx) : EncodeBase<Tidx>(ctx) {
    int64_t block_size;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("block_size", &block_size));
    OP_REQUIRES_OK(ctx, ParseGolombBlockSize(block_size, &log2_block_));
  }

 protected:
  // Stream length S of every auto candidate 2^B (stream_bytes[B - min]).
  // One pass over chunks of the largest candidate block, each sized under
  // all candidates while it is in cache; per-shard sums, no scratch.
  static void AutoStreamBytes(tensorflow::thread::ThreadPool* pool, const Tidx* idx, int64_t k,
                              int64_t* stream_bytes) {
    constexpr int kChunkLog2 = golomb::kAutoMaxLog2Block;
    constexpr int kCandidates = golomb::kAutoCandidates;
    const int64_t chunks = (k + (int64_t{1} << kChunkLog2) - 1) >> kChunkLog2;
    std::atomic<int64_t> totals[kCandidates];
    for (auto& t : totals) t.store(0, std::memory_order_relaxed);
    pool->ParallelFor(chunks, (int64_t{1} << kChunkLog2) * 8 * kCandidates,
                      [&](int64_t begin, int64_t end) {
      int64_t local[kCandidates] = {};
      for (int64_t c = begin; c < end; ++c) {
        for (int i = 0; i < kCandidates; ++i) {
          const int log2_block = golomb::kAutoMinLog2Block + i;
          const int per_chunk = kChunkLog2 - log2_block;
          const int64_t blocks = (k + (int64_t{1} << log2_block) - 1) >> log2_block;
          const int64_t stop = std::min(blocks, (c + 1) << per_chunk);
          for (int64_t b = c << per_chunk; b < stop; ++b) {
            uint64_t bits;
            golomb::ChooseRiceParam(idx + (b << log2_block),
                                    golomb::BlockCount(k, log2_block, b), &bits);
            local[i] += static_cast<int64_t>((bits + 7) / 8);
          }
        }
      }
      for (int i = 0; i < kCandidates; ++i) {
        totals[i].fetch_add(local[i], std::memory_order_relaxed);
      }
    });
    for (int i = 0; i < kCandidates; ++i) stream_bytes[i] = totals[i].load();
  }

  void Encode(OpKernelContext* ctx, const Tidx* idx, int64_t k, int64_t n) override {
    auto pool = CpuPool(ctx);
    int log2_block = log2_block_;
    if (log2_block == kGolombAutoBlock) {
      int64_t stream_bytes[golomb::kAutoCandidates];
      AutoStreamBytes(pool, idx, k, stream_bytes);
      log2_block = golomb::PickLog2Block(n, k, stream_bytes);
    }
    const int64_t blocks = static_cast<int64_t>(
        golomb::MakeLayout(n, k, log2_block, 0).num_blocks);
    // Per block: Rice parameter, then (after the scan) its stream offset.
    Tensor param_t, off_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_INT32, TensorShape({blocks}),
                                           &param_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_INT64, TensorShape({blocks + 1}),
                                           &off_t));
    int32_t* param = param_t.flat<int32_t>().data();
    int64_t* off = off_t.flat<int64_t>().data();
    const int64_t block_size = int64_t{1} << log2_block;
    pool->ParallelFor(blocks, block_size * 6, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        const uint64_t count = golomb::BlockCount(k, log2_block, b);
        uint64_t bits;
        param[b] = golomb::ChooseRiceParam(idx + (b << log2_block), count, &bits);
        off[b] = static_cast<int64_t>((bits + 7) / 8);
      }
    });
    int64_t s = 0;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t bytes = off[b];
      off[b] = s;
      s += bytes;
    }
    off[blocks] = s;
    const golomb::Layout layout = golomb::MakeLayout(n, k, log2_block, s);
    const int64_t table_bytes = (blocks * layout.entry_bits + 7) / 8;
    const int64_t extra = 1 + VarintSize(s);
    uint8_t* p = this->AllocatePayload(ctx, kCodecGolomb, n, k, extra, table_bytes + s);
    if (p == nullptr) return;
    *p++ = static_cast<uint8_t>(log2_block);
    p = PutVarint(p, static_cast<uint64_t>(s));
    BitWriter table(p);
    for (int64_t b = 0; b < blocks; ++b) {
      table.PutWide(static_cast<uint64_t>(idx[b << log2_block]), layout.w_idx);
      table.PutWide(static_cast<uint64_t>(off[b]), layout.w_off);
      table.Put(static_cast<uint64_t>(param[b]), golomb::kRiceParamBits);
    }
    table.Flush();
    uint8_t* stream = p + table_bytes;
    pool->ParallelFor(blocks, block_size * 8, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        golomb::EncodeBlock(idx + (b << log2_block), golomb::BlockCount(k, log2_block, b),
                            param[b], stream + off[b]);
      }
    });
  }

 private:
  int log2_block_;  // kGolombAutoBlock: chosen per payload
};

// ---------------------------------------------------------------------------
// Decoders.

template <typename Tidx>
class DecodeInt32Op : public OpKernel {
 public:
  explicit DecodeInt32Op(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& payload = ctx->input(0);
    CommonHeader h;
    const uint8_t* body;
    OP_REQUIRES_OK(ctx, ParseHeader(payload, kCodecInt32, DataTypeToEnum<Tidx>::v(), &h, &body));
    const uint8_t* end = payload.flat<uint8_t>().data() + payload.NumElements();
    OP_REQUIRES_OK(ctx, ToAbsl(core::ParseInt32Body(h, static_cast<uint64_t>(end - body))));
    const int64_t k = static_cast<int64_t>(h.k);
    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({k}), &out_t));
    Tidx* out = out_t->flat<Tidx>().data();
    const int64_t n = static_cast<int64_t>(h.n);
    CpuPool(ctx)->ParallelFor(k, 2, [&](int64_t begin, int64_t end) {
      core::DecodeInt32Range(body, begin, end, out);
    });
    absl::Status s = ValidateSorted(ctx, out, k, n, "decoded index");
    OP_REQUIRES(ctx, s.ok(),
                Invalid("int32 payload is corrupt: " + std::string(s.message())));
  }
};

template <typename Tidx>
class DecodeBitmapOp : public OpKernel {
 public:
  explicit DecodeBitmapOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& payload = ctx->input(0);
    CommonHeader h;
    const uint8_t* body;
    OP_REQUIRES_OK(ctx, ParseHeader(payload, kCodecBitmap, DataTypeToEnum<Tidx>::v(), &h, &body));
    const uint8_t* end = payload.flat<uint8_t>().data() + payload.NumElements();
    const uint64_t have = static_cast<uint64_t>(end - body);
    OP_REQUIRES_OK(ctx, ToAbsl(core::ParseBitmapBody(h, body, have)));
    const int64_t bytes = static_cast<int64_t>(have);
    const int64_t chunks = (bytes + kBitmapChunkBytes - 1) / kBitmapChunkBytes;
    Tensor off_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_INT64, TensorShape({chunks + 1}),
                                           &off_t));
    int64_t* off = off_t.flat<int64_t>().data();
    auto pool = CpuPool(ctx);
    pool->ParallelFor(chunks, kBitmapChunkBytes, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        const int64_t i0 = c * kBitmapChunkBytes;
        off[c] = core::CountBitmapBits(body, i0, std::min(bytes, i0 + kBitmapChunkBytes));
      }
    });
    int64_t total = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t v = off[c];
      off[c] = total;
      total += v;
    }
    OP_REQUIRES(ctx, static_cast<uint64_t>(total) == h.k,
                ToAbsl(core::BitmapCountMismatch(h.k, total)));
    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({total}), &out_t));
    Tidx* out = out_t->flat<Tidx>().data();
    pool->ParallelFor(chunks, kBitmapChunkBytes * 2, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        const int64_t i0 = c * kBitmapChunkBytes;
        core::ExtractBitmapBits(body, i0, std::min(bytes, i0 + kBitmapChunkBytes), off[c], out);
      }
    });
  }
};

template <typename Tidx>
class DecodeRleOp : public OpKernel {
 public:
  explicit DecodeRleOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& payload = ctx->input(0);
    CommonHeader h;
    const uint8_t* p;
    OP_REQUIRES_OK(ctx, ParseHeader(payload, kCodecRle, DataTypeToEnum<Tidx>::v(), &h, &p));
    const uint8_t* end = payload.flat<uint8_t>().data() + payload.NumElements();
    OP_REQUIRES_OK(ctx, ToAbsl(core::ParseRleCount(h, static_cast<uint64_t>(end - p))));
    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({static_cast<int64_t>(h.k)}),
                                             &out_t));
    OP_REQUIRES_OK(ctx, ToAbsl(core::DecodeRle(h, p, end, out_t->flat<Tidx>().data())));
  }
};

template <typename Tidx>
class DecodeGolombOp : public OpKernel {
 public:
  explicit DecodeGolombOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& payload = ctx->input(0);
    CommonHeader h;
    const uint8_t* body;
    OP_REQUIRES_OK(ctx, ParseHeader(payload, kCodecGolomb, DataTypeToEnum<Tidx>::v(), &h, &body));
    const uint8_t* end = payload.flat<uint8_t>().data() + payload.NumElements();
    golomb::Layout layout;
    const uint8_t *table = nullptr, *stream = nullptr;
    OP_REQUIRES_OK(ctx, ParseGolombLayout(h, body, end, &layout, &table, &stream));
    const int64_t blocks = static_cast<int64_t>(layout.num_blocks);
    const int log2_block = layout.log2_block;

    // Table: (first, offset, parameter) per block, checked before any block
    // is decoded; offsets gain a sentinel at S.
    Tensor tab_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_UINT64,
                                           TensorShape({3 * blocks + 1}), &tab_t));
    uint64_t* first = tab_t.flat<uint64_t>().data();
    uint64_t* off = first + blocks;
    uint64_t* param = off + blocks + 1;
    OP_REQUIRES_OK(ctx, ParseGolombTable(h, layout, table, stream, first, off, param));

    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({static_cast<int64_t>(h.k)}),
                                             &out_t));
    Tidx* out = out_t->flat<Tidx>().data();
    std::atomic<int64_t> first_bad{blocks};
    const int64_t block_size = int64_t{1} << log2_block;
    CpuPool(ctx)->ParallelFor(blocks, block_size * 10, [&](int64_t begin, int64_t stop) {
      const int64_t bad =
          core::DecodeGolombBlocks(h, layout, stream, first, off, param, begin, stop, out);
      if (bad < stop) AtomicMin(&first_bad, bad);
    });
    const int64_t bad = first_bad.load();
    OP_REQUIRES(ctx, bad == blocks, GolombBlockError(h, layout, off, bad));
  }
};

#define REGISTER_INDEX_CPU(T)                                                         \
  REGISTER_KERNEL_BUILDER(                                                            \
      Name("DeepReduce>IndexEncodeInt32").Device(::tensorflow::DEVICE_CPU)           \
          .TypeConstraint<T>("Tidx"), EncodeInt32Op<T>);                              \
  REGISTER_KERNEL_BUILDER(                                                            \
      Name("DeepReduce>IndexEncodeBitmap").Device(::tensorflow::DEVICE_CPU)          \
          .TypeConstraint<T>("Tidx"), EncodeBitmapOp<T>);                             \
  REGISTER_KERNEL_BUILDER(                                                            \
      Name("DeepReduce>IndexEncodeRle").Device(::tensorflow::DEVICE_CPU)             \
          .TypeConstraint<T>("Tidx"), EncodeRleOp<T>);                                \
  REGISTER_KERNEL_BUILDER(                                                            \
      Name("DeepReduce>IndexEncodeGolomb").Device(::tensorflow::DEVICE_CPU)          \
          .TypeConstraint<T>("Tidx"), EncodeGolombOp<T>);                             \
  REGISTER_KERNEL_BUILDER(                                                            \
      Name("DeepReduce>IndexDecodeInt32").Device(::tensorflow::DEVICE_CPU)           \
          .TypeConstraint<T>("out_idx"), DecodeInt32Op<T>);                           \
  REGISTER_KERNEL_BUILDER(                                                            \
      Name("DeepReduce>IndexDecodeBitmap").Device(::tensorflow::DEVICE_CPU)          \
          .TypeConstraint<T>("out_idx"), DecodeBitmapOp<T>);                          \
  REGISTER_KERNEL_BUILDER(                                                            \
      Name("DeepReduce>IndexDecodeRle").Device(::tensorflow::DEVICE_CPU)             \
          .TypeConstraint<T>("out_idx"), DecodeRleOp<T>);                             \
  REGISTER_KERNEL_BUILDER(                                                            \
      Name("DeepReduce>IndexDecodeGolomb").Device(::tensorflow::DEVICE_CPU)          \
          .TypeConstraint<T>("out_idx"), DecodeGolombOp<T>);

REGISTER_INDEX_CPU(int32_t);
REGISTER_INDEX_CPU(int64_t);
#undef REGISTER_INDEX_CPU

}  // namespace
}  // namespace index
}  // namespace deepreduce
