// The OpKernels of tensor fusion, one class per op for every device
// (kernels/common/devices.h): FlattenConcat copies N tensors back to back
// into one vector, SplitReshape gives one vector out as N tensors of the
// `shapes` attribute (views of its buffer where aligned, copies elsewhere).
// Checks, output allocation and the piece tables are this file's; the copies
// are the device's (functor::CopyPieces: fusion_kernels.cc on the CPU,
// fusion_kernels_gpu.cc on the GPU). Host code with TF headers.
#ifndef DEEPREDUCE_KERNELS_FUSION_FUSION_KERNELS_H_
#define DEEPREDUCE_KERNELS_FUSION_FUSION_KERNELS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kernels/common/devices.h"
#include "kernels/fusion/fusion_args.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace deepreduce {
namespace fusion {

namespace functor {
// Copies every piece (total_bytes in all) on the op's device; `op` names the
// op in error messages. Byte copies: the element type does not matter.
template <typename Device>
struct CopyPieces {
  absl::Status operator()(::tensorflow::OpKernelContext* ctx, const std::vector<Piece>& pieces,
                          int64_t total_bytes, const char* op) const;
};
}  // namespace functor

template <typename Device>
class FlattenConcatOp : public ::tensorflow::OpKernel {
 public:
  explicit FlattenConcatOp(::tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    std::vector<Piece> pieces;
    int64_t bytes = 0;
    OP_REQUIRES_OK(ctx, ConcatPieces(ctx, &pieces, &bytes));
    OP_REQUIRES_OK(ctx, functor::CopyPieces<Device>()(ctx, pieces, bytes, "FlattenConcat"));
  }
};

template <typename Device>
class SplitReshapeOp : public ::tensorflow::OpKernel {
 public:
  explicit SplitReshapeOp(::tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ParseShapes(ctx, &shapes_, &total_));
  }

  // An output whose bytes start at an aligned address of the input is a
  // view of the input's buffer (as TensorFlow's own Split does for aligned
  // dim-0 pieces, on every device: tensors are immutable, and a shared buffer
  // is never forwarded for in-place use); the others are copied. A bucket of
  // ResNet-50's weights is aligned almost everywhere: the per-device unpack
  // of a step's sum then copies next to nothing.
  void Compute(::tensorflow::OpKernelContext* ctx) override {
    const ::tensorflow::Tensor& flat = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckFlat(flat, total_));
    ::tensorflow::OpOutputList outputs;
    OP_REQUIRES_OK(ctx, ctx->output_list("values", &outputs));
    const char* in = flat.tensor_data().data();
    const int64_t width = static_cast<int64_t>(::tensorflow::DataTypeSize(flat.dtype()));
    std::vector<Piece> pieces;
    int64_t offset = 0, element = 0, copied = 0;
    for (size_t i = 0; i < shapes_.size(); ++i) {
      const int64_t count = shapes_[i].num_elements();
      const int64_t bytes = count * width;
      const bool aligned =
          reinterpret_cast<std::uintptr_t>(in + offset) % EIGEN_MAX_ALIGN_BYTES == 0;
      if (bytes > 0 && aligned) {
        ::tensorflow::Tensor view;
        OP_REQUIRES(ctx, view.CopyFrom(flat.Slice(element, element + count), shapes_[i]),
                    absl::InternalError("SplitReshape: piece " + std::to_string(i) +
                                        " cannot take its shape"));
        outputs.set(static_cast<int>(i), view);
      } else {
        ::tensorflow::Tensor* out = nullptr;
        OP_REQUIRES_OK(ctx, outputs.allocate(static_cast<int>(i), shapes_[i], &out));
        pieces.push_back({MutableBytes(out), in + offset, bytes});
        copied += bytes;
      }
      offset += bytes;
      element += count;
    }
    OP_REQUIRES_OK(ctx, functor::CopyPieces<Device>()(ctx, pieces, copied, "SplitReshape"));
  }

 private:
  std::vector<::tensorflow::TensorShape> shapes_;
  int64_t total_ = 0;
};

}  // namespace fusion
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_FUSION_FUSION_KERNELS_H_
