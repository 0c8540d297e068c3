// GPU half of tensor fusion (CUDA build only; the OpKernels: fusion_kernels.h,
// shared with the CPU): device-to-device copies queued on the op's stream
// through fusion_kernels.cu, and the GPU registrations. Nothing synchronizes.
#include <cstdint>
#include <vector>

#include "kernels/common/devices.h"
#include "kernels/common/gpu_op_util.h"
#include "kernels/fusion/fusion_args.h"
#include "kernels/fusion/fusion_gpu.h"
#include "kernels/fusion/fusion_kernels.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace deepreduce {
namespace fusion {

namespace functor {
template <>
struct CopyPieces<GpuDevice> {
  absl::Status operator()(::tensorflow::OpKernelContext* ctx, const std::vector<Piece>& pieces,
                          int64_t /*total_bytes*/, const char* op) const {
    void* stream = nullptr;
    TF_RETURN_IF_ERROR(gpu_util::StreamOf(ctx, &stream));
    std::vector<void*> dst;
    std::vector<const void*> src;
    std::vector<int64_t> bytes;
    for (const Piece& p : pieces) {
      dst.push_back(p.dst);
      src.push_back(p.src);
      bytes.push_back(p.bytes);
    }
    return gpu_util::CudaStatus(
        gpu::CopyPieces(dst.data(), src.data(), bytes.data(), static_cast<int>(dst.size()),
                        stream),
        op);
  }
};
}  // namespace functor

namespace {

#define DR_REGISTER_FUSION_GPU(T)                                              \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>FlattenConcat")                     \
                              .Device(::tensorflow::DEVICE_GPU)                \
                              .TypeConstraint<T>("T"),                         \
                          FlattenConcatOp<GpuDevice>);                         \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>SplitReshape")                      \
                              .Device(::tensorflow::DEVICE_GPU)                \
                              .TypeConstraint<T>("T"),                         \
                          SplitReshapeOp<GpuDevice>);
DR_REGISTER_FUSION_GPU(Eigen::half)
DR_REGISTER_FUSION_GPU(Eigen::bfloat16)
DR_REGISTER_FUSION_GPU(float)
DR_REGISTER_FUSION_GPU(double)
#undef DR_REGISTER_FUSION_GPU

}  // namespace
}  // namespace fusion
}  // namespace deepreduce
