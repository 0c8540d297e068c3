// The GPU half of an OpKernel, shared by every family's *_kernels_gpu.cc (the
// CUDA build only): the op's CUDA stream, a launcher's status as an
// absl::Status, device scratch, and pinned host memory for what comes back.
// Host code with TF headers and no CUDA headers (g++ compiles it); the
// launchers it wraps are the plain C++ declarations of
// kernels/<family>/<family>_gpu.h, which return kernels/common/gpu_launch.h's
// GpuStatus.
#ifndef DEEPREDUCE_KERNELS_COMMON_GPU_OP_UTIL_H_
#define DEEPREDUCE_KERNELS_COMMON_GPU_OP_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "kernels/common/devices.h"
#include "kernels/common/gpu_launch.h"
#include "tensorflow/core/framework/device_base.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "xla/stream_executor/stream.h"

namespace deepreduce {
namespace gpu_util {

// The op's cudaStream_t, as the void* the launchers take.
inline absl::Status StreamOf(tensorflow::OpKernelContext* ctx, void** stream) {
  const tensorflow::DeviceContext* dc = ctx->op_device_context();
  if (dc == nullptr || dc->stream() == nullptr) {
    return absl::InternalError("the GPU kernel has no device stream");
  }
  *stream = dc->stream()->platform_specific_handle().stream;
  if (*stream == nullptr) return absl::InternalError("the GPU stream has no CUDA handle");
  return absl::OkStatus();
}

// A launcher's outcome (cuda_error, 0 on success, and the failed `step`) as
// an absl::Status naming the op.
inline absl::Status CudaStatus(const gpu_launch::GpuStatus& s, const char* op) {
  if (s.ok()) return absl::OkStatus();
  return absl::InternalError(std::string(op) + ": CUDA error while " + s.step + ": " +
                             gpu_launch::ErrorString(s.cuda_error));
}

// Device scratch of `bytes` bytes as a uint8 tensor: at least one byte, so
// that the pointer is valid even when nothing is needed. TF's GPU allocator
// aligns it to at least 256 bytes.
inline absl::Status AllocateScratch(tensorflow::OpKernelContext* ctx, size_t bytes,
                                    tensorflow::Tensor* t) {
  return ctx->allocate_temp(tensorflow::DT_UINT8,
                            tensorflow::TensorShape({static_cast<int64_t>(bytes > 0 ? bytes : 1)}),
                            t);
}

// Pinned host memory of `bytes` bytes (at least one) as a uint8 tensor: what
// a launcher copies back to the host, or uploads from it.
inline absl::Status AllocatePinnedHost(tensorflow::OpKernelContext* ctx, int64_t bytes,
                                       tensorflow::Tensor* t) {
  return AllocateHostTemp<GpuDevice>(ctx, tensorflow::DT_UINT8, bytes, t);
}

// Copies `bytes` bytes of device memory at src to pinned host memory held
// by `holder` and points *host at them (gpu_launch::CopyToHost, which
// synchronizes the stream). With bytes == 0 nothing is copied.
inline absl::Status CopyToPinnedHost(tensorflow::OpKernelContext* ctx, const uint8_t* src,
                                     int64_t bytes, tensorflow::Tensor* holder,
                                     const uint8_t** host, const char* op) {
  void* stream = nullptr;
  TF_RETURN_IF_ERROR(StreamOf(ctx, &stream));
  TF_RETURN_IF_ERROR(AllocatePinnedHost(ctx, bytes, holder));
  uint8_t* dst = holder->flat<uint8_t>().data();
  if (bytes > 0) {
    TF_RETURN_IF_ERROR(CudaStatus(
        gpu_launch::CopyToHost(dst, src, static_cast<size_t>(bytes), stream), op));
  }
  *host = dst;
  return absl::OkStatus();
}

}  // namespace gpu_util
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_COMMON_GPU_OP_UTIL_H_
