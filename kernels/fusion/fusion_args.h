// Validation and layout of the fusion ops, shared by the CPU and GPU
// OpKernels (TensorFlow headers; never included by CUDA sources): both
// devices check the same things with the same messages, and compute the same
// piece tables (what is copied where, in bytes).
#ifndef DEEPREDUCE_KERNELS_FUSION_FUSION_ARGS_H_
#define DEEPREDUCE_KERNELS_FUSION_FUSION_ARGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace deepreduce {
namespace fusion {

// The `shapes` attribute of SplitReshape, parsed once in the constructor.
inline absl::Status ParseShapes(::tensorflow::OpKernelConstruction* ctx,
                                std::vector<::tensorflow::TensorShape>* shapes,
                                int64_t* total) {
  std::vector<::tensorflow::PartialTensorShape> partial;
  TF_RETURN_IF_ERROR(ctx->GetAttr("shapes", &partial));
  int n = 0;
  TF_RETURN_IF_ERROR(ctx->GetAttr("N", &n));
  if (static_cast<int>(partial.size()) != n) {
    return absl::InvalidArgumentError("shapes has " + std::to_string(partial.size()) +
                                      " entries but N=" + std::to_string(n));
  }
  *total = 0;
  for (size_t i = 0; i < partial.size(); ++i) {
    ::tensorflow::TensorShape s;
    if (!partial[i].AsTensorShape(&s)) {
      return absl::InvalidArgumentError("shapes[" + std::to_string(i) + "] = " +
                                        partial[i].DebugString() + " is not fully defined");
    }
    *total += s.num_elements();
    shapes->push_back(s);
  }
  return absl::OkStatus();
}

// SplitReshape's input must be a vector of exactly `total` elements.
inline absl::Status CheckFlat(const ::tensorflow::Tensor& flat, int64_t total) {
  if (flat.dims() != 1) {
    return absl::InvalidArgumentError("flat must be a vector, got shape " +
                                      flat.shape().DebugString());
  }
  if (flat.NumElements() != total) {
    return absl::InvalidArgumentError(
        "flat has " + std::to_string(flat.NumElements()) +
        " elements but the shapes hold " + std::to_string(total) +
        ": a vector of another layout was given to SplitReshape");
  }
  return absl::OkStatus();
}

// One contiguous copy: bytes from src to dst.
struct Piece {
  void* dst;
  const void* src;
  int64_t bytes;
};

inline char* MutableBytes(::tensorflow::Tensor* t) {
  return const_cast<char*>(t->tensor_data().data());
}

// FlattenConcat: allocates the output and lists one piece per input, back to
// back. Returns the total bytes through *total_bytes.
inline absl::Status ConcatPieces(::tensorflow::OpKernelContext* ctx, std::vector<Piece>* pieces,
                                 int64_t* total_bytes) {
  ::tensorflow::OpInputList values;
  TF_RETURN_IF_ERROR(ctx->input_list("values", &values));
  int64_t total = 0;
  for (int i = 0; i < values.size(); ++i) total += values[i].NumElements();
  ::tensorflow::Tensor* flat = nullptr;
  TF_RETURN_IF_ERROR(ctx->allocate_output(0, ::tensorflow::TensorShape({total}), &flat));
  char* out = MutableBytes(flat);
  int64_t offset = 0;
  pieces->reserve(values.size());
  for (int i = 0; i < values.size(); ++i) {
    const auto data = values[i].tensor_data();
    pieces->push_back({out + offset, data.data(), static_cast<int64_t>(data.size())});
    offset += static_cast<int64_t>(data.size());
  }
  *total_bytes = offset;
  return absl::OkStatus();
}

}  // namespace fusion
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_FUSION_FUSION_ARGS_H_
