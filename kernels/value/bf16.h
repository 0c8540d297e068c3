// `bf16` value codec: the bfloat16 of each value (halfcast.h: round to
// nearest even, NaN/Inf kept), a little-endian u16 per value after the
// 16-byte header. A codec of the family's convention with GPU kernels
// (value_format.h's CodecDefaults): its ops, CPU and GPU kernels and fuzz
// target are generated from the codec table; its host code is below (an
// element-wise codec: value_decode.h's ElementwiseCodec), its device code in
// bf16.cu.
#ifndef DEEPREDUCE_KERNELS_VALUE_BF16_H_
#define DEEPREDUCE_KERNELS_VALUE_BF16_H_

#include <cstdint>

#include "kernels/common/gpu_launch.h"
#include "kernels/value/halfcast.h"
#include "kernels/value/value_decode.h"
#include "kernels/value/value_format.h"

namespace deepreduce {
namespace value {
namespace bf16 {

struct Codec : ElementwiseCodec<Codec, kCodecBf16, 2> {
  // Every bfloat16 code is a float: an accepted payload re-encodes to its
  // bytes, up to the quiet bit that the encoder sets in every NaN.
  static constexpr bool kCanonical = true;
  static void Canonicalize(uint64_t k, uint8_t* body, uint64_t /*bytes*/) {
    for (uint64_t i = 0; i < k; ++i) {
      const uint16_t h = GetU16(body + 2 * i);
      if ((h & 0x7f80u) == 0x7f80u && (h & 0x007fu) != 0) {
        PutU16(body + 2 * i, static_cast<uint16_t>(h | 0x0040u));
      }
    }
  }

  static void EncodeRange(const float* v, int64_t begin, int64_t end, uint8_t* body) {
    for (int64_t i = begin; i < end; ++i) PutU16(body + 2 * i, halfcast::FloatToBf16(v[i]));
  }
  static void DecodeRange(const uint8_t* body, int64_t begin, int64_t end, float* out) {
    for (int64_t i = begin; i < end; ++i) out[i] = halfcast::Bf16ToFloat(GetU16(body + 2 * i));
  }

  // bf16.cu: value_format.h's GPU launchers (they do not synchronize).
  static gpu_launch::GpuStatus EncodeGpu(const float* d_values, int64_t k, const EncodeArgs& a,
                                         const HeaderBytes& header, uint8_t* d_payload,
                                         uint64_t body_bytes, void* stream);
  static gpu_launch::GpuStatus DecodeGpu(uint64_t k, const uint8_t* d_body, uint64_t bytes,
                                         float* d_out, void* stream);
};

}  // namespace bf16
}  // namespace value
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_VALUE_BF16_H_
