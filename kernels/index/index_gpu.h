// CUDA launchers of the lossless index codecs (int32, bitmap, rle, golomb):
// plain C++ declarations with no TensorFlow and no CUDA headers, so that both
// the TF OpKernels (index_kernels_gpu.cc, g++) and the standalone test
// (tests/cuda/index_cuda_test.cu, nvcc) call the kernels of index_kernels.cu.
//
// Conventions (as in bloom_gpu.h):
//   * d_* pointers are device memory owned by the caller; scratch sizes come
//     from the *ScratchBytes() functions. Payload bodies (d_body, d_table,
//     d_stream) may start at any byte: they follow a variable-length header.
//   * `stream` is a cudaStream_t passed as void*. A launcher that returns a
//     value to the host says "Synchronizes"; the others only enqueue work.
//   * The per-element and per-block code is that of the CPU kernels
//     (index_format.h, rle.h, golomb.h, bit_io.h compiled for the device), so
//     both write the same bytes and accept the same payloads.
//   * Every launcher is overloaded for int32 and int64 indices.
// Headers are assembled on the host (index_format.h) and written with
// WriteBytes; header and table checks of the decoders run on the host, on a
// copied prefix (index_args.h), before any of these is called.
#ifndef DEEPREDUCE_KERNELS_INDEX_INDEX_GPU_H_
#define DEEPREDUCE_KERNELS_INDEX_INDEX_GPU_H_

#include <cstddef>
#include <cstdint>

#include "kernels/index/golomb.h"

namespace deepreduce {
namespace index {
namespace gpu {

// cuda_error is a cudaError_t (0 == cudaSuccess); step names the failed call.
struct GpuStatus {
  int cuda_error;
  const char* step;
  bool ok() const { return cuda_error == 0; }
};
const char* ErrorString(int cuda_error);

// ----------------------------------------------------------------- misc --

// Writes len <= kMaxWriteBytes host bytes to d_dst (passed by value to a
// kernel: no host buffer has to outlive the call).
constexpr int kMaxWriteBytes = 32;
GpuStatus WriteBytes(uint8_t* d_dst, const uint8_t* host_src, int len, void* stream);

// Copies `bytes` bytes from device to host. Synchronizes.
GpuStatus CopyToHost(void* host_dst, const void* d_src, size_t bytes, void* stream);

// ------------------------------------------------------------ validation --

// The first position i of d_idx[0, k) with d_idx[i] outside [0, n) or
// d_idx[i] <= d_idx[i - 1] (first_bad == k if none), with that value and its
// predecessor's (prev, 0 for i == 0), for the CPU kernels' message.
struct SortedCheck {
  int64_t first_bad;
  int64_t value;
  int64_t prev;
};
size_t ValidateScratchBytes();
// Synchronizes (unless k == 0).
GpuStatus ValidateSorted(const int32_t* d_idx, int64_t k, int64_t n, void* d_scratch,
                         void* stream, SortedCheck* result);
GpuStatus ValidateSorted(const int64_t* d_idx, int64_t k, int64_t n, void* d_scratch,
                         void* stream, SortedCheck* result);

// ----------------------------------------------------------------- int32 --

// d_body[4i .. 4i+4) = little-endian d_idx[i] (validated, n <= 2^31).
GpuStatus Int32Encode(const int32_t* d_idx, int64_t k, uint8_t* d_body, void* stream);
GpuStatus Int32Encode(const int64_t* d_idx, int64_t k, uint8_t* d_body, void* stream);
// d_out[i] = the i-th little-endian word read as int32 (words >= 2^31 turn
// negative and fail the ValidateSorted that must follow).
GpuStatus Int32Decode(const uint8_t* d_body, int64_t k, int32_t* d_out, void* stream);
GpuStatus Int32Decode(const uint8_t* d_body, int64_t k, int64_t* d_out, void* stream);

// ---------------------------------------------------------------- bitmap --

// Scratch: ceil(n / 32) aligned 32-bit words, which the encoder ORs into and
// then copies to d_body (BitmapBytes(n) bytes).
size_t BitmapEncodeScratchBytes(int64_t n);
GpuStatus BitmapEncode(const int32_t* d_idx, int64_t k, int64_t n, void* d_scratch,
                       size_t scratch_bytes, uint8_t* d_body, void* stream);
GpuStatus BitmapEncode(const int64_t* d_idx, int64_t k, int64_t n, void* d_scratch,
                       size_t scratch_bytes, uint8_t* d_body, void* stream);

// Decode pass 1: per-word bit counts of the body_bytes bytes at d_body and
// their exclusive scan; *total = the number of set bits. Synchronizes.
// Returns 0 and sets *status on a CUDA error.
size_t BitmapDecodeScratchBytes(int64_t body_bytes, GpuStatus* status);
GpuStatus BitmapCount(const uint8_t* d_body, int64_t body_bytes, void* d_scratch,
                      size_t scratch_bytes, void* stream, int64_t* total);
// Pass 2 (same body and scratch): the set bits' positions, ascending.
GpuStatus BitmapWrite(const uint8_t* d_body, int64_t body_bytes, const void* d_scratch,
                      size_t scratch_bytes, int32_t* d_out, void* stream);
GpuStatus BitmapWrite(const uint8_t* d_body, int64_t body_bytes, const void* d_scratch,
                      size_t scratch_bytes, int64_t* d_out, void* stream);

// ------------------------------------------------------------------- rle --

// Encode pass 1: each index's gap size (rle::GapSize) and their exclusive
// scan; *body_bytes = the body length. Synchronizes.
size_t RleEncodeScratchBytes(int64_t k, GpuStatus* status);
GpuStatus RleSize(const int32_t* d_idx, int64_t k, void* d_scratch, size_t scratch_bytes,
                  void* stream, int64_t* body_bytes);
GpuStatus RleSize(const int64_t* d_idx, int64_t k, void* d_scratch, size_t scratch_bytes,
                  void* stream, int64_t* body_bytes);
// Pass 2 (same indices and scratch): each index writes its gap at its offset.
GpuStatus RleWrite(const int32_t* d_idx, int64_t k, const void* d_scratch,
                   size_t scratch_bytes, uint8_t* d_body, void* stream);
GpuStatus RleWrite(const int64_t* d_idx, int64_t k, const void* d_scratch,
                   size_t scratch_bytes, uint8_t* d_body, void* stream);

// Decode: ONE device thread walks the K gaps (a gap's first byte depends on
// every byte before it, so the format admits no split point without a scan
// of its own). What went wrong, for the CPU kernel's messages:
//   kRleOk; kRleBadGap: gap `at` is truncated or not in shortest form;
//   kRlePastEnd: gap `at` = `gap` runs past n; kRleTrailing: `trailing` bytes
//   follow the K-th gap.
enum RleError : int64_t { kRleOk = 0, kRleBadGap = 1, kRlePastEnd = 2, kRleTrailing = 3 };
struct RleDecodeResult {
  int64_t error;
  int64_t at;
  uint64_t gap;
  int64_t trailing;
};
size_t RleDecodeScratchBytes();
// Synchronizes. The caller has checked K <= body_bytes.
GpuStatus RleDecode(const uint8_t* d_body, int64_t body_bytes, int64_t k, uint64_t n,
                    void* d_scratch, int32_t* d_out, void* stream, RleDecodeResult* result);
GpuStatus RleDecode(const uint8_t* d_body, int64_t body_bytes, int64_t k, uint64_t n,
                    void* d_scratch, int64_t* d_out, void* stream, RleDecodeResult* result);

// ---------------------------------------------------------------- golomb --

// One CUDA thread handles one golomb block (ChooseRiceParam, EncodeBlock,
// DecodeBlock of golomb.h).
//
// Encode pass 1: each block's Rice parameter and byte count and the exclusive
// scan of the counts; *stream_bytes = S. Synchronizes.
size_t GolombEncodeScratchBytes(int64_t k, int log2_block, GpuStatus* status);
GpuStatus GolombSize(const int32_t* d_idx, int64_t k, int log2_block, void* d_scratch,
                     size_t scratch_bytes, void* stream, int64_t* stream_bytes);
GpuStatus GolombSize(const int64_t* d_idx, int64_t k, int log2_block, void* d_scratch,
                     size_t scratch_bytes, void* stream, int64_t* stream_bytes);
// Pass 2 (same indices and scratch; layout = MakeLayout(n, k, log2_block, S)):
// the block table at d_table (one thread per table byte, bit-exact with the
// CPU's BitWriter) and every block at d_stream + its offset.
GpuStatus GolombWrite(const int32_t* d_idx, int64_t k, const golomb::Layout& layout,
                      const void* d_scratch, size_t scratch_bytes, uint8_t* d_table,
                      uint8_t* d_stream, void* stream);
GpuStatus GolombWrite(const int64_t* d_idx, int64_t k, const golomb::Layout& layout,
                      const void* d_scratch, size_t scratch_bytes, uint8_t* d_table,
                      uint8_t* d_stream, void* stream);

// Decode: h_table is the host-checked table (index_args.h ParseGolombTable):
// first[nb], off[nb + 1], param[nb], 3 nb + 1 values. It is copied to the
// scratch, every block is decoded into d_out, and *first_bad is the smallest
// block that failed (nb if none). Synchronizes.
size_t GolombDecodeScratchBytes(int64_t num_blocks);
GpuStatus GolombDecode(const uint8_t* d_stream, const uint64_t* h_table, int64_t k,
                       const golomb::Layout& layout, uint64_t n, void* d_scratch,
                       size_t scratch_bytes, int32_t* d_out, void* stream, int64_t* first_bad);
GpuStatus GolombDecode(const uint8_t* d_stream, const uint64_t* h_table, int64_t k,
                       const golomb::Layout& layout, uint64_t n, void* d_scratch,
                       size_t scratch_bytes, int64_t* d_out, void* stream, int64_t* first_bad);

}  // namespace gpu
}  // namespace index
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_INDEX_INDEX_GPU_H_
