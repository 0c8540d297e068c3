// DeepReduce>BuildInfo: what this binary holds, reported by the binary itself
// (deepreduce_tf.cuda_built() and the loader's version check read it).
#include <string>

#include "tensorflow/core/framework/op_kernel.h"

#ifndef DEEPREDUCE_TF_VERSION
#error "DEEPREDUCE_TF_VERSION must be defined by the build (setup.py or Bazel)"
#endif
// The wheel's headers do not define TF's own version macros, so the build
// passes the version of the TensorFlow whose headers and library it used.
#ifndef DEEPREDUCE_BUILT_TF_VERSION
#error "DEEPREDUCE_BUILT_TF_VERSION must be defined by the build"
#endif
#ifndef DEEPREDUCE_CUDA_ARCHS
#define DEEPREDUCE_CUDA_ARCHS ""
#endif

namespace deepreduce {
namespace {

class BuildInfoOp : public ::tensorflow::OpKernel {
 public:
  explicit BuildInfoOp(::tensorflow::OpKernelConstruction* ctx)
      : OpKernel(ctx) {}

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    ::tensorflow::Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, {}, &out));
#if defined(DEEPREDUCE_WITH_CUDA)
    const char* cuda = "true";
#else
    const char* cuda = "false";
#endif
    out->scalar<::tensorflow::tstring>()() =
        std::string("{\"version\": \"") + DEEPREDUCE_TF_VERSION +
        "\", \"tf_version\": \"" + DEEPREDUCE_BUILT_TF_VERSION +
        "\", \"cuda\": " + cuda + ", \"cuda_archs\": \"" +
        DEEPREDUCE_CUDA_ARCHS + "\"}";
  }
};

REGISTER_KERNEL_BUILDER(Name("DeepReduce>BuildInfo")
                            .Device(::tensorflow::DEVICE_CPU),
                        BuildInfoOp);

}  // namespace
}  // namespace deepreduce
