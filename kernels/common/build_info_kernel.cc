// DeepReduce>BuildInfo: what this binary holds, reported by the binary itself
// (deepreduce_tf.cuda_built() and the loader's version and codec-table checks
// read it).
#include <string>

#include "kernels/common/codec_table.h"
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

// The codec table this binary was compiled with, as JSON:
// {"index": {"raw": 0, ...}, "value": {...}} (codec_table.build_info_table()).
void AddCodec(std::string* json, const char* name, int wire_id) {
  if (json->back() != '{') *json += ", ";
  *json += std::string("\"") + name + "\": " + std::to_string(wire_id);
}

std::string CodecsJson() {
  std::string index = "{", value = "{";
#define DR_INDEX_JSON(name, Camel, id, kernels) AddCodec(&index, #name, id);
#define DR_VALUE_JSON(name, Camel, id, kernels) AddCodec(&value, #name, id);
  DR_INDEX_CODECS(DR_INDEX_JSON)
  DR_VALUE_CODECS(DR_VALUE_JSON)
#undef DR_INDEX_JSON
#undef DR_VALUE_JSON
  return "{\"index\": " + index + "}, \"value\": " + value + "}}";
}

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
        DEEPREDUCE_CUDA_ARCHS + "\", \"codecs\": " + CodecsJson() + "}";
  }
};

REGISTER_KERNEL_BUILDER(Name("DeepReduce>BuildInfo")
                            .Device(::tensorflow::DEVICE_CPU),
                        BuildInfoOp);

}  // namespace
}  // namespace deepreduce
