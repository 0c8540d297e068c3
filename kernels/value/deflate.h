// `deflate` value codec: zlib of the float32 bytes (deflate_decode.h). Its ops
// take a level attribute; CPU only (value_kernels.cc).
#ifndef DEEPREDUCE_KERNELS_VALUE_DEFLATE_H_
#define DEEPREDUCE_KERNELS_VALUE_DEFLATE_H_

#include "kernels/value/value_format.h"

namespace deepreduce {
namespace value {
namespace deflate {

// The codec's struct (value_format.h's CodecDefaults): ops and kernels of its own.
struct Codec : CodecDefaults {
  static constexpr bool kOwnOps = true;
};

}  // namespace deflate
}  // namespace value
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_VALUE_DEFLATE_H_
