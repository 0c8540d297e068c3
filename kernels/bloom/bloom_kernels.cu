// CUDA kernels of the Bloom-filter index codec, behind the plain C++
// launchers of bloom_gpu.h. No TensorFlow headers: memory and the stream come
// from the caller. The per-element logic (hash, probe sequence, bit layout)
// is bloom.h's, shared with the CPU kernels, so both write the same bytes.
#include <cstdint>

// This library's CUB lives in its own namespace, so that its kernels cannot
// collide with those of another CUB (TensorFlow's, another op library's)
// loaded into the same process.
#define CUB_WRAPPED_NAMESPACE deepreduce_cub
#include <cub/device/device_scan.cuh>
#include <cuda_runtime.h>

#include "kernels/bloom/bloom.h"
#include "kernels/bloom/bloom_gpu.h"

namespace deepreduce {
namespace bloom {
namespace gpu {
namespace {

// Launch sizes (kThreads: whole warps, which the query kernels need; GridSize:
// one occupancy wave, the grid-stride loops do the rest), kWarp, kFullMask,
// kAlign: kernels/common/gpu_launch.h.
// A query tile: the positions one warp tests in one grid-stride step, i.e.
// kWarp hit words of kWarp bits. Per-tile counts are what gets scanned.
constexpr int64_t kTileWords = kWarp;
constexpr int64_t kTilePositions = kTileWords * 32;
// ---------------------------------------------------------------- insert --

// Grid-stride over the k indices: thread t handles indices[t],
// indices[t + stride], ... . Each index is range-checked, marked in the seen
// bitmap (a repeat finds its bit already set), and sets its h filter bits.
// Any failure lowers *first_bad to its position.
template <typename Tidx>
__global__ void __launch_bounds__(kThreads)
    InsertKernel(BloomLayout layout, const Tidx* __restrict__ indices, int64_t k,
                 int64_t n, uint32_t* __restrict__ words,
                 unsigned long long* __restrict__ seen,
                 unsigned long long* __restrict__ first_bad) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < k; i += stride) {
    const int64_t v = static_cast<int64_t>(indices[i]);
    if (v < 0 || v >= n) {
      atomicMin(first_bad, static_cast<unsigned long long>(i));
      continue;
    }
    const unsigned long long mask = 1ULL << (v & 63);
    if (atomicOr(&seen[v >> 6], mask) & mask) {
      atomicMin(first_bad, static_cast<unsigned long long>(i));
      continue;
    }
    const ProbeSeq p = Probes(layout, static_cast<uint64_t>(v));
    for (uint32_t j = 0; j < layout.num_hashes; ++j) {
      const uint64_t bit = ProbeBit(layout, p, j);
      atomicOr(&words[bit >> 5], 1u << (bit & 31));
    }
  }
}

struct InsertScratch {
  unsigned long long* seen;       // ceil(n / 64) words
  unsigned long long* first_bad;  // one word; ~0 = no failure
  size_t seen_bytes;
  size_t total_bytes;
};

InsertScratch InsertLayout(int64_t n, void* base) {
  InsertScratch s;
  s.seen_bytes = sizeof(unsigned long long) * static_cast<size_t>((n + 63) / 64);
  const size_t record_at = AlignUp(s.seen_bytes);
  s.total_bytes = record_at + sizeof(unsigned long long);
  char* p = static_cast<char*>(base);
  s.seen = reinterpret_cast<unsigned long long*>(p);
  s.first_bad = reinterpret_cast<unsigned long long*>(p + record_at);
  return s;
}

template <typename Tidx>
GpuStatus Insert(const BloomLayout& layout, const Tidx* d_indices, int64_t k,
                 int64_t n, uint32_t* d_filter_words, void* d_scratch,
                 size_t scratch_bytes, void* stream, InsertResult* result) {
  cudaStream_t s = AsStream(stream);
  result->first_bad = k;
  result->bad_value = 0;
  DR_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(d_filter_words, 0, NumBytes(layout.num_bits), s),
      "clearing the filter");
  if (k == 0) return Ok();
  const InsertScratch sc = InsertLayout(n, d_scratch);
  if (scratch_bytes < sc.total_bytes) {
    return Fail(cudaErrorInvalidValue, "insert scratch is smaller than InsertScratchBytes(n)");
  }
  DR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(sc.seen, 0, sc.seen_bytes, s),
                          "clearing the seen bitmap");
  DR_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(sc.first_bad, 0xff, sizeof(unsigned long long), s),
      "clearing the error record");
  int grid = 0;
  DR_CUDA_RETURN_IF_ERROR(
      GridSize(InsertKernel<Tidx>, (k + kThreads - 1) / kThreads, &grid),
      "sizing the insert grid");
  InsertKernel<Tidx><<<grid, kThreads, 0, s>>>(layout, d_indices, k, n,
                                               d_filter_words, sc.seen,
                                               sc.first_bad);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching InsertKernel");
  unsigned long long bad = 0;
  DR_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(&bad, sc.first_bad, sizeof(bad), cudaMemcpyDeviceToHost, s),
      "copying the error record to the host");
  DR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s), "running InsertKernel");
  if (bad < static_cast<unsigned long long>(k)) {
    Tidx value = 0;
    DR_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(&value, d_indices + bad, sizeof(Tidx),
                        cudaMemcpyDeviceToHost, s),
        "copying the bad index to the host");
    DR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s), "copying the bad index");
    result->first_bad = static_cast<int64_t>(bad);
    result->bad_value = static_cast<int64_t>(value);
  }
  return Ok();
}

// ----------------------------------------------------------------- query --

// Pass 1. Grid-stride over tiles of kTilePositions positions, one warp per
// tile: in step `it` lane l tests position tile * kTilePositions + 32 * it + l,
// and the warp's ballot is hit word tile * kTileWords + it (bit l = that
// position). Lane `it` keeps that word and the warp stores the tile's words
// coalesced, then lane 0 stores the tile's positive count.
__global__ void __launch_bounds__(kThreads)
    QueryMarkKernel(BloomLayout layout, const uint8_t* __restrict__ filter,
                    int64_t n, int64_t num_tiles, uint32_t* __restrict__ hits,
                    int64_t* __restrict__ tile_counts) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warp =
      (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int64_t num_warps = static_cast<int64_t>(gridDim.x) * blockDim.x / kWarp;
  // The loop bounds depend only on the warp, so every ballot is warp-uniform.
  for (int64_t tile = warp; tile < num_tiles; tile += num_warps) {
    const int64_t base = tile * kTilePositions;
    uint32_t mine = 0;
    int count = 0;
    for (int it = 0; it < kTileWords; ++it) {
      const int64_t pos = base + 32 * it + lane;
      const bool hit = pos < n && Contains(layout, filter, static_cast<uint64_t>(pos));
      const uint32_t word = __ballot_sync(kFullMask, hit);
      if (lane == it) mine = word;
      count += __popc(word);
    }
    hits[tile * kTileWords + lane] = mine;
    if (lane == 0) tile_counts[tile] = count;
  }
}

// Pass 2. Grid-stride over tiles, one warp per tile: lane l owns hit word
// tile * kTileWords + l and writes its positives, ascending, starting at the
// tile's offset plus the positives of lanes < l (a warp prefix sum).
template <typename Tidx>
__global__ void __launch_bounds__(kThreads)
    QueryCompactKernel(const uint32_t* __restrict__ hits,
                       const int64_t* __restrict__ tile_offsets, int64_t num_tiles,
                       Tidx* __restrict__ out) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warp =
      (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int64_t num_warps = static_cast<int64_t>(gridDim.x) * blockDim.x / kWarp;
  for (int64_t tile = warp; tile < num_tiles; tile += num_warps) {
    uint32_t word = hits[tile * kTileWords + lane];
    const int c = __popc(word);
    int inclusive = c;
    for (int d = 1; d < kWarp; d *= 2) {
      const int v = __shfl_up_sync(kFullMask, inclusive, d);
      if (lane >= d) inclusive += v;
    }
    int64_t o = tile_offsets[tile] + (inclusive - c);
    const int64_t base = tile * kTilePositions + 32 * lane;
    while (word) {
      out[o++] = static_cast<Tidx>(base + __ffs(word) - 1);
      word &= word - 1;
    }
  }
}

struct QueryScratch {
  int64_t num_tiles;
  uint32_t* hits;        // num_tiles * kTileWords words
  int64_t* counts;       // num_tiles + 1 (the last one is 0)
  int64_t* offsets;      // num_tiles + 1 (exclusive scan: the last is the total)
  void* cub_temp;
  size_t cub_bytes;
  size_t total_bytes;
};

cudaError_t QueryLayout(int64_t n, void* base, QueryScratch* s) {
  s->num_tiles = (n + kTilePositions - 1) / kTilePositions;
  const size_t hits_bytes = sizeof(uint32_t) * static_cast<size_t>(s->num_tiles * kTileWords);
  const size_t scan_bytes = sizeof(int64_t) * static_cast<size_t>(s->num_tiles + 1);
  s->cub_bytes = 0;
  // With a null workspace CUB only reports the size it needs.
  cudaError_t e = deepreduce_cub::cub::DeviceScan::ExclusiveSum(
      nullptr, s->cub_bytes, static_cast<const int64_t*>(nullptr),
      static_cast<int64_t*>(nullptr), s->num_tiles + 1);
  if (e != cudaSuccess) return e;
  const size_t counts_at = AlignUp(hits_bytes);
  const size_t offsets_at = counts_at + AlignUp(scan_bytes);
  const size_t cub_at = offsets_at + AlignUp(scan_bytes);
  s->total_bytes = cub_at + s->cub_bytes;
  char* p = static_cast<char*>(base);
  s->hits = reinterpret_cast<uint32_t*>(p);
  s->counts = reinterpret_cast<int64_t*>(p + counts_at);
  s->offsets = reinterpret_cast<int64_t*>(p + offsets_at);
  s->cub_temp = p + cub_at;
  return cudaSuccess;
}

template <typename Tidx>
GpuStatus QueryWrite(int64_t n, const void* d_scratch, size_t scratch_bytes,
                     Tidx* d_out, void* stream) {
  if (n == 0) return Ok();
  QueryScratch sc;
  DR_CUDA_RETURN_IF_ERROR(QueryLayout(n, const_cast<void*>(d_scratch), &sc),
                          "sizing the query scratch");
  if (scratch_bytes < sc.total_bytes) {
    return Fail(cudaErrorInvalidValue, "query scratch is smaller than QueryScratchBytes(n)");
  }
  int grid = 0;
  const int64_t tiles_per_block = kThreads / kWarp;
  DR_CUDA_RETURN_IF_ERROR(
      GridSize(QueryCompactKernel<Tidx>,
               (sc.num_tiles + tiles_per_block - 1) / tiles_per_block, &grid),
      "sizing the compaction grid");
  QueryCompactKernel<Tidx><<<grid, kThreads, 0, AsStream(stream)>>>(
      sc.hits, sc.offsets, sc.num_tiles, d_out);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching QueryCompactKernel");
  return Ok();
}

}  // namespace

size_t InsertScratchBytes(int64_t n) {
  return InsertLayout(n, nullptr).total_bytes;
}

GpuStatus InsertInt32(const BloomLayout& layout, const int32_t* d_indices,
                      int64_t k, int64_t n, uint32_t* d_filter_words,
                      void* d_scratch, size_t scratch_bytes, void* stream,
                      InsertResult* result) {
  return Insert(layout, d_indices, k, n, d_filter_words, d_scratch,
                scratch_bytes, stream, result);
}

GpuStatus InsertInt64(const BloomLayout& layout, const int64_t* d_indices,
                      int64_t k, int64_t n, uint32_t* d_filter_words,
                      void* d_scratch, size_t scratch_bytes, void* stream,
                      InsertResult* result) {
  return Insert(layout, d_indices, k, n, d_filter_words, d_scratch,
                scratch_bytes, stream, result);
}

size_t QueryScratchBytes(int64_t n, GpuStatus* status) {
  *status = Ok();
  if (n == 0) return 0;
  QueryScratch sc;
  const cudaError_t e = QueryLayout(n, nullptr, &sc);
  if (e != cudaSuccess) {
    *status = Fail(e, "sizing the query scratch");
    return 0;
  }
  return sc.total_bytes;
}

GpuStatus QueryCount(const BloomLayout& layout, const uint8_t* d_filter,
                     int64_t n, void* d_scratch, size_t scratch_bytes,
                     void* stream, int64_t* num_positives, uint32_t* last_word) {
  cudaStream_t s = AsStream(stream);
  *num_positives = 0;
  QueryScratch sc;
  if (n > 0) {
    DR_CUDA_RETURN_IF_ERROR(QueryLayout(n, d_scratch, &sc), "sizing the query scratch");
    if (scratch_bytes < sc.total_bytes) {
      return Fail(cudaErrorInvalidValue, "query scratch is smaller than QueryScratchBytes(n)");
    }
  }
  // Byte-wise, so a filter at any alignment works.
  DR_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(last_word, d_filter + NumBytes(layout.num_bits) - 4,
                      sizeof(uint32_t), cudaMemcpyDeviceToHost, s),
      "copying the filter's last word to the host");
  if (n > 0) {
    DR_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(sc.counts + sc.num_tiles, 0, sizeof(int64_t), s),
        "clearing the count sentinel");
    int grid = 0;
    const int64_t tiles_per_block = kThreads / kWarp;
    DR_CUDA_RETURN_IF_ERROR(
        GridSize(QueryMarkKernel, (sc.num_tiles + tiles_per_block - 1) / tiles_per_block,
                 &grid),
        "sizing the query grid");
    QueryMarkKernel<<<grid, kThreads, 0, s>>>(layout, d_filter, n, sc.num_tiles,
                                              sc.hits, sc.counts);
    DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching QueryMarkKernel");
    size_t cub_bytes = sc.cub_bytes;
    DR_CUDA_RETURN_IF_ERROR(
        deepreduce_cub::cub::DeviceScan::ExclusiveSum(
            sc.cub_temp, cub_bytes, sc.counts, sc.offsets, sc.num_tiles + 1, s),
        "scanning the per-tile counts");
    DR_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(num_positives, sc.offsets + sc.num_tiles, sizeof(int64_t),
                        cudaMemcpyDeviceToHost, s),
        "copying the positive count to the host");
  }
  DR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s), "running the query pass 1");
  return Ok();
}

GpuStatus QueryWriteInt32(int64_t n, const void* d_scratch, size_t scratch_bytes,
                          int32_t* d_out, void* stream) {
  return QueryWrite(n, d_scratch, scratch_bytes, d_out, stream);
}

GpuStatus QueryWriteInt64(int64_t n, const void* d_scratch, size_t scratch_bytes,
                          int64_t* d_out, void* stream) {
  return QueryWrite(n, d_scratch, scratch_bytes, d_out, stream);
}


}  // namespace gpu
}  // namespace bloom
}  // namespace deepreduce
