// CPU kernels of the lossless index codecs (int32, bitmap, rle, golomb): the
// CPU functors of the OpKernels (which are shared with the GPU:
// index_kernels.h) and the CPU registrations. The byte formats and
// per-element / per-block logic live in the codec headers (index_format.h,
// rle.h, golomb.h, index_decode.h), shared with the CUDA kernels; this file
// adds threading.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>

#include "kernels/common/bit_io.h"
#include "kernels/common/cpu_parallel.h"
#include "kernels/common/devices.h"
#include "kernels/common/parse_status_tf.h"
#include "kernels/index/golomb.h"
#include "kernels/index/index_args.h"
#include "kernels/index/index_decode.h"
#include "kernels/index/index_format.h"
#include "kernels/index/index_kernels.h"
#include "kernels/index/rle.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/platform/threadpool.h"

namespace deepreduce {
namespace index {
namespace {

using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

// Indices per work item of the rle encoder and bytes per work item of the
// bitmap decoder: large enough to amortise scheduling, small enough to split
// a 25 M-position tensor across the pool.
constexpr int64_t kRleChunk = 16384;
constexpr int64_t kBitmapChunkBytes = 8192;

// Stream length S of every auto candidate 2^B (stream_bytes[B - min]) of the
// golomb encoder. One pass over chunks of the largest candidate block, each
// sized under all candidates while it is in cache; per-shard sums, no
// scratch.
template <typename Tidx>
void AutoStreamBytes(tensorflow::thread::ThreadPool* pool, const Tidx* idx, int64_t k,
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

}  // namespace

// The CPU halves of the index codecs' OpKernels (index_kernels.h).
namespace functor {

template <>
struct HostBytes<CpuDevice> {
  absl::Status operator()(OpKernelContext* /*ctx*/, const uint8_t* src, int64_t /*bytes*/,
                          Tensor* /*holder*/, const uint8_t** host) const {
    *host = src;
    return absl::OkStatus();
  }
};

template <>
struct WriteBytes<CpuDevice> {
  absl::Status operator()(OpKernelContext* /*ctx*/, uint8_t* dst, const uint8_t* src,
                          int len) const {
    std::memcpy(dst, src, len);
    return absl::OkStatus();
  }
};

template <typename Tidx>
struct FirstUnsorted<CpuDevice, Tidx> {
  absl::Status operator()(OpKernelContext* ctx, const Tidx* idx, int64_t k, int64_t n,
                          OrderCheck* check) const {
    std::atomic<int64_t> first_bad{k};
    CpuPool(ctx)->ParallelFor(k, 4, [&](int64_t begin, int64_t end) {
      const int64_t bad = core::FirstUnsorted(idx, begin, end, n);
      if (bad < end) AtomicMin(&first_bad, bad);
    });
    const int64_t bad = first_bad.load();
    check->first_bad = bad;
    if (bad < k) {
      check->prev = bad > 0 ? static_cast<int64_t>(idx[bad - 1]) : 0;
      check->value = static_cast<int64_t>(idx[bad]);
    }
    return absl::OkStatus();
  }
};

// ------------------------------------------------------------- encoders --

template <typename Tidx>
struct Int32Encode<CpuDevice, Tidx> {
  absl::Status operator()(OpKernelContext* ctx, const Tidx* idx, int64_t k,
                          uint8_t* body) const {
    CpuPool(ctx)->ParallelFor(k, 2, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        StoreLE32(body + 4 * i, static_cast<uint32_t>(idx[i]));
      }
    });
    return absl::OkStatus();
  }
};

template <typename Tidx>
struct BitmapEncode<CpuDevice, Tidx> {
  absl::Status operator()(OpKernelContext* ctx, const Tidx* idx, int64_t k, int64_t n,
                          uint8_t* body) const {
    std::memset(body, 0, BitmapBytes(n));
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
    return absl::OkStatus();
  }
};

// Size: bytes per chunk of kRleChunk gaps, turned into each chunk's offset;
// Write: each chunk writes at its offset.
template <typename Tidx>
struct RleEncode<CpuDevice, Tidx> {
  static uint64_t Gap(const Tidx* idx, int64_t i) {
    return i == 0 ? static_cast<uint64_t>(idx[0])
                  : static_cast<uint64_t>(idx[i]) - static_cast<uint64_t>(idx[i - 1]) - 1;
  }

  absl::Status Size(OpKernelContext* ctx, const Tidx* idx, int64_t k, int64_t* total) {
    const int64_t chunks = (k + kRleChunk - 1) / kRleChunk;
    TF_RETURN_IF_ERROR(
        ctx->allocate_temp(tensorflow::DT_INT64, TensorShape({chunks + 1}), &off_t_));
    int64_t* off = off_t_.flat<int64_t>().data();
    CpuPool(ctx)->ParallelFor(chunks, kRleChunk * 4, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        int64_t bytes = 0;
        for (int64_t i = c * kRleChunk, e = std::min(k, i + kRleChunk); i < e; ++i) {
          bytes += rle::GapSize(Gap(idx, i));
        }
        off[c] = bytes;
      }
    });
    int64_t sum = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t b = off[c];
      off[c] = sum;
      sum += b;
    }
    *total = sum;
    return absl::OkStatus();
  }

  absl::Status Write(OpKernelContext* ctx, const Tidx* idx, int64_t k, uint8_t* body) const {
    const int64_t chunks = (k + kRleChunk - 1) / kRleChunk;
    const int64_t* off = off_t_.flat<int64_t>().data();
    CpuPool(ctx)->ParallelFor(chunks, kRleChunk * 6, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        uint8_t* p = body + off[c];
        for (int64_t i = c * kRleChunk, e = std::min(k, i + kRleChunk); i < e; ++i) {
          p = rle::PutGap(p, Gap(idx, i));
        }
      }
    });
    return absl::OkStatus();
  }

  Tensor off_t_;
};

// Size: the Rice parameter and stream bytes of every block, turned into each
// block's stream offset; Write: the table on this thread, the blocks over
// the pool.
template <typename Tidx>
struct GolombEncode<CpuDevice, Tidx> {
  absl::Status AutoBlock(OpKernelContext* ctx, const Tidx* idx, int64_t k, int64_t n,
                         int* log2_block) const {
    int64_t stream_bytes[golomb::kAutoCandidates];
    AutoStreamBytes(CpuPool(ctx), idx, k, stream_bytes);
    *log2_block = golomb::PickLog2Block(n, k, stream_bytes);
    return absl::OkStatus();
  }

  absl::Status Size(OpKernelContext* ctx, const Tidx* idx, int64_t k, int log2_block,
                    int64_t* s) {
    const int64_t blocks = (k + (int64_t{1} << log2_block) - 1) >> log2_block;  // num_blocks
    TF_RETURN_IF_ERROR(
        ctx->allocate_temp(tensorflow::DT_INT32, TensorShape({blocks}), &param_t_));
    TF_RETURN_IF_ERROR(
        ctx->allocate_temp(tensorflow::DT_INT64, TensorShape({blocks + 1}), &off_t_));
    int32_t* param = param_t_.flat<int32_t>().data();
    int64_t* off = off_t_.flat<int64_t>().data();
    const int64_t block_size = int64_t{1} << log2_block;
    CpuPool(ctx)->ParallelFor(blocks, block_size * 6, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        const uint64_t count = golomb::BlockCount(k, log2_block, b);
        uint64_t bits;
        param[b] = golomb::ChooseRiceParam(idx + (b << log2_block), count, &bits);
        off[b] = static_cast<int64_t>((bits + 7) / 8);
      }
    });
    int64_t sum = 0;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t bytes = off[b];
      off[b] = sum;
      sum += bytes;
    }
    off[blocks] = sum;
    *s = sum;
    return absl::OkStatus();
  }

  absl::Status Write(OpKernelContext* ctx, const Tidx* idx, int64_t k,
                     const golomb::Layout& layout, uint8_t* table_out,
                     uint8_t* stream) const {
    const int log2_block = layout.log2_block;
    const int64_t blocks = static_cast<int64_t>(layout.num_blocks);
    const int32_t* param = param_t_.flat<int32_t>().data();
    const int64_t* off = off_t_.flat<int64_t>().data();
    BitWriter table(table_out);
    for (int64_t b = 0; b < blocks; ++b) {
      table.PutWide(static_cast<uint64_t>(idx[b << log2_block]), layout.w_idx);
      table.PutWide(static_cast<uint64_t>(off[b]), layout.w_off);
      table.Put(static_cast<uint64_t>(param[b]), golomb::kRiceParamBits);
    }
    table.Flush();
    const int64_t block_size = int64_t{1} << log2_block;
    CpuPool(ctx)->ParallelFor(blocks, block_size * 8, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        golomb::EncodeBlock(idx + (b << log2_block), golomb::BlockCount(k, log2_block, b),
                            param[b], stream + off[b]);
      }
    });
    return absl::OkStatus();
  }

  Tensor param_t_, off_t_;
};

// ------------------------------------------------------------- decoders --

template <typename Tidx>
struct Int32Decode<CpuDevice, Tidx> {
  absl::Status operator()(OpKernelContext* ctx, const uint8_t* body, int64_t k,
                          Tidx* out) const {
    CpuPool(ctx)->ParallelFor(k, 2, [&](int64_t begin, int64_t end) {
      core::DecodeInt32Range(body, begin, end, out);
    });
    return absl::OkStatus();
  }
};

// Count: set bits per chunk of kBitmapChunkBytes, turned into each chunk's
// output offset; Write: each chunk extracts its positions there.
template <typename Tidx>
struct BitmapDecode<CpuDevice, Tidx> {
  absl::Status Count(OpKernelContext* ctx, const uint8_t* body, int64_t bytes,
                     int64_t* total) {
    const int64_t chunks = (bytes + kBitmapChunkBytes - 1) / kBitmapChunkBytes;
    TF_RETURN_IF_ERROR(
        ctx->allocate_temp(tensorflow::DT_INT64, TensorShape({chunks + 1}), &off_t_));
    int64_t* off = off_t_.flat<int64_t>().data();
    CpuPool(ctx)->ParallelFor(chunks, kBitmapChunkBytes, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        const int64_t i0 = c * kBitmapChunkBytes;
        off[c] = core::CountBitmapBits(body, i0, std::min(bytes, i0 + kBitmapChunkBytes));
      }
    });
    int64_t sum = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t v = off[c];
      off[c] = sum;
      sum += v;
    }
    *total = sum;
    return absl::OkStatus();
  }

  absl::Status Write(OpKernelContext* ctx, const uint8_t* body, int64_t bytes,
                     Tidx* out) const {
    const int64_t chunks = (bytes + kBitmapChunkBytes - 1) / kBitmapChunkBytes;
    const int64_t* off = off_t_.flat<int64_t>().data();
    CpuPool(ctx)->ParallelFor(chunks, kBitmapChunkBytes * 2, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        const int64_t i0 = c * kBitmapChunkBytes;
        core::ExtractBitmapBits(body, i0, std::min(bytes, i0 + kBitmapChunkBytes), off[c], out);
      }
    });
    return absl::OkStatus();
  }

  Tensor off_t_;
};

template <typename Tidx>
struct RleDecode<CpuDevice, Tidx> {
  absl::Status operator()(OpKernelContext* /*ctx*/, const CommonHeader& h,
                          const uint8_t* body, int64_t bytes, Tidx* out) const {
    return ToAbsl(core::DecodeRle(h, body, body + bytes, out));
  }
};

template <typename Tidx>
struct GolombDecode<CpuDevice, Tidx> {
  absl::Status operator()(OpKernelContext* ctx, const CommonHeader& h,
                          const golomb::Layout& layout, const uint8_t* stream,
                          const uint64_t* table, Tidx* out, int64_t* first_bad_block) const {
    const int64_t blocks = static_cast<int64_t>(layout.num_blocks);
    const uint64_t* first = table;
    const uint64_t* off = first + blocks;
    const uint64_t* param = off + blocks + 1;
    std::atomic<int64_t> first_bad{blocks};
    const int64_t block_size = int64_t{1} << layout.log2_block;
    CpuPool(ctx)->ParallelFor(blocks, block_size * 10, [&](int64_t begin, int64_t stop) {
      const int64_t bad =
          core::DecodeGolombBlocks(h, layout, stream, first, off, param, begin, stop, out);
      if (bad < stop) AtomicMin(&first_bad, bad);
    });
    *first_bad_block = first_bad.load();
    return absl::OkStatus();
  }
};

}  // namespace functor

namespace {

// Every codec with kernels="index" in the codec table, for both index dtypes.
#define DR_REGISTER_INDEX_CPU_T(name, Camel, T)                                     \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>IndexEncode" #Camel)                   \
                              .Device(::tensorflow::DEVICE_CPU)                   \
                              .TypeConstraint<T>("Tidx"),                         \
                          EncodeOp<CpuDevice, T, name::Codec>);                   \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>IndexDecode" #Camel)                   \
                              .Device(::tensorflow::DEVICE_CPU)                   \
                              .TypeConstraint<T>("out_idx"),                      \
                          DecodeOp<CpuDevice, T, name::Codec>);
#define DR_REGISTER_INDEX_CPU(name, Camel, id, kernels) \
  DR_REGISTER_INDEX_CPU_T(name, Camel, int32_t)         \
  DR_REGISTER_INDEX_CPU_T(name, Camel, int64_t)
DR_INDEX_PAYLOAD_CODECS(DR_REGISTER_INDEX_CPU)
#undef DR_REGISTER_INDEX_CPU
#undef DR_REGISTER_INDEX_CPU_T

}  // namespace
}  // namespace index
}  // namespace deepreduce
