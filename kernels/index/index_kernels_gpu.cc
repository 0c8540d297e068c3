// GPU half of the lossless index codecs (CUDA build only: setup.py compiles
// *_gpu.cc files when DEEPREDUCE_TF_CUDA=1): the GPU functors of the
// OpKernels, which are the CPU's (index_kernels.h: same checks, header bytes
// and messages), and their GPU registrations. The functors run the CUDA
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
//     its block table, ~0.01 bits per index) to the host, where the OpKernel
//     checks them before launching anything that reads the body;
//     data-dependent checks (bitmap bit count, int32 order, rle gaps, golomb
//     blocks) run on the device and come back as an error record. So every
//     op synchronizes its stream once or twice.
//   * rle decode has no split points in its format; it is decoded in chunks
//     speculatively from every possible entry offset (rle.h, index_gpu.h),
//     with two short single-thread passes over the chunks.
#include <cstdint>

#include "kernels/common/devices.h"
#include "kernels/common/gpu_op_util.h"
#include "kernels/common/parse_status_tf.h"
#include "kernels/index/golomb.h"
#include "kernels/index/index_decode.h"
#include "kernels/index/index_format.h"
#include "kernels/index/index_gpu.h"
#include "kernels/index/index_kernels.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace deepreduce {
namespace index {
namespace {

using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using gpu_util::AllocateScratch;
using gpu_util::StreamOf;

static_assert(kMaxHeaderBytes <= gpu::kMaxWriteBytes,
              "a payload header is written with one WriteBytes");

absl::Status CudaStatus(const gpu::GpuStatus& s, const char* op) {
  return gpu_util::CudaStatus(s, op);
}

}  // namespace

namespace functor {

template <>
struct HostBytes<GpuDevice> {
  absl::Status operator()(OpKernelContext* ctx, const uint8_t* src, int64_t bytes,
                          Tensor* holder, const uint8_t** host) const {
    return gpu_util::CopyToPinnedHost(ctx, src, bytes, holder, host,
                                      "copying payload bytes to the host");
  }
};

template <>
struct WriteBytes<GpuDevice> {
  absl::Status operator()(OpKernelContext* ctx, uint8_t* dst, const uint8_t* src,
                          int len) const {
    void* stream = nullptr;
    TF_RETURN_IF_ERROR(StreamOf(ctx, &stream));
    return CudaStatus(gpu::WriteBytes(dst, src, len, stream), "writing the payload header");
  }
};

template <typename Tidx>
struct FirstUnsorted<GpuDevice, Tidx> {
  absl::Status operator()(OpKernelContext* ctx, const Tidx* idx, int64_t k, int64_t n,
                          OrderCheck* check) const {
    void* stream = nullptr;
    TF_RETURN_IF_ERROR(StreamOf(ctx, &stream));
    Tensor flag_t;
    TF_RETURN_IF_ERROR(AllocateScratch(ctx, gpu::ValidateScratchBytes(), &flag_t));
    gpu::SortedCheck r{k, 0, 0};
    TF_RETURN_IF_ERROR(CudaStatus(
        gpu::ValidateSorted(idx, k, n, flag_t.flat<uint8_t>().data(), stream, &r),
        "checking the index order"));
    check->first_bad = r.first_bad;
    check->value = r.value;
    check->prev = r.prev;
    return absl::OkStatus();
  }
};

// ------------------------------------------------------------- encoders --

template <typename Tidx>
struct Int32Encode<GpuDevice, Tidx> {
  absl::Status operator()(OpKernelContext* ctx, const Tidx* idx, int64_t k,
                          uint8_t* body) const {
    void* stream = nullptr;
    TF_RETURN_IF_ERROR(StreamOf(ctx, &stream));
    return CudaStatus(gpu::Int32Encode(idx, k, body, stream), "IndexEncodeInt32");
  }
};

template <typename Tidx>
struct BitmapEncode<GpuDevice, Tidx> {
  absl::Status operator()(OpKernelContext* ctx, const Tidx* idx, int64_t k, int64_t n,
                          uint8_t* body) const {
    void* stream = nullptr;
    TF_RETURN_IF_ERROR(StreamOf(ctx, &stream));
    Tensor scratch_t;
    const size_t scratch_bytes = gpu::BitmapEncodeScratchBytes(n);
    TF_RETURN_IF_ERROR(AllocateScratch(ctx, scratch_bytes, &scratch_t));
    return CudaStatus(gpu::BitmapEncode(idx, k, n, scratch_t.flat<uint8_t>().data(),
                                        scratch_bytes, body, stream),
                      "IndexEncodeBitmap");
  }
};

template <typename Tidx>
struct RleEncode<GpuDevice, Tidx> {
  absl::Status Size(OpKernelContext* ctx, const Tidx* idx, int64_t k, int64_t* total) {
    TF_RETURN_IF_ERROR(StreamOf(ctx, &stream_));
    gpu::GpuStatus st;
    scratch_bytes_ = gpu::RleEncodeScratchBytes(k, &st);
    TF_RETURN_IF_ERROR(CudaStatus(st, "IndexEncodeRle"));
    TF_RETURN_IF_ERROR(AllocateScratch(ctx, scratch_bytes_, &scratch_t_));
    return CudaStatus(gpu::RleSize(idx, k, scratch_t_.flat<uint8_t>().data(), scratch_bytes_,
                                   stream_, total),
                      "IndexEncodeRle");
  }

  absl::Status Write(OpKernelContext* /*ctx*/, const Tidx* idx, int64_t k,
                     uint8_t* body) const {
    return CudaStatus(gpu::RleWrite(idx, k, scratch_t_.flat<uint8_t>().data(), scratch_bytes_,
                                    body, stream_),
                      "IndexEncodeRle");
  }

  void* stream_ = nullptr;
  Tensor scratch_t_;
  size_t scratch_bytes_ = 0;
};

template <typename Tidx>
struct GolombEncode<GpuDevice, Tidx> {
  absl::Status AutoBlock(OpKernelContext* ctx, const Tidx* idx, int64_t k, int64_t n,
                         int* log2_block) const {
    void* stream = nullptr;
    TF_RETURN_IF_ERROR(StreamOf(ctx, &stream));
    Tensor auto_t;
    TF_RETURN_IF_ERROR(AllocateScratch(ctx, gpu::GolombAutoScratchBytes(), &auto_t));
    return CudaStatus(gpu::GolombAutoBlock(idx, k, static_cast<uint64_t>(n),
                                           auto_t.flat<uint8_t>().data(),
                                           gpu::GolombAutoScratchBytes(), stream, log2_block),
                      "IndexEncodeGolomb");
  }

  absl::Status Size(OpKernelContext* ctx, const Tidx* idx, int64_t k, int log2_block,
                    int64_t* s) {
    TF_RETURN_IF_ERROR(StreamOf(ctx, &stream_));
    gpu::GpuStatus st;
    scratch_bytes_ = gpu::GolombEncodeScratchBytes(k, log2_block, &st);
    TF_RETURN_IF_ERROR(CudaStatus(st, "IndexEncodeGolomb"));
    TF_RETURN_IF_ERROR(AllocateScratch(ctx, scratch_bytes_, &scratch_t_));
    return CudaStatus(gpu::GolombSize(idx, k, log2_block, scratch_t_.flat<uint8_t>().data(),
                                      scratch_bytes_, stream_, s),
                      "IndexEncodeGolomb");
  }

  absl::Status Write(OpKernelContext* /*ctx*/, const Tidx* idx, int64_t k,
                     const golomb::Layout& layout, uint8_t* table, uint8_t* stream) const {
    return CudaStatus(gpu::GolombWrite(idx, k, layout, scratch_t_.flat<uint8_t>().data(),
                                       scratch_bytes_, table, stream, stream_),
                      "IndexEncodeGolomb");
  }

  void* stream_ = nullptr;
  Tensor scratch_t_;
  size_t scratch_bytes_ = 0;
};

// ------------------------------------------------------------- decoders --

template <typename Tidx>
struct Int32Decode<GpuDevice, Tidx> {
  absl::Status operator()(OpKernelContext* ctx, const uint8_t* body, int64_t k,
                          Tidx* out) const {
    void* stream = nullptr;
    TF_RETURN_IF_ERROR(StreamOf(ctx, &stream));
    return CudaStatus(gpu::Int32Decode(body, k, out, stream), "IndexDecodeInt32");
  }
};

template <typename Tidx>
struct BitmapDecode<GpuDevice, Tidx> {
  absl::Status Count(OpKernelContext* ctx, const uint8_t* body, int64_t bytes,
                     int64_t* total) {
    TF_RETURN_IF_ERROR(StreamOf(ctx, &stream_));
    gpu::GpuStatus st;
    scratch_bytes_ = gpu::BitmapDecodeScratchBytes(bytes, &st);
    TF_RETURN_IF_ERROR(CudaStatus(st, "IndexDecodeBitmap"));
    TF_RETURN_IF_ERROR(AllocateScratch(ctx, scratch_bytes_, &scratch_t_));
    return CudaStatus(gpu::BitmapCount(body, bytes, scratch_t_.flat<uint8_t>().data(),
                                       scratch_bytes_, stream_, total),
                      "IndexDecodeBitmap");
  }

  absl::Status Write(OpKernelContext* /*ctx*/, const uint8_t* body, int64_t bytes,
                     Tidx* out) const {
    return CudaStatus(gpu::BitmapWrite(body, bytes, scratch_t_.flat<uint8_t>().data(),
                                       scratch_bytes_, out, stream_),
                      "IndexDecodeBitmap");
  }

  void* stream_ = nullptr;
  Tensor scratch_t_;
  size_t scratch_bytes_ = 0;
};

template <typename Tidx>
struct RleDecode<GpuDevice, Tidx> {
  absl::Status operator()(OpKernelContext* ctx, const CommonHeader& h, const uint8_t* body,
                          int64_t bytes, Tidx* out) const {
    void* stream = nullptr;
    TF_RETURN_IF_ERROR(StreamOf(ctx, &stream));
    const int64_t k = static_cast<int64_t>(h.k);
    const size_t scratch_bytes = gpu::RleDecodeScratchBytes(bytes);
    Tensor scratch_t;
    TF_RETURN_IF_ERROR(AllocateScratch(ctx, scratch_bytes, &scratch_t));
    gpu::RleDecodeResult r;
    TF_RETURN_IF_ERROR(CudaStatus(gpu::RleDecode(body, bytes, k, h.n,
                                                 scratch_t.flat<uint8_t>().data(),
                                                 scratch_bytes, out, stream, &r),
                                  "IndexDecodeRle"));
    switch (r.error) {
      case gpu::kRleOk:
        return absl::OkStatus();
      case gpu::kRleBadGap:
        return ToAbsl(core::RleBadGap(r.at, k));
      case gpu::kRlePastEnd:
        return ToAbsl(core::RleGapPastEnd(r.at, r.gap, h.n));
      default:
        return ToAbsl(core::RleTrailingBytes(r.trailing, k));
    }
  }
};

template <typename Tidx>
struct GolombDecode<GpuDevice, Tidx> {
  absl::Status operator()(OpKernelContext* ctx, const CommonHeader& h,
                          const golomb::Layout& layout, const uint8_t* stream_bytes,
                          const uint64_t* table, Tidx* out, int64_t* first_bad_block) const {
    void* stream = nullptr;
    TF_RETURN_IF_ERROR(StreamOf(ctx, &stream));
    const size_t scratch_bytes =
        gpu::GolombDecodeScratchBytes(static_cast<int64_t>(layout.num_blocks));
    Tensor scratch_t;
    TF_RETURN_IF_ERROR(AllocateScratch(ctx, scratch_bytes, &scratch_t));
    return CudaStatus(gpu::GolombDecode(stream_bytes, table, static_cast<int64_t>(h.k), layout,
                                        h.n, scratch_t.flat<uint8_t>().data(), scratch_bytes,
                                        out, stream, first_bad_block),
                      "IndexDecodeGolomb");
  }
};

}  // namespace functor

namespace {

// Every codec with kernels="index" and gpu=True in the codec table, for both
// index dtypes.
#define DR_REGISTER_INDEX_GPU_T(name, Camel, T)                                     \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>IndexEncode" #Camel)                   \
                              .Device(::tensorflow::DEVICE_GPU)                   \
                              .HostMemory("universe_size")                        \
                              .TypeConstraint<T>("Tidx"),                         \
                          EncodeOp<GpuDevice, T, name::Codec>);                   \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>IndexDecode" #Camel)                   \
                              .Device(::tensorflow::DEVICE_GPU)                   \
                              .TypeConstraint<T>("out_idx"),                      \
                          DecodeOp<GpuDevice, T, name::Codec>);
#define DR_REGISTER_INDEX_GPU(name, Camel, id, kernels) \
  DR_REGISTER_INDEX_GPU_T(name, Camel, int32_t)         \
  DR_REGISTER_INDEX_GPU_T(name, Camel, int64_t)
DR_INDEX_GPU_CODECS(DR_REGISTER_INDEX_GPU)
#undef DR_REGISTER_INDEX_GPU
#undef DR_REGISTER_INDEX_GPU_T

}  // namespace
}  // namespace index
}  // namespace deepreduce
