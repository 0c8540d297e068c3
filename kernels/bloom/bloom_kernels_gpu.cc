// GPU half of the Bloom-filter index codec (CUDA build only: setup.py
// compiles *_gpu.cc files when DEEPREDUCE_TF_CUDA=1): the GPU functors of
// BloomFilterInsert and BloomFilterQuery, whose OpKernels (checks, sizing,
// outputs, messages) are the CPU's (bloom_kernels.h), and their GPU
// registrations. The functors run the CUDA kernels of bloom_kernels.cu
// through the launchers of bloom_gpu.h on the op's stream. Checks that need
// device data (index range, repeats, the filter's padding bits) are made on
// the device and reported after a device-to-host copy of the result, so these
// ops synchronize the stream once (insert) or once per pass 1 (query).
//
// BloomFilterSelect has no GPU kernel (see bloom_gpu.h); TF runs it on the CPU.
#include <cstdint>

#include "kernels/bloom/bloom.h"
#include "kernels/bloom/bloom_gpu.h"
#include "kernels/bloom/bloom_kernels.h"
#include "kernels/common/devices.h"
#include "kernels/common/gpu_op_util.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace deepreduce {
namespace bloom {
namespace {

using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using gpu_util::AllocateScratch;
using gpu_util::StreamOf;

absl::Status CudaStatus(const gpu::GpuStatus& s, const char* op) {
  return gpu_util::CudaStatus(s, op);
}

inline gpu::GpuStatus LaunchInsert(const BloomLayout& layout, const int32_t* idx,
                                   int64_t k, int64_t n, uint32_t* words,
                                   void* scratch, size_t bytes, void* stream,
                                   gpu::InsertResult* r) {
  return gpu::InsertInt32(layout, idx, k, n, words, scratch, bytes, stream, r);
}
inline gpu::GpuStatus LaunchInsert(const BloomLayout& layout, const int64_t* idx,
                                   int64_t k, int64_t n, uint32_t* words,
                                   void* scratch, size_t bytes, void* stream,
                                   gpu::InsertResult* r) {
  return gpu::InsertInt64(layout, idx, k, n, words, scratch, bytes, stream, r);
}
inline gpu::GpuStatus LaunchQueryWrite(int64_t n, const void* scratch, size_t bytes,
                                       int32_t* out, void* stream) {
  return gpu::QueryWriteInt32(n, scratch, bytes, out, stream);
}
inline gpu::GpuStatus LaunchQueryWrite(int64_t n, const void* scratch, size_t bytes,
                                       int64_t* out, void* stream) {
  return gpu::QueryWriteInt64(n, scratch, bytes, out, stream);
}

}  // namespace

namespace functor {

template <typename Tidx>
struct BloomInsert<GpuDevice, Tidx> {
  absl::Status operator()(OpKernelContext* ctx, const BloomLayout& layout, const Tidx* idx,
                          int64_t k, int64_t n, uint32_t* words, InsertCheck* check) const {
    void* stream = nullptr;
    TF_RETURN_IF_ERROR(StreamOf(ctx, &stream));
    Tensor scratch_t;
    const size_t scratch_bytes = k > 0 ? gpu::InsertScratchBytes(n) : 0;
    TF_RETURN_IF_ERROR(AllocateScratch(ctx, scratch_bytes, &scratch_t));
    gpu::InsertResult r{k, 0};
    TF_RETURN_IF_ERROR(CudaStatus(LaunchInsert(layout, idx, k, n, words,
                                               scratch_t.flat<uint8_t>().data(), scratch_bytes,
                                               stream, &r),
                                  "BloomFilterInsert"));
    check->first_bad = r.first_bad;
    check->bad_value = r.bad_value;
    return absl::OkStatus();
  }
};

template <typename Tidx>
struct BloomQuery<GpuDevice, Tidx> {
  absl::Status LastWord(OpKernelContext* ctx, const uint8_t* filter, const BloomLayout& layout,
                        uint32_t* last_word) const {
    void* stream = nullptr;
    TF_RETURN_IF_ERROR(StreamOf(ctx, &stream));
    return CudaStatus(gpu::CopyToHost(last_word, filter + NumBytes(layout.num_bits) - 4,
                                      sizeof(*last_word), stream),
                      "BloomFilterQuery");
  }

  absl::Status Count(OpKernelContext* ctx, const BloomLayout& layout, const uint8_t* filter,
                     int64_t n, int64_t* total, uint32_t* last_word) {
    TF_RETURN_IF_ERROR(StreamOf(ctx, &stream_));
    gpu::GpuStatus st;
    scratch_bytes_ = gpu::QueryScratchBytes(n, &st);
    TF_RETURN_IF_ERROR(CudaStatus(st, "BloomFilterQuery"));
    TF_RETURN_IF_ERROR(AllocateScratch(ctx, scratch_bytes_, &scratch_t_));
    return CudaStatus(gpu::QueryCount(layout, filter, n, scratch_t_.flat<uint8_t>().data(),
                                      scratch_bytes_, stream_, total, last_word),
                      "BloomFilterQuery");
  }

  absl::Status Write(OpKernelContext* /*ctx*/, int64_t n, Tidx* out) const {
    return CudaStatus(LaunchQueryWrite(n, scratch_t_.flat<uint8_t>().data(), scratch_bytes_,
                                       out, stream_),
                      "BloomFilterQuery");
  }

  void* stream_ = nullptr;
  Tensor scratch_t_;
  size_t scratch_bytes_ = 0;
};

}  // namespace functor

namespace {

#define REGISTER_BLOOM_GPU(T)                                              \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>BloomFilterInsert")            \
                              .Device(::tensorflow::DEVICE_GPU)           \
                              .HostMemory("universe_size")                \
                              .HostMemory("filter_bits")                  \
                              .HostMemory("filter_hashes")                \
                              .TypeConstraint<T>("Tidx"),                 \
                          BloomFilterInsertOp<GpuDevice, T>);              \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>BloomFilterQuery")             \
                              .Device(::tensorflow::DEVICE_GPU)           \
                              .HostMemory("universe_size")                \
                              .HostMemory("filter_bits")                  \
                              .HostMemory("filter_hashes")                \
                              .TypeConstraint<T>("out_idx"),              \
                          BloomFilterQueryOp<GpuDevice, T>);

REGISTER_BLOOM_GPU(int32_t);
REGISTER_BLOOM_GPU(int64_t);
#undef REGISTER_BLOOM_GPU

}  // namespace
}  // namespace bloom
}  // namespace deepreduce
