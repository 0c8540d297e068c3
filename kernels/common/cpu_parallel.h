// Host-side helpers shared by the CPU kernels of every op family (TF headers;
// never included by CUDA sources).
#ifndef DEEPREDUCE_KERNELS_COMMON_CPU_PARALLEL_H_
#define DEEPREDUCE_KERNELS_COMMON_CPU_PARALLEL_H_

#include <atomic>
#include <cstdint>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/platform/threadpool.h"

namespace deepreduce {

// The device's intra-op thread pool: kernels parallelise with its ParallelFor
// and a per-unit cost estimate, never with threads of their own.
inline tensorflow::thread::ThreadPool* CpuPool(tensorflow::OpKernelContext* ctx) {
  return ctx->device()->tensorflow_cpu_worker_threads()->workers;
}

// Lowers *target to value if smaller: how parallel loops record the first
// failing position, so the reported error does not depend on thread timing.
inline void AtomicMin(std::atomic<int64_t>* target, int64_t value) {
  int64_t cur = target->load(std::memory_order_relaxed);
  while (value < cur &&
         !target->compare_exchange_weak(cur, value, std::memory_order_relaxed)) {
  }
}

}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_COMMON_CPU_PARALLEL_H_
