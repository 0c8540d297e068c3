// CUDA launchers of the value codecs with ops of their own (qsgd, polyfit,
// dexp; the codecs of the family's convention declare theirs in their struct,
// kernels/value/<name>.h, and define them in <name>.cu): plain C++
// declarations with no TensorFlow and no CUDA headers, so that both the TF OpKernels
// (value_kernels_gpu.cc, g++) and the standalone test (tests/cuda/, nvcc) can
// call the kernels in value_kernels.cu.
//
// Conventions (as in bloom_gpu.h):
//   * Every pointer argument named d_* is device memory owned by the caller.
//     Payload buffers may have any alignment (they are read and written
//     bytewise through value_format.h's Get/Put helpers); value buffers are
//     float-aligned.
//   * `stream` is a cudaStream_t passed as void*; everything is enqueued on
//     it. A launcher that returns something to the host says so and
//     synchronizes the stream; the others only enqueue work.
//   * The bytes written are those of the CPU kernels: the per-element code
//     (qsgd.h, polyfit.h, lsq.h, dexp.h) is the same source
//     compiled for the device, and the payload layouts are the ones
//     documented there. Exception: dexp encode, whose amplitudes depend on
//     exp() (CUDA's and glibc's may differ in the last bit; see dexp.h).
//   * Header and size checks are the caller's, on the host (value_args.h);
//     checks that need the payload's sections or the values run on the
//     device and come back as "first bad position" records.
//
// polyfit and dexp encode run in steps (sort, segmentation, fit) because the
// host needs a few numbers in between (the sign split, the segment lengths,
// hence the payload size). Deflate is CPU-only by design (zlib is a
// sequential bit stream).
#ifndef DEEPREDUCE_KERNELS_VALUE_VALUE_GPU_H_
#define DEEPREDUCE_KERNELS_VALUE_VALUE_GPU_H_

#include <cstddef>
#include <cstdint>

#include "kernels/common/gpu_launch.h"
#include "kernels/value/dexp.h"
#include "kernels/value/polyfit.h"

namespace deepreduce {
namespace value {
namespace gpu {

// GpuStatus, ErrorString, CopyToHost and (in .cu files) the launch helpers:
// kernels/common/gpu_launch.h.
using namespace ::deepreduce::gpu_launch;  // NOLINT

// ---------------------------------------------------------------- qsgd --

// Device scratch of QsgdEncode / QsgdDecode: the error records.
size_t QsgdScratchBytes();

// Result of QsgdEncode: first_bad is the position of the first non-finite
// value (k if none) and bad_value that value.
struct QsgdEncodeResult {
  int64_t first_bad;
  float bad_value;
};

// Writes the whole qsgd payload of the k values (levels s, bucket size, as
// in qsgd.h; payload_bytes = MakeQsgdLayout(k, s, bucket).size) and checks
// the values for NaN/Inf. Synchronizes the stream and fills *result; when
// result->first_bad < k the payload is unspecified.
GpuStatus QsgdEncode(const float* d_values, int64_t k, uint32_t s, uint32_t bucket,
                     uint64_t seed, uint8_t* d_payload, int64_t payload_bytes,
                     void* d_scratch, size_t scratch_bytes, void* stream,
                     QsgdEncodeResult* result);

// Result of QsgdDecode, in the order the CPU kernel checks: first_bad_scale
// (bucket index of the first scale that is not finite and >= 0, or
// num_buckets) and bad_scale; last_code_byte (for the padding check; 0 if
// there are no codes); first_bad_code (position of the first invalid code, or
// k). When any check fails d_out is unspecified.
struct QsgdDecodeResult {
  int64_t first_bad_scale;
  float bad_scale;
  uint8_t last_code_byte;
  int64_t first_bad_code;
};

// Decodes a payload whose header and size were checked (k, s, bucket from
// its header; payload_bytes its size) into d_out (k floats). Synchronizes
// the stream and fills *result.
GpuStatus QsgdDecode(const uint8_t* d_payload, int64_t payload_bytes, int64_t k,
                     uint32_t s, uint32_t bucket, float* d_out, void* d_scratch,
                     size_t scratch_bytes, void* stream, QsgdDecodeResult* result);

// ------------------------------------------------------------- polyfit --

// Device bytes of the decode tables of a payload with num_segs segments and
// num_coefs coefficients (see PolyfitUploadTables).
size_t PolyfitTableBytes(int64_t num_segs, int64_t num_coefs);

// Copies the host tables of a checked payload to d_tables (PolyfitTableBytes
// bytes): start[num_segs + 1] and coff[num_segs + 1] (value_args.h's
// PolyfitTables) and the coefficients (num_coefs little-endian f32, any
// alignment). Synchronizes the stream, so the host buffers may be freed on
// return.
GpuStatus PolyfitUploadTables(const int64_t* start, const int64_t* coff,
                              const uint8_t* coefs, int64_t num_segs, int64_t num_coefs,
                              void* d_tables, size_t table_bytes, void* stream);

// Evaluates the k values (k == start[num_segs]) of a payload of the given
// degree into d_out from uploaded tables. Does not synchronize.
GpuStatus PolyfitDecode(const void* d_tables, int64_t num_segs, int degree, int64_t k,
                        float* d_out, void* stream);

// ---------------------------------------------------------------- dexp --

// Evaluates the k values of checked coefficients (sign split p_count) into
// d_out. Does not synchronize.
GpuStatus DexpDecode(const dexp::Coefs& pos, const dexp::Coefs& neg, int64_t p_count,
                     int64_t k, float* d_out, void* stream);

// --------------------------------------------- polyfit and dexp encode --

// Device scratch of SortDescending for k values.
size_t SortScratchBytes(int64_t k);

// Result of SortDescending: first_bad is the position of the first
// non-finite value (k if none) and bad_value that value; p_count the number
// of values >= 0 (the sign split).
struct SortResult {
  int64_t first_bad;
  float bad_value;
  int64_t p_count;
};

// Sorts the k values (k <= 2^32 - 1) in descending signed order, ties by
// position, exactly as the CPU kernels: CUB's stable LSD radix sort of
// value_format.h's DescendingKey with the positions as payload. Writes perm
// (int64 if perm64, else int32; perm[i] = input position of the i-th sorted
// value) and the sorted values d_y, checks the values for NaN/Inf and counts
// the values >= 0. Synchronizes the stream and fills *result; when
// result->first_bad < k the other outputs are unspecified.
GpuStatus SortDescending(const float* d_values, int64_t k, bool perm64, void* d_perm,
                         float* d_y, void* d_scratch, size_t scratch_bytes, void* stream,
                         SortResult* result);

// Device scratch of PolyfitGreedy for `segs` segments.
size_t PolyfitGreedyScratchBytes(int64_t segs);

// polyfit's greedy segmentation (value_kernels.cc's, knot by knot on one
// thread block) of the k >= 1 sorted values d_y with p_count values >= 0
// into at most segs >= 1 segments. Synchronizes the stream and writes the
// count to *count and the lengths to lens (host memory, max(segs, 2)
// entries).
GpuStatus PolyfitGreedy(const float* d_y, int64_t k, int64_t p_count, int64_t segs,
                        int degree, void* d_scratch, size_t scratch_bytes, void* stream,
                        int64_t* lens, int64_t* count);

// Device scratch of PolyfitFit.
size_t PolyfitFitScratchBytes(int64_t num_segs, int64_t num_blocks);

// Result of PolyfitFit: the first segment whose fit failed (num_segs if
// none) and polyfit::FinishSegment's code for it.
struct PolyfitFitResult {
  int64_t bad_segment;
  int code;
};

// Fits the segments of the k sorted values d_y in the fixed order of
// polyfit.h's plan (blocks, plan: polyfit::MakePlan's host tables, uploaded
// here) and writes the whole payload (payload_bytes ==
// polyfit::PayloadBytes(num_segs, num_coefs)). Synchronizes the stream, so the
// host tables may be freed on return, and fills *result.
GpuStatus PolyfitFit(const float* d_y, int64_t k, int degree, uint8_t seg_kind,
                     const polyfit::FitBlock* blocks, int64_t num_blocks,
                     const polyfit::SegPlan* plan, int64_t num_segs, uint8_t* d_payload,
                     int64_t payload_bytes, void* d_scratch, size_t scratch_bytes,
                     void* stream, PolyfitFitResult* result);

// Device scratch of DexpFit for k values.
size_t DexpScratchBytes(int64_t k);

// Result of DexpFit: bad_part is -1, or the first sign part (0 positives,
// 1 negatives) whose mean magnitude `mean` is too large for the payload.
struct DexpFitResult {
  int bad_part;
  double mean;
};

// Fits both sign parts of the k sorted values d_y (p_count of them >= 0)
// in dexp.h's blocked order and writes the 56-byte payload. Synchronizes
// the stream and fills *result. Same bytes as the CPU kernel except where
// exp() differs (see dexp.h).
GpuStatus DexpFit(const float* d_y, int64_t k, int64_t p_count, uint8_t* d_payload,
                  void* d_scratch, size_t scratch_bytes, void* stream, DexpFitResult* result);

}  // namespace gpu
}  // namespace value
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_VALUE_VALUE_GPU_H_
