// `bitmap` index codec: ceil(n / 8) bytes, bit i = index i (format:
// index_format.h). Its OpKernels are index_kernels.h's EncodeOp / DecodeOp
// specializations, its decoder index_decode.h's ParseBitmapBody,
// CountBitmapBits and ExtractBitmapBits.
#ifndef DEEPREDUCE_KERNELS_INDEX_BITMAP_H_
#define DEEPREDUCE_KERNELS_INDEX_BITMAP_H_

#include <cstdint>

#include "kernels/index/index_format.h"

namespace deepreduce {
namespace index {
namespace bitmap {

struct Codec : CodecDefaults {
  static int64_t StaticPayloadBytes(int64_t n, int64_t k) {
    return CommonHeaderSize(n, k) + static_cast<int64_t>(BitmapBytes(n));
  }
};

}  // namespace bitmap
}  // namespace index
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_INDEX_BITMAP_H_
