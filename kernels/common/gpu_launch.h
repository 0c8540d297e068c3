// The CUDA launch helpers every kernel family shares, written once. TF-free:
// the families' launcher headers (kernels/<family>/<family>_gpu.h, compiled by
// g++ into the OpKernels and by nvcc into the .cu files and tests/cuda) and
// the .cu files include it; the OpKernels' side (stream, scratch, pinned host
// memory, a GpuStatus as an absl::Status) is kernels/common/gpu_op_util.h.
//
//   * Host part (no CUDA headers): GpuStatus, what every launcher returns;
//     ErrorString and CopyToHost (defined in gpu_launch.cu).
//   * CUDA part (nvcc only, __CUDACC__): the launch sizes (kThreads, GridSize:
//     one occupancy-API wave of kThreads blocks), CeilDiv, the grid-stride
//     indices, scratch alignment, Ok/Fail, DR_CUDA_RETURN_IF_ERROR and
//     AsStream.
//
// A family's launcher header brings them into its gpu namespace with
// `using namespace ::deepreduce::gpu_launch;`, so that both its .cu files and
// its OpKernels (gpu::GpuStatus, gpu::ErrorString) name them unqualified.
#ifndef DEEPREDUCE_KERNELS_COMMON_GPU_LAUNCH_H_
#define DEEPREDUCE_KERNELS_COMMON_GPU_LAUNCH_H_

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#endif

namespace deepreduce {
namespace gpu_launch {

// Outcome of a launcher: cuda_error is a cudaError_t (0 == cudaSuccess) and
// `step` names the call that failed. ErrorString() turns the code into text.
struct GpuStatus {
  int cuda_error;
  const char* step;
  bool ok() const { return cuda_error == 0; }
};

// cudaGetErrorString of a GpuStatus's cuda_error.
const char* ErrorString(int cuda_error);

// Copies `bytes` bytes from device to host and synchronizes the stream (a
// cudaStream_t passed as void*); with bytes == 0 it does nothing.
GpuStatus CopyToHost(void* host_dst, const void* d_src, size_t bytes, void* stream);

#if defined(__CUDACC__)

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;
// Threads per block of the kernels launched with GridSize's default: a
// multiple of the warp size (kernels that work on whole warps rely on it).
constexpr int kThreads = 256;
static_assert(kThreads % kWarp == 0, "kThreads must be whole warps");
// Scratch sub-buffers start on this boundary (CUB wants 256-byte alignment).
constexpr size_t kAlign = 256;

inline size_t AlignUp(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }
inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline GpuStatus Ok() { return GpuStatus{0, ""}; }
inline GpuStatus Fail(cudaError_t e, const char* step) {
  return GpuStatus{static_cast<int>(e), step};
}
inline cudaStream_t AsStream(void* stream) { return static_cast<cudaStream_t>(stream); }

// Returns Fail(error, step) from the enclosing launcher if expr (a
// cudaError_t) is not cudaSuccess.
#define DR_CUDA_RETURN_IF_ERROR(expr, step)                                      \
  do {                                                                           \
    const cudaError_t dr_err_ = (expr);                                          \
    if (dr_err_ != cudaSuccess) return ::deepreduce::gpu_launch::Fail(dr_err_, step); \
  } while (0)

// Blocks of `threads` threads (kThreads unless given) to launch `kernel` for
// `work_blocks` blocks' worth of work: at most one full wave (SMs x resident
// blocks per SM, from the occupancy API), at least one block; the kernels'
// grid-stride loops do the rest.
template <typename Kernel>
cudaError_t GridSize(Kernel kernel, int64_t work_blocks, int* grid, int threads = kThreads) {
  int device = 0, sms = 0, per_sm = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e != cudaSuccess) return e;
  e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0);
  if (e != cudaSuccess) return e;
  const int64_t wave = static_cast<int64_t>(sms) * (per_sm > 0 ? per_sm : 1);
  const int64_t g = work_blocks < wave ? work_blocks : wave;
  *grid = static_cast<int>(g < 1 ? 1 : g);
  return cudaSuccess;
}

// The grid-stride loop's start (this thread's global index) and stride.
__device__ __forceinline__ int64_t GlobalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t GridThreads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

#endif  // __CUDACC__

}  // namespace gpu_launch
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_COMMON_GPU_LAUNCH_H_
