// Generated from deepreduce_tf/ops/codec_table.py by
// `python deepreduce_tf/ops/codec_table.py --write`; do not edit by hand (setup.py and
// tests/codecs/test_codec_table.py check it).
//
// The header of every value codec with kernels="value" in the codec
// table, kernels/value/<name>.h, which declares its struct
// value::<name>::Codec (docs/codecs.md, "Adding a codec").
#ifndef DEEPREDUCE_KERNELS_VALUE_VALUE_CODECS_H_
#define DEEPREDUCE_KERNELS_VALUE_VALUE_CODECS_H_

#include <cstdint>

#include "kernels/common/codec_table.h"
#include "kernels/value/polyfit.h"
#include "kernels/value/dexp.h"
#include "kernels/value/qsgd.h"
#include "kernels/value/fp16.h"
#include "kernels/value/bf16.h"
#include "kernels/value/deflate.h"

namespace deepreduce {
namespace value {

// The table's wire id and names of a codec's struct:
// CodecOf<<name>::Codec>::kId, ::kName, ::kCamel (its ops' prefix).
template <typename Codec>
struct CodecOf;
#define DR_VALUE_CODEC_OF(name, Camel, id, kernels) \
  template <>                                       \
  struct CodecOf<name::Codec> {                     \
    static constexpr uint8_t kId = id;              \
    static constexpr const char* kName = #name;     \
    static constexpr const char* kCamel = #Camel;   \
  };
DR_VALUE_PAYLOAD_CODECS(DR_VALUE_CODEC_OF)
#undef DR_VALUE_CODEC_OF

}  // namespace value

// The table's encode-op attributes and seed input of these codecs
// (codec_table.h's OpArgsOf).
template <>
struct OpArgsOf<value::deflate::Codec> {
  static constexpr int kNumAttrs = 1;
  static constexpr IntAttr kAttrs[kMaxAttrs] = {{"level", 6, 0, 9}};
  static constexpr bool kSeeded = false;
};

}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_VALUE_VALUE_CODECS_H_
