// The out-of-line helpers of kernels/common/gpu_launch.h, shared by every
// kernel family's launchers. No TensorFlow headers.
#include <cuda_runtime.h>

#include "kernels/common/gpu_launch.h"

namespace deepreduce {
namespace gpu_launch {

const char* ErrorString(int cuda_error) {
  return cudaGetErrorString(static_cast<cudaError_t>(cuda_error));
}

GpuStatus CopyToHost(void* host_dst, const void* d_src, size_t bytes, void* stream) {
  if (bytes == 0) return Ok();
  cudaStream_t s = AsStream(stream);
  DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_dst, d_src, bytes, cudaMemcpyDeviceToHost, s),
                          "copying to the host");
  DR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s), "copying to the host");
  return Ok();
}

}  // namespace gpu_launch
}  // namespace deepreduce
