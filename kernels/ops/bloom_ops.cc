// Op registrations and shape functions of the Bloom-filter index codec.
// Kernels live in kernels/bloom/; this file holds no computation. The
// user-facing documentation is on the Python wrappers (deepreduce_tf/ops/bloom.py).
#include <cstdint>

#include "kernels/bloom/bloom.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace deepreduce {
namespace {

using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

absl::Status CheckSizingAttrs(float fpr, int64_t num_bits, int64_t num_hashes) {
  if (num_bits < 0) {
    return absl::InvalidArgumentError(
        "num_bits must be 0 (derive it from fpr) or positive, got " +
        std::to_string(num_bits));
  }
  if (num_hashes < 0 || num_hashes > bloom::kMaxHashes) {
    return absl::InvalidArgumentError(
        "num_hashes must be 0 (derive it from fpr) or in [1, 32], got " +
        std::to_string(num_hashes));
  }
  if ((num_bits == 0 || num_hashes == 0) && !(fpr > 0.0f && fpr < 1.0f)) {
    return absl::InvalidArgumentError(
        "fpr must lie in (0, 1) when num_bits or num_hashes is derived from "
        "it, got " + std::to_string(fpr));
  }
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("DeepReduce>BloomFilterInsert")
    .Input("indices: Tidx")
    .Input("universe_size: int64")
    .Output("filter: uint8")
    .Output("filter_bits: int64")
    .Output("filter_hashes: int64")
    .Attr("Tidx: {int32, int64}")
    .Attr("fpr: float = 0.01")
    .Attr("num_bits: int = 0")
    .Attr("num_hashes: int = 0")
    .Attr("seed: int = 0")
    .SetShapeFn([](InferenceContext* c) -> absl::Status {
      ShapeHandle indices, unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &indices));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 0, &unused));
      float fpr;
      int64_t num_bits, num_hashes;
      TF_RETURN_IF_ERROR(c->GetAttr("fpr", &fpr));
      TF_RETURN_IF_ERROR(c->GetAttr("num_bits", &num_bits));
      TF_RETURN_IF_ERROR(c->GetAttr("num_hashes", &num_hashes));
      TF_RETURN_IF_ERROR(CheckSizingAttrs(fpr, num_bits, num_hashes));
      DimensionHandle k = c->Dim(indices, 0);
      if (num_bits > 0) {
        c->set_output(0, c->Vector(static_cast<int64_t>(
                             bloom::NumBytes(num_bits))));
      } else if (c->ValueKnown(k)) {
        c->set_output(0, c->Vector(static_cast<int64_t>(bloom::NumBytes(
                             bloom::BitsForFpr(c->Value(k), fpr)))));
      } else {
        c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
      }
      c->set_output(1, c->Scalar());
      c->set_output(2, c->Scalar());
      return absl::OkStatus();
    });

REGISTER_OP("DeepReduce>BloomFilterQuery")
    .Input("filter: uint8")
    .Input("universe_size: int64")
    .Input("filter_bits: int64")
    .Input("filter_hashes: int64")
    .Output("positives: out_idx")
    .Attr("out_idx: {int32, int64} = DT_INT64")
    .Attr("seed: int = 0")
    .SetShapeFn([](InferenceContext* c) -> absl::Status {
      ShapeHandle unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &unused));
      for (int i = 1; i < 4; ++i) {
        TF_RETURN_IF_ERROR(c->WithRank(c->input(i), 0, &unused));
      }
      c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
      return absl::OkStatus();
    });

REGISTER_OP("DeepReduce>BloomFilterSelect")
    .Input("filter: uint8")
    .Input("positives: Tidx")
    .Input("filter_bits: int64")
    .Input("filter_hashes: int64")
    .Input("k: int64")
    .Output("selected: Tidx")
    .Attr("Tidx: {int32, int64}")
    .Attr("policy: {'p0', 'leftmost', 'random', 'conflict_sets'}")
    .Attr("seed: int = 0")
    .Attr("policy_seed: int = 0")
    .SetShapeFn([](InferenceContext* c) -> absl::Status {
      ShapeHandle positives, unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &unused));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &positives));
      for (int i = 2; i < 5; ++i) {
        TF_RETURN_IF_ERROR(c->WithRank(c->input(i), 0, &unused));
      }
      std::string policy;
      TF_RETURN_IF_ERROR(c->GetAttr("policy", &policy));
      if (policy == "p0") {
        c->set_output(0, positives);
        return absl::OkStatus();
      }
      DimensionHandle k;
      TF_RETURN_IF_ERROR(c->MakeDimForScalarInput(4, &k));
      c->set_output(0, c->Vector(k));
      return absl::OkStatus();
    });

REGISTER_OP("DeepReduce>BuildInfo")
    .Output("info: string")
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape);

}  // namespace deepreduce
