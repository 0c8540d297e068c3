// Generated from deepreduce_tf/ops/codec_table.py by
// `python deepreduce_tf/ops/codec_table.py --write`; do not edit by hand (setup.py and
// tests/codecs/test_codec_table.py check it).
//
// The header of every index codec with kernels="index" in the codec
// table, kernels/index/<name>.h, which declares its struct
// index::<name>::Codec (docs/codecs.md, "Adding a codec").
#ifndef DEEPREDUCE_KERNELS_INDEX_INDEX_CODECS_H_
#define DEEPREDUCE_KERNELS_INDEX_INDEX_CODECS_H_

#include <cstdint>

#include "kernels/common/codec_table.h"
#include "kernels/index/int32.h"
#include "kernels/index/bitmap.h"
#include "kernels/index/rle.h"
#include "kernels/index/golomb.h"

namespace deepreduce {
namespace index {

// The table's wire id and names of a codec's struct:
// CodecOf<<name>::Codec>::kId, ::kName, ::kCamel (its ops' prefix).
template <typename Codec>
struct CodecOf;
#define DR_INDEX_CODEC_OF(name, Camel, id, kernels) \
  template <>                                       \
  struct CodecOf<name::Codec> {                     \
    static constexpr uint8_t kId = id;              \
    static constexpr const char* kName = #name;     \
    static constexpr const char* kCamel = #Camel;   \
  };
DR_INDEX_PAYLOAD_CODECS(DR_INDEX_CODEC_OF)
#undef DR_INDEX_CODEC_OF

}  // namespace index
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_INDEX_INDEX_CODECS_H_
