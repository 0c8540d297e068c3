// Generated from deepreduce_tf/ops/codec_table.py by
// `python deepreduce_tf/ops/codec_table.py --write`; do not edit by hand (setup.py and
// tests/codecs/test_codec_table.py check that it matches the table, and the op
// loader checks the compiled library).
//
// The codec table as X-macros: X(name, Camel, wire_id, kernels), in wire-id
// order. name is the codec's canonical name, Camel the same in CamelCase
// (kCodec<Camel>, Fuzz<Camel>), wire_id its number on the wire, kernels its
// op family (none: a codec written in Python alone).
//   DR_INDEX_CODECS, DR_VALUE_CODECS     every codec of the kind;
//   DR_INDEX_PAYLOAD_CODECS              the self-describing payloads of
//                                        kernels/index (kernels == index);
//   DR_VALUE_PAYLOAD_CODECS              those of kernels/value;
//   DR_INDEX_KERNEL_CODECS,
//   DR_VALUE_KERNEL_CODECS               every codec with kernels (the fuzz
//                                        harness's codec targets);
//   DR_INDEX_GPU_CODECS,
//   DR_VALUE_GPU_CODECS                  the payload codecs whose ops have
//                                        CUDA kernels (gpu=True).
#ifndef DEEPREDUCE_KERNELS_COMMON_CODEC_TABLE_H_
#define DEEPREDUCE_KERNELS_COMMON_CODEC_TABLE_H_

#include <cstdint>

namespace deepreduce {

// An integer attribute of a codec's encode op (the table's attrs).
struct IntAttr {
  const char* name;
  int64_t default_value;
  int64_t low;
  int64_t high;
};
constexpr int kMaxAttrs = 4;

// What a generic encode kernel hands a codec's encoder: its attributes in
// the table's order (checked against [low, high]) and the seed input (0
// for a codec without one).
struct EncodeArgs {
  int64_t attr[kMaxAttrs] = {};
  uint64_t seed = 0;
};

// A codec struct's encode-op attributes and seed input, from its row;
// the family headers (index_codecs.h, value_codecs.h) specialize it for
// the codecs that have any.
template <typename Codec>
struct OpArgsOf {
  static constexpr int kNumAttrs = 0;
  static constexpr IntAttr kAttrs[kMaxAttrs] = {};
  static constexpr bool kSeeded = false;
};

}  // namespace deepreduce

#define DR_INDEX_CODECS(X)    \
  X(raw, Raw, 0, none)        \
  X(int32, Int32, 1, index)   \
  X(bitmap, Bitmap, 2, index) \
  X(rle, Rle, 3, index)       \
  X(golomb, Golomb, 4, index) \
  X(bloom, Bloom, 5, bloom)

#define DR_INDEX_PAYLOAD_CODECS(X) \
  X(int32, Int32, 1, index)        \
  X(bitmap, Bitmap, 2, index)      \
  X(rle, Rle, 3, index)            \
  X(golomb, Golomb, 4, index)

#define DR_INDEX_KERNEL_CODECS(X) \
  X(int32, Int32, 1, index)       \
  X(bitmap, Bitmap, 2, index)     \
  X(rle, Rle, 3, index)           \
  X(golomb, Golomb, 4, index)     \
  X(bloom, Bloom, 5, bloom)

#define DR_INDEX_GPU_CODECS(X) \
  X(int32, Int32, 1, index)    \
  X(bitmap, Bitmap, 2, index)  \
  X(rle, Rle, 3, index)        \
  X(golomb, Golomb, 4, index)

#define DR_VALUE_CODECS(X)      \
  X(raw, Raw, 0, none)          \
  X(polyfit, Polyfit, 1, value) \
  X(dexp, Dexp, 2, value)       \
  X(qsgd, Qsgd, 3, value)       \
  X(fp16, Fp16, 4, value)       \
  X(bf16, Bf16, 5, value)       \
  X(deflate, Deflate, 6, value) \
  X(ternary, Ternary, 7, none)  \
  X(int8, Int8, 8, none)

#define DR_VALUE_PAYLOAD_CODECS(X) \
  X(polyfit, Polyfit, 1, value)    \
  X(dexp, Dexp, 2, value)          \
  X(qsgd, Qsgd, 3, value)          \
  X(fp16, Fp16, 4, value)          \
  X(bf16, Bf16, 5, value)          \
  X(deflate, Deflate, 6, value)

#define DR_VALUE_KERNEL_CODECS(X) \
  X(polyfit, Polyfit, 1, value)   \
  X(dexp, Dexp, 2, value)         \
  X(qsgd, Qsgd, 3, value)         \
  X(fp16, Fp16, 4, value)         \
  X(bf16, Bf16, 5, value)         \
  X(deflate, Deflate, 6, value)

#define DR_VALUE_GPU_CODECS(X)  \
  X(polyfit, Polyfit, 1, value) \
  X(dexp, Dexp, 2, value)       \
  X(qsgd, Qsgd, 3, value)       \
  X(fp16, Fp16, 4, value)       \
  X(bf16, Bf16, 5, value)

#endif  // DEEPREDUCE_KERNELS_COMMON_CODEC_TABLE_H_
