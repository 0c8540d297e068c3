// Op registrations and shape functions of the lossless index codecs. Kernels
// live in kernels/index/; this file holds no computation. Formats are defined
// in kernels/index/{index_format,rle,golomb}.h; the user-facing documentation
// is on the Python wrappers (deepreduce_tf/ops/index.py).
//
// One op pair per codec with kernels="index" in the codec table
// (kernels/common/codec_table.h), registered from the table:
//   DeepReduce>IndexEncode<Codec>(indices: Tidx, universe_size: int64) -> payload: uint8
//   DeepReduce>IndexDecode<Codec>(payload: uint8) -> indices: out_idx
// The encode op's static payload length comes from the codec's struct
// (<name>::Codec::StaticPayloadBytes, kernels/index/<name>.h). A codec whose
// encode op takes attributes (Codec::kOwnEncodeOp: golomb's block_size) has
// it registered by hand at the end of this file.
#include <cstdint>
#include <string>

#include "kernels/index/index_codecs.h"
#include "kernels/index/index_format.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_def_builder.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor.h"

namespace deepreduce {
namespace {

using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

// indices: a vector; universe_size: a scalar. The payload length is known
// statically only when K is a static dim, n a constant and the codec's size
// depends on nothing else (Codec::StaticPayloadBytes >= 0).
template <typename Codec>
absl::Status EncodeShape(InferenceContext* c) {
  ShapeHandle indices, unused;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &indices));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 0, &unused));
  const DimensionHandle k = c->Dim(indices, 0);
  const ::tensorflow::Tensor* n_t = c->input_tensor(1);
  if (c->ValueKnown(k) && n_t != nullptr) {
    const int64_t n = n_t->scalar<int64_t>()();
    if (n >= 0 && c->Value(k) <= n) {
      const int64_t bytes = Codec::StaticPayloadBytes(n, c->Value(k));
      if (bytes >= 0) {
        c->set_output(0, c->Vector(bytes));
        return absl::OkStatus();
      }
    }
  }
  c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
  return absl::OkStatus();
}

absl::Status DecodeShape(InferenceContext* c) {
  ShapeHandle unused;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &unused));
  c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
  return absl::OkStatus();
}

// Registers a codec's encode op unless it registers its own
// (Codec::kOwnEncodeOp), the way REGISTER_OP does (a builder finalized by
// the registry, while the library loads).
template <typename Codec>
bool RegisterEncodeOp(const char* camel) {
  if (Codec::kOwnEncodeOp) return false;
  ::tensorflow::OpDefBuilder op(std::string("DeepReduce>IndexEncode") + camel);
  op.Input("indices: Tidx")
      .Input("universe_size: int64")
      .Output("payload: uint8")
      .Attr("Tidx: {int32, int64}")
      .SetShapeFn(EncodeShape<Codec>);
  using Args = OpArgsOf<Codec>;
  for (int i = 0; i < Args::kNumAttrs; ++i) {
    op.Attr(std::string(Args::kAttrs[i].name) + ": int = " +
            std::to_string(Args::kAttrs[i].default_value));
  }
  ::tensorflow::OpRegistry::Global()->Register(
      [op](::tensorflow::OpRegistrationData* data) { return op.Finalize(data); });
  return true;
}

#define DR_REGISTER_INDEX_ENCODE_OP(name, Camel, id, kernels) \
  [[maybe_unused]] const bool encode_op_##name =              \
      RegisterEncodeOp<index::name::Codec>(#Camel);
DR_INDEX_PAYLOAD_CODECS(DR_REGISTER_INDEX_ENCODE_OP)
#undef DR_REGISTER_INDEX_ENCODE_OP

}  // namespace

#define DR_REGISTER_INDEX_DECODE_OP(name, Camel, id, kernels) \
  REGISTER_OP("DeepReduce>IndexDecode" #Camel)                \
      .Input("payload: uint8")                                \
      .Output("indices: out_idx")                             \
      .Attr("out_idx: {int32, int64} = DT_INT64")             \
      .SetShapeFn(DecodeShape);
DR_INDEX_PAYLOAD_CODECS(DR_REGISTER_INDEX_DECODE_OP)
#undef DR_REGISTER_INDEX_DECODE_OP

static_assert(index::golomb::Codec::kOwnEncodeOp, "golomb's encode op is registered here");
REGISTER_OP("DeepReduce>IndexEncodeGolomb")
    .Input("indices: Tidx")
    .Input("universe_size: int64")
    .Output("payload: uint8")
    .Attr("Tidx: {int32, int64}")
    // 0: auto, the encoder picks the block size (2^4..2^12) with the
    // smallest payload; else a power of two in [16, 65536].
    .Attr("block_size: int = 0")
    .SetShapeFn([](InferenceContext* c) -> absl::Status {
      int64_t block_size;
      TF_RETURN_IF_ERROR(c->GetAttr("block_size", &block_size));
      if (block_size != 0 &&
          (block_size < 16 || block_size > 65536 || (block_size & (block_size - 1)) != 0)) {
        return absl::InvalidArgumentError(
            "block_size must be 0 (auto: the encoder picks the power of two in [16, 4096] "
            "giving the smallest payload) or a power of two in [16, 65536], got " +
            std::to_string(block_size));
      }
      return EncodeShape<index::golomb::Codec>(c);
    });

}  // namespace deepreduce
