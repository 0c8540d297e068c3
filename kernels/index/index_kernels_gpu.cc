// GPU OpKernels of the lossless index codecs (CUDA build only: setup.py
// compiles *_gpu.cc files when DEEPREDUCE_TF_CUDA=1). They validate exactly
// as the CPU kernels do (index_args.h, same messages) and run the CUDA
// kernels of index_kernels.cu through the launchers of index_gpu.h on the
// op's stream.
//
// Host/device split:
//   * universe_size is a HostMemory input; payloads and indices stay on the
//     device.
//   * Encoders check the indices on the device (range, order) and report the
//     first bad position after a small device-to-host copy; the payload
//     length of rle and golomb comes from a device scan copied back. Headers
//     are built on the host (index_format.h) and written with one tiny kernel.
//   * Decoders copy the payload's first kMaxHeaderBytes bytes (golomb: also
//     its block table, ~0.01 bits per index) to the host and check them there
//     with the CPU kernels' functions before launching anything that reads
//     the body; data-dependent checks (bitmap bit count, int32 order, rle
//     gaps, golomb blocks) run on the device and come back as an error
//     record. So every op synchronizes its stream once or twice.
//   * rle decode has no split points in its format; it is decoded in chunks
//     speculatively from every possible entry offset (rle.h, index_gpu.h),
//     with two short single-thread passes over the chunks.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "kernels/index/golomb.h"
#include "kernels/index/index_args.h"
#include "kernels/index/index_format.h"
#include "kernels/index/index_gpu.h"
#include "tensorflow/core/framework/allocator.h"
#include "tensorflow/core/framework/device_base.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "xla/stream_executor/stream.h"

namespace deepreduce {
namespace index {
namespace {

using ::tensorflow::AllocatorAttributes;
using ::tensorflow::DataTypeToEnum;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

absl::Status StreamOf(OpKernelContext* ctx, void** stream) {
  const ::tensorflow::DeviceContext* dc = ctx->op_device_context();
  if (dc == nullptr || dc->stream() == nullptr) {
    return absl::InternalError("the GPU kernel has no device stream");
  }
  *stream = dc->stream()->platform_specific_handle().stream;
  if (*stream == nullptr) return absl::InternalError("the GPU stream has no CUDA handle");
  return absl::OkStatus();
}

absl::Status CudaStatus(const gpu::GpuStatus& s, const char* op) {
  if (s.ok()) return absl::OkStatus();
  return absl::InternalError(std::string(op) + ": CUDA error while " + s.step + ": " +
                             gpu::ErrorString(s.cuda_error));
}

// Device scratch as a uint8 tensor; at least one byte so that the pointer is
// valid even when nothing is needed. TF's GPU allocator aligns it to >= 256.
absl::Status AllocateScratch(OpKernelContext* ctx, size_t bytes, Tensor* t) {
  return ctx->allocate_temp(tensorflow::DT_UINT8,
                            TensorShape({static_cast<int64_t>(bytes > 0 ? bytes : 1)}), t);
}

// Host memory for what the decoders copy back (header prefix, golomb table).
absl::Status AllocateHost(OpKernelContext* ctx, tensorflow::DataType dtype, int64_t count,
                          Tensor* t) {
  AllocatorAttributes attr;
  attr.set_on_host(true);
  return ctx->allocate_temp(dtype, TensorShape({count > 0 ? count : 1}), t, attr);
}

// ---------------------------------------------------------------------------
// Encoders: shared validation, then the codec's Encode().

template <typename Tidx>
class EncodeGpuBase : public OpKernel {
 public:
  explicit EncodeGpuBase(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    int64_t n = 0;
    OP_REQUIRES_OK(ctx, ParseUniverse(ctx->input(1), &n));  // HostMemory
    const Tensor& indices_t = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckIndicesShape(indices_t, n));
    const int64_t k = indices_t.NumElements();
    const Tidx* idx = indices_t.flat<Tidx>().data();
    void* stream = nullptr;
    OP_REQUIRES_OK(ctx, StreamOf(ctx, &stream));
    Tensor flag_t;
    OP_REQUIRES_OK(ctx, AllocateScratch(ctx, gpu::ValidateScratchBytes(), &flag_t));
    gpu::SortedCheck check;
    OP_REQUIRES_OK(ctx, CudaStatus(gpu::ValidateSorted(idx, k, n, flag_t.flat<uint8_t>().data(),
                                                       stream, &check),
                                   name().c_str()));
    if (check.first_bad < k) {
      ctx->CtxFailure(SortedError("indices", check.first_bad, check.prev, check.value, n));
      return;
    }
    Encode(ctx, idx, k, n, stream);
  }

 protected:
  virtual void Encode(OpKernelContext* ctx, const Tidx* idx, int64_t k, int64_t n,
                      void* stream) = 0;

  // Allocates the payload and writes the common header followed by `extra`
  // (extra_len bytes of codec fields); returns the device body, or nullptr
  // after failing the op.
  uint8_t* AllocatePayload(OpKernelContext* ctx, void* stream, uint8_t codec, int64_t n,
                           int64_t k, const uint8_t* extra, int extra_len, int64_t body_bytes) {
    uint8_t header[gpu::kMaxWriteBytes];
    uint8_t* p = PutCommonHeader(header, codec, n, k);
    if (extra_len > 0) std::memcpy(p, extra, extra_len);
    const int hdr = static_cast<int>(p - header) + extra_len;
    Tensor* out = nullptr;
    absl::Status s = ctx->allocate_output(0, TensorShape({hdr + body_bytes}), &out);
    if (s.ok()) {
      s = CudaStatus(gpu::WriteBytes(out->flat<uint8_t>().data(), header, hdr, stream),
                     name().c_str());
    }
    if (!s.ok()) {
      ctx->CtxFailure(s);
      return nullptr;
    }
    return out->flat<uint8_t>().data() + hdr;
  }
};

template <typename Tidx>
class EncodeInt32GpuOp : public EncodeGpuBase<Tidx> {
 public:
  using EncodeGpuBase<Tidx>::EncodeGpuBase;

 protected:
  void Encode(OpKernelContext* ctx, const Tidx* idx, int64_t k, int64_t n,
              void* stream) override {
    OP_REQUIRES(ctx, static_cast<uint64_t>(n) <= kMaxInt32Universe,
                Invalid("the int32 index codec cannot address universe_size=" +
                        std::to_string(n) + " > 2^31; use golomb, rle or bitmap"));
    uint8_t* body = this->AllocatePayload(ctx, stream, kCodecInt32, n, k, nullptr, 0, 4 * k);
    if (body == nullptr) return;
    OP_REQUIRES_OK(ctx, CudaStatus(gpu::Int32Encode(idx, k, body, stream), "IndexEncodeInt32"));
  }
};

template <typename Tidx>
class EncodeBitmapGpuOp : public EncodeGpuBase<Tidx> {
 public:
  using EncodeGpuBase<Tidx>::EncodeGpuBase;

 protected:
  void Encode(OpKernelContext* ctx, const Tidx* idx, int64_t k, int64_t n,
              void* stream) override {
    const int64_t bytes = static_cast<int64_t>(BitmapBytes(n));
    Tensor scratch_t;
    const size_t scratch_bytes = gpu::BitmapEncodeScratchBytes(n);
    OP_REQUIRES_OK(ctx, AllocateScratch(ctx, scratch_bytes, &scratch_t));
    uint8_t* body = this->AllocatePayload(ctx, stream, kCodecBitmap, n, k, nullptr, 0, bytes);
    if (body == nullptr) return;
    OP_REQUIRES_OK(ctx, CudaStatus(gpu::BitmapEncode(idx, k, n, scratch_t.flat<uint8_t>().data(),
                                                     scratch_bytes, body, stream),
                                   "IndexEncodeBitmap"));
  }
};

template <typename Tidx>
class EncodeRleGpuOp : public EncodeGpuBase<Tidx> {
 public:
  using EncodeGpuBase<Tidx>::EncodeGpuBase;

 protected:
  void Encode(OpKernelContext* ctx, const Tidx* idx, int64_t k, int64_t n,
              void* stream) override {
    gpu::GpuStatus st;
    const size_t scratch_bytes = gpu::RleEncodeScratchBytes(k, &st);
    OP_REQUIRES_OK(ctx, CudaStatus(st, "IndexEncodeRle"));
    Tensor scratch_t;
    OP_REQUIRES_OK(ctx, AllocateScratch(ctx, scratch_bytes, &scratch_t));
    void* scratch = scratch_t.flat<uint8_t>().data();
    int64_t total = 0;
    OP_REQUIRES_OK(ctx, CudaStatus(gpu::RleSize(idx, k, scratch, scratch_bytes, stream, &total),
                                   "IndexEncodeRle"));
    uint8_t* body = this->AllocatePayload(ctx, stream, kCodecRle, n, k, nullptr, 0, total);
    if (body == nullptr) return;
    OP_REQUIRES_OK(ctx, CudaStatus(gpu::RleWrite(idx, k, scratch, scratch_bytes, body, stream),
                                   "IndexEncodeRle"));
  }
};

template <typename Tidx>
class EncodeGolombGpuOp : public EncodeGpuBase<Tidx> {
 public:
  explicit EncodeGolombGpuOp(OpKernelConstruction* ctx) : EncodeGpuBase<Tidx>(ctx) {
    int64_t block_size;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("block_size", &block_size));
    OP_REQUIRES_OK(ctx, ParseGolombBlockSize(block_size, &log2_block_));
  }

 protected:
  void Encode(OpKernelContext* ctx, const Tidx* idx, int64_t k, int64_t n,
              void* stream) override {
    gpu::GpuStatus st;
    int log2_block = log2_block_;
    if (log2_block == kGolombAutoBlock) {
      Tensor auto_t;
      OP_REQUIRES_OK(ctx, AllocateScratch(ctx, gpu::GolombAutoScratchBytes(), &auto_t));
      OP_REQUIRES_OK(ctx, CudaStatus(gpu::GolombAutoBlock(idx, k, static_cast<uint64_t>(n),
                                                          auto_t.flat<uint8_t>().data(),
                                                          gpu::GolombAutoScratchBytes(),
                                                          stream, &log2_block),
                                     "IndexEncodeGolomb"));
    }
    const size_t scratch_bytes = gpu::GolombEncodeScratchBytes(k, log2_block, &st);
    OP_REQUIRES_OK(ctx, CudaStatus(st, "IndexEncodeGolomb"));
    Tensor scratch_t;
    OP_REQUIRES_OK(ctx, AllocateScratch(ctx, scratch_bytes, &scratch_t));
    void* scratch = scratch_t.flat<uint8_t>().data();
    int64_t s = 0;
    OP_REQUIRES_OK(ctx, CudaStatus(gpu::GolombSize(idx, k, log2_block, scratch, scratch_bytes,
                                                   stream, &s),
                                   "IndexEncodeGolomb"));
    const golomb::Layout layout = golomb::MakeLayout(n, k, log2_block, s);
    const int64_t table_bytes = static_cast<int64_t>(GolombTableBytes(layout));
    uint8_t extra[1 + kMaxVarintBytes];
    extra[0] = static_cast<uint8_t>(log2_block);
    const int extra_len =
        static_cast<int>(PutVarint(extra + 1, static_cast<uint64_t>(s)) - extra);
    uint8_t* table = this->AllocatePayload(ctx, stream, kCodecGolomb, n, k, extra, extra_len,
                                           table_bytes + s);
    if (table == nullptr) return;
    OP_REQUIRES_OK(ctx, CudaStatus(gpu::GolombWrite(idx, k, layout, scratch, scratch_bytes,
                                                    table, table + table_bytes, stream),
                                   "IndexEncodeGolomb"));
  }

 private:
  int log2_block_;  // kGolombAutoBlock: chosen per payload
};

// ---------------------------------------------------------------------------
// Decoders.

// What a decoder knows about its (device) payload after checking the header
// on the host: the header, the copied prefix, and where the body starts.
struct DevicePayload {
  const uint8_t* data;  // device
  int64_t bytes;
  CommonHeader h;
  int64_t body_offset;
  uint8_t prefix[kMaxHeaderBytes];
  int64_t prefix_bytes;
  const uint8_t* body() const { return data + body_offset; }
  uint64_t body_bytes() const { return static_cast<uint64_t>(bytes - body_offset); }
};

absl::Status ReadHeader(OpKernelContext* ctx, void* stream, uint8_t codec,
                        tensorflow::DataType out_idx, DevicePayload* p) {
  const Tensor& payload = ctx->input(0);
  absl::Status st = CheckPayloadShape(payload);
  if (!st.ok()) return st;
  p->data = payload.flat<uint8_t>().data();
  p->bytes = payload.NumElements();
  p->prefix_bytes = std::min<int64_t>(p->bytes, kMaxHeaderBytes);
  st = CudaStatus(gpu::CopyToHost(p->prefix, p->data, p->prefix_bytes, stream),
                  "copying the payload header");
  if (!st.ok()) return st;
  return ParseHeaderPrefix(p->prefix, p->prefix_bytes, p->bytes, codec, out_idx, &p->h,
                           &p->body_offset);
}

template <typename Tidx>
class DecodeInt32GpuOp : public OpKernel {
 public:
  explicit DecodeInt32GpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    void* stream = nullptr;
    OP_REQUIRES_OK(ctx, StreamOf(ctx, &stream));
    DevicePayload p;
    OP_REQUIRES_OK(ctx, ReadHeader(ctx, stream, kCodecInt32, DataTypeToEnum<Tidx>::v(), &p));
    const CommonHeader& h = p.h;
    OP_REQUIRES(ctx, h.n <= kMaxInt32Universe,
                Invalid("int32 payload claims universe size n=" + std::to_string(h.n) +
                        " > 2^31, which the int32 codec never writes"));
    const uint64_t have = p.body_bytes();
    OP_REQUIRES(ctx, h.k <= have / 4,
                Invalid("int32 payload claims K=" + std::to_string(h.k) + " indices but holds " +
                        std::to_string(have) + " body bytes (4 per index)"));
    OP_REQUIRES_OK(ctx, CheckBodyLength("int32", have, 4 * h.k,
                                        "K=" + std::to_string(h.k) + ", 4 bytes each"));
    const int64_t k = static_cast<int64_t>(h.k);
    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({k}), &out_t));
    Tidx* out = out_t->flat<Tidx>().data();
    OP_REQUIRES_OK(ctx, CudaStatus(gpu::Int32Decode(p.body(), k, out, stream),
                                   "IndexDecodeInt32"));
    Tensor flag_t;
    OP_REQUIRES_OK(ctx, AllocateScratch(ctx, gpu::ValidateScratchBytes(), &flag_t));
    gpu::SortedCheck check;
    const int64_t n = static_cast<int64_t>(h.n);
    OP_REQUIRES_OK(ctx, CudaStatus(gpu::ValidateSorted(out, k, n, flag_t.flat<uint8_t>().data(),
                                                       stream, &check),
                                   "IndexDecodeInt32"));
    if (check.first_bad < k) {
      const absl::Status s =
          SortedError("decoded index", check.first_bad, check.prev, check.value, n);
      ctx->CtxFailure(Invalid("int32 payload is corrupt: " + std::string(s.message())));
    }
  }
};

template <typename Tidx>
class DecodeBitmapGpuOp : public OpKernel {
 public:
  explicit DecodeBitmapGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    void* stream = nullptr;
    OP_REQUIRES_OK(ctx, StreamOf(ctx, &stream));
    DevicePayload p;
    OP_REQUIRES_OK(ctx, ReadHeader(ctx, stream, kCodecBitmap, DataTypeToEnum<Tidx>::v(), &p));
    const CommonHeader& h = p.h;
    const uint64_t have = p.body_bytes();
    OP_REQUIRES_OK(ctx, CheckBodyLength("bitmap", have, BitmapBytes(h.n),
                                        "universe size n=" + std::to_string(h.n) +
                                            ", ceil(n / 8) bytes"));
    const int64_t n = static_cast<int64_t>(h.n);
    const int64_t bytes = static_cast<int64_t>(have);
    if ((n & 7) != 0) {
      uint8_t last = 0;
      OP_REQUIRES_OK(ctx, CudaStatus(gpu::CopyToHost(&last, p.body() + bytes - 1, 1, stream),
                                     "IndexDecodeBitmap"));
      OP_REQUIRES(ctx, (last >> (n & 7)) == 0,
                  Invalid("bitmap payload has bits set past the universe size n=" +
                          std::to_string(n) + "; it is corrupt"));
    }
    gpu::GpuStatus st;
    const size_t scratch_bytes = gpu::BitmapDecodeScratchBytes(bytes, &st);
    OP_REQUIRES_OK(ctx, CudaStatus(st, "IndexDecodeBitmap"));
    Tensor scratch_t;
    OP_REQUIRES_OK(ctx, AllocateScratch(ctx, scratch_bytes, &scratch_t));
    void* scratch = scratch_t.flat<uint8_t>().data();
    int64_t total = 0;
    OP_REQUIRES_OK(ctx, CudaStatus(gpu::BitmapCount(p.body(), bytes, scratch, scratch_bytes,
                                                    stream, &total),
                                   "IndexDecodeBitmap"));
    OP_REQUIRES(ctx, static_cast<uint64_t>(total) == h.k,
                Invalid("bitmap payload header claims K=" + std::to_string(h.k) +
                        " indices but " + std::to_string(total) + " bits are set"));
    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({total}), &out_t));
    if (total == 0) return;
    OP_REQUIRES_OK(ctx, CudaStatus(gpu::BitmapWrite(p.body(), bytes, scratch, scratch_bytes,
                                                    out_t->flat<Tidx>().data(), stream),
                                   "IndexDecodeBitmap"));
  }
};

template <typename Tidx>
class DecodeRleGpuOp : public OpKernel {
 public:
  explicit DecodeRleGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    void* stream = nullptr;
    OP_REQUIRES_OK(ctx, StreamOf(ctx, &stream));
    DevicePayload p;
    OP_REQUIRES_OK(ctx, ReadHeader(ctx, stream, kCodecRle, DataTypeToEnum<Tidx>::v(), &p));
    const CommonHeader& h = p.h;
    const uint64_t have = p.body_bytes();
    OP_REQUIRES(ctx, h.k <= have,
                Invalid("rle payload claims K=" + std::to_string(h.k) + " indices but its body "
                        "holds only " + std::to_string(have) + " bytes (at least 1 per index)"));
    const int64_t k = static_cast<int64_t>(h.k);
    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({k}), &out_t));
    const size_t scratch_bytes = gpu::RleDecodeScratchBytes(static_cast<int64_t>(have));
    Tensor scratch_t;
    OP_REQUIRES_OK(ctx, AllocateScratch(ctx, scratch_bytes, &scratch_t));
    gpu::RleDecodeResult r;
    OP_REQUIRES_OK(ctx, CudaStatus(gpu::RleDecode(p.body(), static_cast<int64_t>(have), k, h.n,
                                                  scratch_t.flat<uint8_t>().data(),
                                                  scratch_bytes, out_t->flat<Tidx>().data(),
                                                  stream, &r),
                                   "IndexDecodeRle"));
    switch (r.error) {
      case gpu::kRleOk:
        return;
      case gpu::kRleBadGap:
        ctx->CtxFailure(Invalid("rle payload is corrupt: gap " + std::to_string(r.at) +
                                " of K=" + std::to_string(k) +
                                " is truncated or not in shortest form"));
        return;
      case gpu::kRlePastEnd:
        ctx->CtxFailure(Invalid("rle payload is corrupt: gap " + std::to_string(r.at) + " = " +
                                std::to_string(r.gap) + " runs past the universe size n=" +
                                std::to_string(h.n)));
        return;
      default:
        ctx->CtxFailure(Invalid("rle payload has " + std::to_string(r.trailing) +
                                " trailing bytes after its K=" + std::to_string(k) +
                                " gaps; it is extended or corrupt"));
        return;
    }
  }
};

template <typename Tidx>
class DecodeGolombGpuOp : public OpKernel {
 public:
  explicit DecodeGolombGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    void* stream = nullptr;
    OP_REQUIRES_OK(ctx, StreamOf(ctx, &stream));
    DevicePayload p;
    OP_REQUIRES_OK(ctx, ReadHeader(ctx, stream, kCodecGolomb, DataTypeToEnum<Tidx>::v(), &p));
    const CommonHeader& h = p.h;
    golomb::Layout layout;
    uint64_t table_at = 0, stream_at = 0;
    OP_REQUIRES_OK(ctx, ParseGolombLayoutPrefix(h, p.prefix + p.body_offset,
                                                p.prefix + p.prefix_bytes, p.body_bytes(),
                                                &layout, &table_at, &stream_at));
    const int64_t blocks = static_cast<int64_t>(layout.num_blocks);
    const int64_t table_bytes = static_cast<int64_t>(stream_at - table_at);

    // The table (checked against the payload length above) comes to the host
    // and is checked there, as on the CPU, before any block is decoded.
    Tensor table_bytes_t, tab_t;
    OP_REQUIRES_OK(ctx, AllocateHost(ctx, tensorflow::DT_UINT8, table_bytes, &table_bytes_t));
    OP_REQUIRES_OK(ctx, AllocateHost(ctx, tensorflow::DT_UINT64, 3 * blocks + 1, &tab_t));
    uint8_t* table = table_bytes_t.flat<uint8_t>().data();
    OP_REQUIRES_OK(ctx, CudaStatus(gpu::CopyToHost(table, p.body() + table_at,
                                                   static_cast<size_t>(table_bytes), stream),
                                   "IndexDecodeGolomb"));
    uint64_t* first = tab_t.flat<uint64_t>().data();
    uint64_t* off = first + blocks;
    uint64_t* param = off + blocks + 1;
    OP_REQUIRES_OK(ctx, ParseGolombTable(h, layout, table, table + table_bytes, first, off,
                                         param));

    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({static_cast<int64_t>(h.k)}),
                                             &out_t));
    const size_t scratch_bytes = gpu::GolombDecodeScratchBytes(blocks);
    Tensor scratch_t;
    OP_REQUIRES_OK(ctx, AllocateScratch(ctx, scratch_bytes, &scratch_t));
    int64_t bad = blocks;
    OP_REQUIRES_OK(ctx, CudaStatus(gpu::GolombDecode(p.body() + stream_at, first,
                                                     static_cast<int64_t>(h.k), layout, h.n,
                                                     scratch_t.flat<uint8_t>().data(),
                                                     scratch_bytes, out_t->flat<Tidx>().data(),
                                                     stream, &bad),
                                   "IndexDecodeGolomb"));
    OP_REQUIRES(ctx, bad == blocks, GolombBlockError(h, layout, off, bad));
  }
};

#define REGISTER_INDEX_GPU(T)                                                          \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>IndexEncodeInt32")                         \
                              .Device(::tensorflow::DEVICE_GPU)                        \
                              .HostMemory("universe_size")                             \
                              .TypeConstraint<T>("Tidx"),                              \
                          EncodeInt32GpuOp<T>);                                         \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>IndexEncodeBitmap")                        \
                              .Device(::tensorflow::DEVICE_GPU)                        \
                              .HostMemory("universe_size")                             \
                              .TypeConstraint<T>("Tidx"),                              \
                          EncodeBitmapGpuOp<T>);                                        \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>IndexEncodeRle")                           \
                              .Device(::tensorflow::DEVICE_GPU)                        \
                              .HostMemory("universe_size")                             \
                              .TypeConstraint<T>("Tidx"),                              \
                          EncodeRleGpuOp<T>);                                           \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>IndexEncodeGolomb")                        \
                              .Device(::tensorflow::DEVICE_GPU)                        \
                              .HostMemory("universe_size")                             \
                              .TypeConstraint<T>("Tidx"),                              \
                          EncodeGolombGpuOp<T>);                                        \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>IndexDecodeInt32")                         \
                              .Device(::tensorflow::DEVICE_GPU)                        \
                              .TypeConstraint<T>("out_idx"),                           \
                          DecodeInt32GpuOp<T>);                                         \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>IndexDecodeBitmap")                        \
                              .Device(::tensorflow::DEVICE_GPU)                        \
                              .TypeConstraint<T>("out_idx"),                           \
                          DecodeBitmapGpuOp<T>);                                        \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>IndexDecodeRle")                           \
                              .Device(::tensorflow::DEVICE_GPU)                        \
                              .TypeConstraint<T>("out_idx"),                           \
                          DecodeRleGpuOp<T>);                                           \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>IndexDecodeGolomb")                        \
                              .Device(::tensorflow::DEVICE_GPU)                        \
                              .TypeConstraint<T>("out_idx"),                           \
                          DecodeGolombGpuOp<T>);

REGISTER_INDEX_GPU(int32_t);
REGISTER_INDEX_GPU(int64_t);
#undef REGISTER_INDEX_GPU

}  // namespace
}  // namespace index
}  // namespace deepreduce
