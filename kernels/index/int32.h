// `int32` index codec: K little-endian int32 (format: index_format.h). Its
// OpKernels are index_kernels.h's EncodeOp / DecodeOp specializations, its
// decoder index_decode.h's ParseInt32Body and DecodeInt32Range.
#ifndef DEEPREDUCE_KERNELS_INDEX_INT32_H_
#define DEEPREDUCE_KERNELS_INDEX_INT32_H_

#include <cstdint>

#include "kernels/index/index_format.h"

namespace deepreduce {
namespace index {
namespace int32 {

struct Codec : CodecDefaults {
  static int64_t StaticPayloadBytes(int64_t n, int64_t k) {
    return CommonHeaderSize(n, k) + 4 * k;
  }
};

}  // namespace int32
}  // namespace index
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_INDEX_INT32_H_
