// Host-side argument and payload-header checks shared by the CPU and GPU
// OpKernels of the index codecs (TF headers allowed here, not in the codec
// headers). Every message names the argument or header field and its value.
#ifndef DEEPREDUCE_KERNELS_INDEX_INDEX_ARGS_H_
#define DEEPREDUCE_KERNELS_INDEX_INDEX_ARGS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "kernels/common/bit_io.h"
#include "kernels/common/parse_status_tf.h"
#include "kernels/index/golomb.h"
#include "kernels/index/index_decode.h"
#include "kernels/index/index_format.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"

namespace deepreduce {
namespace index {

inline absl::Status Invalid(const std::string& msg) {
  return absl::InvalidArgumentError(msg);
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

// The byte-level parsers live in index_decode.h (TF-free, shared with the
// fuzz harness); these wrappers return their result as an absl::Status.
using core::GolombTableBytes;

// Checks the common header from the first `prefix_bytes` bytes of a payload of
// `payload_bytes` bytes (index_decode.h) and that the decoded indices fit
// out_idx. *body_offset is where the body starts.
inline absl::Status ParseHeaderPrefix(const uint8_t* prefix, int64_t prefix_bytes,
                                      int64_t payload_bytes, uint8_t codec,
                                      tensorflow::DataType out_idx, CommonHeader* h,
                                      int64_t* body_offset) {
  return ToAbsl(core::ParseHeaderPrefix(prefix, prefix_bytes, payload_bytes, codec,
                                        out_idx == tensorflow::DT_INT32, h, body_offset));
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
  return ToAbsl(core::SortedError(name, bad, prev, v, n));
}

inline absl::Status CheckBodyLength(const char* codec, uint64_t have, uint64_t want,
                                    const std::string& why) {
  return ToAbsl(core::CheckBodyLength(codec, have, want, why));
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

// Golomb: B, S and every length checked against the payload (index_decode.h).
inline absl::Status ParseGolombLayoutPrefix(const CommonHeader& h, const uint8_t* body,
                                            const uint8_t* prefix_end, uint64_t body_bytes,
                                            golomb::Layout* layout, uint64_t* table_at,
                                            uint64_t* stream_at) {
  return ToAbsl(core::ParseGolombLayoutPrefix(h, body, prefix_end, body_bytes, layout,
                                              table_at, stream_at));
}

// The same on a payload in host memory: [body, end) is the whole body.
inline absl::Status ParseGolombLayout(const CommonHeader& h, const uint8_t* body,
                                      const uint8_t* end, golomb::Layout* layout,
                                      const uint8_t** table, const uint8_t** stream) {
  return ToAbsl(core::ParseGolombLayout(h, body, end, layout, table, stream));
}

// Reads and checks the block table into first[nb], off[nb + 1], param[nb].
inline absl::Status ParseGolombTable(const CommonHeader& h, const golomb::Layout& layout,
                                     const uint8_t* table, const uint8_t* table_end,
                                     uint64_t* first, uint64_t* off, uint64_t* param) {
  return ToAbsl(core::ParseGolombTable(h, layout, table, table_end, first, off, param));
}

// Message for block `bad` failing to decode.
inline absl::Status GolombBlockError(const CommonHeader& h, const golomb::Layout& layout,
                                     const uint64_t* off, int64_t bad) {
  return ToAbsl(core::GolombBlockError(h, layout, off, bad));
}

}  // namespace index
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_INDEX_INDEX_ARGS_H_
