// CUDA launcher of tensor fusion (kernels/fusion/fusion_kernels.cu): plain C++
// declarations, no TensorFlow headers, so that the .cu file compiles with
// nvcc alone. The OpKernels (fusion_kernels_gpu.cc) pass the op's stream as
// a void*.
#ifndef DEEPREDUCE_KERNELS_FUSION_FUSION_GPU_H_
#define DEEPREDUCE_KERNELS_FUSION_FUSION_GPU_H_

#include <cstdint>

#include "kernels/common/gpu_launch.h"

namespace deepreduce {
namespace fusion {
namespace gpu {

// GpuStatus, ErrorString, CopyToHost and (in .cu files) the launch helpers:
// kernels/common/gpu_launch.h.
using namespace ::deepreduce::gpu_launch;  // NOLINT

// Copies count device-to-device pieces (dst[i] <- src[i], bytes[i] bytes)
// on `stream`, asynchronously: one kernel per 96 non-empty pieces, the table
// passed in the kernel's parameters. The pointer arrays live in host memory;
// pieces must not overlap.
GpuStatus CopyPieces(void* const* dst, const void* const* src, const int64_t* bytes,
                     int count, void* stream);

}  // namespace gpu
}  // namespace fusion
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_FUSION_FUSION_GPU_H_
