// `fp16` value codec: IEEE half of each value (halfcast.h). Its CPU and GPU
// OpKernels are its own (value_kernels.h: HalfEncodeOp, HalfDecodeOp).
#ifndef DEEPREDUCE_KERNELS_VALUE_FP16_H_
#define DEEPREDUCE_KERNELS_VALUE_FP16_H_

#include "kernels/value/value_format.h"

namespace deepreduce {
namespace value {
namespace fp16 {

// The codec's struct (value_format.h's CodecDefaults): ops and kernels of its own.
struct Codec : CodecDefaults {
  static constexpr bool kOwnOps = true;
};

}  // namespace fp16
}  // namespace value
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_VALUE_FP16_H_
