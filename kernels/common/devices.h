// The devices of the OpKernels, which are templated on them (as TensorFlow's
// own kernels and tensorflow/addons are): one class per op does the argument
// checks, the shape logic, the output allocation and the error messages on
// every device, and calls a functor, specialised per device, for the device
// work. The CPU functors live in <family>_kernels.cc, the GPU ones in
// <family>_kernels_gpu.cc (compiled in the CUDA build only; their CUDA
// kernels sit behind the plain C++ launchers of <family>_gpu.h).
//
// Our own tags, not Eigen's devices: a GPU OpKernel here is compiled by the
// host compiler without CUDA headers. Host code with TF headers; never
// included by CUDA sources.
#ifndef DEEPREDUCE_KERNELS_COMMON_DEVICES_H_
#define DEEPREDUCE_KERNELS_COMMON_DEVICES_H_

#include <cstdint>
#include <type_traits>

#include "absl/status/status.h"
#include "tensorflow/core/framework/allocator.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"

namespace deepreduce {

struct CpuDevice {};
struct GpuDevice {};

// A temporary of `count` elements of `dtype` (at least one) in host memory,
// for what the host reads or writes while an op runs (tables parsed from a
// payload, plans uploaded to the device). The CPU's ordinary temporary; on the
// GPU, pinned memory, which the device can copy to and from directly.
template <typename Device>
absl::Status AllocateHostTemp(tensorflow::OpKernelContext* ctx, tensorflow::DataType dtype,
                              int64_t count, tensorflow::Tensor* t) {
  const tensorflow::TensorShape shape({count > 0 ? count : 1});
  if constexpr (std::is_same_v<Device, GpuDevice>) {
    tensorflow::AllocatorAttributes attr;
    attr.set_on_host(true);
    attr.set_gpu_compatible(true);
    return ctx->allocate_temp(dtype, shape, t, attr);
  } else {
    return ctx->allocate_temp(dtype, shape, t);
  }
}

}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_COMMON_DEVICES_H_
