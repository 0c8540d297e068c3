// Host-side argument and payload-header checks shared by the CPU and GPU
// OpKernels of the index codecs (TF headers allowed here, not in the codec
// headers). Every message names the argument or header field and its value.
#ifndef DEEPREDUCE_KERNELS_INDEX_INDEX_ARGS_H_
#define DEEPREDUCE_KERNELS_INDEX_INDEX_ARGS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "kernels/common/bit_io.h"
#include "kernels/index/golomb.h"
#include "kernels/index/index_format.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"

namespace deepreduce {
namespace index {

inline absl::Status Invalid(const std::string& msg) {
  return absl::InvalidArgumentError(msg);
}

inline const char* CodecName(uint8_t codec) {
  switch (codec) {
    case kCodecInt32: return "int32";
    case kCodecBitmap: return "bitmap";
    case kCodecRle: return "rle";
    case kCodecGolomb: return "golomb";
    default: return "unknown";
  }
}

inline absl::Status ParseUniverse(const tensorflow::Tensor& t, int64_t* n) {
  if (!tensorflow::TensorShapeUtils::IsScalar(t.shape())) {
    return Invalid("universe_size must be a scalar, got shape " + t.shape().DebugString());
  }
  *n = t.scalar<int64_t>()();
  if (*n < 0) return Invalid("universe_size must be >= 0, got " + std::to_string(*n));
  return absl::OkStatus();
}

inline absl::Status CheckIndicesShape(const tensorflow::Tensor& t, int64_t n) {
  if (t.dims() != 1) {
    return Invalid("indices must be a vector, got shape " + t.shape().DebugString());
  }
  if (t.NumElements() > n) {
    return Invalid("indices holds K=" + std::to_string(t.NumElements()) +
                   " entries, more distinct indices than universe_size=" +
                   std::to_string(n) + " allows");
  }
  return absl::OkStatus();
}

// The longest header any decoder reads before the body: the common header
// (3 bytes + two varints of at most 9) and golomb's B and S (1 + 9). The GPU
// decoders copy this prefix of the device payload to the host and parse it
// with the same functions as the CPU kernels.
constexpr int64_t kMaxHeaderBytes = 32;

// Checks the common header from the first `prefix_bytes` bytes of a payload of
// `payload_bytes` bytes (prefix_bytes == min(payload_bytes, kMaxHeaderBytes)
// or the whole payload; a valid header's varints have at most 9 bytes, so
// both accept and reject the same payloads) and that the decoded indices fit out_idx. *body_offset is where the
// body starts.
inline absl::Status ParseHeaderPrefix(const uint8_t* prefix, int64_t prefix_bytes,
                                      int64_t payload_bytes, uint8_t codec,
                                      tensorflow::DataType out_idx, CommonHeader* h,
                                      int64_t* body_offset) {
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
  if (out_idx == tensorflow::DT_INT32 && h->n > kMaxInt32Universe) {
    return Invalid("payload universe size n=" + std::to_string(h->n) +
                   " exceeds 2^31, which out_idx=int32 cannot address; decode with "
                   "out_idx=tf.int64");
  }
  *body_offset = body - begin;
  return absl::OkStatus();
}

inline absl::Status CheckPayloadShape(const tensorflow::Tensor& payload) {
  if (payload.dims() != 1) {
    return Invalid("payload must be a vector of uint8, got shape " +
                   payload.shape().DebugString());
  }
  return absl::OkStatus();
}

// Checks the payload's common header and that the decoded indices fit out_idx
// (payload in host memory).
inline absl::Status ParseHeader(const tensorflow::Tensor& payload, uint8_t codec,
                                tensorflow::DataType out_idx, CommonHeader* h,
                                const uint8_t** body) {
  absl::Status st = CheckPayloadShape(payload);
  if (!st.ok()) return st;
  const uint8_t* begin = payload.flat<uint8_t>().data();
  int64_t body_offset = 0;
  st = ParseHeaderPrefix(begin, payload.NumElements(), payload.NumElements(), codec,
                         out_idx, h, &body_offset);
  if (!st.ok()) return st;
  *body = begin + body_offset;
  return absl::OkStatus();
}

// Message for the first position `bad` at which a vector `name` is out of
// [0, n) (value) or not above its predecessor (prev); shared by the CPU and
// GPU kernels.
inline absl::Status SortedError(const char* name, int64_t bad, int64_t prev, int64_t v,
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

inline absl::Status CheckBodyLength(const char* codec, uint64_t have, uint64_t want,
                                    const std::string& why) {
  if (have != want) {
    return Invalid(std::string(codec) + " payload body holds " + std::to_string(have) +
                   " bytes but its header (" + why + ") implies exactly " +
                   std::to_string(want) + "; the payload is truncated, extended or corrupt");
  }
  return absl::OkStatus();
}

// The golomb encoders' block_size attribute: 0 (the default) lets the
// encoder choose per payload (golomb.h PickLog2Block) and parses to
// kGolombAutoBlock; otherwise a power of two in [16, 65536].
constexpr int kGolombAutoBlock = 0;

inline absl::Status ParseGolombBlockSize(int64_t block_size, int* log2_block) {
  if (block_size == 0) {
    *log2_block = kGolombAutoBlock;
    return absl::OkStatus();
  }
  const int log2 = block_size > 0 ? BitWidth64(static_cast<uint64_t>(block_size)) - 1 : -1;
  if (block_size < 0 || (block_size & (block_size - 1)) != 0 ||
      log2 < golomb::kMinLog2Block || log2 > golomb::kMaxLog2Block) {
    return Invalid("block_size must be 0 (auto: the encoder picks the power of two in [16, "
                   "4096] giving the smallest payload) or a power of two in [16, 65536], got " +
                   std::to_string(block_size));
  }
  *log2_block = log2;
  return absl::OkStatus();
}

// Golomb: parses B and S from `body` (readable up to prefix_end; the body has
// body_bytes bytes in all), checks every length against the payload before
// anything is allocated, and returns the layout and where the table and the
// stream start, relative to body. prefix_end leaves at least 10 bytes after
// body whenever the payload has them (kMaxHeaderBytes), so a GPU decoder that
// only copied the prefix gets the answers of the CPU decoder.
inline absl::Status ParseGolombLayoutPrefix(const CommonHeader& h, const uint8_t* body,
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
  absl::Status st = CheckBodyLength("golomb", remaining, table_bytes + s,
                                    "block table + stream length S=" + std::to_string(s));
  if (!st.ok()) return st;
  // Every index but a block's first costs at least one bit.
  if (h.k - layout->num_blocks > 8 * s) {
    return Invalid("golomb payload claims K=" + std::to_string(h.k) +
                   " indices, more than its " + std::to_string(s) +
                   "-byte stream can hold");
  }
  *table_at = fields;
  *stream_at = fields + table_bytes;
  return absl::OkStatus();
}

// The same on a payload in host memory: [body, end) is the whole body.
inline absl::Status ParseGolombLayout(const CommonHeader& h, const uint8_t* body,
                                      const uint8_t* end, golomb::Layout* layout,
                                      const uint8_t** table, const uint8_t** stream) {
  uint64_t table_at = 0, stream_at = 0;
  absl::Status st = ParseGolombLayoutPrefix(h, body, end, static_cast<uint64_t>(end - body),
                                            layout, &table_at, &stream_at);
  if (!st.ok()) return st;
  *table = body + table_at;
  *stream = body + stream_at;
  return absl::OkStatus();
}

inline uint64_t GolombTableBytes(const golomb::Layout& layout) {
  return (layout.num_blocks * layout.entry_bits + 7) / 8;
}

// Reads and checks the block table [table, table_end) (GolombTableBytes bytes)
// into first[nb], off[nb + 1] (with the sentinel off[nb] = S) and param[nb]:
// every check a block decode relies on, before any block is decoded.
inline absl::Status ParseGolombTable(const CommonHeader& h, const golomb::Layout& layout,
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
  return absl::OkStatus();
}

// Message for block `bad` failing to decode.
inline absl::Status GolombBlockError(const CommonHeader& h, const golomb::Layout& layout,
                                     const uint64_t* off, int64_t bad) {
  return Invalid("golomb payload block " + std::to_string(bad) + " of " +
                 std::to_string(layout.num_blocks) + " is corrupt: its " +
                 std::to_string(off[bad + 1] - off[bad]) +
                 " stream bytes do not decode to exactly " +
                 std::to_string(golomb::BlockCount(h.k, layout.log2_block, bad)) +
                 " increasing indices below the next block's first index");
}

}  // namespace index
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_INDEX_INDEX_ARGS_H_
