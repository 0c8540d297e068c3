// GPU OpKernels of the Bloom-filter index codec (CUDA build only: setup.py
// compiles *_gpu.cc files when DEEPREDUCE_TF_CUDA=1). They validate their
// arguments exactly as the CPU kernels do (bloom_args.h, same messages) and
// run the CUDA kernels of bloom_kernels.cu through the launchers of
// bloom_gpu.h on the op's stream. Checks that need device data (index range,
// repeats, the filter's padding bits) are made on the device and reported
// after a device-to-host copy of the result, so these ops synchronize the
// stream once (insert) or once per pass-1 (query).
//
// BloomFilterSelect has no GPU kernel (see bloom_gpu.h); TF runs it on the CPU.
#include <cstdint>
#include <string>

#include "kernels/bloom/bloom.h"
#include "kernels/bloom/bloom_args.h"
#include "kernels/bloom/bloom_gpu.h"
#include "tensorflow/core/framework/device_base.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "xla/stream_executor/stream.h"

namespace deepreduce {
namespace bloom {
namespace {

using ::tensorflow::DataTypeToEnum;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

absl::Status StreamOf(OpKernelContext* ctx, void** stream) {
  const ::tensorflow::DeviceContext* dc = ctx->op_device_context();
  if (dc == nullptr || dc->stream() == nullptr) {
    return absl::InternalError("the GPU kernel has no device stream");
  }
  *stream = dc->stream()->platform_specific_handle().stream;
  if (*stream == nullptr) {
    return absl::InternalError("the GPU stream has no CUDA handle");
  }
  return absl::OkStatus();
}

absl::Status CudaStatus(const gpu::GpuStatus& s, const char* op) {
  if (s.ok()) return absl::OkStatus();
  return absl::InternalError(std::string(op) + ": CUDA error while " + s.step +
                             ": " + gpu::ErrorString(s.cuda_error));
}

// Scratch as a uint8 device tensor; at least one byte so that the pointer is
// valid even when nothing is needed.
absl::Status AllocateScratch(OpKernelContext* ctx, size_t bytes, Tensor* t) {
  return ctx->allocate_temp(
      tensorflow::DT_UINT8,
      TensorShape({static_cast<int64_t>(bytes > 0 ? bytes : 1)}), t);
}

inline gpu::GpuStatus LaunchInsert(const BloomLayout& layout, const int32_t* idx,
                                   int64_t k, int64_t n, uint32_t* words,
                                   void* scratch, size_t bytes, void* stream,
                                   gpu::InsertResult* r) {
  return gpu::InsertInt32(layout, idx, k, n, words, scratch, bytes, stream, r);
}
inline gpu::GpuStatus LaunchInsert(const BloomLayout& layout, const int64_t* idx,
                                   int64_t k, int64_t n, uint32_t* words,
                                   void* scratch, size_t bytes, void* stream,
                                   gpu::InsertResult* r) {
  return gpu::InsertInt64(layout, idx, k, n, words, scratch, bytes, stream, r);
}
inline gpu::GpuStatus LaunchQueryWrite(int64_t n, const void* scratch, size_t bytes,
                                       int32_t* out, void* stream) {
  return gpu::QueryWriteInt32(n, scratch, bytes, out, stream);
}
inline gpu::GpuStatus LaunchQueryWrite(int64_t n, const void* scratch, size_t bytes,
                                       int64_t* out, void* stream) {
  return gpu::QueryWriteInt64(n, scratch, bytes, out, stream);
}

// The padding check of ParseFilter(check_padding=true), on the filter's last
// 32-bit word (the only one that holds bits past m), which the query copies
// to the host with its count. Same message as the CPU kernel.
absl::Status CheckPadding(uint32_t last_word, uint64_t m) {
  const uint64_t word_start = (NumWords(m) - 1) * 32;
  for (uint64_t b = m; b < word_start + 32; ++b) {
    if ((last_word >> (b - word_start)) & 1u) {
      return absl::InvalidArgumentError(
          "filter has bit " + std::to_string(b) + " set beyond filter_bits=" +
          std::to_string(m) + "; the filter is corrupted");
    }
  }
  return absl::OkStatus();
}

template <typename Tidx>
class BloomFilterInsertGpuOp : public OpKernel {
 public:
  explicit BloomFilterInsertGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("fpr", &fpr_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_bits", &num_bits_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_hashes", &num_hashes_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("seed", &seed_));
    OP_REQUIRES(ctx, num_bits_ >= 0 && num_bits_ <= kMaxBits,
                absl::InvalidArgumentError(
                    "num_bits must be 0 (derive from fpr) or in [1, 2^34], got " +
                    std::to_string(num_bits_)));
    OP_REQUIRES(ctx, num_hashes_ >= 0 && num_hashes_ <= kMaxHashes,
                absl::InvalidArgumentError(
                    "num_hashes must be 0 (derive from fpr) or in [1, 32], got " +
                    std::to_string(num_hashes_)));
    OP_REQUIRES(ctx,
                (num_bits_ > 0 && num_hashes_ > 0) || (fpr_ > 0.0f && fpr_ < 1.0f),
                absl::InvalidArgumentError(
                    "fpr must lie in (0, 1) when num_bits or num_hashes is "
                    "derived from it, got " + std::to_string(fpr_)));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& indices_t = ctx->input(0);
    OP_REQUIRES(ctx, indices_t.dims() == 1,
                absl::InvalidArgumentError("indices must be a vector, got shape " +
                                           indices_t.shape().DebugString()));
    int64_t n;
    OP_REQUIRES_OK(ctx, ParseUniverse(ctx->input(1), DataTypeToEnum<Tidx>::v(), &n));
    const int64_t k = indices_t.NumElements();
    OP_REQUIRES(ctx, k <= n,
                absl::InvalidArgumentError(
                    "cannot insert " + std::to_string(k) +
                    " distinct indices into a universe of universe_size=" +
                    std::to_string(n) + " positions"));
    const uint64_t m = num_bits_ > 0 ? static_cast<uint64_t>(num_bits_)
                                     : BitsForFpr(k, fpr_);
    const uint32_t h = num_hashes_ > 0 ? static_cast<uint32_t>(num_hashes_)
                                       : HashesForFpr(fpr_);
    OP_REQUIRES(ctx, m <= static_cast<uint64_t>(kMaxBits),
                absl::InvalidArgumentError(
                    "the filter would need " + std::to_string(m) +
                    " bits, more than 2^34; raise fpr"));
    const BloomLayout layout = MakeLayout(m, h, static_cast<uint64_t>(seed_));
    void* stream = nullptr;
    OP_REQUIRES_OK(ctx, StreamOf(ctx, &stream));

    Tensor* filter_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            0, TensorShape({static_cast<int64_t>(NumBytes(m))}),
                            &filter_t));
    // Outputs 1 and 2 are HostMemory (see the registration).
    Tensor* bits_t = nullptr;
    Tensor* hashes_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({}), &bits_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({}), &hashes_t));
    bits_t->scalar<int64_t>()() = static_cast<int64_t>(m);
    hashes_t->scalar<int64_t>()() = h;

    // TF's GPU allocator aligns buffers to at least 256 bytes: the filter
    // can be written as uint32 words.
    uint32_t* words = reinterpret_cast<uint32_t*>(filter_t->flat<uint8_t>().data());
    Tensor scratch_t;
    const size_t scratch_bytes = k > 0 ? gpu::InsertScratchBytes(n) : 0;
    OP_REQUIRES_OK(ctx, AllocateScratch(ctx, scratch_bytes, &scratch_t));
    gpu::InsertResult result;
    OP_REQUIRES_OK(
        ctx, CudaStatus(LaunchInsert(layout, indices_t.flat<Tidx>().data(), k, n, words,
                                     scratch_t.flat<uint8_t>().data(), scratch_bytes,
                                     stream, &result),
                        "BloomFilterInsert"));
    if (result.first_bad < k) {
      const int64_t bad = result.first_bad;
      const int64_t v = result.bad_value;
      OP_REQUIRES(ctx, v >= 0 && v < n,
                  absl::InvalidArgumentError(
                      "indices[" + std::to_string(bad) + "] = " + std::to_string(v) +
                      " is outside [0, universe_size=" + std::to_string(n) + ")"));
      ctx->CtxFailure(absl::InvalidArgumentError(
          "indices must be distinct, but " + std::to_string(v) +
          " occurs more than once (first repeat found at position " +
          std::to_string(bad) + " or earlier)"));
    }
  }

 private:
  float fpr_;
  int64_t num_bits_;
  int64_t num_hashes_;
  int64_t seed_;
};

template <typename Tidx>
class BloomFilterQueryGpuOp : public OpKernel {
 public:
  explicit BloomFilterQueryGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("seed", &seed_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& filter_t = ctx->input(0);
    // The filter is in device memory: the padding bits are checked below, on
    // the last word the launcher copies back.
    BloomLayout layout;
    OP_REQUIRES_OK(ctx, ParseFilter(filter_t, ctx->input(2), ctx->input(3), seed_,
                                    /*check_padding=*/false, &layout));
    void* stream = nullptr;
    OP_REQUIRES_OK(ctx, StreamOf(ctx, &stream));
    const uint8_t* d_filter = filter_t.flat<uint8_t>().data();
    int64_t n;
    const absl::Status universe =
        ParseUniverse(ctx->input(1), DataTypeToEnum<Tidx>::v(), &n);
    if (!universe.ok()) {
      // The CPU kernel reports a corrupted filter before a bad universe_size.
      uint32_t last_word = 0;
      OP_REQUIRES_OK(ctx, CudaStatus(gpu::CopyToHost(&last_word,
                                                     d_filter + NumBytes(layout.num_bits) - 4,
                                                     sizeof(last_word), stream),
                                     "BloomFilterQuery"));
      OP_REQUIRES_OK(ctx, CheckPadding(last_word, layout.num_bits));
      ctx->CtxFailure(universe);
      return;
    }

    gpu::GpuStatus st;
    const size_t scratch_bytes = gpu::QueryScratchBytes(n, &st);
    OP_REQUIRES_OK(ctx, CudaStatus(st, "BloomFilterQuery"));
    Tensor scratch_t;
    OP_REQUIRES_OK(ctx, AllocateScratch(ctx, scratch_bytes, &scratch_t));
    void* scratch = scratch_t.flat<uint8_t>().data();
    int64_t total = 0;
    uint32_t last_word = 0;
    OP_REQUIRES_OK(ctx, CudaStatus(gpu::QueryCount(layout, d_filter, n, scratch,
                                                   scratch_bytes, stream, &total,
                                                   &last_word),
                                   "BloomFilterQuery"));
    OP_REQUIRES_OK(ctx, CheckPadding(last_word, layout.num_bits));
    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({total}), &out_t));
    if (total == 0) return;
    OP_REQUIRES_OK(ctx, CudaStatus(LaunchQueryWrite(n, scratch, scratch_bytes,
                                                    out_t->flat<Tidx>().data(), stream),
                                   "BloomFilterQuery"));
  }

 private:
  int64_t seed_;
};

#define REGISTER_BLOOM_GPU(T)                                              \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>BloomFilterInsert")            \
                              .Device(::tensorflow::DEVICE_GPU)           \
                              .HostMemory("universe_size")                \
                              .HostMemory("filter_bits")                  \
                              .HostMemory("filter_hashes")                \
                              .TypeConstraint<T>("Tidx"),                 \
                          BloomFilterInsertGpuOp<T>);                      \
  REGISTER_KERNEL_BUILDER(Name("DeepReduce>BloomFilterQuery")             \
                              .Device(::tensorflow::DEVICE_GPU)           \
                              .HostMemory("universe_size")                \
                              .HostMemory("filter_bits")                  \
                              .HostMemory("filter_hashes")                \
                              .TypeConstraint<T>("out_idx"),              \
                          BloomFilterQueryGpuOp<T>);

REGISTER_BLOOM_GPU(int32_t);
REGISTER_BLOOM_GPU(int64_t);
#undef REGISTER_BLOOM_GPU

}  // namespace
}  // namespace bloom
}  // namespace deepreduce
