// GPU OpKernels of the sparsifiers (CUDA build only: setup.py compiles
// *_gpu.cc files when DEEPREDUCE_TF_CUDA=1). They validate exactly as the CPU
// kernels do (sparsify_args.h, same messages) and run the CUDA kernels of
// sparsify_kernels.cu through the launchers of sparsify_gpu.h on the op's
// stream. k, seed, threshold and the segmented ops' offsets live in host
// memory. TopK, RandomK and the segmented ops do not synchronize (the output
// size is known on the host); ThresholdSelect synchronizes once, to learn its
// output size. The segmented ops share their OpKernel with the CPU
// (SegmentedSelectOp, sparsify_args.h); this file supplies the GPU functor.
#include <cstdint>
#include <string>

#include "kernels/sparsify/sparsify.h"
#include "kernels/sparsify/sparsify_args.h"
#include "kernels/sparsify/sparsify_gpu.h"
#include "tensorflow/core/framework/device_base.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "xla/stream_executor/stream.h"

namespace deepreduce {
namespace sparsify {
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
  return absl::InternalError(std::string(op) + ": CUDA error while " + s.step +
                             ": " + gpu::ErrorString(s.cuda_error));
}

template <typename T>
gpu::FloatKind KindOf();
template <>
gpu::FloatKind KindOf<Eigen::half>() { return gpu::FloatKind::kHalf; }
template <>
gpu::FloatKind KindOf<Eigen::bfloat16>() { return gpu::FloatKind::kBFloat16; }
template <>
gpu::FloatKind KindOf<float>() { return gpu::FloatKind::kFloat32; }
template <>
gpu::FloatKind KindOf<double>() { return gpu::FloatKind::kFloat64; }

absl::Status AllocateScratch(OpKernelContext* ctx, int64_t n, Tensor* t, size_t* bytes) {
  gpu::GpuStatus st;
  *bytes = gpu::ScratchBytes(n, &st);
  if (!st.ok()) return CudaStatus(st, "sparsify");
  return ctx->allocate_temp(tensorflow::DT_UINT8,
                            TensorShape({static_cast<int64_t>(*bytes > 0 ? *bytes : 1)}), t);
}

// TopK (random == false) and RandomK (random == true).
template <typename T, typename Tidx, bool kRandom>
class SelectKGpuOp : public OpKernel {
 public:
  explicit SelectKGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    using U = typename FloatOf<T>::F::U;
    const Tensor& x_t = ctx->input(0);
    int64_t n, k, seed = 0;
    OP_REQUIRES_OK(ctx, CheckSize<Tidx>(x_t, &n));
    OP_REQUIRES_OK(ctx, ScalarInt64(ctx->input(1), "k", &k));
    if (kRandom) OP_REQUIRES_OK(ctx, ScalarInt64(ctx->input(2), "seed", &seed));
    OP_REQUIRES_OK(ctx, CheckK(k, n));
    Tensor *idx_t = nullptr, *val_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({k}), &idx_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({k}), &val_t));
    if (k == 0) return;
    void* stream = nullptr;
    OP_REQUIRES_OK(ctx, StreamOf(ctx, &stream));
    Tensor scratch_t;
    size_t bytes = 0;
    OP_REQUIRES_OK(ctx, AllocateScratch(ctx, n, &scratch_t, &bytes));
    const U* x = reinterpret_cast<const U*>(x_t.flat<T>().data());
    U* val = reinterpret_cast<U*>(val_t->flat<T>().data());
    Tidx* idx = idx_t->flat<Tidx>().data();
    void* scratch = scratch_t.flat<uint8_t>().data();
    const gpu::GpuStatus st =
        kRandom ? gpu::RandomK<U, Tidx>(static_cast<uint64_t>(seed), x, n, k, idx, val,
                                        scratch, bytes, stream)
                : gpu::TopK<U, Tidx>(KindOf<T>(), x, n, k, idx, val, scratch, bytes,
                                     stream);
    OP_REQUIRES_OK(ctx, CudaStatus(st, kRandom ? "RandomK" : "TopK"));
  }
};

template <typename T, typename Tidx>
class ThresholdSelectGpuOp : public OpKernel {
 public:
  explicit ThresholdSelectGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    using U = typename FloatOf<T>::F::U;
    const Tensor& x_t = ctx->input(0);
    int64_t n;
    OP_REQUIRES_OK(ctx, CheckSize<Tidx>(x_t, &n));
    U t_key;
    OP_REQUIRES_OK(ctx, ThresholdKey<T>(ctx->input(1), &t_key));
    void* stream = nullptr;
    OP_REQUIRES_OK(ctx, StreamOf(ctx, &stream));
    Tensor scratch_t;
    size_t bytes = 0;
    OP_REQUIRES_OK(ctx, AllocateScratch(ctx, n, &scratch_t, &bytes));
    const U* x = reinterpret_cast<const U*>(x_t.flat<T>().data());
    void* scratch = scratch_t.flat<uint8_t>().data();
    int64_t count = 0;
    OP_REQUIRES_OK(ctx, CudaStatus(gpu::ThresholdCount<U>(KindOf<T>(), x, n, t_key,
                                                           scratch, bytes, stream, &count),
                                   "ThresholdSelect"));
    Tensor *idx_t = nullptr, *val_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({count}), &idx_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({count}), &val_t));
    if (count == 0) return;
    OP_REQUIRES_OK(ctx, CudaStatus(gpu::ThresholdWrite<U, Tidx>(
                                       x, n, scratch, bytes, idx_t->flat<Tidx>().data(),
                                       reinterpret_cast<U*>(val_t->flat<T>().data()),
                                       stream),
                                   "ThresholdSelect"));
  }
};

}  // namespace

// The GPU half of the segmented ops (SegmentedSelectOp, sparsify_args.h): the
// launchers read offsets and k from the host tensors and copy an O(S) table
// to the device (staged during the call); nothing comes back to the host.
namespace functor {
template <typename T, bool kRandom>
struct SegmentedSelect<GpuDevice, T, kRandom> {
  absl::Status operator()(OpKernelContext* ctx, const Segments& seg, const T* x,
                          uint64_t seed, int64_t* idx, T* val) const {
    using U = typename FloatOf<T>::F::U;
    void* stream = nullptr;
    TF_RETURN_IF_ERROR(StreamOf(ctx, &stream));
    gpu::GpuStatus st;
    const size_t bytes =
        gpu::SegmentedScratchBytes(seg.offsets, seg.k, seg.num_segments, &st);
    TF_RETURN_IF_ERROR(CudaStatus(st, "segmented select"));
    Tensor scratch_t;
    TF_RETURN_IF_ERROR(ctx->allocate_temp(
        tensorflow::DT_UINT8, TensorShape({static_cast<int64_t>(bytes > 0 ? bytes : 1)}),
        &scratch_t));
    void* scratch = scratch_t.flat<uint8_t>().data();
    const U* xb = reinterpret_cast<const U*>(x);
    U* vb = reinterpret_cast<U*>(val);
    if constexpr (kRandom) {
      return CudaStatus(gpu::SegmentedRandomK<U>(seed, xb, seg.offsets, seg.k,
                                                 seg.num_segments, idx, vb, scratch, bytes,
                                                 stream),
                        "SegmentedRandomK");
    } else {
      return CudaStatus(gpu::SegmentedTopK<U>(KindOf<T>(), xb, seg.offsets, seg.k,
                                              seg.num_segments, idx, vb, scratch, bytes,
                                              stream),
                        "SegmentedTopK");
    }
  }
};
}  // namespace functor

namespace {

#define REGISTER_SEGMENTED_GPU(T)                                            \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>SegmentedTopK")                  \
                              .Device(::tensorflow::DEVICE_GPU)             \
                              .TypeConstraint<T>("T")                       \
                              .HostMemory("offsets")                        \
                              .HostMemory("k"),                             \
                          SegmentedSelectOp<GpuDevice, T, false>);           \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>SegmentedRandomK")               \
                              .Device(::tensorflow::DEVICE_GPU)             \
                              .TypeConstraint<T>("T")                       \
                              .HostMemory("offsets")                        \
                              .HostMemory("k")                              \
                              .HostMemory("seed"),                          \
                          SegmentedSelectOp<GpuDevice, T, true>);

REGISTER_SEGMENTED_GPU(Eigen::half);
REGISTER_SEGMENTED_GPU(Eigen::bfloat16);
REGISTER_SEGMENTED_GPU(float);
REGISTER_SEGMENTED_GPU(double);
#undef REGISTER_SEGMENTED_GPU

#define REGISTER_SPARSIFY_GPU(T, Tidx)                                        \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>TopK")                            \
                              .Device(::tensorflow::DEVICE_GPU)              \
                              .TypeConstraint<T>("T")                        \
                              .TypeConstraint<Tidx>("out_idx")               \
                              .HostMemory("k"),                              \
                          SelectKGpuOp<T, Tidx, false>);                      \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>RandomK")                         \
                              .Device(::tensorflow::DEVICE_GPU)              \
                              .TypeConstraint<T>("T")                        \
                              .TypeConstraint<Tidx>("out_idx")               \
                              .HostMemory("k")                               \
                              .HostMemory("seed"),                           \
                          SelectKGpuOp<T, Tidx, true>);                       \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>ThresholdSelect")                 \
                              .Device(::tensorflow::DEVICE_GPU)              \
                              .TypeConstraint<T>("T")                        \
                              .TypeConstraint<Tidx>("out_idx")               \
                              .HostMemory("threshold"),                      \
                          ThresholdSelectGpuOp<T, Tidx>);

#define REGISTER_SPARSIFY_GPU_ALL_IDX(T) \
  REGISTER_SPARSIFY_GPU(T, int32_t)      \
  REGISTER_SPARSIFY_GPU(T, int64_t)

REGISTER_SPARSIFY_GPU_ALL_IDX(Eigen::half);
REGISTER_SPARSIFY_GPU_ALL_IDX(Eigen::bfloat16);
REGISTER_SPARSIFY_GPU_ALL_IDX(float);
REGISTER_SPARSIFY_GPU_ALL_IDX(double);
#undef REGISTER_SPARSIFY_GPU_ALL_IDX
#undef REGISTER_SPARSIFY_GPU

}  // namespace
}  // namespace sparsify
}  // namespace deepreduce
