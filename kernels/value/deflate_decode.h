// TensorFlow-free parser and decoder of the deflate value codec, shared by
// the CPU kernel (value_kernels.cc) and the fuzz harness (kernels/fuzz/).
//
// Payload (after the 16-byte common header, value_format.h):
//   16  u8   zlib level used (0..9; informational)
//   17  u8[7] reserved, 0
//   24  u64  C, length of the zlib stream
//   32  u8   zlib stream (RFC 1950) of the K float32 values' little-endian bytes
// CPU only: zlib is a sequential bit stream; there is no CUDA kernel.
//
// zlib: the op library uses the copy bundled with TensorFlow (its headers
// under external/zlib, its symbols exported by libtensorflow_framework); a
// build without TF uses the system's <zlib.h> (link -lz).
#ifndef DEEPREDUCE_KERNELS_VALUE_DEFLATE_DECODE_H_
#define DEEPREDUCE_KERNELS_VALUE_DEFLATE_DECODE_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#if __has_include("external/zlib/zlib.h")
#include "external/zlib/zlib.h"
#else
#include <zlib.h>
#endif

#include "kernels/common/parse_status.h"
#include "kernels/value/value_decode.h"
#include "kernels/value/value_format.h"

namespace deepreduce {
namespace value {

constexpr int64_t kDeflateFixedBytes = 32;
// DEFLATE cannot expand by more than 1032:1 (258-byte matches in ~2 bits).
constexpr uint64_t kDeflateMaxRatio = 1032;

namespace core {

// The fixed fields of a deflate payload (p, size) whose header gave K, and
// its stream length C (*clen); bounds K by the stream before any allocation.
inline ParseStatus ParseDeflateFixed(const uint8_t* p, int64_t size, uint64_t k,
                                     uint64_t* clen) {
  if (size < kDeflateFixedBytes) {
    return SizeMismatch("deflate", size, kDeflateFixedBytes, "fixed fields");
  }
  bool reserved_zero = p[16] <= 9;
  for (int i = 17; i < 24; ++i) reserved_zero &= p[i] == 0;
  if (!reserved_zero) {
    return Invalid("deflate payload has level " + std::to_string(p[16]) +
                   " > 9 or nonzero reserved bytes");
  }
  *clen = GetU64(p + 24);
  if (*clen != static_cast<uint64_t>(size - kDeflateFixedBytes)) {
    return SizeMismatch("deflate", size,
                        kDeflateFixedBytes + std::min(*clen, uint64_t{1} << 62),
                        "stream length " + std::to_string(*clen));
  }
  const uint64_t raw = 4 * k;
  if (raw > kDeflateMaxRatio * *clen + 64) {
    return Invalid("deflate payload claims K = " + std::to_string(k) + " values (" +
                   std::to_string(raw) + " bytes) from a " + std::to_string(*clen) +
                   "-byte stream, beyond DEFLATE's maximum ratio of 1032:1; it is corrupted");
  }
  return ParseStatus();
}

// Inflates the stream of a checked deflate payload (ParseDeflateFixed) into
// the 4 * K bytes at `out` and checks that it holds exactly those bytes.
inline ParseStatus InflateValues(const uint8_t* p, uint64_t k, uint64_t clen, uint8_t* out) {
  const uint64_t raw = 4 * k;
  uint8_t dummy = 0;
  if (k == 0) out = &dummy;
  z_stream zs;
  std::memset(&zs, 0, sizeof(zs));
  if (inflateInit(&zs) != Z_OK) {
    return ParseStatus::Internal("deflate: zlib inflateInit failed");
  }
  const uint8_t* in = p + kDeflateFixedBytes;
  uint64_t in_left = clen, out_left = raw;
  zs.next_out = out;
  int rc = Z_OK;
  while (rc == Z_OK) {
    const uInt in_step = static_cast<uInt>(std::min<uint64_t>(in_left, 1u << 30));
    const uInt out_step = static_cast<uInt>(std::min<uint64_t>(out_left, 1u << 30));
    zs.next_in = const_cast<Bytef*>(in + (clen - in_left));
    zs.avail_in = in_step;
    zs.avail_out = out_step;
    rc = inflate(&zs, Z_NO_FLUSH);
    const uint64_t used_in = in_step - zs.avail_in, used_out = out_step - zs.avail_out;
    in_left -= used_in;
    out_left -= used_out;
    if (rc == Z_OK && used_in == 0 && used_out == 0) rc = Z_BUF_ERROR;
  }
  const std::string zmsg = zs.msg ? std::string(", ") + zs.msg : std::string();
  inflateEnd(&zs);
  if (rc != Z_STREAM_END) {
    return Invalid(std::string("deflate payload's zlib stream is ") +
                   (rc == Z_BUF_ERROR ? (out_left == 0 ? "longer than K values" : "truncated")
                                      : "corrupted") +
                   " (zlib code " + std::to_string(rc) + zmsg + ")");
  }
  if (out_left != 0) {
    return Invalid("deflate payload's zlib stream holds " + std::to_string(raw - out_left) +
                   " bytes, not the " + std::to_string(raw) + " of K = " + std::to_string(k) +
                   " values");
  }
  if (in_left != 0) {
    return Invalid("deflate payload has " + std::to_string(in_left) +
                   " bytes after the end of its zlib stream");
  }
  return ParseStatus();
}

}  // namespace core
}  // namespace value
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_VALUE_DEFLATE_DECODE_H_
