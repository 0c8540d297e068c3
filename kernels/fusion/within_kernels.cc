// CPU OpKernels of AllWithin and AddWithin (registration in
// kernels/ops/fusion_ops.cc).
//
//   AllWithin(x, limit)      true iff every element of x is finite and |x| <= limit
//   AddWithin(x, y, limit)   (x + y, AllWithin(x + y, limit)) in one pass: error
//                            feedback's compensation and the range check
//                            together (x + y rounds as TensorFlow's AddV2 does:
//                            in float for the 16-bit types, Eigen's rule)
//
// The check every compressed step makes before coding its values (NaN, Inf,
// or a value beyond the value codec's range sends the step dense). As
// TensorFlow ops it is abs -> less_equal -> reduce_all: two temporaries the
// size of the bucket and three passes; here one read, in parallel chunks,
// and nothing allocated. CPU-only: under a GPU the Python side uses
// TensorFlow's ops (deepreduce_tf/ops/fusion.py).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "kernels/common/cpu_parallel.h"
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

// Wide type of the comparison: float for the 16-bit types and float,
// double for double (exact for every input value).
template <typename T>
struct Wide {
  using type = float;
};
template <>
struct Wide<double> {
  using type = double;
};

// The limit attribute: >= 0 (inf allowed); NaN is refused too.
absl::Status GetLimit(OpKernelConstruction* ctx, const char* op, double* limit) {
  float value = 0;
  TF_RETURN_IF_ERROR(ctx->GetAttr("limit", &value));
  if (!(value >= 0)) {
    return absl::InvalidArgumentError(std::string(op) + ": limit must be >= 0 (or inf), got " +
                                      std::to_string(value));
  }
  *limit = value;
  return absl::OkStatus();
}

// Elements per early-exit check of AllWithin: 2^20, counted in 32 bits.
constexpr int64_t kWithinChunk = int64_t{1} << 20;

template <typename T>
class AllWithinOp : public OpKernel {
 public:
  explicit AllWithinOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, GetLimit(ctx, "AllWithin", &limit_));
  }

  void Compute(OpKernelContext* ctx) override {
    using W = typename Wide<T>::type;
    const Tensor& x = ctx->input(0);
    const T* data = x.flat<T>().data();
    const int64_t n = x.NumElements();
    const W limit = static_cast<W>(limit_);
    // One bound: |x| <= min(limit, the type's max) is false for NaN and Inf.
    const W bound = std::min(limit, std::numeric_limits<W>::max());
    std::atomic<bool> ok{true};
    CpuPool(ctx)->ParallelFor(n, 8, [&](int64_t begin, int64_t end) {
      // Counted, not branched on, in 32-bit counters: the loop vectorises.
      for (int64_t b = begin; b < end && ok.load(std::memory_order_relaxed); b += kWithinChunk) {
        const int64_t e = std::min(end, b + kWithinChunk);
        int32_t outside = 0;
        for (int64_t i = b; i < e; ++i) outside += !(std::abs(static_cast<W>(data[i])) <= bound);
        if (outside) ok.store(false, std::memory_order_relaxed);
      }
    });
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<bool>()() = ok.load();
  }

 private:
  double limit_ = 0;
};

template <typename T>
class AddWithinOp : public OpKernel {
 public:
  explicit AddWithinOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, GetLimit(ctx, "AddWithin", &limit_));
  }

  void Compute(OpKernelContext* ctx) override {
    using W = typename Wide<T>::type;
    const Tensor& x_t = ctx->input(0);
    const Tensor& y_t = ctx->input(1);
    OP_REQUIRES(ctx, x_t.shape() == y_t.shape(),
                absl::InvalidArgumentError("AddWithin: x and y must have the same shape, got " +
                                           x_t.shape().DebugString() + " and " +
                                           y_t.shape().DebugString()));
    Tensor* sum_t = nullptr;
    // The sum takes the buffer of x or y when nothing else holds it.
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0, 1}, 0, x_t.shape(), &sum_t));
    const T* x = x_t.flat<T>().data();
    const T* y = y_t.flat<T>().data();
    T* sum = sum_t->flat<T>().data();
    const int64_t n = x_t.NumElements();
    const W bound = std::min(static_cast<W>(limit_), std::numeric_limits<W>::max());
    std::atomic<bool> ok{true};
    CpuPool(ctx)->ParallelFor(n, 12, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; b += kWithinChunk) {
        const int64_t e = std::min(end, b + kWithinChunk);
        int32_t outside = 0;
        for (int64_t i = b; i < e; ++i) {
          const T s = static_cast<T>(static_cast<W>(x[i]) + static_cast<W>(y[i]));
          sum[i] = s;
          outside += !(std::abs(static_cast<W>(s)) <= bound);
        }
        if (outside) ok.store(false, std::memory_order_relaxed);
      }
    });
    Tensor* fits = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({}), &fits));
    fits->scalar<bool>()() = ok.load();
  }

 private:
  double limit_ = 0;
};

#define DR_REGISTER_WITHIN(T)                                                             \
  REGISTER_KERNEL_BUILDER(                                                                \
      Name("DeepReduce>AllWithin").Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), \
      AllWithinOp<T>);                                                                    \
  REGISTER_KERNEL_BUILDER(                                                                \
      Name("DeepReduce>AddWithin").Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), \
      AddWithinOp<T>);
DR_REGISTER_WITHIN(Eigen::half)
DR_REGISTER_WITHIN(Eigen::bfloat16)
DR_REGISTER_WITHIN(float)
DR_REGISTER_WITHIN(double)
#undef DR_REGISTER_WITHIN

}  // namespace
}  // namespace fusion
}  // namespace deepreduce
