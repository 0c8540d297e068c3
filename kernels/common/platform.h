// Portability macros shared by the CPU (g++) and CUDA (nvcc) translation units.
// Nothing here includes TensorFlow: the CUDA sources compile without TF headers.
#ifndef DEEPREDUCE_KERNELS_COMMON_PLATFORM_H_
#define DEEPREDUCE_KERNELS_COMMON_PLATFORM_H_

#if defined(__CUDACC__)
#define DR_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define DR_HOST_DEVICE inline
#endif

// A double product rounded before it meets any addition. nvcc contracts
// a * b + c into one FMA by default (-fmad=true) while g++ on x86-64 without
// -mfma never does, so arithmetic whose bits must match on the CPU and the
// GPU (qsgd.h's level, polyfit.h's Clenshaw recurrence) spells its products
// with DR_DMUL: __dmul_rn is never fused.
#if defined(__CUDA_ARCH__)
#define DR_DMUL(a, b) __dmul_rn((a), (b))
#else
#define DR_DMUL(a, b) ((a) * (b))
#endif

#endif  // DEEPREDUCE_KERNELS_COMMON_PLATFORM_H_
