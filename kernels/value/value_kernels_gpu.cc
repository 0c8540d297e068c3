// GPU half of the value codecs (CUDA build only: setup.py compiles *_gpu.cc
// files when DEEPREDUCE_TF_CUDA=1): the GPU functors of the OpKernels, which
// are the CPU's (value_kernels.h: same checks, sizes and messages), and their
// GPU registrations. The generic functors of the codecs of the family's
// convention run each codec's own launchers (kernels/value/<name>.cu; every
// codec whose table row says gpu=True is registered here); those of qsgd,
// polyfit and dexp run the CUDA kernels of value_kernels.cu through the
// launchers of value_gpu.h on the op's stream; the OpKernels read headers and fixed fields on the
// host from a copy of the payload's prefix (all of it for polyfit and dexp,
// whose payloads are small); data checks (NaN/Inf values, qsgd scales, codes
// and padding) run on the device and are reported after a small
// device-to-host copy.
//
// Synchronization: every decoder copies its header to the host (one stream
// sync); qsgd encode/decode also sync once for their error records; polyfit
// decode once more to upload its segment tables. polyfit/dexp encode sync
// after the sort (NaN/Inf record, sign split), polyfit's greedy segmentation
// twice more (count, lengths: the payload size depends on them), and the fit
// once (error record). The generic encoders never sync; the generic decoders
// once, for the header.
//
// Not here: deflate (CPU only by design): TF places it on the CPU.
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/common/devices.h"
#include "kernels/common/gpu_op_util.h"
#include "kernels/value/dexp.h"
#include "kernels/value/polyfit.h"
#include "kernels/value/value_args.h"
#include "kernels/value/value_codecs.h"
#include "kernels/value/value_format.h"
#include "kernels/value/value_gpu.h"
#include "kernels/value/value_kernels.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace deepreduce {
namespace value {
namespace {

using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using gpu_util::AllocateScratch;
using gpu_util::StreamOf;

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

// ------------------------------------------------------------- generic --

// The codec's launchers (kernels/value/<name>.cu): the payload is exactly
// the header and body_bytes (Codec::BodyBytes) bytes.
template <typename Codec>
struct CodecEncode<GpuDevice, Codec> {
  absl::Status operator()(OpKernelContext* ctx, const float* v, int64_t k,
                          const EncodeArgs& args, uint64_t body_bytes) const {
    void* stream = nullptr;
    TF_RETURN_IF_ERROR(StreamOf(ctx, &stream));
    Tensor* payload_t = nullptr;
    TF_RETURN_IF_ERROR(ctx->allocate_output(
        0, tensorflow::TensorShape({kHeaderBytes + static_cast<int64_t>(body_bytes)}),
        &payload_t));
    const std::string op = std::string(CodecOf<Codec>::kCamel) + "Encode";
    return CudaStatus(Codec::EncodeGpu(v, k, args,
                                       MakeHeader(CodecOf<Codec>::kId, static_cast<uint64_t>(k)),
                                       payload_t->flat<uint8_t>().data(), body_bytes, stream),
                      op.c_str());
  }
};

template <typename Codec>
struct CodecDecode<GpuDevice, Codec> {
  absl::Status operator()(OpKernelContext* ctx, uint64_t k, const uint8_t* body, uint64_t bytes,
                          float* out) const {
    void* stream = nullptr;
    TF_RETURN_IF_ERROR(StreamOf(ctx, &stream));
    const std::string op = std::string(CodecOf<Codec>::kCamel) + "Decode";
    return CudaStatus(Codec::DecodeGpu(k, body, bytes, out, stream), op.c_str());
  }
};

// ---------------------------------------------------------------- qsgd --

template <>
struct QsgdEncode<GpuDevice> {
  absl::Status operator()(OpKernelContext* ctx, const float* v, int64_t k,
                          const QsgdLayout& l, uint64_t seed, uint8_t* payload,
                          int64_t* first_bad, float* bad_value) const {
    void* stream = nullptr;
    TF_RETURN_IF_ERROR(StreamOf(ctx, &stream));
    Tensor scratch_t;
    const size_t scratch_bytes = gpu::QsgdScratchBytes();
    TF_RETURN_IF_ERROR(AllocateScratch(ctx, scratch_bytes, &scratch_t));
    gpu::QsgdEncodeResult r{k, 0.0f};
    // TF's GPU allocator aligns outputs to >= 64 bytes: the scales can be
    // updated as 32-bit words.
    TF_RETURN_IF_ERROR(CudaStatus(gpu::QsgdEncode(v, k, l.s, l.bucket, seed, payload,
                                                  static_cast<int64_t>(l.size),
                                                  scratch_t.flat<uint8_t>().data(),
                                                  scratch_bytes, stream, &r),
                                  "QsgdEncode"));
    *first_bad = r.first_bad;
    *bad_value = r.bad_value;
    return absl::OkStatus();
  }
};

template <>
struct QsgdDecode<GpuDevice> {
  absl::Status operator()(OpKernelContext* ctx, const uint8_t* payload, int64_t size,
                          const QsgdLayout& l, float* out, int64_t* first_bad_code) const {
    void* stream = nullptr;
    TF_RETURN_IF_ERROR(StreamOf(ctx, &stream));
    Tensor scratch_t;
    const size_t scratch_bytes = gpu::QsgdScratchBytes();
    TF_RETURN_IF_ERROR(AllocateScratch(ctx, scratch_bytes, &scratch_t));
    gpu::QsgdDecodeResult r;
    TF_RETURN_IF_ERROR(CudaStatus(gpu::QsgdDecode(payload, size, static_cast<int64_t>(l.k),
                                                  l.s, l.bucket, out,
                                                  scratch_t.flat<uint8_t>().data(),
                                                  scratch_bytes, stream, &r),
                                  "QsgdDecode"));
    // The CPU kernel's order: scales, padding, codes.
    if (r.first_bad_scale < static_cast<int64_t>(l.num_buckets)) {
      return QsgdBadScale(static_cast<uint64_t>(r.first_bad_scale), r.bad_scale);
    }
    if (l.code_bytes != 0 && !QsgdPaddingOk(l, r.last_code_byte)) return QsgdBadPadding();
    *first_bad_code = r.first_bad_code;
    return absl::OkStatus();
  }
};

// ------------------------------------------------------------- polyfit --

template <>
struct PolyfitDecode<GpuDevice> {
  absl::Status operator()(OpKernelContext* ctx, const PolyfitView& v, const int64_t* start,
                          const int64_t* coff, float* out) const {
    void* stream = nullptr;
    TF_RETURN_IF_ERROR(StreamOf(ctx, &stream));
    const int64_t num_coefs = coff[v.num_segs];
    const size_t table_bytes = gpu::PolyfitTableBytes(v.num_segs, num_coefs);
    Tensor tables_t;
    TF_RETURN_IF_ERROR(AllocateScratch(ctx, table_bytes, &tables_t));
    void* d_tables = tables_t.flat<uint8_t>().data();
    TF_RETURN_IF_ERROR(CudaStatus(gpu::PolyfitUploadTables(start, coff, v.coefs, v.num_segs,
                                                           num_coefs, d_tables, table_bytes,
                                                           stream),
                                  "PolyfitDecode"));
    return CudaStatus(gpu::PolyfitDecode(d_tables, v.num_segs, v.degree,
                                         static_cast<int64_t>(v.k), out, stream),
                      "PolyfitDecode");
  }
};

template <>
struct PolyfitGreedy<GpuDevice> {
  absl::Status operator()(OpKernelContext* ctx, const float* y, int64_t k, int64_t p_count,
                          int64_t segs, int degree, int64_t* lens, int64_t* count) const {
    void* stream = nullptr;
    TF_RETURN_IF_ERROR(StreamOf(ctx, &stream));
    Tensor greedy_t;
    const size_t greedy_bytes = gpu::PolyfitGreedyScratchBytes(segs);
    TF_RETURN_IF_ERROR(AllocateScratch(ctx, greedy_bytes, &greedy_t));
    return CudaStatus(gpu::PolyfitGreedy(y, k, p_count, segs, degree,
                                         greedy_t.flat<uint8_t>().data(), greedy_bytes, stream,
                                         lens, count),
                      "PolyfitEncode");
  }
};

template <>
struct PolyfitFit<GpuDevice> {
  absl::Status operator()(OpKernelContext* ctx, const float* y, int64_t k, int degree,
                          uint8_t seg_kind, const polyfit::FitBlock* blocks, int64_t num_blocks,
                          const polyfit::SegPlan* plan, int64_t num_segs, uint8_t* payload,
                          int64_t size, int64_t* bad_segment, int* code) const {
    void* stream = nullptr;
    TF_RETURN_IF_ERROR(StreamOf(ctx, &stream));
    Tensor fit_t;
    const size_t fit_bytes = gpu::PolyfitFitScratchBytes(num_segs, num_blocks);
    TF_RETURN_IF_ERROR(AllocateScratch(ctx, fit_bytes, &fit_t));
    gpu::PolyfitFitResult r{num_segs, polyfit::kSegOk};
    TF_RETURN_IF_ERROR(CudaStatus(gpu::PolyfitFit(y, k, degree, seg_kind, blocks, num_blocks,
                                                  plan, num_segs, payload, size,
                                                  fit_t.flat<uint8_t>().data(), fit_bytes,
                                                  stream, &r),
                                  "PolyfitEncode"));
    *bad_segment = r.bad_segment;
    *code = r.code;
    return absl::OkStatus();
  }
};

// ---------------------------------------------------------------- dexp --

template <>
struct DexpDecode<GpuDevice> {
  absl::Status operator()(OpKernelContext* ctx, const dexp::Coefs c[2], int64_t pos, int64_t k,
                          float* out) const {
    void* stream = nullptr;
    TF_RETURN_IF_ERROR(StreamOf(ctx, &stream));
    return CudaStatus(gpu::DexpDecode(c[0], c[1], pos, k, out, stream), "DexpDecode");
  }
};

template <>
struct DexpFit<GpuDevice> {
  absl::Status operator()(OpKernelContext* ctx, const float* y, int64_t k, int64_t p_count,
                          uint8_t* payload) const {
    void* stream = nullptr;
    TF_RETURN_IF_ERROR(StreamOf(ctx, &stream));
    Tensor fit_t;
    const size_t fit_bytes = gpu::DexpScratchBytes(k);
    TF_RETURN_IF_ERROR(AllocateScratch(ctx, fit_bytes, &fit_t));
    gpu::DexpFitResult r{-1, 0.0};
    TF_RETURN_IF_ERROR(CudaStatus(gpu::DexpFit(y, k, p_count, payload,
                                               fit_t.flat<uint8_t>().data(), fit_bytes, stream,
                                               &r),
                                  "DexpEncode"));
    if (r.bad_part >= 0) return DexpMeanTooLarge(r.mean);
    return absl::OkStatus();
  }
};

// ------------------------------------------------ polyfit / dexp encode --

// The NaN/Inf check is part of the sort (one pass, one synchronization): a
// vector of more values than CheckSortable allows is reported as such even
// if it holds a NaN, where the CPU names the NaN.
template <typename Tidx>
struct SortDescending<GpuDevice, Tidx> {
  absl::Status CheckFinite(OpKernelContext* /*ctx*/, const float* /*v*/, int64_t /*k*/,
                           const char* /*codec*/) const {
    return absl::OkStatus();
  }

  absl::Status operator()(OpKernelContext* ctx, const float* v, int64_t k, Tidx* perm, float* y,
                          const char* codec, int64_t* p_count) const {
    void* stream = nullptr;
    TF_RETURN_IF_ERROR(StreamOf(ctx, &stream));
    Tensor sort_t;
    const size_t sort_bytes = gpu::SortScratchBytes(k);
    TF_RETURN_IF_ERROR(AllocateScratch(ctx, sort_bytes, &sort_t));
    gpu::SortResult r{k, 0.0f, 0};
    TF_RETURN_IF_ERROR(CudaStatus(gpu::SortDescending(v, k, std::is_same<Tidx, int64_t>::value,
                                                      perm, y, sort_t.flat<uint8_t>().data(),
                                                      sort_bytes, stream, &r),
                                  codec));
    if (r.first_bad < k) return NonFiniteValue(codec, r.first_bad, r.bad_value);
    *p_count = r.p_count;
    return absl::OkStatus();
  }
};

}  // namespace functor

namespace {

#define DR_REGISTER_GPU(name, ...) \
  REGISTER_KERNEL_BUILDER(         \
      Name("DeepReduce>" name).Device(::tensorflow::DEVICE_GPU), __VA_ARGS__)

DR_REGISTER_GPU("QsgdDecode", QsgdDecodeOp<GpuDevice>);
DR_REGISTER_GPU("PolyfitDecode", PolyfitDecodeOp<GpuDevice>);
DR_REGISTER_GPU("DexpDecode", DexpDecodeOp<GpuDevice>);
#undef DR_REGISTER_GPU
#define DR_REGISTER_SORTING_GPU(T)                                                   \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>PolyfitEncode")                          \
                              .Device(::tensorflow::DEVICE_GPU)                     \
                              .TypeConstraint<T>("out_idx"),                        \
                          PolyfitEncodeOp<GpuDevice, T>);                           \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>DexpEncode")                             \
                              .Device(::tensorflow::DEVICE_GPU)                     \
                              .TypeConstraint<T>("out_idx"),                        \
                          DexpEncodeOp<GpuDevice, T>);
DR_REGISTER_SORTING_GPU(int32_t);
DR_REGISTER_SORTING_GPU(int64_t);
#undef DR_REGISTER_SORTING_GPU
REGISTER_KERNEL_BUILDER(Name("DeepReduce>QsgdEncode")
                            .Device(::tensorflow::DEVICE_GPU)
                            .HostMemory("seed"),
                        QsgdEncodeOp<GpuDevice>);

// Registers the generic GPU kernels of a codec of the table with gpu=True
// unless it has its own (Codec::kOwnOps), the way REGISTER_KERNEL_BUILDER
// does; a seeded encoder reads its seed on the host.
template <typename Codec>
bool RegisterGenericGpuKernels(const char* camel) {
  if constexpr (Codec::kOwnOps) {
    return false;
  } else {
    const std::string prefix = std::string("DeepReduce>") + camel;
    ::tensorflow::register_kernel::Name encode((prefix + "Encode").c_str());
    encode.Device(::tensorflow::DEVICE_GPU);
    if (OpArgsOf<Codec>::kSeeded) encode.HostMemory("seed");
    ::tensorflow::kernel_factory::OpKernelRegistrar(
        encode.Build(), "deepreduce::value::EncodeOp",
        [](tensorflow::OpKernelConstruction* ctx) -> tensorflow::OpKernel* {
          return new EncodeOp<GpuDevice, Codec>(ctx);
        });
    ::tensorflow::kernel_factory::OpKernelRegistrar(
        ::tensorflow::register_kernel::Name((prefix + "Decode").c_str())
            .Device(::tensorflow::DEVICE_GPU)
            .Build(),
        "deepreduce::value::DecodeOp",
        [](tensorflow::OpKernelConstruction* ctx) -> tensorflow::OpKernel* {
          return new DecodeOp<GpuDevice, Codec>(ctx);
        });
    return true;
  }
}

#define DR_REGISTER_VALUE_GPU(name, Camel, id, kernels)  \
  [[maybe_unused]] const bool value_gpu_kernels_##name = \
      RegisterGenericGpuKernels<name::Codec>(#Camel);
DR_VALUE_GPU_CODECS(DR_REGISTER_VALUE_GPU)
#undef DR_REGISTER_VALUE_GPU

}  // namespace
}  // namespace value
}  // namespace deepreduce
