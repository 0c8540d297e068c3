// CUDA kernels of the lossless index codecs behind the plain launchers of
// index_gpu.h. No TensorFlow headers: memory and the stream come from the
// caller. The per-element and per-block code (varints, rle gaps, golomb
// blocks, the LSB-first bit layout) is that of the codec headers, shared with
// the CPU kernels, so both write the same bytes.
#include <cstdint>

// This library's CUB lives in its own namespace (as in bloom_kernels.cu), so
// that its kernels cannot collide with those of another CUB (TensorFlow's,
// another op library's) loaded into the same process.
#define CUB_WRAPPED_NAMESPACE deepreduce_cub
#include <cub/device/device_scan.cuh>
#include <cuda_runtime.h>

#include "kernels/common/bit_io.h"
#include "kernels/index/golomb.h"
#include "kernels/index/index_format.h"
#include "kernels/index/index_gpu.h"
#include "kernels/index/rle.h"

namespace deepreduce {
namespace index {
namespace gpu {
namespace {

// Threads per CUDA block of the element-wise kernels (kThreads) and their
// grid (GridSize: one wave from the occupancy API, grid-stride loops do the
// rest), kWarp, kFullMask, kAlign: kernels/common/gpu_launch.h.
// Threads per CUDA block of the golomb kernels, where one warp owns one
// golomb block (16..4096 indices, chosen per payload by default): a 25 M-
// position tensor at 1 % has ~60-16k busy warps, so small CUDA blocks spread
// them over the SMs.
constexpr int kGolombThreads = 64;
static_assert(kThreads % 32 == 0 && kGolombThreads % 32 == 0, "whole warps");
// A gap must not skip a whole chunk (rle.h).
static_assert(kRleChunkBytes >= rle::kEntries, "rle chunks shorter than a gap");
#define DR_GRID_STRIDE(i, count)                                                   \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; \
       i < (count); i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// Bytes needed by CUB's exclusive sum of `count` int64 values.
cudaError_t ScanTempBytes(int64_t count, size_t* bytes) {
  *bytes = 0;
  return deepreduce_cub::cub::DeviceScan::ExclusiveSum(
      nullptr, *bytes, static_cast<const int64_t*>(nullptr), static_cast<int64_t*>(nullptr),
      count);
}

// A scratch of `count` int64 values, their exclusive scan, and CUB's
// workspace. counts[count - 1] is the caller's zero sentinel, so that
// offsets[count - 1] is the total.
struct ScanScratch {
  int64_t* counts;
  int64_t* offsets;
  void* cub_temp;
  size_t cub_bytes;
  size_t total_bytes;
};

cudaError_t ScanLayout(int64_t count, size_t head_bytes, void* base, ScanScratch* s) {
  cudaError_t e = ScanTempBytes(count, &s->cub_bytes);
  if (e != cudaSuccess) return e;
  const size_t scan_bytes = AlignUp(sizeof(int64_t) * static_cast<size_t>(count));
  const size_t counts_at = AlignUp(head_bytes);
  const size_t offsets_at = counts_at + scan_bytes;
  const size_t cub_at = offsets_at + scan_bytes;
  s->total_bytes = cub_at + s->cub_bytes;
  char* p = static_cast<char*>(base);
  s->counts = reinterpret_cast<int64_t*>(p + counts_at);
  s->offsets = reinterpret_cast<int64_t*>(p + offsets_at);
  s->cub_temp = p + cub_at;
  return cudaSuccess;
}

// Clears the sentinel counts[count - 1], scans, and copies the total to the
// host. Synchronizes.
GpuStatus ScanAndTotal(const ScanScratch& sc, int64_t count, cudaStream_t s, int64_t* total) {
  DR_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(sc.counts + count - 1, 0, sizeof(int64_t), s), "clearing the scan sentinel");
  size_t cub_bytes = sc.cub_bytes;
  DR_CUDA_RETURN_IF_ERROR(deepreduce_cub::cub::DeviceScan::ExclusiveSum(
                              sc.cub_temp, cub_bytes, sc.counts, sc.offsets, count, s),
                          "scanning the sizes");
  DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(total, sc.offsets + count - 1, sizeof(int64_t),
                                          cudaMemcpyDeviceToHost, s),
                          "copying the total to the host");
  DR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s), "running the size pass");
  return Ok();
}

// ----------------------------------------------------------------- misc --

struct SmallBytes {
  uint8_t b[kMaxWriteBytes];
};

// Thread t writes byte t.
__global__ void WriteBytesKernel(SmallBytes bytes, int len, uint8_t* dst) {
  const int t = threadIdx.x;
  if (t < len) dst[t] = bytes.b[t];
}

// ------------------------------------------------------------ validation --

// Grid-stride over the k indices: thread t checks indices t, t + stride, ...
// against the range and their predecessor; failures lower *first_bad.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    ValidateKernel(const T* __restrict__ idx, int64_t k, int64_t n,
                   unsigned long long* __restrict__ first_bad) {
  DR_GRID_STRIDE(i, k) {
    const int64_t v = static_cast<int64_t>(idx[i]);
    if (v < 0 || v >= n || (i > 0 && static_cast<int64_t>(idx[i - 1]) >= v)) {
      atomicMin(first_bad, static_cast<unsigned long long>(i));
    }
  }
}

template <typename T>
GpuStatus Validate(const T* d_idx, int64_t k, int64_t n, void* d_scratch, void* stream,
                   SortedCheck* r) {
  cudaStream_t s = AsStream(stream);
  r->first_bad = k;
  r->value = 0;
  r->prev = 0;
  if (k == 0) return Ok();
  unsigned long long* flag = static_cast<unsigned long long*>(d_scratch);
  DR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(flag, 0xff, sizeof(*flag), s), "clearing the error flag");
  int grid = 0;
  DR_CUDA_RETURN_IF_ERROR(
      GridSize(ValidateKernel<T>, CeilDiv(k, kThreads), &grid, kThreads),
      "sizing the check grid");
  ValidateKernel<T><<<grid, kThreads, 0, s>>>(d_idx, k, n, flag);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching ValidateKernel");
  unsigned long long bad = 0;
  DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&bad, flag, sizeof(bad), cudaMemcpyDeviceToHost, s),
                          "copying the error flag to the host");
  DR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s), "checking the indices");
  if (bad >= static_cast<unsigned long long>(k)) return Ok();
  T vals[2] = {0, 0};  // idx[bad - 1], idx[bad]
  const int64_t from = bad > 0 ? static_cast<int64_t>(bad) - 1 : 0;
  const int count = bad > 0 ? 2 : 1;
  DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(bad > 0 ? vals : vals + 1, d_idx + from,
                                          sizeof(T) * count, cudaMemcpyDeviceToHost, s),
                          "copying the bad index to the host");
  DR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s), "copying the bad index");
  r->first_bad = static_cast<int64_t>(bad);
  r->prev = static_cast<int64_t>(vals[0]);
  r->value = static_cast<int64_t>(vals[1]);
  return Ok();
}

// ----------------------------------------------------------------- int32 --

// Grid-stride over the k indices: thread t writes / reads word t, t + stride...
template <typename T>
__global__ void __launch_bounds__(kThreads)
    Int32EncodeKernel(const T* __restrict__ idx, int64_t k, uint8_t* __restrict__ body) {
  DR_GRID_STRIDE(i, k) { StoreLE32(body + 4 * i, static_cast<uint32_t>(idx[i])); }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    Int32DecodeKernel(const uint8_t* __restrict__ body, int64_t k, T* __restrict__ out) {
  DR_GRID_STRIDE(i, k) { out[i] = static_cast<T>(static_cast<int32_t>(LoadLE32(body + 4 * i))); }
}

template <typename T>
GpuStatus Int32EncodeT(const T* d_idx, int64_t k, uint8_t* d_body, void* stream) {
  if (k == 0) return Ok();
  int grid = 0;
  DR_CUDA_RETURN_IF_ERROR(
      GridSize(Int32EncodeKernel<T>, CeilDiv(k, kThreads), &grid, kThreads),
      "sizing the grid");
  Int32EncodeKernel<T><<<grid, kThreads, 0, AsStream(stream)>>>(d_idx, k, d_body);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching Int32EncodeKernel");
  return Ok();
}

template <typename T>
GpuStatus Int32DecodeT(const uint8_t* d_body, int64_t k, T* d_out, void* stream) {
  if (k == 0) return Ok();
  int grid = 0;
  DR_CUDA_RETURN_IF_ERROR(
      GridSize(Int32DecodeKernel<T>, CeilDiv(k, kThreads), &grid, kThreads),
      "sizing the grid");
  Int32DecodeKernel<T><<<grid, kThreads, 0, AsStream(stream)>>>(d_body, k, d_out);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching Int32DecodeKernel");
  return Ok();
}

// ---------------------------------------------------------------- bitmap --

// Grid-stride over the k (validated, distinct) indices: thread t sets bit
// idx[t] % 32 of word idx[t] / 32, ... . Bit j of the little-endian words is
// bit j % 8 of byte j / 8: the bitmap body's layout.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    BitmapSetKernel(const T* __restrict__ idx, int64_t k, uint32_t* __restrict__ words) {
  DR_GRID_STRIDE(i, k) {
    const uint64_t v = static_cast<uint64_t>(idx[i]);
    atomicOr(&words[v >> 5], 1u << (v & 31));
  }
}

int64_t BitmapWords(int64_t bytes) { return (bytes + 3) / 4; }

// Word w of a body at any alignment: its bytes 4w .. 4w + 3 that exist.
__device__ __forceinline__ uint32_t LoadBodyWord(const uint8_t* body, int64_t bytes, int64_t w) {
  const int64_t at = 4 * w;
  if (at + 4 <= bytes) return LoadLE32(body + at);
  uint32_t x = 0;
  for (int j = 0; at + j < bytes; ++j) x |= static_cast<uint32_t>(body[at + j]) << (8 * j);
  return x;
}

// Grid-stride over the words of the body: thread t counts word t's bits, ...
__global__ void __launch_bounds__(kThreads)
    BitmapCountKernel(const uint8_t* __restrict__ body, int64_t bytes, int64_t words,
                      int64_t* __restrict__ counts) {
  DR_GRID_STRIDE(w, words) { counts[w] = __popc(LoadBodyWord(body, bytes, w)); }
}

// Grid-stride over the words: thread t writes word t's positions, ascending,
// from the exclusive prefix sum of the counts.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    BitmapCompactKernel(const uint8_t* __restrict__ body, int64_t bytes, int64_t words,
                        const int64_t* __restrict__ offsets, T* __restrict__ out) {
  DR_GRID_STRIDE(w, words) {
    uint32_t x = LoadBodyWord(body, bytes, w);
    int64_t o = offsets[w];
    while (x) {
      out[o++] = static_cast<T>(32 * w + (__ffs(x) - 1));
      x &= x - 1;
    }
  }
}

template <typename T>
GpuStatus BitmapEncodeT(const T* d_idx, int64_t k, int64_t n, void* d_scratch,
                        size_t scratch_bytes, uint8_t* d_body, void* stream) {
  cudaStream_t s = AsStream(stream);
  if (n == 0) return Ok();
  if (scratch_bytes < BitmapEncodeScratchBytes(n)) {
    return Fail(cudaErrorInvalidValue, "bitmap scratch is smaller than BitmapEncodeScratchBytes(n)");
  }
  uint32_t* words = static_cast<uint32_t*>(d_scratch);
  DR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(words, 0, BitmapEncodeScratchBytes(n), s),
                          "clearing the bitmap");
  if (k > 0) {
    int grid = 0;
    DR_CUDA_RETURN_IF_ERROR(
        GridSize(BitmapSetKernel<T>, CeilDiv(k, kThreads), &grid, kThreads),
        "sizing the grid");
    BitmapSetKernel<T><<<grid, kThreads, 0, s>>>(d_idx, k, words);
    DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching BitmapSetKernel");
  }
  DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d_body, words, BitmapBytes(static_cast<uint64_t>(n)),
                                          cudaMemcpyDeviceToDevice, s),
                          "copying the bitmap into the payload");
  return Ok();
}

template <typename T>
GpuStatus BitmapWriteT(const uint8_t* d_body, int64_t bytes, const void* d_scratch,
                       size_t scratch_bytes, T* d_out, void* stream) {
  if (bytes == 0) return Ok();
  const int64_t words = BitmapWords(bytes);
  ScanScratch sc;
  DR_CUDA_RETURN_IF_ERROR(ScanLayout(words + 1, 0, const_cast<void*>(d_scratch), &sc),
                          "sizing the bitmap scratch");
  if (scratch_bytes < sc.total_bytes) {
    return Fail(cudaErrorInvalidValue, "bitmap scratch is smaller than BitmapDecodeScratchBytes");
  }
  int grid = 0;
  DR_CUDA_RETURN_IF_ERROR(
      GridSize(BitmapCompactKernel<T>, CeilDiv(words, kThreads), &grid, kThreads),
      "sizing the grid");
  BitmapCompactKernel<T><<<grid, kThreads, 0, AsStream(stream)>>>(d_body, bytes, words,
                                                                  sc.offsets, d_out);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching BitmapCompactKernel");
  return Ok();
}

// ------------------------------------------------------------------- rle --

template <typename T>
__device__ __forceinline__ uint64_t Gap(const T* idx, int64_t i) {
  return i == 0 ? static_cast<uint64_t>(idx[0])
                : static_cast<uint64_t>(idx[i]) - static_cast<uint64_t>(idx[i - 1]) - 1;
}

// Grid-stride over the k indices: thread t sizes / writes index t's gap, ...
template <typename T>
__global__ void __launch_bounds__(kThreads)
    RleSizeKernel(const T* __restrict__ idx, int64_t k, int64_t* __restrict__ sizes) {
  DR_GRID_STRIDE(i, k) { sizes[i] = rle::GapSize(Gap(idx, i)); }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    RleWriteKernel(const T* __restrict__ idx, int64_t k, const int64_t* __restrict__ offsets,
                   uint8_t* __restrict__ body) {
  DR_GRID_STRIDE(i, k) { rle::PutGap(body + offsets[i], Gap(idx, i)); }
}

// Decode, rle.h's chunk passes. Scan: grid-stride over (chunk, entry)
// pairs, thread t handles pair t = chunk * 9 + entry, ... .
__global__ void __launch_bounds__(kThreads)
    RleScanKernel(const uint8_t* __restrict__ body, int64_t bytes, int64_t chunks,
                  rle::ChunkScan* __restrict__ scans) {
  DR_GRID_STRIDE(t, chunks * rle::kEntries) {
    scans[t] = rle::ScanChunk(body, bytes, kRleChunkBytes, t / rle::kEntries,
                              static_cast<int>(t % rle::kEntries));
  }
}

// One thread: the entries, chunk after chunk (a few operations per chunk).
__global__ void RleResolveKernel(const rle::ChunkScan* scans, int64_t chunks,
                                 rle::ChunkPlan* plans, int64_t* totals) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  rle::ResolveChunks(scans, chunks, plans, &totals[0], &totals[1]);
}

// Grid-stride over the chunks: thread t decodes chunk t, ... .
template <typename T>
__global__ void __launch_bounds__(kThreads)
    RleDecodeChunksKernel(const uint8_t* __restrict__ body, int64_t bytes, int64_t chunks,
                          const rle::ChunkPlan* __restrict__ plans, int64_t k, uint64_t n,
                          T* __restrict__ out, rle::ChunkDecode* __restrict__ decoded) {
  DR_GRID_STRIDE(c, chunks) {
    decoded[c] = rle::DecodeChunk(body, bytes, kRleChunkBytes, c, plans[c], k, n, out);
  }
}

// One thread: the first error in gap order.
__global__ void RleFinishKernel(const rle::ChunkDecode* decoded, int64_t chunks, int64_t bytes,
                                int64_t k, const int64_t* totals, RleDecodeResult* result) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  *result = rle::FinishChunks(decoded, chunks, bytes, k, totals[0], totals[1]);
}

// Rle decode scratch, each part 256-byte aligned: scans[9 * chunks],
// plans[chunks], decoded[chunks], totals[2], the result.
struct RleDecodeScratch {
  rle::ChunkScan* scans;
  rle::ChunkPlan* plans;
  rle::ChunkDecode* decoded;
  int64_t* totals;
  RleDecodeResult* result;
  size_t total_bytes;
};

RleDecodeScratch RleDecodeLayout(int64_t bytes, void* base) {
  const int64_t chunks = (bytes + kRleChunkBytes - 1) / kRleChunkBytes;
  const size_t scans_at = 0;
  const size_t plans_at =
      scans_at + AlignUp(sizeof(rle::ChunkScan) * rle::kEntries * static_cast<size_t>(chunks));
  const size_t decoded_at = plans_at + AlignUp(sizeof(rle::ChunkPlan) * static_cast<size_t>(chunks));
  const size_t totals_at =
      decoded_at + AlignUp(sizeof(rle::ChunkDecode) * static_cast<size_t>(chunks));
  const size_t result_at = totals_at + AlignUp(2 * sizeof(int64_t));
  char* p = static_cast<char*>(base);
  RleDecodeScratch s;
  s.scans = reinterpret_cast<rle::ChunkScan*>(p + scans_at);
  s.plans = reinterpret_cast<rle::ChunkPlan*>(p + plans_at);
  s.decoded = reinterpret_cast<rle::ChunkDecode*>(p + decoded_at);
  s.totals = reinterpret_cast<int64_t*>(p + totals_at);
  s.result = reinterpret_cast<RleDecodeResult*>(p + result_at);
  s.total_bytes = result_at + sizeof(RleDecodeResult);
  return s;
}

template <typename T>
GpuStatus RleSizeT(const T* d_idx, int64_t k, void* d_scratch, size_t scratch_bytes,
                   void* stream, int64_t* body_bytes) {
  *body_bytes = 0;
  if (k == 0) return Ok();
  cudaStream_t s = AsStream(stream);
  ScanScratch sc;
  DR_CUDA_RETURN_IF_ERROR(ScanLayout(k + 1, 0, d_scratch, &sc), "sizing the rle scratch");
  if (scratch_bytes < sc.total_bytes) {
    return Fail(cudaErrorInvalidValue, "rle scratch is smaller than RleEncodeScratchBytes(k)");
  }
  int grid = 0;
  DR_CUDA_RETURN_IF_ERROR(
      GridSize(RleSizeKernel<T>, CeilDiv(k, kThreads), &grid, kThreads),
      "sizing the grid");
  RleSizeKernel<T><<<grid, kThreads, 0, s>>>(d_idx, k, sc.counts);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching RleSizeKernel");
  return ScanAndTotal(sc, k + 1, s, body_bytes);
}

template <typename T>
GpuStatus RleWriteT(const T* d_idx, int64_t k, const void* d_scratch, size_t scratch_bytes,
                    uint8_t* d_body, void* stream) {
  if (k == 0) return Ok();
  ScanScratch sc;
  DR_CUDA_RETURN_IF_ERROR(ScanLayout(k + 1, 0, const_cast<void*>(d_scratch), &sc),
                          "sizing the rle scratch");
  if (scratch_bytes < sc.total_bytes) {
    return Fail(cudaErrorInvalidValue, "rle scratch is smaller than RleEncodeScratchBytes(k)");
  }
  int grid = 0;
  DR_CUDA_RETURN_IF_ERROR(
      GridSize(RleWriteKernel<T>, CeilDiv(k, kThreads), &grid, kThreads),
      "sizing the grid");
  RleWriteKernel<T><<<grid, kThreads, 0, AsStream(stream)>>>(d_idx, k, sc.offsets, d_body);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching RleWriteKernel");
  return Ok();
}

template <typename T>
GpuStatus RleDecodeT(const uint8_t* d_body, int64_t bytes, int64_t k, uint64_t n,
                     void* d_scratch, size_t scratch_bytes, T* d_out, void* stream,
                     RleDecodeResult* result) {
  *result = RleDecodeResult{kRleOk, 0, 0, 0};
  if (bytes == 0) return Ok();  // then k == 0 too (checked by the caller)
  if (k == 0) {                 // what the sequential decoder says, without a launch
    *result = RleDecodeResult{kRleTrailing, 0, 0, bytes};
    return Ok();
  }
  cudaStream_t s = AsStream(stream);
  const RleDecodeScratch sc = RleDecodeLayout(bytes, d_scratch);
  if (scratch_bytes < sc.total_bytes) {
    return Fail(cudaErrorInvalidValue, "rle scratch is smaller than RleDecodeScratchBytes");
  }
  const int64_t chunks = (bytes + kRleChunkBytes - 1) / kRleChunkBytes;
  int grid = 0;
  DR_CUDA_RETURN_IF_ERROR(
      GridSize(RleScanKernel, CeilDiv(chunks * rle::kEntries, kThreads), &grid, kThreads),
      "sizing the grid");
  RleScanKernel<<<grid, kThreads, 0, s>>>(d_body, bytes, chunks, sc.scans);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching RleScanKernel");
  RleResolveKernel<<<1, 1, 0, s>>>(sc.scans, chunks, sc.plans, sc.totals);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching RleResolveKernel");
  DR_CUDA_RETURN_IF_ERROR(
      GridSize(RleDecodeChunksKernel<T>, CeilDiv(chunks, kThreads), &grid, kThreads),
      "sizing the grid");
  RleDecodeChunksKernel<T><<<grid, kThreads, 0, s>>>(d_body, bytes, chunks, sc.plans, k, n,
                                                     d_out, sc.decoded);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching RleDecodeChunksKernel");
  RleFinishKernel<<<1, 1, 0, s>>>(sc.decoded, chunks, bytes, k, sc.totals, sc.result);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching RleFinishKernel");
  DR_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(result, sc.result, sizeof(*result), cudaMemcpyDeviceToHost, s),
      "copying the rle result to the host");
  DR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s), "running the rle decode");
  return Ok();
}

// ---------------------------------------------------------------- golomb --

int64_t NumBlocks(int64_t k, int log2_block) {
  return (k + (int64_t{1} << log2_block) - 1) >> log2_block;
}

// One warp owns one golomb block (warp-stride loops: warp w handles blocks w,
// w + warps, ...), so a block of 2^12 indices is summed, written and staged
// by 32 lanes instead of one thread. Every lane runs the same control flow
// (the sums are reduced to all lanes), so the full-mask shuffles are safe.
// Per-warp shared staging of one block's stream bytes (encode: ORed bit by
// bit, then copied out; decode: copied in, then read by one lane). Larger
// blocks (big explicit block sizes, huge gaps) take the global-memory path,
// which writes and accepts the same bytes.
constexpr int kGolombWarps = kGolombThreads / kWarp;
constexpr int kStageBytes = 10240;
constexpr int kStageWords = kStageBytes / 4 + 6;  // + the words a last code may spill into

#define DR_WARP_STRIDE(b, count)                                                          \
  for (int64_t b = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp; \
       b < (count); b += static_cast<int64_t>(gridDim.x) * blockDim.x / kWarp)

__device__ uint64_t WarpSum(uint64_t v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

// golomb::ChooseRiceParam of a block, its gap sums spread over the warp.
template <typename T>
__device__ int WarpChooseRiceParam(const T* idx, uint64_t count, int lane, uint64_t* bits) {
  const uint64_t gap_sum = count <= 1 ? 0
                                      : static_cast<uint64_t>(idx[count - 1]) -
                                            static_cast<uint64_t>(idx[0]) - (count - 1);
  const uint64_t g = count - 1;
  auto costs3 = [&](int r, uint64_t* c) {
    uint64_t lo = 0, mid = 0, hi = 0;
    for (uint64_t i = 1 + lane; i < count; i += kWarp) {
      const uint64_t d = static_cast<uint64_t>(idx[i]) - static_cast<uint64_t>(idx[i - 1]) - 1;
      lo += d >> (r - 1);
      mid += d >> r;
      hi += d >> (r + 1);
    }
    const uint64_t base = g * static_cast<uint64_t>(1 + r);  // as golomb::RiceBits3
    c[0] = base - g + WarpSum(lo);
    c[1] = base + WarpSum(mid);
    c[2] = base + g + WarpSum(hi);
  };
  auto cost = [&](int r) {
    uint64_t sum = 0;
    for (uint64_t i = 1 + lane; i < count; i += kWarp) {
      sum += (static_cast<uint64_t>(idx[i]) - static_cast<uint64_t>(idx[i - 1]) - 1) >> r;
    }
    return g * static_cast<uint64_t>(1 + r) + WarpSum(sum);  // as golomb::RiceBits
  };
  return golomb::ChooseRiceParamWith(count, gap_sum, costs3, cost, bits);
}

template <typename T>
__global__ void __launch_bounds__(kGolombThreads)
    GolombPlanKernel(const T* __restrict__ idx, int64_t k, int log2_block, int64_t blocks,
                     int32_t* __restrict__ param, int64_t* __restrict__ bytes) {
  const int lane = threadIdx.x % kWarp;
  DR_WARP_STRIDE(b, blocks) {
    uint64_t bits;
    const int r = WarpChooseRiceParam(idx + (b << log2_block),
                                      golomb::BlockCount(k, log2_block, b), lane, &bits);
    if (lane == 0) {
      param[b] = r;
      bytes[b] = static_cast<int64_t>((bits + 7) / 8);
    }
  }
}

// Auto block size: warp-stride over the blocks of one candidate size; each
// warp sums its blocks' exact byte counts and adds that to *total once.
template <typename T>
__global__ void __launch_bounds__(kGolombThreads)
    GolombCandidateKernel(const T* __restrict__ idx, int64_t k, int log2_block, int64_t blocks,
                          unsigned long long* __restrict__ total) {
  const int lane = threadIdx.x % kWarp;
  unsigned long long local = 0;
  DR_WARP_STRIDE(b, blocks) {
    uint64_t bits;
    WarpChooseRiceParam(idx + (b << log2_block), golomb::BlockCount(k, log2_block, b), lane,
                        &bits);
    local += static_cast<unsigned long long>((bits + 7) / 8);
  }
  if (lane == 0 && local != 0) atomicAdd(total, local);
}

// ORs the low `width` (<= 57) bits of v into the LSB-first bit stream of
// 32-bit words at bit position pos (the little-endian byte order of the
// stream: bit j is bit j % 8 of byte j / 8).
__device__ void OrBits(uint32_t* words, uint64_t pos, uint64_t v, int width) {
  const uint64_t w = pos >> 5;
  const int sh = static_cast<int>(pos & 31);
  const uint64_t lo = v << sh;
  atomicOr(words + w, static_cast<uint32_t>(lo));
  if (sh + width > 32) atomicOr(words + w + 1, static_cast<uint32_t>(lo >> 32));
  if (sh + width > 64) atomicOr(words + w + 2, static_cast<uint32_t>(v >> (64 - sh)));
}

// golomb::EncodeBlock by a warp: each lane codes every 32nd gap, a warp
// scan of the code lengths gives each code's bit position, the codes are
// ORed into a zeroed shared copy of the block, which the lanes copy out.
template <typename T>
__global__ void __launch_bounds__(kGolombThreads)
    GolombEncodeKernel(const T* __restrict__ idx, int64_t k, int log2_block, int64_t blocks,
                       const int32_t* __restrict__ param, const int64_t* __restrict__ off,
                       uint8_t* __restrict__ out) {
  __shared__ uint32_t stage_all[kGolombWarps][kStageWords];
  const int lane = threadIdx.x % kWarp;
  uint32_t* stage = stage_all[threadIdx.x / kWarp];
  DR_WARP_STRIDE(b, blocks) {
    const T* bidx = idx + (b << log2_block);
    const uint64_t count = golomb::BlockCount(k, log2_block, b);
    const int r = param[b];
    const int64_t nbytes = off[b + 1] - off[b];
    uint8_t* dst = out + off[b];
    if (nbytes > kStageBytes) {
      if (lane == 0) golomb::EncodeBlock(bidx, count, r, dst);
      __syncwarp();
      continue;
    }
    // Only the block's own words: the codes' bits lie below 8 * nbytes.
    for (int64_t w = lane; w < (nbytes + 3) / 4; w += kWarp) stage[w] = 0;
    __syncwarp();
    uint64_t base = 0;
    for (uint64_t first = 1; first < count; first += kWarp) {
      const uint64_t i = first + lane;
      uint64_t d = 0, len = 0;
      if (i < count) {
        d = static_cast<uint64_t>(bidx[i]) - static_cast<uint64_t>(bidx[i - 1]) - 1;
        len = (d >> r) + 1 + static_cast<uint64_t>(r);
      }
      uint64_t incl = len;  // inclusive scan of the code lengths
      for (int o = 1; o < kWarp; o <<= 1) {
        const uint64_t v = __shfl_up_sync(kFullMask, incl, o);
        if (lane >= o) incl += v;
      }
      if (i < count) {
        // q zero bits, then the stop bit and the low r bits of d.
        const uint64_t stop = base + incl - len + (d >> r);
        OrBits(stage, stop, 1 | ((d & LowMask64(r)) << 1), r + 1);
      }
      base += __shfl_sync(kFullMask, incl, kWarp - 1);
    }
    __syncwarp();
    const uint8_t* bytes = reinterpret_cast<const uint8_t*>(stage);
    for (int64_t j = lane; j < nbytes; j += kWarp) dst[j] = bytes[j];
    __syncwarp();
  }
}

// Grid-stride over the bytes of the block table: thread t assembles byte t
// from the 8 table bits it holds (golomb.h's TableByte, BitWriter's layout).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    GolombTableKernel(const T* __restrict__ idx, golomb::Layout layout, int64_t table_bytes,
                      const int32_t* __restrict__ param, const int64_t* __restrict__ off,
                      uint8_t* __restrict__ table) {
  DR_GRID_STRIDE(j, table_bytes) {
    table[j] = golomb::TableByte(layout, idx, off, param, static_cast<uint64_t>(j));
  }
}

// ------------------------------------------------ golomb, warp decode --
// A Rice code is q zero bits, a stop bit (1), then r bits: its stop bit is
// the first 1 at or after the code's start, and the next code starts r + 1
// bits later. So the stop bits of a block form a chain t -> FirstOne(t + r +
// 1) from FirstOne(0), and the warp finds it in three passes over the block
// staged in shared memory, each lane owning a word-aligned segment:
//   1. each lane follows the chain from its segment's first bit (a guess:
//      the true entry may lie up to r bits later) and marks the stops it
//      meets in a shared stop mask;
//   2. lane by lane, the true entry (the previous lane's exit) is compared:
//      where it differs, the lane walks from it until it meets a marked stop
//      (chains that share a stop are equal from there: usually after a code
//      or two) or its segment's end, and replaces the marks before that;
//   3. each lane decodes its marked codes (q = stop - start, then r bits);
//      warp scans of the code counts and gap sums place them.
// The block is accepted exactly when golomb::DecodeBlock accepts it: count - 1
// codes whose values stay below `upper`, the last ending inside the stream,
// followed by fewer than 8 bits, all zero. Small blocks take DecodeBlock.
constexpr uint64_t kGolombWarpDecodeMin = 256;  // indices per block
constexpr uint64_t kSumCap = uint64_t{1} << 63;  // > any n: a saturated gap sum

__device__ uint64_t SatAdd(uint64_t a, uint64_t b) {
  const uint64_t c = a + b;
  return (c < a || c > kSumCap) ? kSumCap : c;
}

// The first set bit of the LSB-first words at or after p and below limit
// (limit if none).
__device__ uint64_t FirstOne(const uint32_t* w, uint64_t p, uint64_t limit) {
  if (p >= limit) return limit;
  uint64_t wi = p >> 5;
  uint32_t cur = w[wi] & (~0u << (p & 31));
  const uint64_t last = (limit - 1) >> 5;
  while (cur == 0) {
    if (++wi > last) return limit;
    cur = w[wi];
  }
  const uint64_t t = (wi << 5) + static_cast<uint64_t>(__ffs(cur) - 1);
  return t < limit ? t : limit;
}

// `width` (<= 56) bits at bit position pos; words pos/32 .. +2 must exist.
__device__ uint64_t GetBits(const uint32_t* w, uint64_t pos, int width) {
  const uint64_t wi = pos >> 5;
  const int sh = static_cast<int>(pos & 31);
  uint64_t v = (static_cast<uint64_t>(w[wi]) | (static_cast<uint64_t>(w[wi + 1]) << 32)) >> sh;
  if (sh + width > 64) v |= static_cast<uint64_t>(w[wi + 2]) << (64 - sh);
  return v & LowMask64(width);
}

// Clears the bits [a, b) of a lane's own words.
__device__ void ClearBits(uint32_t* w, uint64_t a, uint64_t b) {
  while (a < b) {
    const uint64_t wi = a >> 5;
    const int lo = static_cast<int>(a & 31);
    const uint64_t word_end = (wi + 1) << 5;
    const int hi = static_cast<int>((b < word_end ? b : word_end) - (wi << 5));  // 1..32
    const uint32_t keep_lo = lo == 0 ? 0u : (~0u >> (32 - lo));
    const uint32_t keep_hi = hi >= 32 ? 0u : (~0u << hi);
    w[wi] &= keep_lo | keep_hi;
    a = word_end;
  }
}

template <typename T>
__device__ bool WarpDecodeBlock(const uint32_t* stream, uint32_t* stops, uint64_t nbytes,
                                uint64_t first, int r, uint64_t count, uint64_t upper, T* out,
                                int lane) {
  const uint64_t total_bits = 8 * nbytes;
  const uint64_t words = (nbytes + 3) / 4;
  uint64_t seg = (words + kWarp - 1) / kWarp;
  if (seg < 2) seg = 2;  // a code's r + 1 <= 57 bits never skip a segment
  const uint64_t seg_start = min(static_cast<uint64_t>(lane) * seg * 32, total_bits);
  const uint64_t seg_end = min(static_cast<uint64_t>(lane + 1) * seg * 32, total_bits);
  const uint64_t step = static_cast<uint64_t>(r) + 1;
  // Pass 1: the chain from the segment's first bit.
  uint64_t e = seg_start;
  for (;;) {
    const uint64_t t = FirstOne(stream, e, seg_end);
    if (t >= seg_end) break;
    stops[t >> 5] |= 1u << (t & 31);
    e = t + step;
  }
  uint64_t exit = e > seg_end ? e : seg_end;
  __syncwarp();
  // Pass 2: the true entries, lane by lane.
  for (int j = 1; j < kWarp; ++j) {
    const uint64_t entry = __shfl_sync(kFullMask, exit, j - 1);
    if (lane == j && entry != seg_start) {
      uint64_t merge = seg_end, at = entry;
      for (;;) {
        const uint64_t t = FirstOne(stream, at, seg_end);
        if (t >= seg_end) break;
        if ((stops[t >> 5] >> (t & 31)) & 1u) {
          merge = t;
          break;
        }
        at = t + step;
      }
      ClearBits(stops, seg_start, merge);
      at = entry;
      for (;;) {
        const uint64_t t = FirstOne(stream, at, merge);
        if (t >= merge) break;
        stops[t >> 5] |= 1u << (t & 31);
        at = t + step;
      }
      if (merge == seg_end) exit = at > seg_end ? at : seg_end;
    }
    __syncwarp();
  }
  // Pass 3: this lane's codes. Their first start: the previous lane with a
  // stop's last stop + r + 1 (a max-scan: stops increase), else 0.
  // This lane's stop-mask words (none for a lane past the stream's end).
  const uint64_t w_begin = seg_start >> 5;
  const uint64_t w_end = seg_start < seg_end ? (seg_end + 31) >> 5 : w_begin;
  uint64_t codes = 0, last_next = 0;
  for (uint64_t wi = w_begin; wi < w_end; ++wi) {
    const uint32_t m = stops[wi];
    if (m != 0) {
      codes += static_cast<uint64_t>(__popc(m));
      last_next = (wi << 5) + static_cast<uint64_t>(31 - __clz(m)) + step;
    }
  }
  uint64_t start = last_next;  // inclusive max-scan, then shifted
  for (int o = 1; o < kWarp; o <<= 1) {
    const uint64_t v = __shfl_up_sync(kFullMask, start, o);
    if (lane >= o && v > start) start = v;
  }
  const uint64_t end_next = __shfl_sync(kFullMask, start, kWarp - 1);  // after the last code
  start = __shfl_up_sync(kFullMask, start, 1);
  if (lane == 0) start = 0;
  // Gap sums (each d + 1), saturated; a q too large for any value is bad.
  const uint64_t room = upper - first;  // > 0: the table check keeps first < upper
  bool bad = false;
  uint64_t sum = 0, at = start;
  for (uint64_t wi = w_begin; wi < w_end; ++wi) {
    uint32_t m = stops[wi];
    while (m != 0) {
      const uint64_t t = (wi << 5) + static_cast<uint64_t>(__ffs(m) - 1);
      m &= m - 1;
      const uint64_t q = t - at;
      if (q > (room >> r)) {
        bad = true;
      } else {
        sum = SatAdd(sum, ((q << r) | GetBits(stream, t + 1, r)) + 1);
      }
      at = t + step;
    }
  }
  uint64_t rank = codes, base = sum;  // inclusive scans
  for (int o = 1; o < kWarp; o <<= 1) {
    const uint64_t rv = __shfl_up_sync(kFullMask, rank, o);
    const uint64_t bv = __shfl_up_sync(kFullMask, base, o);
    if (lane >= o) {
      rank += rv;
      base = SatAdd(base, bv);
    }
  }
  const uint64_t total_codes = __shfl_sync(kFullMask, rank, kWarp - 1);
  const uint64_t total_sum = __shfl_sync(kFullMask, base, kWarp - 1);
  rank -= codes;
  base = __shfl_up_sync(kFullMask, base, 1);  // every lane shuffles, then lane 0 drops it
  if (lane == 0) base = 0;
  bad = __any_sync(kFullMask, bad);
  bad = bad || total_codes != count - 1 || total_sum >= room || end_next > total_bits ||
        total_bits - end_next >= 8 || FirstOne(stream, end_next, total_bits) != total_bits;
  if (bad) return false;
  // Write: out[0] = first, out[1 + rank] = first + the gap sums so far.
  if (lane == 0) out[0] = static_cast<T>(first);
  uint64_t value = first + base;
  at = start;
  for (uint64_t wi = w_begin; wi < w_end; ++wi) {
    uint32_t m = stops[wi];
    while (m != 0) {
      const uint64_t t = (wi << 5) + static_cast<uint64_t>(__ffs(m) - 1);
      m &= m - 1;
      value += (((t - at) << r) | GetBits(stream, t + 1, r)) + 1;
      out[1 + rank++] = static_cast<T>(value);
      at = t + step;
    }
  }
  return true;
}

// One block per warp: the lanes stage the block's bytes in shared memory;
// large blocks are decoded by the warp (above), small ones (and blocks too
// large to stage) by golomb::DecodeBlock on one lane.
template <typename T>
__global__ void __launch_bounds__(kGolombThreads)
    GolombDecodeKernel(const uint8_t* __restrict__ stream, const uint64_t* __restrict__ first,
                       const uint64_t* __restrict__ off, const uint64_t* __restrict__ param,
                       int64_t k, int log2_block, int64_t blocks, uint64_t n,
                       T* __restrict__ out, unsigned long long* __restrict__ first_bad) {
  __shared__ uint32_t stage_all[kGolombWarps][kStageWords];
  __shared__ uint32_t stops_all[kGolombWarps][kStageWords];
  const int lane = threadIdx.x % kWarp;
  uint32_t* words = stage_all[threadIdx.x / kWarp];
  uint32_t* stops = stops_all[threadIdx.x / kWarp];
  uint8_t* stage = reinterpret_cast<uint8_t*>(words);
  DR_WARP_STRIDE(b, blocks) {
    const uint64_t upper = b + 1 < blocks ? first[b + 1] : n;
    const uint8_t* begin = stream + off[b];
    const uint64_t nbytes = off[b + 1] - off[b];
    const uint64_t count = golomb::BlockCount(k, log2_block, b);
    const bool staged = nbytes <= static_cast<uint64_t>(kStageBytes);
    const bool by_warp = staged && count >= kGolombWarpDecodeMin;
    bool ok;
    if (staged) {
      if (by_warp) {  // the block's words, + the 3 that GetBits may read past its last bit
        const uint64_t used = (nbytes + 3) / 4;
        for (uint64_t w = lane; w < used + 3; w += kWarp) words[w] = 0;
        for (uint64_t w = lane; w < used; w += kWarp) stops[w] = 0;
        __syncwarp();
      }
      for (uint64_t j = lane; j < nbytes; j += kWarp) stage[j] = begin[j];
      __syncwarp();
    }
    if (by_warp) {
      ok = WarpDecodeBlock(words, stops, nbytes, first[b], static_cast<int>(param[b]), count,
                           upper, out + (b << log2_block), lane);
    } else {
      const uint8_t* src = staged ? stage : begin;
      ok = lane != 0 || golomb::DecodeBlock(src, src + nbytes, first[b],
                                            static_cast<int>(param[b]), count, upper,
                                            out + (b << log2_block));
    }
    if (!ok && lane == 0) atomicMin(first_bad, static_cast<unsigned long long>(b));
    __syncwarp();
  }
}

// Golomb encode scratch: param[nb] (int32) ahead of the scan of nb + 1 sizes.
size_t GolombParamBytes(int64_t blocks) { return sizeof(int32_t) * static_cast<size_t>(blocks); }

template <typename T>
GpuStatus GolombSizeT(const T* d_idx, int64_t k, int log2_block, void* d_scratch,
                      size_t scratch_bytes, void* stream, int64_t* stream_bytes) {
  *stream_bytes = 0;
  const int64_t blocks = NumBlocks(k, log2_block);
  if (blocks == 0) return Ok();
  cudaStream_t s = AsStream(stream);
  ScanScratch sc;
  DR_CUDA_RETURN_IF_ERROR(ScanLayout(blocks + 1, GolombParamBytes(blocks), d_scratch, &sc),
                          "sizing the golomb scratch");
  if (scratch_bytes < sc.total_bytes) {
    return Fail(cudaErrorInvalidValue, "golomb scratch is smaller than GolombEncodeScratchBytes");
  }
  int32_t* param = static_cast<int32_t*>(d_scratch);
  int grid = 0;
  DR_CUDA_RETURN_IF_ERROR(
      GridSize(GolombPlanKernel<T>, CeilDiv(blocks * kWarp, kGolombThreads), &grid,
               kGolombThreads),
      "sizing the grid");
  GolombPlanKernel<T><<<grid, kGolombThreads, 0, s>>>(d_idx, k, log2_block, blocks, param,
                                                      sc.counts);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching GolombPlanKernel");
  return ScanAndTotal(sc, blocks + 1, s, stream_bytes);
}

template <typename T>
GpuStatus GolombAutoBlockT(const T* d_idx, int64_t k, uint64_t n, void* d_scratch,
                           size_t scratch_bytes, void* stream, int* log2_block) {
  int64_t stream_bytes[golomb::kAutoCandidates] = {};
  if (k > 0) {
    if (scratch_bytes < GolombAutoScratchBytes()) {
      return Fail(cudaErrorInvalidValue, "golomb scratch is smaller than GolombAutoScratchBytes");
    }
    cudaStream_t s = AsStream(stream);
    unsigned long long* totals = static_cast<unsigned long long*>(d_scratch);
    DR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(totals, 0, GolombAutoScratchBytes(), s),
                            "clearing the golomb candidate totals");
    for (int i = 0; i < golomb::kAutoCandidates; ++i) {
      const int log2 = golomb::kAutoMinLog2Block + i;
      const int64_t blocks = NumBlocks(k, log2);
      int grid = 0;
      DR_CUDA_RETURN_IF_ERROR(
          GridSize(GolombCandidateKernel<T>, CeilDiv(blocks * kWarp, kGolombThreads),
                   &grid, kGolombThreads),
          "sizing the grid");
      GolombCandidateKernel<T><<<grid, kGolombThreads, 0, s>>>(d_idx, k, log2, blocks,
                                                               totals + i);
      DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching GolombCandidateKernel");
    }
    unsigned long long h_totals[golomb::kAutoCandidates];
    DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(h_totals, totals, GolombAutoScratchBytes(),
                                            cudaMemcpyDeviceToHost, s),
                            "copying the golomb candidate totals to the host");
    DR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s), "running GolombCandidateKernel");
    for (int i = 0; i < golomb::kAutoCandidates; ++i) {
      stream_bytes[i] = static_cast<int64_t>(h_totals[i]);
    }
  }
  *log2_block = golomb::PickLog2Block(n, static_cast<uint64_t>(k), stream_bytes);
  return Ok();
}

template <typename T>
GpuStatus GolombWriteT(const T* d_idx, int64_t k, const golomb::Layout& layout,
                       const void* d_scratch, size_t scratch_bytes, uint8_t* d_table,
                       uint8_t* d_stream, void* stream) {
  const int64_t blocks = static_cast<int64_t>(layout.num_blocks);
  if (blocks == 0) return Ok();
  cudaStream_t s = AsStream(stream);
  ScanScratch sc;
  DR_CUDA_RETURN_IF_ERROR(
      ScanLayout(blocks + 1, GolombParamBytes(blocks), const_cast<void*>(d_scratch), &sc),
      "sizing the golomb scratch");
  if (scratch_bytes < sc.total_bytes) {
    return Fail(cudaErrorInvalidValue, "golomb scratch is smaller than GolombEncodeScratchBytes");
  }
  const int32_t* param = static_cast<const int32_t*>(d_scratch);
  const int64_t table_bytes =
      static_cast<int64_t>((layout.num_blocks * layout.entry_bits + 7) / 8);
  int grid = 0;
  DR_CUDA_RETURN_IF_ERROR(
      GridSize(GolombTableKernel<T>, CeilDiv(table_bytes, kThreads), &grid, kThreads),
      "sizing the grid");
  GolombTableKernel<T><<<grid, kThreads, 0, s>>>(d_idx, layout, table_bytes, param, sc.offsets,
                                                 d_table);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching GolombTableKernel");
  if (layout.stream_bytes == 0) return Ok();
  DR_CUDA_RETURN_IF_ERROR(
      GridSize(GolombEncodeKernel<T>, CeilDiv(blocks * kWarp, kGolombThreads), &grid,
               kGolombThreads),
      "sizing the grid");
  GolombEncodeKernel<T><<<grid, kGolombThreads, 0, s>>>(d_idx, k, layout.log2_block, blocks,
                                                        param, sc.offsets, d_stream);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching GolombEncodeKernel");
  return Ok();
}

// Golomb decode scratch: the table (3 nb + 1 values), then the error flag.
size_t GolombTableValues(int64_t blocks) { return 3 * static_cast<size_t>(blocks) + 1; }

template <typename T>
GpuStatus GolombDecodeT(const uint8_t* d_stream, const uint64_t* h_table, int64_t k,
                        const golomb::Layout& layout, uint64_t n, void* d_scratch,
                        size_t scratch_bytes, T* d_out, void* stream, int64_t* first_bad) {
  const int64_t blocks = static_cast<int64_t>(layout.num_blocks);
  *first_bad = blocks;
  if (blocks == 0) return Ok();
  if (scratch_bytes < GolombDecodeScratchBytes(blocks)) {
    return Fail(cudaErrorInvalidValue, "golomb scratch is smaller than GolombDecodeScratchBytes");
  }
  cudaStream_t s = AsStream(stream);
  uint64_t* table = static_cast<uint64_t*>(d_scratch);
  unsigned long long* flag = reinterpret_cast<unsigned long long*>(
      static_cast<char*>(d_scratch) + AlignUp(sizeof(uint64_t) * GolombTableValues(blocks)));
  DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(table, h_table, sizeof(uint64_t) * GolombTableValues(blocks),
                                          cudaMemcpyHostToDevice, s),
                          "copying the block table to the device");
  DR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(flag, 0xff, sizeof(*flag), s), "clearing the error flag");
  int grid = 0;
  DR_CUDA_RETURN_IF_ERROR(
      GridSize(GolombDecodeKernel<T>, CeilDiv(blocks * kWarp, kGolombThreads), &grid,
               kGolombThreads),
      "sizing the grid");
  const uint64_t* first = table;
  const uint64_t* off = table + blocks;
  const uint64_t* param = off + blocks + 1;
  GolombDecodeKernel<T><<<grid, kGolombThreads, 0, s>>>(d_stream, first, off, param, k,
                                                        layout.log2_block, blocks, n, d_out,
                                                        flag);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching GolombDecodeKernel");
  unsigned long long bad = 0;
  DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&bad, flag, sizeof(bad), cudaMemcpyDeviceToHost, s),
                          "copying the error flag to the host");
  DR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s), "running GolombDecodeKernel");
  if (bad < static_cast<unsigned long long>(blocks)) *first_bad = static_cast<int64_t>(bad);
  return Ok();
}

}  // namespace

// ------------------------------------------------------ public launchers --

GpuStatus WriteBytes(uint8_t* d_dst, const uint8_t* host_src, int len, void* stream) {
  if (len <= 0) return Ok();
  if (len > kMaxWriteBytes) return Fail(cudaErrorInvalidValue, "WriteBytes: more than 32 bytes");
  SmallBytes bytes;
  for (int i = 0; i < kMaxWriteBytes; ++i) bytes.b[i] = i < len ? host_src[i] : 0;
  WriteBytesKernel<<<1, kMaxWriteBytes, 0, AsStream(stream)>>>(bytes, len, d_dst);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching WriteBytesKernel");
  return Ok();
}

size_t ValidateScratchBytes() { return sizeof(unsigned long long); }

size_t BitmapEncodeScratchBytes(int64_t n) {
  return sizeof(uint32_t) * static_cast<size_t>((n + 31) / 32);
}

size_t BitmapDecodeScratchBytes(int64_t body_bytes, GpuStatus* status) {
  *status = Ok();
  if (body_bytes == 0) return 0;
  ScanScratch sc;
  const cudaError_t e = ScanLayout(BitmapWords(body_bytes) + 1, 0, nullptr, &sc);
  if (e != cudaSuccess) {
    *status = Fail(e, "sizing the bitmap scratch");
    return 0;
  }
  return sc.total_bytes;
}

GpuStatus BitmapCount(const uint8_t* d_body, int64_t bytes, void* d_scratch,
                      size_t scratch_bytes, void* stream, int64_t* total) {
  *total = 0;
  if (bytes == 0) return Ok();
  cudaStream_t s = AsStream(stream);
  const int64_t words = BitmapWords(bytes);
  ScanScratch sc;
  DR_CUDA_RETURN_IF_ERROR(ScanLayout(words + 1, 0, d_scratch, &sc), "sizing the bitmap scratch");
  if (scratch_bytes < sc.total_bytes) {
    return Fail(cudaErrorInvalidValue, "bitmap scratch is smaller than BitmapDecodeScratchBytes");
  }
  int grid = 0;
  DR_CUDA_RETURN_IF_ERROR(
      GridSize(BitmapCountKernel, CeilDiv(words, kThreads), &grid, kThreads),
      "sizing the grid");
  BitmapCountKernel<<<grid, kThreads, 0, s>>>(d_body, bytes, words, sc.counts);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching BitmapCountKernel");
  return ScanAndTotal(sc, words + 1, s, total);
}

size_t RleEncodeScratchBytes(int64_t k, GpuStatus* status) {
  *status = Ok();
  if (k == 0) return 0;
  ScanScratch sc;
  const cudaError_t e = ScanLayout(k + 1, 0, nullptr, &sc);
  if (e != cudaSuccess) {
    *status = Fail(e, "sizing the rle scratch");
    return 0;
  }
  return sc.total_bytes;
}

size_t RleDecodeScratchBytes(int64_t body_bytes) {
  return body_bytes == 0 ? 0 : RleDecodeLayout(body_bytes, nullptr).total_bytes;
}

size_t GolombEncodeScratchBytes(int64_t k, int log2_block, GpuStatus* status) {
  *status = Ok();
  const int64_t blocks = NumBlocks(k, log2_block);
  if (blocks == 0) return 0;
  ScanScratch sc;
  const cudaError_t e = ScanLayout(blocks + 1, GolombParamBytes(blocks), nullptr, &sc);
  if (e != cudaSuccess) {
    *status = Fail(e, "sizing the golomb scratch");
    return 0;
  }
  return sc.total_bytes;
}

size_t GolombAutoScratchBytes() {
  return sizeof(unsigned long long) * golomb::kAutoCandidates;
}

size_t GolombDecodeScratchBytes(int64_t num_blocks) {
  if (num_blocks == 0) return 0;
  return AlignUp(sizeof(uint64_t) * GolombTableValues(num_blocks)) + sizeof(unsigned long long);
}

#define DR_INDEX_LAUNCHERS(T)                                                                    \
  GpuStatus ValidateSorted(const T* d_idx, int64_t k, int64_t n, void* d_scratch, void* stream,  \
                           SortedCheck* result) {                                                \
    return Validate(d_idx, k, n, d_scratch, stream, result);                                     \
  }                                                                                              \
  GpuStatus Int32Encode(const T* d_idx, int64_t k, uint8_t* d_body, void* stream) {              \
    return Int32EncodeT(d_idx, k, d_body, stream);                                               \
  }                                                                                              \
  GpuStatus Int32Decode(const uint8_t* d_body, int64_t k, T* d_out, void* stream) {              \
    return Int32DecodeT(d_body, k, d_out, stream);                                               \
  }                                                                                              \
  GpuStatus BitmapEncode(const T* d_idx, int64_t k, int64_t n, void* d_scratch,                  \
                         size_t scratch_bytes, uint8_t* d_body, void* stream) {                  \
    return BitmapEncodeT(d_idx, k, n, d_scratch, scratch_bytes, d_body, stream);                 \
  }                                                                                              \
  GpuStatus BitmapWrite(const uint8_t* d_body, int64_t body_bytes, const void* d_scratch,        \
                        size_t scratch_bytes, T* d_out, void* stream) {                          \
    return BitmapWriteT(d_body, body_bytes, d_scratch, scratch_bytes, d_out, stream);            \
  }                                                                                              \
  GpuStatus RleSize(const T* d_idx, int64_t k, void* d_scratch, size_t scratch_bytes,            \
                    void* stream, int64_t* body_bytes) {                                         \
    return RleSizeT(d_idx, k, d_scratch, scratch_bytes, stream, body_bytes);                     \
  }                                                                                              \
  GpuStatus RleWrite(const T* d_idx, int64_t k, const void* d_scratch, size_t scratch_bytes,     \
                     uint8_t* d_body, void* stream) {                                            \
    return RleWriteT(d_idx, k, d_scratch, scratch_bytes, d_body, stream);                        \
  }                                                                                              \
  GpuStatus RleDecode(const uint8_t* d_body, int64_t body_bytes, int64_t k, uint64_t n,          \
                      void* d_scratch, size_t scratch_bytes, T* d_out, void* stream,             \
                      RleDecodeResult* result) {                                                 \
    return RleDecodeT(d_body, body_bytes, k, n, d_scratch, scratch_bytes, d_out, stream, result); \
  }                                                                                              \
  GpuStatus GolombSize(const T* d_idx, int64_t k, int log2_block, void* d_scratch,               \
                       size_t scratch_bytes, void* stream, int64_t* stream_bytes) {              \
    return GolombSizeT(d_idx, k, log2_block, d_scratch, scratch_bytes, stream, stream_bytes);    \
  }                                                                                              \
  GpuStatus GolombAutoBlock(const T* d_idx, int64_t k, uint64_t n, void* d_scratch,              \
                            size_t scratch_bytes, void* stream, int* log2_block) {               \
    return GolombAutoBlockT(d_idx, k, n, d_scratch, scratch_bytes, stream, log2_block);          \
  }                                                                                              \
  GpuStatus GolombWrite(const T* d_idx, int64_t k, const golomb::Layout& layout,                 \
                        const void* d_scratch, size_t scratch_bytes, uint8_t* d_table,           \
                        uint8_t* d_stream, void* stream) {                                       \
    return GolombWriteT(d_idx, k, layout, d_scratch, scratch_bytes, d_table, d_stream, stream);  \
  }                                                                                              \
  GpuStatus GolombDecode(const uint8_t* d_stream, const uint64_t* h_table, int64_t k,            \
                         const golomb::Layout& layout, uint64_t n, void* d_scratch,              \
                         size_t scratch_bytes, T* d_out, void* stream, int64_t* first_bad) {     \
    return GolombDecodeT(d_stream, h_table, k, layout, n, d_scratch, scratch_bytes, d_out,       \
                         stream, first_bad);                                                     \
  }

DR_INDEX_LAUNCHERS(int32_t)
DR_INDEX_LAUNCHERS(int64_t)
#undef DR_INDEX_LAUNCHERS
#undef DR_GRID_STRIDE

}  // namespace gpu
}  // namespace index
}  // namespace deepreduce
