// GPU registration of DeepReduce>Check (CUDA build only; the OpKernel:
// check_kernel.h, shared with the CPU). The bool condition is read on the
// host; the value is forwarded where it is, every dtype of the op.
#include <cstdint>

#include "kernels/fusion/check_kernel.h"
#include "tensorflow/core/framework/bfloat16.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/types.h"

namespace deepreduce {
namespace fusion {
namespace {

#define DR_REGISTER_CHECK_GPU(T)                                  \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>Check")                \
                              .Device(::tensorflow::DEVICE_GPU)   \
                              .TypeConstraint<T>("T")             \
                              .HostMemory("condition"),           \
                          CheckOp);

DR_REGISTER_CHECK_GPU(bool)
DR_REGISTER_CHECK_GPU(uint8_t)
DR_REGISTER_CHECK_GPU(int8_t)
DR_REGISTER_CHECK_GPU(uint16_t)
DR_REGISTER_CHECK_GPU(int16_t)
DR_REGISTER_CHECK_GPU(uint32_t)
DR_REGISTER_CHECK_GPU(int32_t)
DR_REGISTER_CHECK_GPU(int64_t)
DR_REGISTER_CHECK_GPU(uint64_t)
DR_REGISTER_CHECK_GPU(::Eigen::half)
DR_REGISTER_CHECK_GPU(::tensorflow::bfloat16)
DR_REGISTER_CHECK_GPU(float)
DR_REGISTER_CHECK_GPU(double)
#undef DR_REGISTER_CHECK_GPU

}  // namespace
}  // namespace fusion
}  // namespace deepreduce
