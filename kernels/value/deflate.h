// `deflate` value codec: zlib of the K float32 values' little-endian bytes;
// lossless. A codec of the family's convention (value_format.h's
// CodecDefaults): its ops, CPU kernels and fuzz target are generated from
// the codec table, whose row declares its one attribute, the zlib level
// (0..9, default 6). TensorFlow-free host code, shared by the kernels and
// the fuzz harness. CPU only: zlib is a sequential bit stream.
//
// Payload (after the 16-byte common header, value_format.h):
//   16  u8   zlib level used (0..9; informational)
//   17  u8[7] reserved, 0
//   24  u64  C, length of the zlib stream
//   32  u8   zlib stream (RFC 1950) of the K float32 values' bytes
//
// zlib: the op library uses the copy bundled with TensorFlow (its headers
// under external/zlib, its symbols exported by libtensorflow_framework); a
// build without TF uses the system's <zlib.h> (link -lz).
#ifndef DEEPREDUCE_KERNELS_VALUE_DEFLATE_H_
#define DEEPREDUCE_KERNELS_VALUE_DEFLATE_H_

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
namespace deflate {

// The fixed fields after the common header.
constexpr uint64_t kFixedBodyBytes = 16;
// DEFLATE cannot expand by more than 1032:1 (258-byte matches in ~2 bits).
constexpr uint64_t kMaxRatio = 1032;

struct Codec : CodecDefaults {
  // 4 K <= 1032 C + 64 (CheckBody): at most 258 values per stream byte, + 16.
  static constexpr uint64_t kValuesPerByte = kMaxRatio / 4;
  // zlib's output depends on its level, which the payload records only as
  // information: an accepted payload need not be the one this build writes.
  static constexpr bool kCanonical = false;

  static ParseStatus BodyBytes(const float* /*v*/, int64_t k, const EncodeArgs& /*a*/,
                               uint64_t* bytes) {
    *bytes = kFixedBodyBytes + compressBound(static_cast<uLong>(4 * static_cast<uint64_t>(k))) +
             64;
    return ParseStatus();
  }

  // One stream, fed in pieces of at most 1 GiB (zlib's counters are 32-bit).
  static ParseStatus EncodeBody(const float* v, int64_t k, const EncodeArgs& a, uint8_t* body,
                                uint64_t capacity, uint64_t* written) {
    const int level = static_cast<int>(a.attr[0]);
    const uint64_t raw = 4 * static_cast<uint64_t>(k);
    const uint8_t* in = reinterpret_cast<const uint8_t*>(v);
    z_stream zs;
    std::memset(&zs, 0, sizeof(zs));
    if (deflateInit(&zs, level) != Z_OK) {
      return ParseStatus::Internal("deflate: zlib deflateInit failed");
    }
    uint64_t in_left = raw, out_left = capacity - kFixedBodyBytes;
    const uint64_t out_size = out_left;
    zs.next_out = body + kFixedBodyBytes;
    int rc = Z_OK;
    while (rc == Z_OK) {
      const uInt in_step = static_cast<uInt>(std::min<uint64_t>(in_left, 1u << 30));
      const uInt out_step = static_cast<uInt>(std::min<uint64_t>(out_left, 1u << 30));
      zs.next_in = const_cast<Bytef*>(in + (raw - in_left));
      zs.avail_in = in_step;
      zs.avail_out = out_step;
      rc = ::deflate(&zs, in_left == in_step ? Z_FINISH : Z_NO_FLUSH);
      in_left -= in_step - zs.avail_in;
      out_left -= out_step - zs.avail_out;
      if (rc == Z_OK && out_left == 0) rc = Z_BUF_ERROR;
    }
    deflateEnd(&zs);
    if (rc != Z_STREAM_END) {
      return ParseStatus::Internal("deflate: zlib failed with code " + std::to_string(rc));
    }
    const uint64_t clen = out_size - out_left;
    std::memset(body, 0, kFixedBodyBytes);
    PutU8(body, static_cast<uint8_t>(level));
    PutU64(body + 8, clen);
    *written = kFixedBodyBytes + clen;
    return ParseStatus();
  }

  // The fixed fields; bounds K by the stream before any allocation.
  static ParseStatus CheckBody(uint64_t k, const uint8_t* body, uint64_t bytes) {
    const int64_t size = static_cast<int64_t>(kHeaderBytes + bytes);
    if (bytes < kFixedBodyBytes) {
      return core::SizeMismatch("deflate", size, kHeaderBytes + kFixedBodyBytes, "fixed fields");
    }
    bool reserved_zero = body[0] <= 9;
    for (int i = 1; i < 8; ++i) reserved_zero &= body[i] == 0;
    if (!reserved_zero) {
      return core::Invalid("deflate payload has level " + std::to_string(body[0]) +
                           " > 9 or nonzero reserved bytes");
    }
    const uint64_t clen = GetU64(body + 8);
    if (clen != bytes - kFixedBodyBytes) {
      return core::SizeMismatch("deflate", size,
                                kHeaderBytes + kFixedBodyBytes + std::min(clen, uint64_t{1} << 62),
                                "stream length " + std::to_string(clen));
    }
    const uint64_t raw = 4 * k;
    if (raw > kMaxRatio * clen + 64) {
      return core::Invalid("deflate payload claims K = " + std::to_string(k) + " values (" +
                           std::to_string(raw) + " bytes) from a " + std::to_string(clen) +
                           "-byte stream, beyond DEFLATE's maximum ratio of 1032:1; it is "
                           "corrupted");
    }
    return ParseStatus();
  }

  // Inflates the stream of a checked body into the K values and checks that
  // it holds exactly their bytes.
  static ParseStatus DecodeBody(uint64_t k, const uint8_t* body, uint64_t bytes, float* values) {
    const uint64_t raw = 4 * k, clen = bytes - kFixedBodyBytes;
    uint8_t dummy = 0;
    uint8_t* out = k == 0 ? &dummy : reinterpret_cast<uint8_t*>(values);
    z_stream zs;
    std::memset(&zs, 0, sizeof(zs));
    if (inflateInit(&zs) != Z_OK) {
      return ParseStatus::Internal("deflate: zlib inflateInit failed");
    }
    const uint8_t* in = body + kFixedBodyBytes;
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
      return core::Invalid(
          std::string("deflate payload's zlib stream is ") +
          (rc == Z_BUF_ERROR ? (out_left == 0 ? "longer than K values" : "truncated")
                             : "corrupted") +
          " (zlib code " + std::to_string(rc) + zmsg + ")");
    }
    if (out_left != 0) {
      return core::Invalid("deflate payload's zlib stream holds " +
                           std::to_string(raw - out_left) + " bytes, not the " +
                           std::to_string(raw) + " of K = " + std::to_string(k) + " values");
    }
    if (in_left != 0) {
      return core::Invalid("deflate payload has " + std::to_string(in_left) +
                           " bytes after the end of its zlib stream");
    }
    return ParseStatus();
  }
};

}  // namespace deflate
}  // namespace value
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_VALUE_DEFLATE_H_
