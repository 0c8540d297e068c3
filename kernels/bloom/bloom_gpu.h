// CUDA launchers of the Bloom-filter index codec: plain C++ declarations with
// no TensorFlow and no CUDA headers, so that both the TF OpKernels
// (bloom_kernels_gpu.cc, g++) and the standalone test (tests/cuda/, nvcc)
// can call the kernels in bloom_kernels.cu.
//
// Conventions:
//   * Every pointer argument named d_* is device memory; the caller owns it
//     (TF allocates it with allocate_temp/allocate_output, the test with
//     cudaMalloc). Sizes come from the *ScratchBytes() functions.
//   * `stream` is a cudaStream_t (== CUstream) passed as void*; everything is
//     enqueued on it. A function that returns a value to the host says so and
//     synchronizes the stream; the others only enqueue work.
//   * The bits written are those of the CPU kernels: the same bloom.h
//     functions (Probes/ProbeBit/Contains) run on the device, and the filter
//     has the bit layout documented in bloom.h (word w bit k of the uint32
//     words == byte 4w + k/8 bit k%8, little-endian).
//
// BloomFilterSelect has no CUDA kernel and none is planned: it works on the
// ~K positives, not on the universe, and its conflict_sets policy is a
// sequential greedy. TF places it on the CPU; its inputs are small.
#ifndef DEEPREDUCE_KERNELS_BLOOM_BLOOM_GPU_H_
#define DEEPREDUCE_KERNELS_BLOOM_BLOOM_GPU_H_

#include <cstddef>
#include <cstdint>

#include "kernels/common/gpu_launch.h"
#include "kernels/bloom/bloom.h"

namespace deepreduce {
namespace bloom {
namespace gpu {

// GpuStatus, ErrorString, CopyToHost and (in .cu files) the launch helpers:
// kernels/common/gpu_launch.h.
using namespace ::deepreduce::gpu_launch;  // NOLINT

// ---------------------------------------------------------------- insert --

// Result of an insert: first_bad is the smallest position i of `indices`
// at which a bad index was detected (out of [0, n), or a repeat of an index
// seen at another position), or k if every index was fine; bad_value is
// indices[first_bad] when first_bad < k. As on the CPU, which copy of a
// repeated index is flagged depends on thread timing.
struct InsertResult {
  int64_t first_bad;
  int64_t bad_value;
};

// Device scratch of an insert into a universe of n positions: the "seen"
// bitmap (one bit per position, 64-bit words) and the error record.
size_t InsertScratchBytes(int64_t n);

// Clears the filter (NumBytes(layout.num_bits) bytes at d_filter_words, which
// must be 4-byte aligned), sets the h bits of each of the k indices, and
// checks the indices. Synchronizes the stream and fills *result.
// With k == 0 it only clears the filter and does not synchronize.
GpuStatus InsertInt32(const BloomLayout& layout, const int32_t* d_indices,
                      int64_t k, int64_t n, uint32_t* d_filter_words,
                      void* d_scratch, size_t scratch_bytes, void* stream,
                      InsertResult* result);
GpuStatus InsertInt64(const BloomLayout& layout, const int64_t* d_indices,
                      int64_t k, int64_t n, uint32_t* d_filter_words,
                      void* d_scratch, size_t scratch_bytes, void* stream,
                      InsertResult* result);

// ----------------------------------------------------------------- query --

// Device scratch of a query over n positions: the hit bitmap (one bit per
// position), per-tile counts and offsets, and CUB's scan workspace.
// Returns 0 and sets *status on a CUDA error.
size_t QueryScratchBytes(int64_t n, GpuStatus* status);

// Pass 1 of a query: tests every position of [0, n) against the filter
// (d_filter: NumBytes(layout.num_bits) bytes, any alignment) into the hit
// bitmap in d_scratch and counts the positives. Also copies the filter's last
// 32-bit word to *last_word (the word that holds the padding bits past m, for
// the caller's corruption check). Synchronizes the stream; *num_positives is
// the length of the output of QueryWrite*. With n == 0 only the last word is
// read.
GpuStatus QueryCount(const BloomLayout& layout, const uint8_t* d_filter,
                     int64_t n, void* d_scratch, size_t scratch_bytes,
                     void* stream, int64_t* num_positives, uint32_t* last_word);

// Pass 2: writes the positives found by QueryCount (same n, same scratch,
// untouched in between) to d_out, in ascending order. Does not synchronize.
GpuStatus QueryWriteInt32(int64_t n, const void* d_scratch, size_t scratch_bytes,
                          int32_t* d_out, void* stream);
GpuStatus QueryWriteInt64(int64_t n, const void* d_scratch, size_t scratch_bytes,
                          int64_t* d_out, void* stream);

}  // namespace gpu
}  // namespace bloom
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_BLOOM_BLOOM_GPU_H_
