// Op registrations and shape functions of tensor fusion: many tensors <-> one
// flat vector in ONE graph node each way, so that packing a bucket of V
// variables adds O(1) nodes to a step, not O(V) reshapes (Python side:
// deepreduce_tf/ops/fusion.py, deepreduce_tf/fusion.py). Kernels live in
// kernels/fusion/.
#include <cstdint>
#include <string>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace deepreduce {
namespace {

using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

// [sum of the inputs' element counts], unknown if one of them is.
absl::Status FlattenConcatShape(InferenceContext* c) {
  DimensionHandle total = c->MakeDim(0);
  for (int i = 0; i < c->num_inputs(); ++i) {
    const DimensionHandle n = c->NumElements(c->input(i));
    TF_RETURN_IF_ERROR(c->Add(total, n, &total));
  }
  c->set_output(0, c->Vector(total));
  return absl::OkStatus();
}

// The outputs take the `shapes` attribute; flat must be a vector whose
// length, when known, is the sum of their element counts.
absl::Status SplitReshapeShape(InferenceContext* c) {
  std::vector<::tensorflow::PartialTensorShape> shapes;
  TF_RETURN_IF_ERROR(c->GetAttr("shapes", &shapes));
  if (static_cast<int>(shapes.size()) != c->num_outputs()) {
    return absl::InvalidArgumentError("shapes has " + std::to_string(shapes.size()) +
                                      " entries but N=" + std::to_string(c->num_outputs()));
  }
  ShapeHandle flat;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &flat));
  int64_t total = 0;
  for (int i = 0; i < c->num_outputs(); ++i) {
    if (!shapes[i].IsFullyDefined()) {
      return absl::InvalidArgumentError("shapes[" + std::to_string(i) + "] = " +
                                        shapes[i].DebugString() + " is not fully defined");
    }
    total += shapes[i].num_elements();
    ShapeHandle out;
    TF_RETURN_IF_ERROR(c->MakeShapeFromPartialTensorShape(shapes[i], &out));
    c->set_output(i, out);
  }
  DimensionHandle unused;
  TF_RETURN_IF_ERROR(c->WithValue(c->Dim(flat, 0), total, &unused));
  return absl::OkStatus();
}

// ScatterSubtract: the output takes rest's shape (a vector).
absl::Status ScatterSubtractShape(InferenceContext* c) {
  ShapeHandle rest;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &rest));
  c->set_output(0, rest);
  return absl::OkStatus();
}

// ScatterSum: [n + length of tail].
absl::Status ScatterSumShape(InferenceContext* c) {
  int64_t n = 0;
  TF_RETURN_IF_ERROR(c->GetAttr("n", &n));
  ShapeHandle tail;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 1, &tail));
  DimensionHandle total;
  TF_RETURN_IF_ERROR(c->Add(c->Dim(tail, 0), n, &total));
  c->set_output(0, c->Vector(total));
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("DeepReduce>ScatterSum")
    .Input("positions: int64")
    .Input("values: T")
    .Input("tail: T")
    .Output("sum: T")
    .Attr("n: int >= 0")
    .Attr("T: {half, bfloat16, float, double}")
    .SetShapeFn(ScatterSumShape);

REGISTER_OP("DeepReduce>ScatterSubtract")
    .Input("rest: T")
    .Input("positions: int64")
    .Input("values: T")
    .Output("out: T")
    .Attr("T: {half, bfloat16, float, double}")
    .SetShapeFn(ScatterSubtractShape);

REGISTER_OP("DeepReduce>AllWithin")
    .Input("x: T")
    .Output("fits: bool")
    .Attr("limit: float")
    .Attr("T: {half, bfloat16, float, double}")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Scalar());
      return absl::OkStatus();
    });

REGISTER_OP("DeepReduce>AddWithin")
    .Input("x: T")
    .Input("y: T")
    .Output("sum: T")
    .Output("fits: bool")
    .Attr("limit: float")
    .Attr("T: {half, bfloat16, float, double}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle shape;
      TF_RETURN_IF_ERROR(c->Merge(c->input(0), c->input(1), &shape));
      c->set_output(0, shape);
      c->set_output(1, c->Scalar());
      return absl::OkStatus();
    });

REGISTER_OP("DeepReduce>FlattenConcat")
    .Input("values: N * T")
    .Output("flat: T")
    .Attr("N: int >= 1")
    .Attr("T: {half, bfloat16, float, double}")
    .SetShapeFn(FlattenConcatShape);

REGISTER_OP("DeepReduce>SplitReshape")
    .Input("flat: T")
    .Output("values: N * T")
    .Attr("N: int >= 1")
    .Attr("T: {half, bfloat16, float, double}")
    .Attr("shapes: list(shape)")
    .SetShapeFn(SplitReshapeShape);

// Check(value, condition): value, passed through, once condition (a bool
// scalar) holds; InvalidArgument(message) when it does not. The run-time
// checks of decoding (deepreduce_tf/_checks.py). A STATELESS op that the
// checked value flows through, unlike tf.debugging.Assert: inside a
// tf.function, TensorFlow's automatic control dependencies chain every
// stateful op without a resource input in program order, across the local
// replicas of a multi-device step too, and a replica's assertion after its
// collective then waits for another replica's assertion before that
// replica's collective (a hang). A data dependency also keeps the check
// from being pruned in TF1 graphs, which Assert needed guarded() for.
REGISTER_OP("DeepReduce>Check")
    .Input("value: T")
    .Input("condition: bool")
    .Output("checked: T")
    .Attr("message: string")
    .Attr("T: {bool, uint8, int8, uint16, int16, uint32, int32, uint64, int64, half, "
          "bfloat16, float, double}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle scalar;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 0, &scalar));
      c->set_output(0, c->input(0));
      return absl::OkStatus();
    });

}  // namespace deepreduce
