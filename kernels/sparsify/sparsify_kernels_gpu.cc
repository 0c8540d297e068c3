// GPU half of the sparsifiers (CUDA build only: setup.py compiles *_gpu.cc
// files when DEEPREDUCE_TF_CUDA=1): the GPU functors of the OpKernels, which
// are the CPU's (sparsify_kernels.h: same checks, shapes and messages), and
// their GPU registrations. The functors run the CUDA kernels of
// sparsify_kernels.cu through the launchers of sparsify_gpu.h on the op's
// stream. k, seed, threshold and the segmented ops' offsets live in host
// memory. TopK, RandomK and the segmented ops do not synchronize (the output
// size is known on the host); ThresholdSelect synchronizes once, to learn its
// output size.
#include <cstdint>

#include "kernels/common/devices.h"
#include "kernels/common/gpu_op_util.h"
#include "kernels/sparsify/sparsify.h"
#include "kernels/sparsify/sparsify_args.h"
#include "kernels/sparsify/sparsify_gpu.h"
#include "kernels/sparsify/sparsify_kernels.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace deepreduce {
namespace sparsify {
namespace {

using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using gpu_util::StreamOf;

absl::Status CudaStatus(const gpu::GpuStatus& s, const char* op) {
  return gpu_util::CudaStatus(s, op);
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

// The radix-select scratch of n elements.
absl::Status AllocateScratch(OpKernelContext* ctx, int64_t n, Tensor* t, size_t* bytes) {
  gpu::GpuStatus st;
  *bytes = gpu::ScratchBytes(n, &st);
  if (!st.ok()) return CudaStatus(st, "sparsify");
  return gpu_util::AllocateScratch(ctx, *bytes, t);
}

}  // namespace

namespace functor {

template <typename T, typename Tidx, bool kRandom>
struct SelectK<GpuDevice, T, Tidx, kRandom> {
  absl::Status operator()(OpKernelContext* ctx, const T* x, int64_t n, int64_t k,
                          uint64_t seed, Tidx* idx, T* val) const {
    using U = typename FloatOf<T>::F::U;
    void* stream = nullptr;
    TF_RETURN_IF_ERROR(StreamOf(ctx, &stream));
    Tensor scratch_t;
    size_t bytes = 0;
    TF_RETURN_IF_ERROR(AllocateScratch(ctx, n, &scratch_t, &bytes));
    const U* xb = reinterpret_cast<const U*>(x);
    U* vb = reinterpret_cast<U*>(val);
    void* scratch = scratch_t.flat<uint8_t>().data();
    if constexpr (kRandom) {
      return CudaStatus(gpu::RandomK<U, Tidx>(seed, xb, n, k, idx, vb, scratch, bytes, stream),
                        "RandomK");
    } else {
      return CudaStatus(
          gpu::TopK<U, Tidx>(KindOf<T>(), xb, n, k, idx, vb, scratch, bytes, stream), "TopK");
    }
  }
};

template <typename T, typename Tidx>
struct ThresholdSelect<GpuDevice, T, Tidx> {
  using U = typename FloatOf<T>::F::U;

  absl::Status Count(OpKernelContext* ctx, const T* x, int64_t n, U t_key, int64_t* total) {
    TF_RETURN_IF_ERROR(StreamOf(ctx, &stream_));
    TF_RETURN_IF_ERROR(AllocateScratch(ctx, n, &scratch_t_, &bytes_));
    return CudaStatus(gpu::ThresholdCount<U>(KindOf<T>(), reinterpret_cast<const U*>(x), n,
                                             t_key, scratch_t_.flat<uint8_t>().data(), bytes_,
                                             stream_, total),
                      "ThresholdSelect");
  }

  absl::Status Write(OpKernelContext* /*ctx*/, const T* x, int64_t n, Tidx* idx,
                     T* val) const {
    return CudaStatus(gpu::ThresholdWrite<U, Tidx>(reinterpret_cast<const U*>(x), n,
                                                   scratch_t_.flat<uint8_t>().data(), bytes_,
                                                   idx, reinterpret_cast<U*>(val), stream_),
                      "ThresholdSelect");
  }

  void* stream_ = nullptr;
  Tensor scratch_t_;
  size_t bytes_ = 0;
};

// The launchers read offsets and k from the host tensors and copy an O(S)
// table to the device (staged during the call); nothing comes back to the host.
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
    TF_RETURN_IF_ERROR(gpu_util::AllocateScratch(ctx, bytes, &scratch_t));
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
                          SelectKOp<GpuDevice, T, Tidx, false>);              \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>RandomK")                         \
                              .Device(::tensorflow::DEVICE_GPU)              \
                              .TypeConstraint<T>("T")                        \
                              .TypeConstraint<Tidx>("out_idx")               \
                              .HostMemory("k")                               \
                              .HostMemory("seed"),                           \
                          SelectKOp<GpuDevice, T, Tidx, true>);               \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>ThresholdSelect")                 \
                              .Device(::tensorflow::DEVICE_GPU)              \
                              .TypeConstraint<T>("T")                        \
                              .TypeConstraint<Tidx>("out_idx")               \
                              .HostMemory("threshold"),                      \
                          ThresholdSelectOp<GpuDevice, T, Tidx>);

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
