// The OpKernels of the lossless index codecs, one class template per op,
// EncodeOp / DecodeOp<Device, Tidx, Codec> for the codec's struct
// <name>::Codec (kernels/index/<name>.h), for every device
// (kernels/common/devices.h); index_kernels.cc and index_kernels_gpu.cc
// register them for the codec table's rows. The primary templates are the
// generic CPU kernels of a codec without kernels of its own (its struct's
// host functions, index_format.h's CodecDefaults); int32, bitmap, rle and
// golomb specialize them with device functors. Argument and
// header checks, payload sizing, the header bytes, output allocation and
// every message are this file's (the parsers: index_args.h and the TF-free
// index_decode.h); the passes over indices and bodies are the device's
// functors (index_kernels.cc on the CPU, index_kernels_gpu.cc on the GPU).
//
// Host/device split: universe_size is a host tensor on every device (a
// HostMemory input on the GPU); indices and payloads are on the op's device.
// Decoders read the payload's first kMaxHeaderBytes bytes (golomb: also its
// block table) on the host (functor::HostBytes: the tensor itself on the CPU,
// a copy on the GPU) and check them before anything reads the body.
// Host code with TF headers.
#ifndef DEEPREDUCE_KERNELS_INDEX_INDEX_KERNELS_H_
#define DEEPREDUCE_KERNELS_INDEX_INDEX_KERNELS_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "kernels/common/devices.h"
#include "kernels/common/parse_status_tf.h"
#include "kernels/index/golomb.h"
#include "kernels/index/index_args.h"
#include "kernels/index/index_codecs.h"
#include "kernels/index/index_decode.h"
#include "kernels/index/index_format.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"

namespace deepreduce {
namespace index {

// The first position of an index vector that leaves [0, n) or does not rise
// above its predecessor (first_bad == K: none), its value and the
// predecessor's (0 at position 0).
struct OrderCheck {
  int64_t first_bad;
  int64_t value;
  int64_t prev;
};

namespace functor {

// ---- device primitives
// HostBytes<Device>()(ctx, src, bytes, &holder, &host): the `bytes` bytes at
// src (device memory of the op) readable on the host at *host: src itself on
// the CPU, a copy in pinned memory held by `holder` on the GPU.
template <typename Device>
struct HostBytes;
// WriteBytes<Device>()(ctx, dst, host_src, len): writes len <=
// kMaxHeaderBytes host bytes to dst (device memory of the op).
template <typename Device>
struct WriteBytes;
// FirstUnsorted<Device, Tidx>()(ctx, idx, k, n, &check).
template <typename Device, typename Tidx>
struct FirstUnsorted;

// ---- encoders: the body of a payload whose header is written; idx holds K
// checked (sorted, distinct, in [0, n)) indices.
// Int32Encode()(ctx, idx, k, body): K little-endian int32.
template <typename Device, typename Tidx>
struct Int32Encode;
// BitmapEncode()(ctx, idx, k, n, body): ceil(n / 8) bytes, bit i set for
// every index i.
template <typename Device, typename Tidx>
struct BitmapEncode;
// RleEncode: Size(ctx, idx, k, &bytes) of the gaps' varints, then
// Write(ctx, idx, k, body).
template <typename Device, typename Tidx>
struct RleEncode;
// GolombEncode: AutoBlock(ctx, idx, k, n, &log2_block) (block_size 0: the
// smallest payload of golomb::PickLog2Block), Size(ctx, idx, k, log2_block,
// &s) of the stream, then Write(ctx, idx, k, layout, table, stream) of the
// block table and the stream.
template <typename Device, typename Tidx>
struct GolombEncode;

// ---- decoders: the body of a payload whose header (and golomb's table) is
// checked; out holds the K indices the header announced.
// Int32Decode()(ctx, body, k, out); the caller checks the order after.
template <typename Device, typename Tidx>
struct Int32Decode;
// BitmapDecode: Count(ctx, body, bytes, &total) of the set bits, then
// Write(ctx, body, bytes, out) of their positions (total > 0).
template <typename Device, typename Tidx>
struct BitmapDecode;
// RleDecode()(ctx, h, body, bytes, out): the K gaps, with the messages of
// index_decode.h (RleBadGap, RleGapPastEnd, RleTrailingBytes).
template <typename Device, typename Tidx>
struct RleDecode;
// GolombDecode()(ctx, h, layout, stream, table, out, &bad): every block of
// the stream (device memory) with the host-checked table (first[nb],
// off[nb + 1], param[nb]: ParseGolombTable); bad = the first block that does
// not decode, or nb.
template <typename Device, typename Tidx>
struct GolombDecode;

}  // namespace functor

// ---------------------------------------------------------------------------
// Encoders: shared validation, then the codec's Encode().

template <typename Device, typename Tidx>
class EncodeBase : public tensorflow::OpKernel {
 public:
  explicit EncodeBase(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(tensorflow::OpKernelContext* ctx) override {
    int64_t n = 0;
    OP_REQUIRES_OK(ctx, ParseUniverse(ctx->input(1), &n));
    const tensorflow::Tensor& indices_t = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckIndicesShape(indices_t, n));
    const int64_t k = indices_t.NumElements();
    const Tidx* idx = indices_t.flat<Tidx>().data();
    OrderCheck check{k, 0, 0};
    OP_REQUIRES_OK(ctx, functor::FirstUnsorted<Device, Tidx>()(ctx, idx, k, n, &check));
    OP_REQUIRES(ctx, check.first_bad == k,
                SortedError("indices", check.first_bad, check.prev, check.value, n));
    Encode(ctx, idx, k, n);
  }

 protected:
  virtual void Encode(tensorflow::OpKernelContext* ctx, const Tidx* idx, int64_t k,
                      int64_t n) = 0;

  // Allocates the payload and writes the common header followed by `extra`
  // (extra_len bytes of codec fields); returns the body, or nullptr after
  // failing the op.
  uint8_t* AllocatePayload(tensorflow::OpKernelContext* ctx, uint8_t codec, int64_t n,
                           int64_t k, const uint8_t* extra, int extra_len,
                           int64_t body_bytes) {
    uint8_t header[kMaxHeaderBytes];
    uint8_t* p = PutCommonHeader(header, codec, n, k);
    if (extra_len > 0) std::memcpy(p, extra, extra_len);
    const int hdr = static_cast<int>(p - header) + extra_len;
    tensorflow::Tensor* out = nullptr;
    absl::Status s = ctx->allocate_output(0, tensorflow::TensorShape({hdr + body_bytes}), &out);
    if (s.ok()) s = functor::WriteBytes<Device>()(ctx, out->flat<uint8_t>().data(), header, hdr);
    if (!s.ok()) {
      ctx->CtxFailure(s);
      return nullptr;
    }
    return out->flat<uint8_t>().data() + hdr;
  }
};

// The generic encoder: one pass of the codec's host functions.
template <typename Device, typename Tidx, typename Codec>
class EncodeOp : public EncodeBase<Device, Tidx> {
  static_assert(std::is_same<Device, CpuDevice>::value,
                "a codec with gpu=True in the codec table needs GPU OpKernels of its own "
                "(EncodeOp and DecodeOp specializations for its struct)");

 public:
  using Args = OpArgsOf<Codec>;

  // The row's attributes (codec_table.h's OpArgsOf), checked against its bounds.
  explicit EncodeOp(tensorflow::OpKernelConstruction* ctx) : EncodeBase<Device, Tidx>(ctx) {
    for (int i = 0; i < Args::kNumAttrs; ++i) {
      const IntAttr& attr = Args::kAttrs[i];
      int64_t v;
      OP_REQUIRES_OK(ctx, ctx->GetAttr(attr.name, &v));
      OP_REQUIRES(ctx, v >= attr.low && v <= attr.high,
                  absl::InvalidArgumentError(
                      std::string(CodecOf<Codec>::kName) + ": " + attr.name + " must lie in [" +
                      std::to_string(attr.low) + ", " + std::to_string(attr.high) +
                      "], got " + std::to_string(v)));
      args_.attr[i] = v;
    }
  }

 protected:
  void Encode(tensorflow::OpKernelContext* ctx, const Tidx* idx, int64_t k,
              int64_t n) override {
    const uint64_t bytes = Codec::BodyBytes(idx, k, static_cast<uint64_t>(n), args_);
    uint8_t* body = this->AllocatePayload(ctx, CodecOf<Codec>::kId, n, k, nullptr, 0,
                                          static_cast<int64_t>(bytes));
    if (body == nullptr) return;
    Codec::EncodeBody(idx, k, static_cast<uint64_t>(n), args_, body);
  }

 private:
  EncodeArgs args_;
};

template <typename Device, typename Tidx>
class EncodeOp<Device, Tidx, int32::Codec> : public EncodeBase<Device, Tidx> {
 public:
  using EncodeBase<Device, Tidx>::EncodeBase;

 protected:
  void Encode(tensorflow::OpKernelContext* ctx, const Tidx* idx, int64_t k,
              int64_t n) override {
    OP_REQUIRES(ctx, static_cast<uint64_t>(n) <= kMaxInt32Universe,
                Invalid("the int32 index codec cannot address universe_size=" +
                        std::to_string(n) + " > 2^31; use golomb, rle or bitmap"));
    uint8_t* body = this->AllocatePayload(ctx, kCodecInt32, n, k, nullptr, 0, 4 * k);
    if (body == nullptr) return;
    OP_REQUIRES_OK(ctx, functor::Int32Encode<Device, Tidx>()(ctx, idx, k, body));
  }
};

template <typename Device, typename Tidx>
class EncodeOp<Device, Tidx, bitmap::Codec> : public EncodeBase<Device, Tidx> {
 public:
  using EncodeBase<Device, Tidx>::EncodeBase;

 protected:
  void Encode(tensorflow::OpKernelContext* ctx, const Tidx* idx, int64_t k,
              int64_t n) override {
    const int64_t bytes = static_cast<int64_t>(BitmapBytes(n));
    uint8_t* body = this->AllocatePayload(ctx, kCodecBitmap, n, k, nullptr, 0, bytes);
    if (body == nullptr) return;
    OP_REQUIRES_OK(ctx, functor::BitmapEncode<Device, Tidx>()(ctx, idx, k, n, body));
  }
};

template <typename Device, typename Tidx>
class EncodeOp<Device, Tidx, rle::Codec> : public EncodeBase<Device, Tidx> {
 public:
  using EncodeBase<Device, Tidx>::EncodeBase;

 protected:
  void Encode(tensorflow::OpKernelContext* ctx, const Tidx* idx, int64_t k,
              int64_t n) override {
    functor::RleEncode<Device, Tidx> rle;
    int64_t total = 0;
    OP_REQUIRES_OK(ctx, rle.Size(ctx, idx, k, &total));
    uint8_t* body = this->AllocatePayload(ctx, kCodecRle, n, k, nullptr, 0, total);
    if (body == nullptr) return;
    OP_REQUIRES_OK(ctx, rle.Write(ctx, idx, k, body));
  }
};

template <typename Device, typename Tidx>
class EncodeOp<Device, Tidx, golomb::Codec> : public EncodeBase<Device, Tidx> {
 public:
  explicit EncodeOp(tensorflow::OpKernelConstruction* ctx)
      : EncodeBase<Device, Tidx>(ctx) {
    int64_t block_size;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("block_size", &block_size));
    OP_REQUIRES_OK(ctx, ParseGolombBlockSize(block_size, &log2_block_));
  }

 protected:
  void Encode(tensorflow::OpKernelContext* ctx, const Tidx* idx, int64_t k,
              int64_t n) override {
    functor::GolombEncode<Device, Tidx> golomb;
    int log2_block = log2_block_;
    if (log2_block == kGolombAutoBlock) {
      OP_REQUIRES_OK(ctx, golomb.AutoBlock(ctx, idx, k, n, &log2_block));
    }
    int64_t s = 0;
    OP_REQUIRES_OK(ctx, golomb.Size(ctx, idx, k, log2_block, &s));
    const golomb::Layout layout = golomb::MakeLayout(n, k, log2_block, s);
    const int64_t table_bytes = static_cast<int64_t>(GolombTableBytes(layout));
    uint8_t extra[1 + kMaxVarintBytes];
    extra[0] = static_cast<uint8_t>(log2_block);
    const int extra_len =
        static_cast<int>(PutVarint(extra + 1, static_cast<uint64_t>(s)) - extra);
    uint8_t* table = this->AllocatePayload(ctx, kCodecGolomb, n, k, extra, extra_len,
                                           table_bytes + s);
    if (table == nullptr) return;
    OP_REQUIRES_OK(ctx, golomb.Write(ctx, idx, k, layout, table, table + table_bytes));
  }

 private:
  int log2_block_;  // kGolombAutoBlock: chosen per payload
};

// ---------------------------------------------------------------------------
// Decoders.

// A decoder's payload (input 0, on the op's device) after its common header
// was checked on the host: `prefix` holds its first prefix_bytes =
// min(bytes, kMaxHeaderBytes) bytes there (index_decode.h: the header and
// golomb's B and S always fit), the body starts at body_offset.
struct Payload {
  const uint8_t* data;
  int64_t bytes;
  CommonHeader h;
  int64_t body_offset;
  const uint8_t* prefix;
  int64_t prefix_bytes;
  tensorflow::Tensor prefix_holder;
  const uint8_t* body() const { return data + body_offset; }
  uint64_t body_bytes() const { return static_cast<uint64_t>(bytes - body_offset); }
};

template <typename Device>
absl::Status ReadHeader(tensorflow::OpKernelContext* ctx, uint8_t codec,
                        tensorflow::DataType out_idx, Payload* p) {
  const tensorflow::Tensor& payload = ctx->input(0);
  TF_RETURN_IF_ERROR(CheckPayloadShape(payload));
  p->data = payload.flat<uint8_t>().data();
  p->bytes = payload.NumElements();
  p->prefix_bytes = std::min<int64_t>(p->bytes, kMaxHeaderBytes);
  TF_RETURN_IF_ERROR(functor::HostBytes<Device>()(ctx, p->data, p->prefix_bytes,
                                                  &p->prefix_holder, &p->prefix));
  return ParseHeaderPrefix(p->prefix, p->prefix_bytes, p->bytes, codec, out_idx, &p->h,
                           &p->body_offset);
}

// The generic decoder: the codec's host functions, then the order check.
template <typename Device, typename Tidx, typename Codec>
class DecodeOp : public tensorflow::OpKernel {
  static_assert(std::is_same<Device, CpuDevice>::value,
                "a codec with gpu=True in the codec table needs GPU OpKernels of its own "
                "(EncodeOp and DecodeOp specializations for its struct)");

 public:
  explicit DecodeOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(tensorflow::OpKernelContext* ctx) override {
    Payload p;
    OP_REQUIRES_OK(ctx, ReadHeader<Device>(ctx, CodecOf<Codec>::kId,
                                           tensorflow::DataTypeToEnum<Tidx>::v(), &p));
    OP_REQUIRES_OK(ctx, ToAbsl(Codec::CheckBody(p.h, p.body(), p.body_bytes())));
    const int64_t k = static_cast<int64_t>(p.h.k);
    const int64_t n = static_cast<int64_t>(p.h.n);
    tensorflow::Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tensorflow::TensorShape({k}), &out_t));
    Tidx* out = out_t->flat<Tidx>().data();
    OP_REQUIRES_OK(ctx, ToAbsl(Codec::DecodeBody(p.h, p.body(), p.body_bytes(), out)));
    const int64_t bad = core::FirstUnsorted(out, 0, k, n);
    if (bad < k) {
      const absl::Status s = SortedError("decoded index", bad, bad > 0 ? out[bad - 1] : 0,
                                         out[bad], n);
      ctx->CtxFailure(Invalid(std::string(CodecOf<Codec>::kName) + " payload is corrupt: " +
                              std::string(s.message())));
    }
  }
};

template <typename Device, typename Tidx>
class DecodeOp<Device, Tidx, int32::Codec> : public tensorflow::OpKernel {
 public:
  explicit DecodeOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(tensorflow::OpKernelContext* ctx) override {
    Payload p;
    OP_REQUIRES_OK(ctx, ReadHeader<Device>(ctx, kCodecInt32,
                                           tensorflow::DataTypeToEnum<Tidx>::v(), &p));
    OP_REQUIRES_OK(ctx, ToAbsl(core::ParseInt32Body(p.h, p.body_bytes())));
    const int64_t k = static_cast<int64_t>(p.h.k);
    const int64_t n = static_cast<int64_t>(p.h.n);
    tensorflow::Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tensorflow::TensorShape({k}), &out_t));
    Tidx* out = out_t->flat<Tidx>().data();
    OP_REQUIRES_OK(ctx, functor::Int32Decode<Device, Tidx>()(ctx, p.body(), k, out));
    OrderCheck check{k, 0, 0};
    OP_REQUIRES_OK(ctx, functor::FirstUnsorted<Device, Tidx>()(ctx, out, k, n, &check));
    if (check.first_bad < k) {
      const absl::Status s =
          SortedError("decoded index", check.first_bad, check.prev, check.value, n);
      ctx->CtxFailure(Invalid("int32 payload is corrupt: " + std::string(s.message())));
    }
  }
};

template <typename Device, typename Tidx>
class DecodeOp<Device, Tidx, bitmap::Codec> : public tensorflow::OpKernel {
 public:
  explicit DecodeOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(tensorflow::OpKernelContext* ctx) override {
    Payload p;
    OP_REQUIRES_OK(ctx, ReadHeader<Device>(ctx, kCodecBitmap,
                                           tensorflow::DataTypeToEnum<Tidx>::v(), &p));
    const CommonHeader& h = p.h;
    OP_REQUIRES_OK(ctx, ToAbsl(core::CheckBitmapLength(h, p.body_bytes())));
    const int64_t bytes = static_cast<int64_t>(p.body_bytes());
    if ((h.n & 7) != 0) {  // then bytes >= 1
      tensorflow::Tensor last_holder;
      const uint8_t* last = nullptr;
      OP_REQUIRES_OK(ctx, functor::HostBytes<Device>()(ctx, p.body() + bytes - 1, 1,
                                                       &last_holder, &last));
      OP_REQUIRES_OK(ctx, ToAbsl(core::CheckBitmapPadding(h, *last)));
    }
    functor::BitmapDecode<Device, Tidx> bitmap;
    int64_t total = 0;
    OP_REQUIRES_OK(ctx, bitmap.Count(ctx, p.body(), bytes, &total));
    OP_REQUIRES(ctx, static_cast<uint64_t>(total) == h.k,
                ToAbsl(core::BitmapCountMismatch(h.k, total)));
    tensorflow::Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tensorflow::TensorShape({total}), &out_t));
    if (total == 0) return;
    OP_REQUIRES_OK(ctx, bitmap.Write(ctx, p.body(), bytes, out_t->flat<Tidx>().data()));
  }
};

template <typename Device, typename Tidx>
class DecodeOp<Device, Tidx, rle::Codec> : public tensorflow::OpKernel {
 public:
  explicit DecodeOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(tensorflow::OpKernelContext* ctx) override {
    Payload p;
    OP_REQUIRES_OK(ctx, ReadHeader<Device>(ctx, kCodecRle,
                                           tensorflow::DataTypeToEnum<Tidx>::v(), &p));
    OP_REQUIRES_OK(ctx, ToAbsl(core::ParseRleCount(p.h, p.body_bytes())));
    tensorflow::Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            0, tensorflow::TensorShape({static_cast<int64_t>(p.h.k)}), &out_t));
    OP_REQUIRES_OK(ctx, functor::RleDecode<Device, Tidx>()(
                            ctx, p.h, p.body(), static_cast<int64_t>(p.body_bytes()),
                            out_t->flat<Tidx>().data()));
  }
};

template <typename Device, typename Tidx>
class DecodeOp<Device, Tidx, golomb::Codec> : public tensorflow::OpKernel {
 public:
  explicit DecodeOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(tensorflow::OpKernelContext* ctx) override {
    Payload p;
    OP_REQUIRES_OK(ctx, ReadHeader<Device>(ctx, kCodecGolomb,
                                           tensorflow::DataTypeToEnum<Tidx>::v(), &p));
    const CommonHeader& h = p.h;
    golomb::Layout layout;
    uint64_t table_at = 0, stream_at = 0;
    OP_REQUIRES_OK(ctx, ParseGolombLayoutPrefix(h, p.prefix + p.body_offset,
                                                p.prefix + p.prefix_bytes, p.body_bytes(),
                                                &layout, &table_at, &stream_at));
    const int64_t blocks = static_cast<int64_t>(layout.num_blocks);
    const int64_t table_bytes = static_cast<int64_t>(stream_at - table_at);

    // The table (its length checked against the payload above) is read and
    // checked on the host before any block is decoded: (first, offset,
    // parameter) per block; offsets gain a sentinel at S.
    tensorflow::Tensor table_holder, tab_t;
    const uint8_t* table = nullptr;
    OP_REQUIRES_OK(ctx, functor::HostBytes<Device>()(ctx, p.body() + table_at, table_bytes,
                                                     &table_holder, &table));
    OP_REQUIRES_OK(ctx, AllocateHostTemp<Device>(ctx, tensorflow::DT_UINT64, 3 * blocks + 1,
                                                 &tab_t));
    uint64_t* first = tab_t.flat<uint64_t>().data();
    uint64_t* off = first + blocks;
    uint64_t* param = off + blocks + 1;
    OP_REQUIRES_OK(ctx, ParseGolombTable(h, layout, table, table + table_bytes, first, off,
                                         param));

    tensorflow::Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            0, tensorflow::TensorShape({static_cast<int64_t>(h.k)}), &out_t));
    int64_t bad = blocks;
    OP_REQUIRES_OK(ctx, functor::GolombDecode<Device, Tidx>()(
                            ctx, h, layout, p.body() + stream_at, first,
                            out_t->flat<Tidx>().data(), &bad));
    OP_REQUIRES(ctx, bad == blocks, GolombBlockError(h, layout, off, bad));
  }
};

}  // namespace index
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_INDEX_INDEX_KERNELS_H_
