// The OpKernel of DeepReduce>Check (registration in kernels/ops/fusion_ops.cc),
// one class for both devices: check_kernels.cc registers it on the CPU,
// check_kernels_gpu.cc on the GPU (the condition in host memory; the value
// is forwarded, never read, on either device).
#ifndef DEEPREDUCE_KERNELS_FUSION_CHECK_KERNEL_H_
#define DEEPREDUCE_KERNELS_FUSION_CHECK_KERNEL_H_

#include <string>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace deepreduce {
namespace fusion {

class CheckOp : public ::tensorflow::OpKernel {
 public:
  explicit CheckOp(::tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("message", &message_));
  }

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    const ::tensorflow::Tensor& condition = ctx->input(1);
    OP_REQUIRES(ctx, ::tensorflow::TensorShapeUtils::IsScalar(condition.shape()),
                absl::InvalidArgumentError("Check: condition must be a bool scalar, got shape " +
                                           condition.shape().DebugString()));
    OP_REQUIRES(ctx, condition.scalar<bool>()(), absl::InvalidArgumentError(message_));
    ctx->set_output(0, ctx->input(0));
  }

 private:
  std::string message_;
};

}  // namespace fusion
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_FUSION_CHECK_KERNEL_H_
