// The OpKernels of the Bloom-filter ops that run on the CPU and the GPU,
// BloomFilterInsert and BloomFilterQuery: one class per op for every device
// (kernels/common/devices.h). Attributes, argument checks, filter sizing,
// output allocation and every error message are this file's; the passes over
// the indices and the positions are the device's functors (bloom_kernels.cc
// on the CPU, bloom_kernels_gpu.cc on the GPU). BloomFilterSelect is CPU-only
// (bloom_gpu.h says why) and stays in bloom_kernels.cc. Host code with TF
// headers.
#ifndef DEEPREDUCE_KERNELS_BLOOM_BLOOM_KERNELS_H_
#define DEEPREDUCE_KERNELS_BLOOM_BLOOM_KERNELS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "kernels/bloom/bloom.h"
#include "kernels/bloom/bloom_args.h"
#include "kernels/bloom/bloom_decode.h"
#include "kernels/common/devices.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"

namespace deepreduce {
namespace bloom {

// What an insert found wrong with its indices: first_bad is the smallest
// position found to hold an index outside [0, n) or a repeat of an index at
// another position (which copy is flagged depends on thread timing, on either
// device), or k if none; bad_value is the index there.
struct InsertCheck {
  int64_t first_bad;
  int64_t bad_value;
};

namespace functor {

// BloomInsert<Device, Tidx>()(ctx, layout, idx, k, n, words, &check):
// clears the filter (NumBytes(layout.num_bits) bytes at `words`, 4-byte
// aligned), sets the layout.num_hashes bits of each of the k indices and
// fills `check`. Returns an error status only for a failure of its own (the
// CPU's sorted-copy check of very sparse sets reports there too).
template <typename Device, typename Tidx>
struct BloomInsert;

// BloomQuery<Device, Tidx>: the two passes of a query over the positions
// [0, n), which keep their state (hit bitmap, per-block counts) in between:
//   Count(ctx, layout, filter, n, &total, &last_word): marks and counts the
//     positives, and returns the filter's last 32-bit word (for the padding
//     check) with them;
//   Write(ctx, n, out): writes the `total` positives in ascending order;
//   LastWord(ctx, filter, layout, &last_word): the last word alone.
// `filter` is the op's input 0 on its device (size checked by ParseFilter).
template <typename Device, typename Tidx>
struct BloomQuery;

}  // namespace functor

template <typename Device, typename Tidx>
class BloomFilterInsertOp : public tensorflow::OpKernel {
 public:
  explicit BloomFilterInsertOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
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

  void Compute(tensorflow::OpKernelContext* ctx) override {
    const tensorflow::Tensor& indices_t = ctx->input(0);
    OP_REQUIRES(ctx, indices_t.dims() == 1,
                absl::InvalidArgumentError("indices must be a vector, got shape " +
                                           indices_t.shape().DebugString()));
    int64_t n;
    OP_REQUIRES_OK(ctx,
                   ParseUniverse(ctx->input(1), tensorflow::DataTypeToEnum<Tidx>::v(), &n));
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

    tensorflow::Tensor* filter_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            0, tensorflow::TensorShape({static_cast<int64_t>(NumBytes(m))}),
                            &filter_t));
    // Outputs 1 and 2 are in host memory on every device (HostMemory on the GPU).
    tensorflow::Tensor* bits_t = nullptr;
    tensorflow::Tensor* hashes_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, tensorflow::TensorShape({}), &bits_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, tensorflow::TensorShape({}), &hashes_t));
    bits_t->scalar<int64_t>()() = static_cast<int64_t>(m);
    hashes_t->scalar<int64_t>()() = h;
    // TF aligns buffers to at least 64 bytes (256 on a GPU), so the output
    // can be written as uint32 words; byte order is little-endian on every
    // target.
    uint32_t* words = reinterpret_cast<uint32_t*>(filter_t->flat<uint8_t>().data());
    InsertCheck check{k, 0};
    OP_REQUIRES_OK(ctx, functor::BloomInsert<Device, Tidx>()(
                            ctx, layout, indices_t.flat<Tidx>().data(), k, n, words, &check));
    if (check.first_bad < k) {
      const int64_t bad = check.first_bad;
      const int64_t v = check.bad_value;
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

template <typename Device, typename Tidx>
class BloomFilterQueryOp : public tensorflow::OpKernel {
 public:
  explicit BloomFilterQueryOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("seed", &seed_));
  }

  // The padding bits past m are checked on the filter's last word, which the
  // first pass returns (on a GPU: one synchronization for the count and the
  // word). A corrupted filter is still reported before a bad universe_size.
  void Compute(tensorflow::OpKernelContext* ctx) override {
    const tensorflow::Tensor& filter_t = ctx->input(0);
    BloomLayout layout;
    OP_REQUIRES_OK(ctx, ParseFilter(filter_t, ctx->input(2), ctx->input(3), seed_,
                                    /*check_padding=*/false, &layout));
    const int64_t m = static_cast<int64_t>(layout.num_bits);
    const uint8_t* filter = filter_t.flat<uint8_t>().data();
    functor::BloomQuery<Device, Tidx> query;
    int64_t n;
    const absl::Status universe =
        ParseUniverse(ctx->input(1), tensorflow::DataTypeToEnum<Tidx>::v(), &n);
    if (!universe.ok()) {
      uint32_t last_word = 0;
      OP_REQUIRES_OK(ctx, query.LastWord(ctx, filter, layout, &last_word));
      OP_REQUIRES_OK(ctx, CheckFilterPadding(last_word, m));
      ctx->CtxFailure(universe);
      return;
    }
    int64_t total = 0;
    uint32_t last_word = 0;
    OP_REQUIRES_OK(ctx, query.Count(ctx, layout, filter, n, &total, &last_word));
    OP_REQUIRES_OK(ctx, CheckFilterPadding(last_word, m));
    tensorflow::Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tensorflow::TensorShape({total}), &out_t));
    if (total == 0) return;
    OP_REQUIRES_OK(ctx, query.Write(ctx, n, out_t->flat<Tidx>().data()));
  }

 private:
  int64_t seed_;
};

}  // namespace bloom
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_BLOOM_BLOOM_KERNELS_H_
