// Op registrations and shape functions of the value codecs. Kernels live in
// kernels/value/; this file holds no computation. The user-facing
// documentation is on the Python wrappers (deepreduce_tf/ops/value.py).
//
// Every encoder takes a float32 vector of K values and returns one flat uint8
// payload; polyfit and dexp also return perm (perm[i] = input position of the
// i-th decoded value). Every decoder takes a payload and returns the K values.
//
// A codec of the table (kernels="value") whose struct does not set kOwnOps
// (kernels/value/<name>.h; deflate, fp16, bf16) gets its op pair from the
// table (an element-wise codec's, Codec::kValueBytes > 0, with exact sizes):
//   DeepReduce><Codec>Encode(values: float[, seed: int64]) -> payload: uint8
//       with one "<attr>: int = <default>" per attribute of its row
//   DeepReduce><Codec>Decode(payload: uint8) -> values: float
// The codecs with ops of their own (other inputs or outputs, device-side data
// checks: polyfit, dexp, qsgd) are registered by hand below.
#include <cstdint>
#include <string>

#include "kernels/value/dexp.h"
#include "kernels/value/qsgd.h"
#include "kernels/value/value_codecs.h"
#include "kernels/value/value_format.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_def_builder.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace deepreduce {
namespace {

using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

// values: rank 1. perm (if any) has the shape of values.
absl::Status EncodeShape(InferenceContext* c, bool with_perm, ShapeHandle* values) {
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, values));
  if (with_perm) c->set_output(1, *values);
  return absl::OkStatus();
}

absl::Status UnknownPayload(InferenceContext* c, bool with_perm) {
  ShapeHandle values;
  TF_RETURN_IF_ERROR(EncodeShape(c, with_perm, &values));
  c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
  return absl::OkStatus();
}

// Decoders: payload rank 1; K comes from the payload's header.
absl::Status DecodeShape(InferenceContext* c) {
  ShapeHandle payload;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &payload));
  c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
  return absl::OkStatus();
}

// An element-wise codec (Codec::kValueBytes > 0: fp16, bf16): the payload
// is the header plus kValueBytes bytes per value, both ways.
template <typename Codec>
absl::Status ElementwiseEncodeShape(InferenceContext* c) {
  ShapeHandle values;
  TF_RETURN_IF_ERROR(EncodeShape(c, false, &values));
  DimensionHandle k = c->Dim(values, 0);
  c->set_output(0, c->Vector(c->ValueKnown(k)
                                 ? value::kHeaderBytes + Codec::kValueBytes * c->Value(k)
                                 : InferenceContext::kUnknownDim));
  return absl::OkStatus();
}

template <typename Codec>
absl::Status ElementwiseDecodeShape(InferenceContext* c) {
  ShapeHandle payload;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &payload));
  DimensionHandle n = c->Dim(payload, 0);
  if (c->ValueKnown(n) && c->Value(n) >= value::kHeaderBytes &&
      (c->Value(n) - value::kHeaderBytes) % Codec::kValueBytes == 0) {
    c->set_output(0, c->Vector((c->Value(n) - value::kHeaderBytes) / Codec::kValueBytes));
  } else {
    // A malformed size is left to the kernel, which names the problem.
    c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
  }
  return absl::OkStatus();
}

// Registers a codec's op pair unless it registers its own (Codec::kOwnOps),
// the way REGISTER_OP does (builders finalized by the registry, while the
// library loads).
template <typename Codec>
bool RegisterValueOps(const char* camel) {
  if (Codec::kOwnOps) return false;
  using Args = OpArgsOf<Codec>;
  const std::string prefix = std::string("DeepReduce>") + camel;
  ::tensorflow::OpDefBuilder encode(prefix + "Encode");
  encode.Input("values: float");
  if (Args::kSeeded) encode.Input("seed: int64");
  encode.Output("payload: uint8").SetShapeFn([](InferenceContext* c) -> absl::Status {
    if (Args::kSeeded) {
      ShapeHandle seed;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 0, &seed));
    }
    if constexpr (Codec::kValueBytes > 0) return ElementwiseEncodeShape<Codec>(c);
    return UnknownPayload(c, false);
  });
  for (int i = 0; i < Args::kNumAttrs; ++i) {
    encode.Attr(std::string(Args::kAttrs[i].name) + ": int = " +
                std::to_string(Args::kAttrs[i].default_value));
  }
  ::tensorflow::OpDefBuilder decode(prefix + "Decode");
  decode.Input("payload: uint8").Output("values: float");
  if constexpr (Codec::kValueBytes > 0) {
    decode.SetShapeFn(ElementwiseDecodeShape<Codec>);
  } else {
    decode.SetShapeFn(DecodeShape);
  }
  for (const ::tensorflow::OpDefBuilder& op : {encode, decode}) {
    ::tensorflow::OpRegistry::Global()->Register(
        [op](::tensorflow::OpRegistrationData* data) { return op.Finalize(data); });
  }
  return true;
}

#define DR_REGISTER_VALUE_OPS(name, Camel, id, kernels) \
  [[maybe_unused]] const bool value_ops_##name =        \
      RegisterValueOps<value::name::Codec>(#Camel);
DR_VALUE_PAYLOAD_CODECS(DR_REGISTER_VALUE_OPS)
#undef DR_REGISTER_VALUE_OPS

}  // namespace

REGISTER_OP("DeepReduce>PolyfitEncode")
    .Input("values: float")
    .Output("payload: uint8")
    .Output("perm: out_idx")
    .Attr("degree: int = 5")
    .Attr("segmentation: {'greedy', 'geometric'} = 'greedy'")
    .Attr("segments: int = 0")
    .Attr("out_idx: {int32, int64} = DT_INT64")
    .SetShapeFn([](InferenceContext* c) { return UnknownPayload(c, true); });

REGISTER_OP("DeepReduce>PolyfitDecode")
    .Input("payload: uint8")
    .Output("values: float")
    .Attr("max_values: int >= 0")
    .SetShapeFn(DecodeShape);

REGISTER_OP("DeepReduce>DexpEncode")
    .Input("values: float")
    .Output("payload: uint8")
    .Output("perm: out_idx")
    .Attr("out_idx: {int32, int64} = DT_INT64")
    .SetShapeFn([](InferenceContext* c) -> absl::Status {
      ShapeHandle values;
      TF_RETURN_IF_ERROR(EncodeShape(c, true, &values));
      c->set_output(0, c->Vector(value::dexp::kPayloadBytes));
      return absl::OkStatus();
    });

REGISTER_OP("DeepReduce>DexpDecode")
    .Input("payload: uint8")
    .Output("values: float")
    .Attr("max_values: int >= 0")
    .SetShapeFn([](InferenceContext* c) -> absl::Status {
      ShapeHandle payload;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &payload));
      DimensionHandle unused;
      TF_RETURN_IF_ERROR(c->WithValue(c->Dim(payload, 0), value::dexp::kPayloadBytes, &unused));
      c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
      return absl::OkStatus();
    });

REGISTER_OP("DeepReduce>QsgdEncode")
    .Input("values: float")
    .Input("seed: int64")
    .Output("payload: uint8")
    .Attr("levels: int = 127")
    .Attr("bucket_size: int = 512")
    .SetShapeFn([](InferenceContext* c) -> absl::Status {
      ShapeHandle values, seed;
      TF_RETURN_IF_ERROR(EncodeShape(c, false, &values));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 0, &seed));
      int64_t levels, bucket;
      TF_RETURN_IF_ERROR(c->GetAttr("levels", &levels));
      TF_RETURN_IF_ERROR(c->GetAttr("bucket_size", &bucket));
      DimensionHandle k = c->Dim(values, 0);
      if (c->ValueKnown(k) && levels >= 1 && levels <= value::qsgd::kMaxLevels &&
          bucket >= 1) {
        const int64_t kk = c->Value(k);
        const int64_t w = value::qsgd::CodeBits(static_cast<uint32_t>(levels));
        c->set_output(0, c->Vector(value::qsgd::kFixedBytes + 4 * ((kk + bucket - 1) / bucket) +
                                   (kk * w + 7) / 8));
      } else {
        c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
      }
      return absl::OkStatus();
    });

REGISTER_OP("DeepReduce>QsgdDecode")
    .Input("payload: uint8")
    .Output("values: float")
    .SetShapeFn(DecodeShape);

}  // namespace deepreduce
