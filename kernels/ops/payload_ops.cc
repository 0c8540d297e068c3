// Op registrations and shape functions of the self-checking payload container
// and the bit-packed permutation. Kernels live in kernels/payload/; this file
// holds no computation. The formats are in kernels/payload/payload_format.h;
// the user-facing documentation is on the Python wrappers
// (deepreduce_tf/ops/payload.py).
//
//   DeepReduce>PayloadPack(sections: N * uint8, meta: int64) -> payload: uint8
//   DeepReduce>PayloadUnpack(payload: uint8) -> meta: int64, sections: N * uint8
//   DeepReduce>PermEncode(perm: T) -> data: uint8
//   DeepReduce>PermDecode(data: uint8, k: int64) -> perm: out_idx
//
// These are host-side ops on small byte buffers: CPU kernels only.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/payload/payload_format.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor.h"

namespace deepreduce {
namespace {

using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

absl::Status CheckKindAttr(InferenceContext* c) {
  int64_t kind;
  TF_RETURN_IF_ERROR(c->GetAttr("kind", &kind));
  if (kind < 1 || kind > 255) {
    return absl::InvalidArgumentError("kind must lie in [1, 255], got " +
                                      std::to_string(kind));
  }
  return absl::OkStatus();
}

// The payload length is static when every section length is and the meta
// values are a constant: fixed bytes + the varints + the sections + CRC.
absl::Status PackShape(InferenceContext* c) {
  TF_RETURN_IF_ERROR(CheckKindAttr(c));
  const int n = c->num_inputs() - 1;
  bool known = true;
  int64_t total = payload::kFixedBytes + VarintSize(n) + payload::kCrcBytes;
  for (int i = 0; i < n; ++i) {
    ShapeHandle s;
    TF_RETURN_IF_ERROR(c->WithRank(c->input(i), 1, &s));
    const DimensionHandle d = c->Dim(s, 0);
    if (c->ValueKnown(d)) {
      total += VarintSize(static_cast<uint64_t>(c->Value(d))) + c->Value(d);
    } else {
      known = false;
    }
  }
  ShapeHandle meta;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(n), 1, &meta));
  const ::tensorflow::Tensor* meta_t = c->input_tensor(n);
  if (known && meta_t != nullptr) {
    auto values = meta_t->flat<int64_t>();
    total += VarintSize(static_cast<uint64_t>(values.size()));
    for (int64_t i = 0; i < values.size() && known; ++i) {
      // A negative value is the kernel's to reject, with its message.
      known = values(i) >= 0;
      total += VarintSize(static_cast<uint64_t>(values(i)));
    }
  }
  c->set_output(0, c->Vector(known && meta_t != nullptr ? total
                                                        : InferenceContext::kUnknownDim));
  return absl::OkStatus();
}

absl::Status UnpackShape(InferenceContext* c) {
  TF_RETURN_IF_ERROR(CheckKindAttr(c));
  ShapeHandle unused;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &unused));
  int64_t num_meta, num_sections;
  TF_RETURN_IF_ERROR(c->GetAttr("num_meta", &num_meta));
  TF_RETURN_IF_ERROR(c->GetAttr("num_sections", &num_sections));
  c->set_output(0, c->Vector(num_meta));
  for (int64_t i = 0; i < num_sections; ++i) {
    c->set_output(1 + i, c->Vector(InferenceContext::kUnknownDim));
  }
  return absl::OkStatus();
}

absl::Status PermEncodeShape(InferenceContext* c) {
  ShapeHandle perm;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &perm));
  const DimensionHandle k = c->Dim(perm, 0);
  uint64_t bytes = 0;
  if (c->ValueKnown(k) && payload::PermBytes(static_cast<uint64_t>(c->Value(k)), &bytes)) {
    c->set_output(0, c->Vector(static_cast<int64_t>(bytes)));
  } else {
    c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
  }
  return absl::OkStatus();
}

// The output has k entries: static when k is a non-negative constant (a
// negative one is the kernel's to reject, with its message).
absl::Status PermDecodeShape(InferenceContext* c) {
  ShapeHandle unused;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &unused));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 0, &unused));
  const ::tensorflow::Tensor* k_t = c->input_tensor(1);
  if (k_t != nullptr && k_t->scalar<int64_t>()() >= 0) {
    c->set_output(0, c->Vector(k_t->scalar<int64_t>()()));
  } else {
    c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
  }
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("DeepReduce>PayloadPack")
    .Input("sections: N * uint8")
    .Input("meta: int64")
    .Output("payload: uint8")
    .Attr("N: int >= 0")
    .Attr("kind: int")
    .SetShapeFn(PackShape);

REGISTER_OP("DeepReduce>PayloadUnpack")
    .Input("payload: uint8")
    .Output("meta: int64")
    .Output("sections: num_sections * uint8")
    .Attr("kind: int")
    .Attr("num_meta: int >= 0")
    .Attr("num_sections: int >= 0")
    .Attr("expected_fields: list(int) = []")
    .Attr("expected_values: list(int) = []")
    .Attr("field_names: list(string) = []")
    .SetShapeFn(UnpackShape);

REGISTER_OP("DeepReduce>PermEncode")
    .Input("perm: T")
    .Output("data: uint8")
    .Attr("T: {int32, int64}")
    .SetShapeFn(PermEncodeShape);

REGISTER_OP("DeepReduce>PermDecode")
    .Input("data: uint8")
    .Input("k: int64")
    .Output("perm: out_idx")
    .Attr("out_idx: {int32, int64} = DT_INT64")
    .SetShapeFn(PermDecodeShape);

}  // namespace deepreduce
