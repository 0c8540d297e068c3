// TensorFlow-free payload parsers and decoders of the lossless index codecs
// (int32, bitmap, rle, golomb): the code the CPU kernels (index_kernels.cc)
// run, also compiled without TF by the fuzz harness (kernels/fuzz/). Parsers
// check a payload held in host memory (or, for the GPU kernels, its header
// prefix) and return ParseStatus with the text of the kernels'
// InvalidArgumentError; the decoders write into a caller-provided buffer of
// the K entries the header announced, so callers allocate only after the
// checks. index_args.h wraps the parsers as absl::Status.
#ifndef DEEPREDUCE_KERNELS_INDEX_INDEX_DECODE_H_
#define DEEPREDUCE_KERNELS_INDEX_INDEX_DECODE_H_

#include <cstdint>
#include <cstring>
#include <string>

#include "kernels/common/bit_io.h"
#include "kernels/common/parse_status.h"
#include "kernels/index/golomb.h"
#include "kernels/index/index_format.h"
#include "kernels/index/rle.h"

namespace deepreduce {
namespace index {

// The name of a payload codec id (codec table), "unknown" for any other byte.
inline const char* CodecName(uint8_t codec) {
  switch (codec) {
#define DR_INDEX_CODEC_NAME(name, Camel, id, kernels) \
  case kCodec##Camel:                                 \
    return #name;
    DR_INDEX_PAYLOAD_CODECS(DR_INDEX_CODEC_NAME)
#undef DR_INDEX_CODEC_NAME
    default: return "unknown";
  }
}

// The longest header any decoder reads before the body: the common header
// (3 bytes + two varints of at most 9) and golomb's B and S (1 + 9). The GPU
// decoders copy this prefix of the device payload to the host and parse it
// with the same functions as the CPU kernels.
constexpr int64_t kMaxHeaderBytes = 32;

namespace core {

inline ParseStatus Invalid(const std::string& msg) { return ParseStatus::Invalid(msg); }

// Checks the common header from the first `prefix_bytes` bytes of a payload of
// `payload_bytes` bytes (prefix_bytes == min(payload_bytes, kMaxHeaderBytes)
// or the whole payload; a valid header's varints have at most 9 bytes, so
// both accept and reject the same payloads) and that the decoded indices fit
// out_idx (int32_out: out_idx is int32). *body_offset is where the body starts.
inline ParseStatus ParseHeaderPrefix(const uint8_t* prefix, int64_t prefix_bytes,
                                     int64_t payload_bytes, uint8_t codec, bool int32_out,
                                     CommonHeader* h, int64_t* body_offset) {
  const uint8_t* begin = prefix;
  const uint8_t* end = prefix + prefix_bytes;
  const uint8_t* body = nullptr;
  const char* err = ParseCommonHeader(begin, end, codec, h, &body);
  if (err != nullptr) {
    std::string msg = std::string("payload (") + std::to_string(payload_bytes) +
                      " bytes) is not a valid " + CodecName(codec) + " index payload: " + err;
    if (end - begin >= 3 && begin[0] == kMagic) {
      msg += " (codec id " + std::to_string(begin[1]) + " = " + CodecName(begin[1]) +
             ", version " + std::to_string(begin[2]) + ")";
    }
    return Invalid(msg);
  }
  if (int32_out && h->n > kMaxInt32Universe) {
    return Invalid("payload universe size n=" + std::to_string(h->n) +
                   " exceeds 2^31, which out_idx=int32 cannot address; decode with "
                   "out_idx=tf.int64");
  }
  *body_offset = body - begin;
  return ParseStatus();
}

// Message for the first position `bad` at which a vector `name` is out of
// [0, n) (value) or not above its predecessor (prev); shared by the CPU and
// GPU kernels.
inline ParseStatus SortedError(const char* name, int64_t bad, int64_t prev, int64_t v,
                               int64_t n) {
  if (v < 0 || v >= n) {
    return Invalid(std::string(name) + "[" + std::to_string(bad) + "] = " +
                   std::to_string(v) + " is outside [0, universe_size=" +
                   std::to_string(n) + ")");
  }
  return Invalid(std::string(name) + " must be strictly increasing (sorted, distinct), but " +
                 name + "[" + std::to_string(bad - 1) + "] = " + std::to_string(prev) +
                 " >= " + name + "[" + std::to_string(bad) + "] = " + std::to_string(v));
}

// The first i in [begin, end) at which idx leaves [0, n) or does not rise
// above idx[i - 1]; end if there is none.
template <typename T>
inline int64_t FirstUnsorted(const T* idx, int64_t begin, int64_t end, int64_t n) {
  for (int64_t i = begin; i < end; ++i) {
    const int64_t v = static_cast<int64_t>(idx[i]);
    if (v < 0 || v >= n || (i > 0 && static_cast<int64_t>(idx[i - 1]) >= v)) return i;
  }
  return end;
}

inline ParseStatus CheckBodyLength(const char* codec, uint64_t have, uint64_t want,
                                   const std::string& why) {
  if (have != want) {
    return Invalid(std::string(codec) + " payload body holds " + std::to_string(have) +
                   " bytes but its header (" + why + ") implies exactly " +
                   std::to_string(want) + "; the payload is truncated, extended or corrupt");
  }
  return ParseStatus();
}

// ------------------------------------------------------------------ int32 --

// The body of an int32 payload (`have` bytes) against its header.
inline ParseStatus ParseInt32Body(const CommonHeader& h, uint64_t have) {
  if (h.n > kMaxInt32Universe) {
    return Invalid("int32 payload claims universe size n=" + std::to_string(h.n) +
                   " > 2^31, which the int32 codec never writes");
  }
  if (h.k > have / 4) {
    return Invalid("int32 payload claims K=" + std::to_string(h.k) + " indices but holds " +
                   std::to_string(have) + " body bytes (4 per index)");
  }
  return CheckBodyLength("int32", have, 4 * h.k, "K=" + std::to_string(h.k) + ", 4 bytes each");
}

// Entries [begin, end) of a checked int32 body. Words >= 2^31 (never written,
// n <= 2^31) are read as signed, so they become negative for either out_idx
// and fail FirstUnsorted, which the caller runs next.
template <typename T>
inline void DecodeInt32Range(const uint8_t* body, int64_t begin, int64_t end, T* out) {
  for (int64_t i = begin; i < end; ++i) {
    out[i] = static_cast<T>(static_cast<int32_t>(LoadLE32(body + 4 * i)));
  }
}

// ----------------------------------------------------------------- bitmap --

// A bitmap body (`have` bytes) holds exactly ceil(n / 8) bytes.
inline ParseStatus CheckBitmapLength(const CommonHeader& h, uint64_t have) {
  return CheckBodyLength("bitmap", have, BitmapBytes(h.n),
                         "universe size n=" + std::to_string(h.n) + ", ceil(n / 8) bytes");
}

// No bit of the body's last byte `last` is set past n (when n % 8 != 0).
inline ParseStatus CheckBitmapPadding(const CommonHeader& h, uint8_t last) {
  const int64_t n = static_cast<int64_t>(h.n);
  if ((n & 7) != 0 && (last >> (n & 7)) != 0) {
    return Invalid("bitmap payload has bits set past the universe size n=" +
                   std::to_string(n) + "; it is corrupt");
  }
  return ParseStatus();
}

// The body of a bitmap payload (`have` bytes) against its header: exactly
// ceil(n / 8) bytes, no bit set past n. The count of set bits (which must be
// K) is the caller's (CountBitmapBits over chunks, then BitmapCountMismatch).
inline ParseStatus ParseBitmapBody(const CommonHeader& h, const uint8_t* body, uint64_t have) {
  DR_RETURN_IF_PARSE_ERROR(CheckBitmapLength(h, have));
  if ((h.n & 7) == 0) return ParseStatus();  // no padding bits (and have may be 0)
  return CheckBitmapPadding(h, body[have - 1]);
}

inline ParseStatus BitmapCountMismatch(uint64_t k, int64_t set) {
  return Invalid("bitmap payload header claims K=" + std::to_string(k) + " indices but " +
                 std::to_string(set) + " bits are set");
}

// Eight bitmap bytes as one little-endian word (bit j = byte j / 8, bit j % 8;
// every target here is little-endian), alignment-free.
inline uint64_t LoadWord(const uint8_t* p) {
  uint64_t w;
  std::memcpy(&w, p, sizeof(w));
  return w;
}

// Set bits in bytes [i0, e) of a bitmap body.
inline int64_t CountBitmapBits(const uint8_t* body, int64_t i0, int64_t e) {
  int64_t count = 0, i = i0;
  for (; i + 8 <= e; i += 8) count += __builtin_popcountll(LoadWord(body + i));
  for (; i < e; ++i) count += __builtin_popcount(body[i]);
  return count;
}

// Writes the positions of the set bits in bytes [i0, e) to out[o], out[o + 1], ...
template <typename T>
inline void ExtractBitmapBits(const uint8_t* body, int64_t i0, int64_t e, int64_t o, T* out) {
  int64_t i = i0;
  for (; i + 8 <= e; i += 8) {
    uint64_t v = LoadWord(body + i);
    while (v) {
      out[o++] = static_cast<T>(8 * i + __builtin_ctzll(v));
      v &= v - 1;
    }
  }
  for (; i < e; ++i) {
    unsigned v = body[i];
    while (v) {
      out[o++] = static_cast<T>(8 * i + __builtin_ctz(v));
      v &= v - 1;
    }
  }
}

// -------------------------------------------------------------------- rle --

// Every gap takes at least one byte: K is bounded by the body (`have` bytes).
inline ParseStatus ParseRleCount(const CommonHeader& h, uint64_t have) {
  if (h.k > have) {
    return Invalid("rle payload claims K=" + std::to_string(h.k) + " indices but its body "
                   "holds only " + std::to_string(have) + " bytes (at least 1 per index)");
  }
  return ParseStatus();
}

// The rle decoders' failures (DecodeRle here, rle::DecodeResult on the GPU):
// gap i of K truncated or not in shortest form; gap i = gap running past n;
// `trailing` bytes after the K-th gap.
inline ParseStatus RleBadGap(int64_t i, int64_t k) {
  return Invalid("rle payload is corrupt: gap " + std::to_string(i) + " of K=" +
                 std::to_string(k) + " is truncated or not in shortest form");
}
inline ParseStatus RleGapPastEnd(int64_t i, uint64_t gap, uint64_t n) {
  return Invalid("rle payload is corrupt: gap " + std::to_string(i) + " = " +
                 std::to_string(gap) + " runs past the universe size n=" + std::to_string(n));
}
inline ParseStatus RleTrailingBytes(int64_t trailing, int64_t k) {
  return Invalid("rle payload has " + std::to_string(trailing) +
                 " trailing bytes after its K=" + std::to_string(k) +
                 " gaps; it is extended or corrupt");
}

// Decodes the K gaps of the body [p, end) into out (K entries). The gaps are
// sequential by nature (a varint's start depends on all before it); this
// loop runs at several hundred MB/s on one core.
template <typename T>
inline ParseStatus DecodeRle(const CommonHeader& h, const uint8_t* p, const uint8_t* end,
                             T* out) {
  const int64_t k = static_cast<int64_t>(h.k);
  uint64_t next = 0;  // the smallest value the next index may take
  for (int64_t i = 0; i < k; ++i) {
    uint64_t gap;
    if (!rle::GetGap(&p, end, &gap)) return RleBadGap(i, k);
    if (!(gap < h.n - next)) return RleGapPastEnd(i, gap, h.n);
    const uint64_t v = next + gap;
    out[i] = static_cast<T>(v);
    next = v + 1;
  }
  if (p != end) return RleTrailingBytes(static_cast<int64_t>(end - p), k);
  return ParseStatus();
}

// ----------------------------------------------------------------- golomb --

// Golomb: parses B and S from `body` (readable up to prefix_end; the body has
// body_bytes bytes in all), checks every length against the payload before
// anything is allocated, and returns the layout and where the table and the
// stream start, relative to body. prefix_end leaves at least 10 bytes after
// body whenever the payload has them (kMaxHeaderBytes), so a GPU decoder that
// only copied the prefix gets the answers of the CPU decoder.
inline ParseStatus ParseGolombLayoutPrefix(const CommonHeader& h, const uint8_t* body,
                                           const uint8_t* prefix_end, uint64_t body_bytes,
                                           golomb::Layout* layout, uint64_t* table_at,
                                           uint64_t* stream_at) {
  if (body_bytes == 0 || body >= prefix_end) {
    return Invalid("golomb payload ends before its block-size field");
  }
  const uint8_t* p = body;
  const int log2_block = *p++;
  if (log2_block < golomb::kMinLog2Block || log2_block > golomb::kMaxLog2Block) {
    return Invalid("golomb payload block-size field log2(block)=" +
                   std::to_string(log2_block) + " is outside [4, 16]");
  }
  uint64_t s;
  if (!GetVarint(&p, prefix_end, &s)) {
    return Invalid("golomb payload has a malformed varint for its stream length S");
  }
  const uint64_t fields = static_cast<uint64_t>(p - body);
  const uint64_t remaining = body_bytes - fields;
  if (s > remaining) {
    return Invalid("golomb payload claims a stream of S=" + std::to_string(s) +
                   " bytes but only " + std::to_string(remaining) + " bytes follow its header");
  }
  // No block reads the stream of an empty set: it must be empty too, or its
  // bytes would be accepted unread (the format is canonical).
  if (h.k == 0 && s != 0) {
    return Invalid("golomb payload holds no indices (K=0) but claims a stream of S=" +
                   std::to_string(s) + " bytes; it is corrupt");
  }
  *layout = golomb::MakeLayout(h.n, h.k, log2_block, s);
  // entry_bits >= 6, so this bounds num_blocks by the buffer before the
  // multiplication below can overflow.
  const uint64_t table_room = remaining - s;
  if (layout->num_blocks > table_room * 8 / layout->entry_bits) {
    return Invalid("golomb payload: K=" + std::to_string(h.k) + " needs " +
                   std::to_string(layout->num_blocks) + " block-table entries of " +
                   std::to_string(layout->entry_bits) + " bits, more than the " +
                   std::to_string(table_room) + " bytes left for the table hold");
  }
  const uint64_t table_bytes = (layout->num_blocks * layout->entry_bits + 7) / 8;
  DR_RETURN_IF_PARSE_ERROR(CheckBodyLength("golomb", remaining, table_bytes + s,
                                           "block table + stream length S=" +
                                               std::to_string(s)));
  // Every index but a block's first costs at least one bit.
  if (h.k - layout->num_blocks > 8 * s) {
    return Invalid("golomb payload claims K=" + std::to_string(h.k) +
                   " indices, more than its " + std::to_string(s) +
                   "-byte stream can hold");
  }
  *table_at = fields;
  *stream_at = fields + table_bytes;
  return ParseStatus();
}

// The same on a payload in host memory: [body, end) is the whole body.
inline ParseStatus ParseGolombLayout(const CommonHeader& h, const uint8_t* body,
                                     const uint8_t* end, golomb::Layout* layout,
                                     const uint8_t** table, const uint8_t** stream) {
  uint64_t table_at = 0, stream_at = 0;
  DR_RETURN_IF_PARSE_ERROR(ParseGolombLayoutPrefix(h, body, end,
                                                   static_cast<uint64_t>(end - body), layout,
                                                   &table_at, &stream_at));
  *table = body + table_at;
  *stream = body + stream_at;
  return ParseStatus();
}

inline uint64_t GolombTableBytes(const golomb::Layout& layout) {
  return (layout.num_blocks * layout.entry_bits + 7) / 8;
}

// Reads and checks the block table [table, table_end) (GolombTableBytes bytes)
// into first[nb], off[nb + 1] (with the sentinel off[nb] = S) and param[nb]:
// every check a block decode relies on, before any block is decoded.
inline ParseStatus ParseGolombTable(const CommonHeader& h, const golomb::Layout& layout,
                                    const uint8_t* table, const uint8_t* table_end,
                                    uint64_t* first, uint64_t* off, uint64_t* param) {
  const uint64_t blocks = layout.num_blocks;
  const int log2_block = layout.log2_block;
  const uint64_t s = layout.stream_bytes;
  BitReader tr(table, table_end);
  for (uint64_t b = 0; b < blocks; ++b) {
    // The table's length was checked against the buffer: these reads succeed.
    tr.GetWide(layout.w_idx, &first[b]);
    tr.GetWide(layout.w_off, &off[b]);
    tr.Get(golomb::kRiceParamBits, &param[b]);
    const uint64_t count = golomb::BlockCount(h.k, log2_block, b);
    const uint64_t lowest =
        b == 0 ? 0 : first[b - 1] + golomb::BlockCount(h.k, log2_block, b - 1);
    if (param[b] > golomb::kMaxRiceParam) {
      return Invalid("golomb payload block " + std::to_string(b) + " has Rice parameter " +
                     std::to_string(param[b]) + " > 56; the payload is corrupt");
    }
    if (!((b == 0 ? off[b] == 0 : off[b] >= off[b - 1]) && off[b] <= s)) {
      return Invalid("golomb payload block " + std::to_string(b) + " starts at stream byte " +
                     std::to_string(off[b]) + ", outside its predecessor's end .. S=" +
                     std::to_string(s) + "; the payload is corrupt");
    }
    if (!(first[b] >= lowest && first[b] < h.n && count <= h.n - first[b])) {
      return Invalid("golomb payload block " + std::to_string(b) + " starts at index " +
                     std::to_string(first[b]) + ", which leaves no room for its " +
                     std::to_string(count) + " indices between the previous block and n=" +
                     std::to_string(h.n) + "; the payload is corrupt");
    }
  }
  off[blocks] = s;
  tr.Refill();
  if (!tr.AtPaddedEnd()) {
    return Invalid("golomb payload has non-zero padding after its block table; "
                   "it is corrupt");
  }
  return ParseStatus();
}

// Decodes blocks [begin, stop) of a payload whose table was checked
// (ParseGolombTable) into out (K entries); returns the first block that
// fails to decode, or stop.
template <typename T>
inline int64_t DecodeGolombBlocks(const CommonHeader& h, const golomb::Layout& layout,
                                  const uint8_t* stream, const uint64_t* first,
                                  const uint64_t* off, const uint64_t* param, int64_t begin,
                                  int64_t stop, T* out) {
  const int64_t blocks = static_cast<int64_t>(layout.num_blocks);
  const int log2_block = layout.log2_block;
  for (int64_t b = begin; b < stop; ++b) {
    const uint64_t upper = b + 1 < blocks ? first[b + 1] : h.n;
    if (!golomb::DecodeBlock(stream + off[b], stream + off[b + 1], first[b],
                             static_cast<int>(param[b]), golomb::BlockCount(h.k, log2_block, b),
                             upper, out + (b << log2_block))) {
      return b;
    }
  }
  return stop;
}

// Message for block `bad` failing to decode.
inline ParseStatus GolombBlockError(const CommonHeader& h, const golomb::Layout& layout,
                                    const uint64_t* off, int64_t bad) {
  return Invalid("golomb payload block " + std::to_string(bad) + " of " +
                 std::to_string(layout.num_blocks) + " is corrupt: its " +
                 std::to_string(off[bad + 1] - off[bad]) +
                 " stream bytes do not decode to exactly " +
                 std::to_string(golomb::BlockCount(h.k, layout.log2_block, bad)) +
                 " increasing indices below the next block's first index");
}

}  // namespace core
}  // namespace index
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_INDEX_INDEX_DECODE_H_
