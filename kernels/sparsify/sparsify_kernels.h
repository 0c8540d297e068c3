// The OpKernels of the sparsifiers, one class per op for every device
// (kernels/common/devices.h): TopK and RandomK (SelectKOp), ThresholdSelect,
// and the segmented SegmentedTopK and SegmentedRandomK (SegmentedSelectOp).
// Argument checks (sparsify_args.h), output shapes, the empty cases and every
// message are this file's; the selection is the device's functor
// (sparsify_kernels.cc on the CPU, sparsify_kernels_gpu.cc on the GPU), which
// both pick exactly the same elements (sparsify.h: keys, tie rule, seeds).
// Host code with TF headers.
#ifndef DEEPREDUCE_KERNELS_SPARSIFY_SPARSIFY_KERNELS_H_
#define DEEPREDUCE_KERNELS_SPARSIFY_SPARSIFY_KERNELS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/common/devices.h"
#include "kernels/sparsify/sparsify.h"
#include "kernels/sparsify/sparsify_args.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace deepreduce {
namespace sparsify {

namespace functor {

// SelectK<Device, T, Tidx, kRandom>()(ctx, x, n, k, seed, idx, val): writes
// the k (0 < k <= n) selected positions of x's n elements in ascending order
// to idx and their values to val (outputs on the op's device): the k largest
// magnitudes (top-k), or the k largest random keys of `seed` (random-k).
template <typename Device, typename T, typename Tidx, bool kRandom>
struct SelectK;

// ThresholdSelect<Device, T, Tidx>: the two passes of a threshold selection,
// which keep their state in between:
//   Count(ctx, x, n, t_key, &total): how many magnitude keys are >= t_key;
//   Write(ctx, x, n, idx, val): writes those positions in ascending order and
//     their values (total > 0 entries each).
template <typename Device, typename T, typename Tidx>
struct ThresholdSelect;

// Fills idx and val (seg.total_k > 0 entries each, allocated on the op's
// device) with every segment's selection: top-k, or random-k with `seed`
// (sparsify.h). x is the op's input 0 on its device; seg's tables are in
// host memory.
template <typename Device, typename T, bool kRandom>
struct SegmentedSelect {
  absl::Status operator()(tensorflow::OpKernelContext* ctx, const Segments& seg, const T* x,
                          uint64_t seed, int64_t* idx, T* val) const;
};

}  // namespace functor

// TopK (kRandom false) and RandomK (true); k and seed are host tensors on
// every device.
template <typename Device, typename T, typename Tidx, bool kRandom>
class SelectKOp : public tensorflow::OpKernel {
 public:
  explicit SelectKOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(tensorflow::OpKernelContext* ctx) override {
    const tensorflow::Tensor& x_t = ctx->input(0);
    int64_t n, k, seed = 0;
    OP_REQUIRES_OK(ctx, CheckSize<Tidx>(x_t, &n));
    OP_REQUIRES_OK(ctx, ScalarInt64(ctx->input(1), "k", &k));
    if (kRandom) OP_REQUIRES_OK(ctx, ScalarInt64(ctx->input(2), "seed", &seed));
    OP_REQUIRES_OK(ctx, CheckK(k, n));
    tensorflow::Tensor *idx_t = nullptr, *val_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tensorflow::TensorShape({k}), &idx_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, tensorflow::TensorShape({k}), &val_t));
    if (k == 0) return;
    OP_REQUIRES_OK(ctx, functor::SelectK<Device, T, Tidx, kRandom>()(
                            ctx, x_t.flat<T>().data(), n, k, static_cast<uint64_t>(seed),
                            idx_t->flat<Tidx>().data(), val_t->flat<T>().data()));
  }
};

// ThresholdSelect: every element whose magnitude is >= threshold (a host
// tensor on every device); the output size is known after the first pass.
template <typename Device, typename T, typename Tidx>
class ThresholdSelectOp : public tensorflow::OpKernel {
 public:
  explicit ThresholdSelectOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(tensorflow::OpKernelContext* ctx) override {
    const tensorflow::Tensor& x_t = ctx->input(0);
    int64_t n;
    OP_REQUIRES_OK(ctx, CheckSize<Tidx>(x_t, &n));
    typename FloatOf<T>::F::U t_key;
    OP_REQUIRES_OK(ctx, ThresholdKey<T>(ctx->input(1), &t_key));
    const T* x = x_t.flat<T>().data();
    functor::ThresholdSelect<Device, T, Tidx> select;
    int64_t total = 0;
    OP_REQUIRES_OK(ctx, select.Count(ctx, x, n, t_key, &total));
    tensorflow::Tensor *idx_t = nullptr, *val_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tensorflow::TensorShape({total}), &idx_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, tensorflow::TensorShape({total}), &val_t));
    if (total == 0) return;
    OP_REQUIRES_OK(ctx, select.Write(ctx, x, n, idx_t->flat<Tidx>().data(),
                                     val_t->flat<T>().data()));
  }
};

// SegmentedTopK (kRandom false) and SegmentedRandomK (true) on any device:
// the arguments' checks, the output shapes and the empty case are this one
// class's; offsets, k and seed are host tensors on every device.
template <typename Device, typename T, bool kRandom>
class SegmentedSelectOp : public tensorflow::OpKernel {
 public:
  explicit SegmentedSelectOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(tensorflow::OpKernelContext* ctx) override {
    int64_t seed = 0;
    if (kRandom) OP_REQUIRES_OK(ctx, ScalarInt64(ctx->input(3), "seed", &seed));
    Segments seg;
    OP_REQUIRES_OK(ctx, CheckSegments(ctx->input(0), ctx->input(1), ctx->input(2), &seg));
    tensorflow::Tensor *idx_t = nullptr, *val_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tensorflow::TensorShape({seg.total_k}), &idx_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, tensorflow::TensorShape({seg.total_k}), &val_t));
    if (seg.total_k == 0) return;
    OP_REQUIRES_OK(ctx, functor::SegmentedSelect<Device, T, kRandom>()(
                            ctx, seg, ctx->input(0).flat<T>().data(),
                            static_cast<uint64_t>(seed), idx_t->flat<int64_t>().data(),
                            val_t->flat<T>().data()));
  }
};

}  // namespace sparsify
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_SPARSIFY_SPARSIFY_KERNELS_H_
