// Host-side argument and payload-header checks shared by the CPU and GPU
// OpKernels of the index codecs (TF headers allowed here, not in the codec
// headers). Every message names the argument or header field and its value.
#ifndef DEEPREDUCE_KERNELS_INDEX_INDEX_ARGS_H_
#define DEEPREDUCE_KERNELS_INDEX_INDEX_ARGS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
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

// Checks the payload's common header and that the decoded indices fit out_idx.
inline absl::Status ParseHeader(const tensorflow::Tensor& payload, uint8_t codec,
                                tensorflow::DataType out_idx, CommonHeader* h,
                                const uint8_t** body) {
  if (payload.dims() != 1) {
    return Invalid("payload must be a vector of uint8, got shape " +
                   payload.shape().DebugString());
  }
  const uint8_t* begin = payload.flat<uint8_t>().data();
  const uint8_t* end = begin + payload.NumElements();
  const char* err = ParseCommonHeader(begin, end, codec, h, body);
  if (err != nullptr) {
    std::string msg = std::string("payload (") + std::to_string(payload.NumElements()) +
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
  return absl::OkStatus();
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

// Golomb: parses B and S, checks every length against the buffer before
// anything is allocated, and returns the layout, table and stream pointers.
inline absl::Status ParseGolombLayout(const CommonHeader& h, const uint8_t* body,
                                      const uint8_t* end, golomb::Layout* layout,
                                      const uint8_t** table, const uint8_t** stream) {
  if (body >= end) return Invalid("golomb payload ends before its block-size field");
  const int log2_block = *body++;
  if (log2_block < golomb::kMinLog2Block || log2_block > golomb::kMaxLog2Block) {
    return Invalid("golomb payload block-size field log2(block)=" +
                   std::to_string(log2_block) + " is outside [4, 16]");
  }
  uint64_t s;
  if (!GetVarint(&body, end, &s)) {
    return Invalid("golomb payload has a malformed varint for its stream length S");
  }
  const uint64_t remaining = static_cast<uint64_t>(end - body);
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
  *table = body;
  *stream = body + table_bytes;
  return absl::OkStatus();
}

}  // namespace index
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_INDEX_INDEX_ARGS_H_
