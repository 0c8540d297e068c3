// CUDA launchers of the sparsifiers: plain C++ declarations with no
// TensorFlow and no CUDA headers, so that the TF OpKernels
// (sparsify_kernels_gpu.cc, g++) can call the kernels in sparsify_kernels.cu.
//
// Conventions (as in bloom_gpu.h):
//   * Pointers named d_* are device memory owned by the caller; scratch sizes
//     come from ScratchBytes().
//   * `stream` is a cudaStream_t passed as void*; everything is enqueued on
//     it. Only ThresholdCount returns a value to the host and synchronizes.
//   * Elements are passed as their raw bits (uint16_t for float16/bfloat16,
//     uint32_t for float32, uint64_t for float64) plus a FloatKind; values
//     are copied bit for bit.
//   * The results are those of the CPU kernels: the same keys (sparsify.h:
//     MagnitudeKey, RandomKKey), the same tie rule (lower index first) and
//     ascending output. The GPU always runs the exact radix select (levels of
//     kGpuLevelBits over the whole input, the histogram in shared memory);
//     it needs no candidate buffer and no host round trip.
#ifndef DEEPREDUCE_KERNELS_SPARSIFY_SPARSIFY_GPU_H_
#define DEEPREDUCE_KERNELS_SPARSIFY_SPARSIFY_GPU_H_

#include <cstddef>
#include <cstdint>

#include "kernels/common/gpu_launch.h"
#include "kernels/sparsify/sparsify.h"

namespace deepreduce {
namespace sparsify {
namespace gpu {

// GpuStatus, ErrorString, CopyToHost and (in .cu files) the launch helpers:
// kernels/common/gpu_launch.h.
using namespace ::deepreduce::gpu_launch;  // NOLINT

enum class FloatKind : int { kHalf = 0, kBFloat16 = 1, kFloat32 = 2, kFloat64 = 3 };

// Device scratch for any of the launchers below over n elements.
// Returns 0 and sets *status on a CUDA error.
size_t ScratchBytes(int64_t n, GpuStatus* status);

// The k elements of largest magnitude (0 < k <= n; the caller handles
// k == 0), indices ascending in d_idx[0..k), their bits in d_val[0..k).
// U is uint16_t (kind kHalf or kBFloat16), uint32_t (kFloat32) or uint64_t
// (kFloat64); Tidx is int32_t or int64_t.
template <typename U, typename Tidx>
GpuStatus TopK(FloatKind kind, const U* d_x, int64_t n, int64_t k, Tidx* d_idx,
               U* d_val, void* d_scratch, size_t scratch_bytes, void* stream);

// k positions chosen by the random-k key of (seed, position) (0 < k <= n).
template <typename U, typename Tidx>
GpuStatus RandomK(uint64_t seed, const U* d_x, int64_t n, int64_t k, Tidx* d_idx,
                  U* d_val, void* d_scratch, size_t scratch_bytes, void* stream);

// Threshold, pass 1: marks the positions with MagnitudeKey >= t_key (t_key
// is MagnitudeKey of the threshold's bits), counts them into the scratch and
// returns the count in *count. Synchronizes the stream.
template <typename U>
GpuStatus ThresholdCount(FloatKind kind, const U* d_x, int64_t n, U t_key,
                         void* d_scratch, size_t scratch_bytes, void* stream,
                         int64_t* count);

// Threshold, pass 2: writes the marked positions (same n and scratch,
// untouched since ThresholdCount) ascending, and their values. No sync.
template <typename U, typename Tidx>
GpuStatus ThresholdWrite(const U* d_x, int64_t n, const void* d_scratch,
                         size_t scratch_bytes, Tidx* d_idx, U* d_val, void* stream);

// ------------------------------------------------------------- segmented --
// SegmentedTopK / SegmentedRandomK: d_x is a bucket of S segments, segment i
// = d_x[h_offsets[i], h_offsets[i+1]), of which h_k[i] are selected; both
// tables are in HOST memory, already validated (offsets[0] == 0,
// non-decreasing, 0 <= k[i] <= length; the TF ops check them with
// sparsify_args.h's CheckSegments). Segment i gets exactly what the CPU
// kernels give it (sparsify.h: same keys from the position within the
// segment, same tie rule, random-k seed SegmentSeed(seed, i)); the output is
// every segment's selection in segment order, as flat positions into d_x
// (ascending), total_k = sum of k[i] entries in d_idx and d_val (the caller
// allocates them). One launch sequence for all segments: each radix level is
// one histogram pass over every segment that selects something (a
// shared-memory histogram per chunk of one segment) and one bucket search per
// segment; then per-tile counts, two scans and an ordered write, as TopK. The
// launchers copy a table of O(S) entries to the device from pageable memory
// (CUDA stages it during the call and may wait for the stream to do so) and
// return nothing to the host. Scratch: 8 KiB of histogram per segment with
// 0 < k < length, plus O(n / 1024) per-tile counters.
//
// Device scratch for a segmentation (only its lengths and k matter).
size_t SegmentedScratchBytes(const int64_t* h_offsets, const int64_t* h_k,
                             int64_t num_segments, GpuStatus* status);

template <typename U>
GpuStatus SegmentedTopK(FloatKind kind, const U* d_x, const int64_t* h_offsets,
                        const int64_t* h_k, int64_t num_segments, int64_t* d_idx,
                        U* d_val, void* d_scratch, size_t scratch_bytes, void* stream);

template <typename U>
GpuStatus SegmentedRandomK(uint64_t seed, const U* d_x, const int64_t* h_offsets,
                           const int64_t* h_k, int64_t num_segments, int64_t* d_idx,
                           U* d_val, void* d_scratch, size_t scratch_bytes,
                           void* stream);

}  // namespace gpu
}  // namespace sparsify
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_SPARSIFY_SPARSIFY_GPU_H_
