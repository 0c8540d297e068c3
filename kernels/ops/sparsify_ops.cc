// Op registrations and shape functions of the sparsifiers (top-k by
// magnitude, threshold, random-k). Kernels live in kernels/sparsify/; this
// file holds no computation. The user-facing documentation is on the Python
// wrappers (deepreduce_tf/ops/sparsify.py).
#include <cstdint>
#include <string>

#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace deepreduce {
namespace {

using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

// Outputs [k] (k known when it is a constant), after checking that k is a
// scalar and, when both are known, that 0 <= k <= n.
absl::Status KSelectedShape(InferenceContext* c) {
  ShapeHandle unused;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 0, &unused));
  const tensorflow::Tensor* k_t = c->input_tensor(1);
  DimensionHandle k = c->UnknownDim();
  if (k_t != nullptr) {
    const int64_t kv = k_t->scalar<int64_t>()();
    if (kv < 0) {
      return absl::InvalidArgumentError("k must be >= 0, got " + std::to_string(kv));
    }
    const DimensionHandle n = c->NumElements(c->input(0));
    if (c->ValueKnown(n) && kv > c->Value(n)) {
      return absl::InvalidArgumentError(
          "k=" + std::to_string(kv) + " exceeds the number of elements n=" +
          std::to_string(c->Value(n)) + " of x");
    }
    k = c->MakeDim(kv);
  }
  c->set_output(0, c->Vector(k));
  c->set_output(1, c->Vector(k));
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("DeepReduce>TopK")
    .Input("x: T")
    .Input("k: int64")
    .Output("indices: out_idx")
    .Output("values: T")
    .Attr("T: {half, bfloat16, float, double}")
    .Attr("out_idx: {int32, int64} = DT_INT64")
    .SetShapeFn(KSelectedShape);

REGISTER_OP("DeepReduce>ThresholdSelect")
    .Input("x: T")
    .Input("threshold: T")
    .Output("indices: out_idx")
    .Output("values: T")
    .Attr("T: {half, bfloat16, float, double}")
    .Attr("out_idx: {int32, int64} = DT_INT64")
    .SetShapeFn([](InferenceContext* c) -> absl::Status {
      ShapeHandle unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 0, &unused));
      c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
      c->set_output(1, c->Vector(InferenceContext::kUnknownDim));
      return absl::OkStatus();
    });

REGISTER_OP("DeepReduce>RandomK")
    .Input("x: T")
    .Input("k: int64")
    .Input("seed: int64")
    .Output("indices: out_idx")
    .Output("values: T")
    .Attr("T: {half, bfloat16, float, double}")
    .Attr("out_idx: {int32, int64} = DT_INT64")
    .SetShapeFn([](InferenceContext* c) -> absl::Status {
      ShapeHandle unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 0, &unused));
      return KSelectedShape(c);
    });

}  // namespace deepreduce
