// CPU OpKernels of tensor fusion (registrations in kernels/ops/fusion_ops.cc):
// FlattenConcat copies N tensors back to back into one vector, SplitReshape
// gives one vector out as N tensors of the `shapes` attribute (views of its
// buffer where aligned, copies elsewhere). Copies are byte copies (the
// element type does not matter), spread over the device's thread pool piece
// by piece when there is enough to copy.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/common/cpu_parallel.h"
#include "kernels/fusion/fusion_args.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace deepreduce {
namespace fusion {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

// Below this many bytes in total, one thread copies everything.
constexpr int64_t kParallelBytes = 1 << 20;

void CopyAll(OpKernelContext* ctx, const std::vector<Piece>& pieces, int64_t total_bytes) {
  auto copy = [&pieces](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if (pieces[i].bytes > 0) std::memcpy(pieces[i].dst, pieces[i].src, pieces[i].bytes);
    }
  };
  if (total_bytes < kParallelBytes || pieces.size() < 2) {
    copy(0, static_cast<int64_t>(pieces.size()));
    return;
  }
  const int64_t per_piece = total_bytes / static_cast<int64_t>(pieces.size()) + 1;
  CpuPool(ctx)->ParallelFor(static_cast<int64_t>(pieces.size()), per_piece, copy);
}

class FlattenConcatOp : public OpKernel {
 public:
  explicit FlattenConcatOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    std::vector<Piece> pieces;
    int64_t bytes = 0;
    OP_REQUIRES_OK(ctx, ConcatPieces(ctx, &pieces, &bytes));
    CopyAll(ctx, pieces, bytes);
  }
};

class SplitReshapeOp : public OpKernel {
 public:
  explicit SplitReshapeOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ParseShapes(ctx, &shapes_, &total_));
  }

  // An output whose bytes start at an aligned address of the input is a
  // view of the input's buffer (as TensorFlow's own Split does for aligned
  // dim-0 pieces: tensors are immutable, and a shared buffer is never
  // forwarded for in-place use); the others are copied. A bucket of
  // ResNet-50's weights is aligned almost everywhere: the per-device unpack
  // of a step's sum then copies next to nothing.
  void Compute(OpKernelContext* ctx) override {
    const Tensor& flat = ctx->input(0);
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
        Tensor view;
        OP_REQUIRES(ctx, view.CopyFrom(flat.Slice(element, element + count), shapes_[i]),
                    absl::InternalError("SplitReshape: piece " + std::to_string(i) +
                                        " cannot take its shape"));
        outputs.set(static_cast<int>(i), view);
      } else {
        Tensor* out = nullptr;
        OP_REQUIRES_OK(ctx, outputs.allocate(static_cast<int>(i), shapes_[i], &out));
        pieces.push_back({MutableBytes(out), in + offset, bytes});
        copied += bytes;
      }
      offset += bytes;
      element += count;
    }
    CopyAll(ctx, pieces, copied);
  }

 private:
  std::vector<TensorShape> shapes_;
  int64_t total_ = 0;
};

#define DR_REGISTER_FUSION(T)                                                  \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>FlattenConcat")                     \
                              .Device(::tensorflow::DEVICE_CPU)                \
                              .TypeConstraint<T>("T"),                         \
                          FlattenConcatOp);                                    \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>SplitReshape")                      \
                              .Device(::tensorflow::DEVICE_CPU)                \
                              .TypeConstraint<T>("T"),                         \
                          SplitReshapeOp);
DR_REGISTER_FUSION(Eigen::half)
DR_REGISTER_FUSION(Eigen::bfloat16)
DR_REGISTER_FUSION(float)
DR_REGISTER_FUSION(double)
#undef DR_REGISTER_FUSION

}  // namespace
}  // namespace fusion
}  // namespace deepreduce
