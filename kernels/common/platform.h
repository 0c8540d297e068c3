// Portability macros shared by the CPU (g++) and CUDA (nvcc) translation units.
// Nothing here includes TensorFlow: the CUDA sources compile without TF headers.
#ifndef DEEPREDUCE_KERNELS_COMMON_PLATFORM_H_
#define DEEPREDUCE_KERNELS_COMMON_PLATFORM_H_

#if defined(__CUDACC__)
#define DR_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define DR_HOST_DEVICE inline
#endif

#endif  // DEEPREDUCE_KERNELS_COMMON_PLATFORM_H_
