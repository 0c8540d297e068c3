// GPU OpKernels of the value codecs (CUDA build only: setup.py compiles
// *_gpu.cc files when DEEPREDUCE_TF_CUDA=1): fp16/bf16, qsgd, polyfit and
// dexp encode and decode. They validate exactly as the CPU kernels do
// (value_args.h, same messages): header and fixed fields on the host from a
// copy of the payload's prefix (all of it for polyfit and dexp, whose
// payloads are small), data checks (NaN/Inf values, qsgd scales, codes and
// padding) on the device, reported after a small device-to-host copy. Work
// runs on the op's stream through the launchers of value_gpu.h.
//
// Synchronization: every decoder copies its header to the host (one stream
// sync); qsgd encode/decode also sync once for their error records; polyfit
// decode once more to upload its segment tables. polyfit/dexp encode sync
// after the sort (NaN/Inf record, sign split), polyfit's greedy segmentation
// twice more (count, lengths: the payload size depends on them), and the fit
// once (error record). fp16/bf16 encode never syncs.
//
// Not here: deflate (CPU only by design): TF places it on the CPU.
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/value/dexp.h"
#include "kernels/value/polyfit.h"
#include "kernels/value/qsgd.h"
#include "kernels/value/value_args.h"
#include "kernels/value/value_format.h"
#include "kernels/value/value_gpu.h"
#include "tensorflow/core/framework/allocator.h"
#include "tensorflow/core/framework/device_base.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "xla/stream_executor/stream.h"

namespace deepreduce {
namespace value {
namespace {

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
  if (*stream == nullptr) {
    return absl::InternalError("the GPU stream has no CUDA handle");
  }
  return absl::OkStatus();
}

absl::Status CudaStatus(const gpu::GpuStatus& s, const char* op) {
  if (s.ok()) return absl::OkStatus();
  return absl::InternalError(std::string(op) + ": CUDA error while " + s.step + ": " +
                             gpu::ErrorString(s.cuda_error));
}

// Device scratch as a uint8 tensor (at least one byte, so the pointer is valid).
absl::Status AllocateScratch(OpKernelContext* ctx, size_t bytes, Tensor* t) {
  return ctx->allocate_temp(tensorflow::DT_UINT8,
                            TensorShape({static_cast<int64_t>(bytes > 0 ? bytes : 1)}), t);
}

// Pinned host memory (DMA-able by the GPU) as a uint8 tensor.
absl::Status AllocateHost(OpKernelContext* ctx, int64_t bytes, Tensor* t) {
  tensorflow::AllocatorAttributes attr;
  attr.set_on_host(true);
  attr.set_gpu_compatible(true);
  return ctx->allocate_temp(tensorflow::DT_UINT8, TensorShape({bytes > 0 ? bytes : 1}), t,
                            attr);
}

// Copies the first min(size, cap) bytes of the device payload to `host`.
absl::Status CopyPrefix(const Tensor& payload, int64_t cap, uint8_t* host, void* stream,
                        const char* op) {
  const int64_t size = payload.NumElements();
  const int64_t n = size < cap ? size : cap;
  if (n == 0) return absl::OkStatus();
  return CudaStatus(gpu::CopyToHost(host, payload.flat<uint8_t>().data(),
                                    static_cast<size_t>(n), stream),
                    op);
}

// ----------------------------------------------------------- fp16/bf16 --

template <uint8_t kCodec>
class HalfEncodeGpuOp : public OpKernel {
 public:
  explicit HalfEncodeGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& values_t = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckValuesShape(values_t, CodecName(kCodec)));
    const int64_t k = values_t.NumElements();
    void* stream = nullptr;
    OP_REQUIRES_OK(ctx, StreamOf(ctx, &stream));
    Tensor* payload_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({kHeaderBytes + 2 * k}),
                                             &payload_t));
    OP_REQUIRES_OK(ctx, CudaStatus(gpu::HalfEncode(kCodec, values_t.flat<float>().data(), k,
                                                   payload_t->flat<uint8_t>().data(), stream),
                                   kCodec == kCodecFp16 ? "Fp16Encode" : "Bf16Encode"));
  }
};

template <uint8_t kCodec>
class HalfDecodeGpuOp : public OpKernel {
 public:
  explicit HalfDecodeGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const char* op = kCodec == kCodecFp16 ? "Fp16Decode" : "Bf16Decode";
    const Tensor& payload = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckPayloadShape(payload, kCodec));
    void* stream = nullptr;
    OP_REQUIRES_OK(ctx, StreamOf(ctx, &stream));
    uint8_t header[kHeaderBytes];
    OP_REQUIRES_OK(ctx, CopyPrefix(payload, kHeaderBytes, header, stream, op));
    const int64_t size = payload.NumElements();
    uint64_t k;
    OP_REQUIRES_OK(ctx, ParseHeaderBytes(header, size, kCodec, &k));
    OP_REQUIRES_OK(ctx, CheckHalfSize(kCodec, size, k));
    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({static_cast<int64_t>(k)}), &out_t));
    OP_REQUIRES_OK(ctx, CudaStatus(gpu::HalfDecode(kCodec, payload.flat<uint8_t>().data(),
                                                   static_cast<int64_t>(k),
                                                   out_t->flat<float>().data(), stream),
                                   op));
  }
};

// ---------------------------------------------------------------- qsgd --

class QsgdEncodeGpuOp : public OpKernel {
 public:
  explicit QsgdEncodeGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    int64_t levels, bucket;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("levels", &levels));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("bucket_size", &bucket));
    OP_REQUIRES(ctx, levels >= 1 && levels <= qsgd::kMaxLevels,
                Invalid("levels must lie in [1, 255] (1..8 bits), got " +
                        std::to_string(levels)));
    OP_REQUIRES(ctx, bucket >= 1 && bucket <= qsgd::kMaxBucket,
                Invalid("bucket_size must lie in [1, 2^30], got " + std::to_string(bucket)));
    levels_ = static_cast<uint32_t>(levels);
    bucket_ = static_cast<uint32_t>(bucket);
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& values_t = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckValuesShape(values_t, "qsgd"));
    // seed is HostMemory. The CPU kernel reports non-finite values before a
    // bad seed, and the values are checked on the device, so a bad seed is
    // reported after the encoder ran (with seed 0).
    const Tensor& seed_t = ctx->input(1);
    const bool seed_ok = tensorflow::TensorShapeUtils::IsScalar(seed_t.shape());
    const uint64_t seed = seed_ok ? static_cast<uint64_t>(seed_t.scalar<int64_t>()()) : 0;
    const int64_t k = values_t.NumElements();
    const QsgdLayout l = MakeQsgdLayout(k, levels_, bucket_);
    void* stream = nullptr;
    OP_REQUIRES_OK(ctx, StreamOf(ctx, &stream));
    Tensor* payload_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({static_cast<int64_t>(l.size)}),
                                             &payload_t));
    Tensor scratch_t;
    const size_t scratch_bytes = gpu::QsgdScratchBytes();
    OP_REQUIRES_OK(ctx, AllocateScratch(ctx, scratch_bytes, &scratch_t));
    gpu::QsgdEncodeResult r;
    // TF's GPU allocator aligns outputs to >= 64 bytes: the scales can be
    // updated as 32-bit words.
    OP_REQUIRES_OK(ctx, CudaStatus(gpu::QsgdEncode(values_t.flat<float>().data(), k, l.s,
                                                   l.bucket, seed,
                                                   payload_t->flat<uint8_t>().data(),
                                                   static_cast<int64_t>(l.size),
                                                   scratch_t.flat<uint8_t>().data(),
                                                   scratch_bytes, stream, &r),
                                   "QsgdEncode"));
    OP_REQUIRES(ctx, r.first_bad >= k, NonFiniteValue("qsgd", r.first_bad, r.bad_value));
    OP_REQUIRES(ctx, seed_ok,
                Invalid("seed must be a scalar, got shape " + seed_t.shape().DebugString()));
  }

 private:
  uint32_t levels_, bucket_;
};

class QsgdDecodeGpuOp : public OpKernel {
 public:
  explicit QsgdDecodeGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& payload = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckPayloadShape(payload, kCodecQsgd));
    void* stream = nullptr;
    OP_REQUIRES_OK(ctx, StreamOf(ctx, &stream));
    uint8_t fixed[qsgd::kFixedBytes];
    OP_REQUIRES_OK(ctx, CopyPrefix(payload, qsgd::kFixedBytes, fixed, stream, "QsgdDecode"));
    const int64_t size = payload.NumElements();
    uint64_t k;
    OP_REQUIRES_OK(ctx, ParseHeaderBytes(fixed, size, kCodecQsgd, &k));
    QsgdLayout l;
    OP_REQUIRES_OK(ctx, ParseQsgdFixed(fixed, size, k, &l));
    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({static_cast<int64_t>(k)}), &out_t));
    Tensor scratch_t;
    const size_t scratch_bytes = gpu::QsgdScratchBytes();
    OP_REQUIRES_OK(ctx, AllocateScratch(ctx, scratch_bytes, &scratch_t));
    gpu::QsgdDecodeResult r;
    OP_REQUIRES_OK(ctx, CudaStatus(gpu::QsgdDecode(payload.flat<uint8_t>().data(), size,
                                                   static_cast<int64_t>(k), l.s, l.bucket,
                                                   out_t->flat<float>().data(),
                                                   scratch_t.flat<uint8_t>().data(),
                                                   scratch_bytes, stream, &r),
                                   "QsgdDecode"));
    // The CPU kernel's order: scales, padding, codes.
    OP_REQUIRES(ctx, r.first_bad_scale >= static_cast<int64_t>(l.num_buckets),
                QsgdBadScale(static_cast<uint64_t>(r.first_bad_scale), r.bad_scale));
    OP_REQUIRES(ctx, l.code_bytes == 0 || QsgdPaddingOk(l, r.last_code_byte),
                QsgdBadPadding());
    OP_REQUIRES(ctx, r.first_bad_code >= static_cast<int64_t>(k),
                QsgdBadCode(r.first_bad_code, l.s));
  }
};

// ------------------------------------------------------------- polyfit --

class PolyfitDecodeGpuOp : public OpKernel {
 public:
  explicit PolyfitDecodeGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("max_values", &max_values_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& payload = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckPayloadShape(payload, kCodecPolyfit));
    void* stream = nullptr;
    OP_REQUIRES_OK(ctx, StreamOf(ctx, &stream));
    // The payload holds O(segments) bytes, not O(K): it is parsed and
    // checked on the host in full, exactly as on the CPU.
    const int64_t size = payload.NumElements();
    Tensor host_t;
    OP_REQUIRES_OK(ctx, AllocateHost(ctx, size, &host_t));
    uint8_t* host = host_t.flat<uint8_t>().data();
    OP_REQUIRES_OK(ctx, CopyPrefix(payload, size, host, stream, "PolyfitDecode"));
    PolyfitView v;
    OP_REQUIRES_OK(ctx, ParsePolyfitBytes(host, size, max_values_, &v));
    const int64_t k = static_cast<int64_t>(v.k);
    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({k}), &out_t));
    if (k == 0) return;
    Tensor tables_host_t;
    OP_REQUIRES_OK(ctx, AllocateHost(ctx, 16 * (v.num_segs + 1), &tables_host_t));
    int64_t* start = reinterpret_cast<int64_t*>(tables_host_t.flat<uint8_t>().data());
    int64_t* coff = start + (v.num_segs + 1);
    PolyfitTables(v, start, coff);
    const int64_t num_coefs = coff[v.num_segs];
    const size_t table_bytes = gpu::PolyfitTableBytes(v.num_segs, num_coefs);
    Tensor tables_t;
    OP_REQUIRES_OK(ctx, AllocateScratch(ctx, table_bytes, &tables_t));
    void* d_tables = tables_t.flat<uint8_t>().data();
    OP_REQUIRES_OK(ctx, CudaStatus(gpu::PolyfitUploadTables(start, coff, v.coefs, v.num_segs,
                                                            num_coefs, d_tables, table_bytes,
                                                            stream),
                                   "PolyfitDecode"));
    OP_REQUIRES_OK(ctx, CudaStatus(gpu::PolyfitDecode(d_tables, v.num_segs, v.degree, k,
                                                      out_t->flat<float>().data(), stream),
                                   "PolyfitDecode"));
  }

 private:
  int64_t max_values_;
};

// ---------------------------------------------------------------- dexp --

class DexpDecodeGpuOp : public OpKernel {
 public:
  explicit DexpDecodeGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("max_values", &max_values_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& payload = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckPayloadShape(payload, kCodecDexp));
    void* stream = nullptr;
    OP_REQUIRES_OK(ctx, StreamOf(ctx, &stream));
    uint8_t bytes[dexp::kPayloadBytes];
    OP_REQUIRES_OK(ctx, CopyPrefix(payload, dexp::kPayloadBytes, bytes, stream, "DexpDecode"));
    uint64_t k, pos;
    dexp::Coefs c[2];
    OP_REQUIRES_OK(ctx, ParseDexpBytes(bytes, payload.NumElements(), max_values_, &k, &pos, c));
    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({static_cast<int64_t>(k)}), &out_t));
    OP_REQUIRES_OK(ctx, CudaStatus(gpu::DexpDecode(c[0], c[1], static_cast<int64_t>(pos),
                                                   static_cast<int64_t>(k),
                                                   out_t->flat<float>().data(), stream),
                                   "DexpDecode"));
  }

 private:
  int64_t max_values_;
};

// ------------------------------------------------ polyfit / dexp encode --

// The sort shared by both encoders: perm (output 1) and the sorted values
// (device scratch y_t). Validates like the CPU kernel (shape, K, then
// NaN/Inf: the CPU checks K after the values; a vector of > 2^32 values
// cannot be sorted either way). Returns the sign split in *p_count.
template <typename Tidx>
absl::Status SortOnGpu(OpKernelContext* ctx, const char* codec, void* stream, Tensor* y_t,
                       int64_t* p_count) {
  const Tensor& values_t = ctx->input(0);
  absl::Status s = CheckValuesShape(values_t, codec);
  if (!s.ok()) return s;
  const int64_t k = values_t.NumElements();
  s = CheckSortable<Tidx>(codec, k);
  if (!s.ok()) return s;
  Tensor* perm_t = nullptr;
  s = ctx->allocate_output(1, TensorShape({k}), &perm_t);
  if (s.ok()) s = AllocateScratch(ctx, 4 * static_cast<size_t>(k), y_t);
  Tensor sort_t;
  const size_t sort_bytes = gpu::SortScratchBytes(k);
  if (s.ok()) s = AllocateScratch(ctx, sort_bytes, &sort_t);
  if (!s.ok()) return s;
  gpu::SortResult r;
  s = CudaStatus(gpu::SortDescending(values_t.flat<float>().data(), k,
                                     std::is_same<Tidx, int64_t>::value,
                                     perm_t->flat<Tidx>().data(),
                                     reinterpret_cast<float*>(y_t->flat<uint8_t>().data()),
                                     sort_t.flat<uint8_t>().data(), sort_bytes, stream, &r),
                 codec);
  if (!s.ok()) return s;
  if (r.first_bad < k) return NonFiniteValue(codec, r.first_bad, r.bad_value);
  *p_count = r.p_count;
  return absl::OkStatus();
}

template <typename Tidx>
class PolyfitEncodeGpuOp : public OpKernel {
 public:
  explicit PolyfitEncodeGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ParsePolyfitAttrs(ctx, &attrs_));
  }

  void Compute(OpKernelContext* ctx) override {
    void* stream = nullptr;
    OP_REQUIRES_OK(ctx, StreamOf(ctx, &stream));
    Tensor y_t;
    int64_t p_count = 0;
    OP_REQUIRES_OK(ctx, SortOnGpu<Tidx>(ctx, "polyfit", stream, &y_t, &p_count));
    const int64_t k = ctx->input(0).NumElements();
    const float* y = reinterpret_cast<const float*>(y_t.flat<uint8_t>().data());
    const int degree = attrs_.degree;

    // Segment lengths on the host: the geometric layout is a function of
    // (K, P, segments) computed by the CPU kernel's code; the greedy knots
    // come from the device.
    const int64_t want = polyfit::WantedSegments(k, attrs_.segments);
    Tensor lens_t;
    OP_REQUIRES_OK(ctx, AllocateHost(ctx, 8 * std::max<int64_t>(want, 2), &lens_t));
    int64_t* lens = reinterpret_cast<int64_t*>(lens_t.flat<uint8_t>().data());
    int64_t num_segs = 0;
    if (k > 0 && attrs_.seg_kind == polyfit::kSegGeometric) {
      num_segs = polyfit::GeometricLayout(k, p_count, want, lens);
    } else if (k > 0) {
      Tensor greedy_t;
      const size_t greedy_bytes = gpu::PolyfitGreedyScratchBytes(want);
      OP_REQUIRES_OK(ctx, AllocateScratch(ctx, greedy_bytes, &greedy_t));
      OP_REQUIRES_OK(ctx, CudaStatus(gpu::PolyfitGreedy(y, k, p_count, want, degree,
                                                        greedy_t.flat<uint8_t>().data(),
                                                        greedy_bytes, stream, lens, &num_segs),
                                     "PolyfitEncode"));
    }

    int64_t num_blocks, num_coefs;
    polyfit::PlanSizes(lens, num_segs, degree, &num_blocks, &num_coefs);
    Tensor tables_t;
    const int64_t block_bytes = static_cast<int64_t>(sizeof(polyfit::FitBlock)) * num_blocks;
    OP_REQUIRES_OK(ctx, AllocateHost(ctx, block_bytes + static_cast<int64_t>(
                                              sizeof(polyfit::SegPlan)) * num_segs,
                                     &tables_t));
    auto* blocks = reinterpret_cast<polyfit::FitBlock*>(tables_t.flat<uint8_t>().data());
    auto* plan = reinterpret_cast<polyfit::SegPlan*>(tables_t.flat<uint8_t>().data() +
                                                     block_bytes);
    polyfit::MakePlan(lens, num_segs, degree, blocks, plan);
    const int64_t size = polyfit::PayloadBytes(num_segs, num_coefs);
    Tensor* payload_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({size}), &payload_t));
    Tensor fit_t;
    const size_t fit_bytes = gpu::PolyfitFitScratchBytes(num_segs, num_blocks);
    OP_REQUIRES_OK(ctx, AllocateScratch(ctx, fit_bytes, &fit_t));
    gpu::PolyfitFitResult r;
    OP_REQUIRES_OK(ctx, CudaStatus(gpu::PolyfitFit(y, k, degree, attrs_.seg_kind, blocks,
                                                   num_blocks, plan, num_segs,
                                                   payload_t->flat<uint8_t>().data(), size,
                                                   fit_t.flat<uint8_t>().data(), fit_bytes,
                                                   stream, &r),
                                   "PolyfitEncode"));
    OP_REQUIRES(ctx, r.bad_segment >= num_segs, PolyfitSegmentError(r.bad_segment, r.code));
  }

 private:
  PolyfitAttrs attrs_;
};

template <typename Tidx>
class DexpEncodeGpuOp : public OpKernel {
 public:
  explicit DexpEncodeGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    void* stream = nullptr;
    OP_REQUIRES_OK(ctx, StreamOf(ctx, &stream));
    Tensor y_t;
    int64_t p_count = 0;
    OP_REQUIRES_OK(ctx, SortOnGpu<Tidx>(ctx, "dexp", stream, &y_t, &p_count));
    const int64_t k = ctx->input(0).NumElements();
    Tensor* payload_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({dexp::kPayloadBytes}),
                                             &payload_t));
    Tensor fit_t;
    const size_t fit_bytes = gpu::DexpScratchBytes(k);
    OP_REQUIRES_OK(ctx, AllocateScratch(ctx, fit_bytes, &fit_t));
    gpu::DexpFitResult r;
    OP_REQUIRES_OK(ctx, CudaStatus(gpu::DexpFit(
                                       reinterpret_cast<const float*>(y_t.flat<uint8_t>().data()),
                                       k, p_count, payload_t->flat<uint8_t>().data(),
                                       fit_t.flat<uint8_t>().data(), fit_bytes, stream, &r),
                                   "DexpEncode"));
    OP_REQUIRES(ctx, r.bad_part < 0, DexpMeanTooLarge(r.mean));
  }
};

#define DR_REGISTER_GPU(name, ...) \
  REGISTER_KERNEL_BUILDER(         \
      Name("DeepReduce>" name).Device(::tensorflow::DEVICE_GPU), __VA_ARGS__)

DR_REGISTER_GPU("Fp16Encode", HalfEncodeGpuOp<kCodecFp16>);
DR_REGISTER_GPU("Fp16Decode", HalfDecodeGpuOp<kCodecFp16>);
DR_REGISTER_GPU("Bf16Encode", HalfEncodeGpuOp<kCodecBf16>);
DR_REGISTER_GPU("Bf16Decode", HalfDecodeGpuOp<kCodecBf16>);
DR_REGISTER_GPU("QsgdDecode", QsgdDecodeGpuOp);
DR_REGISTER_GPU("PolyfitDecode", PolyfitDecodeGpuOp);
DR_REGISTER_GPU("DexpDecode", DexpDecodeGpuOp);
#undef DR_REGISTER_GPU
#define DR_REGISTER_SORTING_GPU(T)                                                   \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>PolyfitEncode")                          \
                              .Device(::tensorflow::DEVICE_GPU)                     \
                              .TypeConstraint<T>("out_idx"),                        \
                          PolyfitEncodeGpuOp<T>);                                   \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>DexpEncode")                             \
                              .Device(::tensorflow::DEVICE_GPU)                     \
                              .TypeConstraint<T>("out_idx"),                        \
                          DexpEncodeGpuOp<T>);
DR_REGISTER_SORTING_GPU(int32_t);
DR_REGISTER_SORTING_GPU(int64_t);
#undef DR_REGISTER_SORTING_GPU
REGISTER_KERNEL_BUILDER(Name("DeepReduce>QsgdEncode")
                            .Device(::tensorflow::DEVICE_GPU)
                            .HostMemory("seed"),
                        QsgdEncodeGpuOp);

}  // namespace
}  // namespace value
}  // namespace deepreduce
