// CPU OpKernel of AllWithin (registration in kernels/ops/fusion_ops.cc).
//
//   AllWithin(x, limit)   true iff every element of x is finite and |x| <= limit
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

template <typename T>
class AllWithinOp : public OpKernel {
 public:
  explicit AllWithinOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    float limit = 0;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("limit", &limit));
    OP_REQUIRES(ctx, !(limit < 0), absl::InvalidArgumentError(
                                       "AllWithin: limit must be >= 0 (or inf)"));
    limit_ = limit;
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
      for (int64_t b = begin; b < end && ok.load(std::memory_order_relaxed); b += 1 << 20) {
        const int64_t e = std::min(end, b + (int64_t{1} << 20));
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

#define DR_REGISTER_WITHIN(T)                                                             \
  REGISTER_KERNEL_BUILDER(                                                                \
      Name("DeepReduce>AllWithin").Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), \
      AllWithinOp<T>);
DR_REGISTER_WITHIN(Eigen::half)
DR_REGISTER_WITHIN(Eigen::bfloat16)
DR_REGISTER_WITHIN(float)
DR_REGISTER_WITHIN(double)
#undef DR_REGISTER_WITHIN

}  // namespace
}  // namespace fusion
}  // namespace deepreduce
