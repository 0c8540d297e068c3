// Argument parsing and validation shared by the CPU and GPU OpKernels of the
// Bloom-filter ops (host code, TF headers). Every message names the argument
// and the offending value.
#ifndef DEEPREDUCE_KERNELS_BLOOM_BLOOM_ARGS_H_
#define DEEPREDUCE_KERNELS_BLOOM_BLOOM_ARGS_H_

#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "kernels/bloom/bloom.h"
#include "kernels/bloom/bloom_decode.h"
#include "kernels/common/parse_status_tf.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"

namespace deepreduce {
namespace bloom {

inline absl::Status ScalarInt64(const tensorflow::Tensor& t, const char* name,
                                int64_t* out) {
  if (!tensorflow::TensorShapeUtils::IsScalar(t.shape())) {
    return absl::InvalidArgumentError(std::string(name) +
                                      " must be a scalar, got shape " +
                                      t.shape().DebugString());
  }
  *out = t.scalar<int64_t>()();
  return absl::OkStatus();
}

// n: the universe size. Index dtype int32 can address at most 2^31 positions.
inline absl::Status ParseUniverse(const tensorflow::Tensor& t,
                                  tensorflow::DataType index_dtype,
                                  int64_t* n) {
  absl::Status s = ScalarInt64(t, "universe_size", n);
  if (!s.ok()) return s;
  if (*n < 0) {
    return absl::InvalidArgumentError("universe_size must be >= 0, got " +
                                      std::to_string(*n));
  }
  if (index_dtype == tensorflow::DT_INT32 && *n > (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(
        "universe_size " + std::to_string(*n) +
        " exceeds 2^31, which int32 indices cannot address; use int64 "
        "indices (out_idx=tf.int64) for such tensors");
  }
  return absl::OkStatus();
}

// m and h in range (bloom_decode.h, TF-free).
inline absl::Status CheckBitsAndHashes(int64_t m, int64_t h) {
  return ToAbsl(core::CheckBitsAndHashes(m, h));
}

// The padding check of ParseFilter(check_padding=true) on the filter's last
// 32-bit word (bloom_decode.h), for a filter that is not in host memory.
inline absl::Status CheckFilterPadding(uint32_t last_word, int64_t m) {
  return ToAbsl(core::CheckPaddingWord(last_word, m));
}

// Checks a received filter against its claimed m and h and returns the
// layout. The byte count must match exactly; the padding bits past m must be
// zero (they are on every filter this library writes), which catches most
// truncated, extended or corrupted filters before they are queried.
inline absl::Status ParseFilter(const tensorflow::Tensor& filter,
                                const tensorflow::Tensor& bits_t,
                                const tensorflow::Tensor& hashes_t,
                                int64_t seed, bool check_padding,
                                BloomLayout* layout) {
  if (filter.dims() != 1) {
    return absl::InvalidArgumentError("filter must be a vector of uint8, got shape " +
                                      filter.shape().DebugString());
  }
  int64_t m, h;
  absl::Status s = ScalarInt64(bits_t, "filter_bits", &m);
  if (!s.ok()) return s;
  s = ScalarInt64(hashes_t, "filter_hashes", &h);
  if (!s.ok()) return s;
  s = CheckBitsAndHashes(m, h);
  if (!s.ok()) return s;
  // The bytes are read only for the padding check (callers whose filter is
  // on a GPU pass check_padding=false and check its last word instead).
  const uint8_t* bytes = check_padding ? filter.flat<uint8_t>().data() : nullptr;
  s = ToAbsl(core::CheckFilterBytes(bytes, filter.NumElements(), m, check_padding));
  if (!s.ok()) return s;
  *layout = MakeLayout(static_cast<uint64_t>(m), static_cast<uint32_t>(h),
                       static_cast<uint64_t>(seed));
  return absl::OkStatus();
}

}  // namespace bloom
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_BLOOM_BLOOM_ARGS_H_
