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

#include "kernels/common/gpu_launch.h"
#include "kernels/index/golomb.h"
#include "kernels/index/rle.h"

namespace deepreduce {
namespace index {
namespace gpu {

// GpuStatus, ErrorString, CopyToHost and (in .cu files) the launch helpers:
// kernels/common/gpu_launch.h.
using namespace ::deepreduce::gpu_launch;  // NOLINT

// ----------------------------------------------------------------- misc --

// Writes len <= kMaxWriteBytes host bytes to d_dst (passed by value to a
// kernel: no host buffer has to outlive the call).
constexpr int kMaxWriteBytes = 32;
GpuStatus WriteBytes(uint8_t* d_dst, const uint8_t* host_src, int len, void* stream);

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

// Decode, in chunks of kRleChunkBytes body bytes (rle.h: a speculative
// scan of every chunk from each of the 9 possible entry offsets, one thread
// resolving the real entries in chunk order, a parallel decode of every chunk,
// one thread picking the first error in gap order). The result is the
// sequential decoder's (rle::DecodeResult: kRleOk, kRleBadGap at gap `at`,
// kRlePastEnd at gap `at` = `gap`, kRleTrailing with `trailing` bytes).
constexpr int64_t kRleChunkBytes = 1024;
using RleDecodeResult = rle::DecodeResult;
constexpr int64_t kRleOk = rle::kOk;
constexpr int64_t kRleBadGap = rle::kBadGap;
constexpr int64_t kRlePastEnd = rle::kPastEnd;
constexpr int64_t kRleTrailing = rle::kTrailing;
size_t RleDecodeScratchBytes(int64_t body_bytes);
// Synchronizes. The caller has checked K <= body_bytes.
GpuStatus RleDecode(const uint8_t* d_body, int64_t body_bytes, int64_t k, uint64_t n,
                    void* d_scratch, size_t scratch_bytes, int32_t* d_out, void* stream,
                    RleDecodeResult* result);
GpuStatus RleDecode(const uint8_t* d_body, int64_t body_bytes, int64_t k, uint64_t n,
                    void* d_scratch, size_t scratch_bytes, int64_t* d_out, void* stream,
                    RleDecodeResult* result);

// ---------------------------------------------------------------- golomb --

// One CUDA warp handles one golomb block: its lanes sum the gap costs of
// golomb.h's ChooseRiceParamWith, code every 32nd gap (positions from a warp
// scan of the code lengths) into a shared-memory copy of the block, and decode
// a staged block by following its chain of stop bits in parallel (blocks of
// fewer than 256 indices, or too large to stage, run golomb.h's DecodeBlock on
// one lane). Same bytes as ChooseRiceParam and EncodeBlock; a block is
// rejected exactly when DecodeBlock rejects it.
//
// Encode pass 0, auto block size only (block_size attribute 0): sizes every
// candidate 2^B, B in golomb::kAutoMinLog2Block..kAutoMaxLog2Block (one
// kernel per candidate, totals reduced on the device and copied back once)
// and *log2_block = golomb::PickLog2Block of them, as the CPU encoder does.
// Synchronizes.
size_t GolombAutoScratchBytes();
GpuStatus GolombAutoBlock(const int32_t* d_idx, int64_t k, uint64_t n, void* d_scratch,
                          size_t scratch_bytes, void* stream, int* log2_block);
GpuStatus GolombAutoBlock(const int64_t* d_idx, int64_t k, uint64_t n, void* d_scratch,
                          size_t scratch_bytes, void* stream, int* log2_block);
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
