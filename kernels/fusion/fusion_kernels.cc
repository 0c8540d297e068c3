// CPU half of tensor fusion (the OpKernels: fusion_kernels.h): byte copies
// spread over the device's thread pool piece by piece when there is enough
// to copy, and the CPU registrations (ops: kernels/ops/fusion_ops.cc).
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/common/cpu_parallel.h"
#include "kernels/common/devices.h"
#include "kernels/fusion/fusion_args.h"
#include "kernels/fusion/fusion_kernels.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace deepreduce {
namespace fusion {

// Below this many bytes in total, one thread copies everything.
constexpr int64_t kParallelBytes = 1 << 20;

namespace functor {
template <>
struct CopyPieces<CpuDevice> {
  absl::Status operator()(::tensorflow::OpKernelContext* ctx, const std::vector<Piece>& pieces,
                          int64_t total_bytes, const char* /*op*/) const {
    auto copy = [&pieces](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        if (pieces[i].bytes > 0) std::memcpy(pieces[i].dst, pieces[i].src, pieces[i].bytes);
      }
    };
    if (total_bytes < kParallelBytes || pieces.size() < 2) {
      copy(0, static_cast<int64_t>(pieces.size()));
      return absl::OkStatus();
    }
    const int64_t per_piece = total_bytes / static_cast<int64_t>(pieces.size()) + 1;
    CpuPool(ctx)->ParallelFor(static_cast<int64_t>(pieces.size()), per_piece, copy);
    return absl::OkStatus();
  }
};
}  // namespace functor

namespace {

#define DR_REGISTER_FUSION(T)                                                  \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>FlattenConcat")                     \
                              .Device(::tensorflow::DEVICE_CPU)                \
                              .TypeConstraint<T>("T"),                         \
                          FlattenConcatOp<CpuDevice>);                         \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>SplitReshape")                      \
                              .Device(::tensorflow::DEVICE_CPU)                \
                              .TypeConstraint<T>("T"),                         \
                          SplitReshapeOp<CpuDevice>);
DR_REGISTER_FUSION(Eigen::half)
DR_REGISTER_FUSION(Eigen::bfloat16)
DR_REGISTER_FUSION(float)
DR_REGISTER_FUSION(double)
#undef DR_REGISTER_FUSION

}  // namespace
}  // namespace fusion
}  // namespace deepreduce
