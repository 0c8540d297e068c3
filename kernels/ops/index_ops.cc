// Op registrations and shape functions of the lossless index codecs. Kernels
// live in kernels/index/; this file holds no computation. Formats are defined
// in kernels/index/{index_format,rle,golomb}.h; the user-facing documentation
// is on the Python wrappers (deepreduce_tf/ops/index.py).
//
// One op pair per codec:
//   DeepReduce>IndexEncode<Codec>(indices: Tidx, universe_size: int64) -> payload: uint8
//   DeepReduce>IndexDecode<Codec>(payload: uint8) -> indices: out_idx
// for Codec in {Int32, Bitmap, Rle, Golomb}.
#include <cstdint>

#include "kernels/index/index_format.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor.h"

namespace deepreduce {
namespace {

using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

// Payload size as a function of (n, K) for the codecs whose size depends on
// nothing else; the data-dependent codecs (rle, golomb) pass nullptr.
using SizeFn = int64_t (*)(int64_t n, int64_t k);

int64_t Int32PayloadSize(int64_t n, int64_t k) {
  return index::CommonHeaderSize(n, k) + 4 * k;
}
int64_t BitmapPayloadSize(int64_t n, int64_t k) {
  return index::CommonHeaderSize(n, k) + static_cast<int64_t>(index::BitmapBytes(n));
}

// indices: a vector; universe_size: a scalar. The payload length is known
// statically only when K is a static dim, n a constant and the codec's size
// depends on nothing else.
absl::Status EncodeShape(InferenceContext* c, SizeFn size) {
  ShapeHandle indices, unused;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &indices));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 0, &unused));
  const DimensionHandle k = c->Dim(indices, 0);
  const ::tensorflow::Tensor* n_t = c->input_tensor(1);
  if (size != nullptr && c->ValueKnown(k) && n_t != nullptr) {
    const int64_t n = n_t->scalar<int64_t>()();
    if (n >= 0 && c->Value(k) <= n) {
      c->set_output(0, c->Vector(size(n, c->Value(k))));
      return absl::OkStatus();
    }
  }
  c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
  return absl::OkStatus();
}

absl::Status DecodeShape(InferenceContext* c) {
  ShapeHandle unused;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &unused));
  c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
  return absl::OkStatus();
}

}  // namespace

#define DR_REGISTER_INDEX_CODEC_OPS(Codec, SIZE_FN)                     \
  REGISTER_OP("DeepReduce>IndexEncode" #Codec)                          \
      .Input("indices: Tidx")                                           \
      .Input("universe_size: int64")                                    \
      .Output("payload: uint8")                                         \
      .Attr("Tidx: {int32, int64}")                                     \
      .SetShapeFn([](InferenceContext* c) { return EncodeShape(c, SIZE_FN); }); \
  REGISTER_OP("DeepReduce>IndexDecode" #Codec)                          \
      .Input("payload: uint8")                                          \
      .Output("indices: out_idx")                                       \
      .Attr("out_idx: {int32, int64} = DT_INT64")                       \
      .SetShapeFn(DecodeShape)

DR_REGISTER_INDEX_CODEC_OPS(Int32, Int32PayloadSize);
DR_REGISTER_INDEX_CODEC_OPS(Bitmap, BitmapPayloadSize);
DR_REGISTER_INDEX_CODEC_OPS(Rle, nullptr);
#undef DR_REGISTER_INDEX_CODEC_OPS

REGISTER_OP("DeepReduce>IndexEncodeGolomb")
    .Input("indices: Tidx")
    .Input("universe_size: int64")
    .Output("payload: uint8")
    .Attr("Tidx: {int32, int64}")
    // 0: auto, the encoder picks the block size (2^4..2^12) with the
    // smallest payload; else a power of two in [16, 65536].
    .Attr("block_size: int = 0")
    .SetShapeFn([](InferenceContext* c) -> absl::Status {
      int64_t block_size;
      TF_RETURN_IF_ERROR(c->GetAttr("block_size", &block_size));
      if (block_size != 0 &&
          (block_size < 16 || block_size > 65536 || (block_size & (block_size - 1)) != 0)) {
        return absl::InvalidArgumentError(
            "block_size must be 0 (auto: the encoder picks the power of two in [16, 4096] "
            "giving the smallest payload) or a power of two in [16, 65536], got " +
            std::to_string(block_size));
      }
      return EncodeShape(c, nullptr);
    });

REGISTER_OP("DeepReduce>IndexDecodeGolomb")
    .Input("payload: uint8")
    .Output("indices: out_idx")
    .Attr("out_idx: {int32, int64} = DT_INT64")
    .SetShapeFn(DecodeShape);

}  // namespace deepreduce
