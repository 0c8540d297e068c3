// CPU registration of DeepReduce>Check (the OpKernel: check_kernel.h), every
// dtype of the op: the value is forwarded, never read.
#include "kernels/fusion/check_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace deepreduce {
namespace fusion {
namespace {

REGISTER_KERNEL_BUILDER(Name("DeepReduce>Check").Device(::tensorflow::DEVICE_CPU), CheckOp);

}  // namespace
}  // namespace fusion
}  // namespace deepreduce
