// CPU OpKernels of ScatterSum and ScatterSubtract (registrations in
// kernels/ops/fusion_ops.cc; cores in kernels/fusion/scatter.h).
//
//   ScatterSum(positions, values, tail, n)   zeros [n], values added in order,
//                                         then tail (a bucket's dense section:
//                                         no concat copy of the whole vector)
//   ScatterSubtract(rest, positions, values)   rest with values subtracted
//                                         (rest's buffer reused when it can be)
//
// The updates are sequential on purpose: they must apply in order (bit-exact
// sums), and the K ~ 1 % updates of a bucket cost far less than the zero
// fill or copy of the bucket, the only dense pass (spread over the pool). CPU-only: under a GPU the
// Python side uses TensorFlow's scatter ops (deepreduce_tf/ops/fusion.py).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "kernels/common/cpu_parallel.h"

#include "kernels/fusion/scatter.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace deepreduce {
namespace fusion {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::TensorShapeUtils;

absl::Status CheckUpdates(const Tensor& positions, const Tensor& values, int64_t n,
                          const char* op) {
  if (!TensorShapeUtils::IsVector(positions.shape()) ||
      !TensorShapeUtils::IsVector(values.shape()) ||
      positions.NumElements() != values.NumElements()) {
    return absl::InvalidArgumentError(
        std::string(op) + ": positions and values must be vectors of one length, got " +
        positions.shape().DebugString() + " and " + values.shape().DebugString());
  }
  const int64_t bad = FirstBadPosition(positions.flat<int64_t>().data(),
                                       positions.NumElements(), n);
  if (bad >= 0) {
    return absl::InvalidArgumentError(
        std::string(op) + ": positions[" + std::to_string(bad) + "] = " +
        std::to_string(positions.flat<int64_t>()(bad)) + " is outside [0, " +
        std::to_string(n) + ")");
  }
  return absl::OkStatus();
}

template <typename T>
class ScatterSumOp : public OpKernel {
 public:
  explicit ScatterSumOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("n", &n_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& positions = ctx->input(0);
    const Tensor& values = ctx->input(1);
    const Tensor& tail = ctx->input(2);
    OP_REQUIRES_OK(ctx, CheckUpdates(positions, values, n_, "ScatterSum"));
    OP_REQUIRES(ctx, TensorShapeUtils::IsVector(tail.shape()),
                absl::InvalidArgumentError("ScatterSum: tail must be a vector, got " +
                                           tail.shape().DebugString()));
    const int64_t m = tail.NumElements();
    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n_ + m}), &out_t));
    T* out = out_t->flat<T>().data();
    const T* tail_data = tail.flat<T>().data();
    const int64_t total = n_ + m;
    CpuPool(ctx)->ParallelFor(total, 1, [&](int64_t begin, int64_t end) {
      const int64_t zero_end = std::min(end, n_);
      if (begin < zero_end) std::fill(out + begin, out + zero_end, T(0));
      const int64_t copy_begin = std::max(begin, n_);
      if (copy_begin < end) {
        std::memcpy(out + copy_begin, tail_data + (copy_begin - n_),
                    sizeof(T) * (end - copy_begin));
      }
    });
    ScatterInOrder<false>(out, positions.flat<int64_t>().data(), values.flat<T>().data(),
                          values.NumElements());
  }

 private:
  int64_t n_ = 0;
};

template <typename T>
class ScatterSubtractOp : public OpKernel {
 public:
  explicit ScatterSubtractOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& rest = ctx->input(0);
    const Tensor& positions = ctx->input(1);
    const Tensor& values = ctx->input(2);
    OP_REQUIRES(ctx, TensorShapeUtils::IsVector(rest.shape()),
                absl::InvalidArgumentError("ScatterSubtract: rest must be a vector, got " +
                                           rest.shape().DebugString()));
    const int64_t n = rest.NumElements();
    OP_REQUIRES_OK(ctx, CheckUpdates(positions, values, n, "ScatterSubtract"));
    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, rest.shape(), &out_t));
    T* out = out_t->flat<T>().data();
    const T* in = rest.flat<T>().data();
    if (out != in && n > 0) std::memcpy(out, in, sizeof(T) * n);
    ScatterInOrder<true>(out, positions.flat<int64_t>().data(), values.flat<T>().data(),
                         values.NumElements());
  }
};

#define DR_REGISTER_SCATTER(T)                                                            \
  REGISTER_KERNEL_BUILDER(                                                                \
      Name("DeepReduce>ScatterSum").Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), \
      ScatterSumOp<T>);                                                                   \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>ScatterSubtract")                              \
                              .Device(::tensorflow::DEVICE_CPU)                           \
                              .TypeConstraint<T>("T"),                                    \
                          ScatterSubtractOp<T>);
DR_REGISTER_SCATTER(Eigen::half)
DR_REGISTER_SCATTER(Eigen::bfloat16)
DR_REGISTER_SCATTER(float)
DR_REGISTER_SCATTER(double)
#undef DR_REGISTER_SCATTER

}  // namespace
}  // namespace fusion
}  // namespace deepreduce
