// CUDA kernels of the sparsifiers, behind the plain C++ launchers of
// sparsify_gpu.h. No TensorFlow headers: memory and the stream come from the
// caller. The keys (MagnitudeKey, RandomKKey) and the radix levels are
// sparsify.h's, shared with the CPU kernels, so both select the same set.
//
// Top-k and random-k: an exact radix select over the whole input, one level
// of kGpuLevelBits per pass (histogram in shared memory, merged with global
// atomics; one block then finds the bucket of the k-th key and updates the
// prefix and the remaining count on the device), then an ordered compaction:
// per-tile counts of keys > T and == T, exclusive scans (CUB), and a write
// pass in which each warp emits its tile's selections in index order. No
// host round trip. Threshold: mark + count per tile, scan, count to the host
// (the output size), write from the marks. The segmented selections
// (SegmentedTopK, SegmentedRandomK) run the same steps over every segment of
// a bucket at once (see the section at the end of the kernels).
#include <cstdint>
#include <vector>

// This library's CUB lives in its own namespace (see bloom_kernels.cu).
#define CUB_WRAPPED_NAMESPACE deepreduce_cub
#include <cub/block/block_scan.cuh>
#include <cub/device/device_scan.cuh>
#include <cuda_runtime.h>

#include "kernels/sparsify/sparsify.h"
#include "kernels/sparsify/sparsify_gpu.h"

namespace deepreduce {
namespace sparsify {
namespace gpu {
namespace {

// Launch sizes (kThreads: whole warps, the tile kernels give one warp a tile;
// GridSize: from the occupancy API), kWarp, kFullMask, kAlign:
// kernels/common/gpu_launch.h.
// A tile: the positions one warp handles in one grid-stride step: 32 steps of
// 32 consecutive positions (lane l takes position base + 32 * step + l, so
// every load is coalesced).
constexpr int kTileSteps = 32;
constexpr int64_t kTile = kTileSteps * kWarp;
constexpr int kMaxBins = 1 << kGpuLevelBits;
// The bucket finder: one block, two bins per thread.
constexpr int kFindThreads = kMaxBins / 2;
// ------------------------------------------------------------------ keys --

template <typename F>
struct MagKeys {
  using U = typename F::U;
  const U* x;
  __host__ __device__ int KeyBits() const { return MagnitudeKeyBits<F>(); }
  __device__ U operator()(int64_t i) const { return MagnitudeKey<F>(x[i]); }
};

struct RandKeys {
  using U = uint64_t;
  uint64_t seed_mix;
  __host__ __device__ int KeyBits() const { return 64; }
  __device__ U operator()(int64_t i) const {
    return RandomKKey(seed_mix, static_cast<uint64_t>(i));
  }
};

// The selection state on the device: the digits of the k-th key found so far
// (after the last level: the key T itself) and how many keys with that
// prefix are still to be taken (after the last level: how many keys equal
// to T are taken, the lowest-index ones).
struct SelectState {
  unsigned long long prefix;
  long long need;
};

struct Scratch {
  SelectState* state;
  unsigned* hist;        // kMaxBins
  long long* gt;         // per tile: keys > T (threshold: marked count)
  long long* eq;         // per tile: keys == T
  long long* eq_before;  // exclusive scan of eq (threshold: output offsets)
  long long* take;       // per tile: keys == T taken
  long long* sel;        // per tile: selected
  long long* offset;     // exclusive scan of sel
  uint32_t* marks;       // threshold: kTileSteps words per tile
  void* cub_temp;
  size_t cub_bytes;
  size_t total_bytes;
};

int64_t NumTiles(int64_t n) { return (n + kTile - 1) / kTile; }

cudaError_t ScanTempBytes(int64_t num_items, size_t* bytes) {
  return deepreduce_cub::cub::DeviceScan::ExclusiveSum(
      nullptr, *bytes, static_cast<const long long*>(nullptr),
      static_cast<long long*>(nullptr), static_cast<int>(num_items));
}

// Sub-buffers of the scratch; base may be null (sizing only).
cudaError_t Layout(int64_t n, void* base, Scratch* s) {
  const int64_t tiles = NumTiles(n) > 0 ? NumTiles(n) : 1;
  size_t cub_bytes = 0;
  cudaError_t e = ScanTempBytes(tiles, &cub_bytes);
  if (e != cudaSuccess) return e;
  char* p = static_cast<char*>(base);
  size_t at = 0;
  auto take = [&](size_t bytes) {
    char* q = p == nullptr ? nullptr : p + at;
    at += AlignUp(bytes);
    return q;
  };
  const size_t tile_bytes = sizeof(long long) * static_cast<size_t>(tiles);
  s->state = reinterpret_cast<SelectState*>(take(sizeof(SelectState)));
  s->hist = reinterpret_cast<unsigned*>(take(sizeof(unsigned) * kMaxBins));
  s->gt = reinterpret_cast<long long*>(take(tile_bytes));
  s->eq = reinterpret_cast<long long*>(take(tile_bytes));
  s->eq_before = reinterpret_cast<long long*>(take(tile_bytes));
  s->take = reinterpret_cast<long long*>(take(tile_bytes));
  s->sel = reinterpret_cast<long long*>(take(tile_bytes));
  s->offset = reinterpret_cast<long long*>(take(tile_bytes));
  s->marks = reinterpret_cast<uint32_t*>(
      take(sizeof(uint32_t) * kTileSteps * static_cast<size_t>(tiles)));
  s->cub_temp = take(cub_bytes);
  s->cub_bytes = cub_bytes;
  s->total_bytes = at;
  return cudaSuccess;
}

__device__ __forceinline__ unsigned LanesBelow(int lane) { return (1u << lane) - 1u; }

// ---------------------------------------------------------------- select --

__global__ void InitKernel(SelectState* st, long long k) {
  st->prefix = 0;
  st->need = k;
}

// One level's histogram. Grid-stride over positions: thread t counts the
// digit of keys t, t + stride, ... that carry the current prefix into its
// block's shared histogram, which is then added to the global one.
template <typename Keys>
__global__ void __launch_bounds__(kThreads)
    HistKernel(Keys keys, int64_t n, RadixPlan plan, int level,
               const SelectState* __restrict__ st, unsigned* __restrict__ hist) {
  using U = typename Keys::U;
  __shared__ unsigned sh[kMaxBins];
  const int bins = 1 << plan.DigitBits(level);
  for (int b = threadIdx.x; b < bins; b += blockDim.x) sh[b] = 0;
  __syncthreads();
  const U prefix = static_cast<U>(st->prefix);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const U key = keys(i);
    if (HasPrefix(plan, level, key, prefix)) atomicAdd(&sh[Digit(plan, level, key)], 1u);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < bins; b += blockDim.x) {
    if (sh[b] != 0) atomicAdd(&hist[b], sh[b]);
  }
}

// One block of kFindThreads per selection: block a searches histogram row a
// (kMaxBins apart) and updates st[a] (the per-tensor select launches one
// block; the segmented select one per active segment). Thread t takes bins
// bins-1-2t and bins-2-2t (from the top), an inclusive block scan gives the
// count of keys in higher or equal bins, and the one bin where that count
// first reaches `need` extends the prefix. A selection that starts with need
// 0 (a segment that takes everything) matches no bin and is left alone.
__global__ void __launch_bounds__(kFindThreads)
    FindKernel(const unsigned* __restrict__ hist_rows, RadixPlan plan, int level,
               SelectState* states) {
  using BlockScan = deepreduce_cub::cub::BlockScan<long long, kFindThreads>;
  __shared__ typename BlockScan::TempStorage temp;
  const unsigned* hist = hist_rows + static_cast<int64_t>(blockIdx.x) * kMaxBins;
  SelectState* st = states + blockIdx.x;
  const int bins = 1 << plan.DigitBits(level);
  const long long need = st->need;
  const unsigned long long prefix = st->prefix;
  long long items[2], incl[2];
  for (int j = 0; j < 2; ++j) {
    const int b = bins - 1 - (2 * static_cast<int>(threadIdx.x) + j);
    items[j] = b >= 0 ? static_cast<long long>(hist[b]) : 0;
  }
  BlockScan(temp).InclusiveSum(items, incl);  // synchronizes the block
  for (int j = 0; j < 2; ++j) {
    const int b = bins - 1 - (2 * static_cast<int>(threadIdx.x) + j);
    const long long excl = incl[j] - items[j];
    if (b >= 0 && excl < need && incl[j] >= need) {
      st->need = need - excl;
      st->prefix = level == 0 ? static_cast<unsigned long long>(b)
                              : (prefix << plan.DigitBits(level)) |
                                    static_cast<unsigned long long>(b);
    }
  }
}

// Per tile (one warp per tile, grid-stride over tiles): keys > T and == T.
template <typename Keys>
__global__ void __launch_bounds__(kThreads)
    CountKernel(Keys keys, int64_t n, int64_t num_tiles,
                const SelectState* __restrict__ st, long long* __restrict__ gt,
                long long* __restrict__ eq) {
  using U = typename Keys::U;
  const U t = static_cast<U>(st->prefix);
  const int lane = threadIdx.x % kWarp;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int64_t num_warps = static_cast<int64_t>(gridDim.x) * blockDim.x / kWarp;
  for (int64_t tile = warp; tile < num_tiles; tile += num_warps) {
    long long cg = 0, ce = 0;
    for (int it = 0; it < kTileSteps; ++it) {
      const int64_t pos = tile * kTile + kWarp * it + lane;
      const bool valid = pos < n;
      const U key = valid ? keys(pos) : U{0};
      cg += __popc(__ballot_sync(kFullMask, valid && key > t));
      ce += __popc(__ballot_sync(kFullMask, valid && key == t));
    }
    if (lane == 0) {
      gt[tile] = cg;
      eq[tile] = ce;
    }
  }
}

// Per tile: how many of its keys equal to T are taken, and its selections.
__global__ void __launch_bounds__(kThreads)
    TakeKernel(int64_t num_tiles, const SelectState* __restrict__ st,
               const long long* __restrict__ gt, const long long* __restrict__ eq,
               const long long* __restrict__ eq_before, long long* __restrict__ take,
               long long* __restrict__ sel) {
  const long long need = st->need;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       t < num_tiles; t += stride) {
    long long tk = need - eq_before[t];
    tk = tk < 0 ? 0 : (tk > eq[t] ? eq[t] : tk);
    take[t] = tk;
    sel[t] = gt[t] + tk;
  }
}

// One warp per tile: in step `it` the lanes hold 32 consecutive positions; a
// ballot ranks the keys equal to T among the tile's so far, a second ballot
// of the selected ones gives each its output slot.
template <typename Keys, typename Tidx>
__global__ void __launch_bounds__(kThreads)
    WriteKernel(Keys keys, const void* __restrict__ values, int value_bytes, int64_t n,
                int64_t num_tiles, const SelectState* __restrict__ st,
                const long long* __restrict__ take, const long long* __restrict__ offset,
                Tidx* __restrict__ idx, void* __restrict__ out_values) {
  using U = typename Keys::U;
  const U t = static_cast<U>(st->prefix);
  const int lane = threadIdx.x % kWarp;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int64_t num_warps = static_cast<int64_t>(gridDim.x) * blockDim.x / kWarp;
  for (int64_t tile = warp; tile < num_tiles; tile += num_warps) {
    const long long tk = take[tile];
    long long out = offset[tile];
    long long eq_seen = 0;
    for (int it = 0; it < kTileSteps; ++it) {
      const int64_t pos = tile * kTile + kWarp * it + lane;
      const bool valid = pos < n;
      const U key = valid ? keys(pos) : U{0};
      const bool is_eq = valid && key == t;
      const unsigned eq_ballot = __ballot_sync(kFullMask, is_eq);
      const long long rank = eq_seen + __popc(eq_ballot & LanesBelow(lane));
      const bool s = valid && (key > t || (is_eq && rank < tk));
      const unsigned s_ballot = __ballot_sync(kFullMask, s);
      if (s) {
        const long long o = out + __popc(s_ballot & LanesBelow(lane));
        idx[o] = static_cast<Tidx>(pos);
        switch (value_bytes) {
          case 2:
            static_cast<uint16_t*>(out_values)[o] = static_cast<const uint16_t*>(values)[pos];
            break;
          case 4:
            static_cast<uint32_t*>(out_values)[o] = static_cast<const uint32_t*>(values)[pos];
            break;
          default:
            static_cast<uint64_t*>(out_values)[o] = static_cast<const uint64_t*>(values)[pos];
        }
      }
      out += __popc(s_ballot);
      eq_seen += __popc(eq_ballot);
    }
  }
}

// The whole selection for a key functor; values are the bits at d_values
// (value_bytes wide).
template <typename Keys, typename Tidx>
GpuStatus Select(const Keys& keys, const void* d_values, int value_bytes, int64_t n,
                 int64_t k, Tidx* d_idx, void* d_val, void* d_scratch,
                 size_t scratch_bytes, void* stream) {
  cudaStream_t s = AsStream(stream);
  Scratch sc;
  DR_CUDA_RETURN_IF_ERROR(Layout(n, d_scratch, &sc), "laying out the scratch");
  if (scratch_bytes < sc.total_bytes) {
    return Fail(cudaErrorInvalidValue, "scratch is smaller than ScratchBytes(n)");
  }
  const RadixPlan plan = MakeRadixPlan(keys.KeyBits(), kGpuLevelBits);
  const int64_t tiles = NumTiles(n);
  InitKernel<<<1, 1, 0, s>>>(sc.state, static_cast<long long>(k));
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching InitKernel");
  int grid = 0;
  DR_CUDA_RETURN_IF_ERROR(GridSize(HistKernel<Keys>, (n + kThreads - 1) / kThreads, &grid),
                          "sizing the histogram grid");
  for (int level = 0; level < plan.num_levels; ++level) {
    DR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(sc.hist, 0, sizeof(unsigned) * kMaxBins, s),
                            "clearing the histogram");
    HistKernel<Keys><<<grid, kThreads, 0, s>>>(keys, n, plan, level, sc.state, sc.hist);
    DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching HistKernel");
    FindKernel<<<1, kFindThreads, 0, s>>>(sc.hist, plan, level, sc.state);
    DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching FindKernel");
  }
  const int64_t warps_needed = (tiles * kWarp + kThreads - 1) / kThreads;
  DR_CUDA_RETURN_IF_ERROR(GridSize(CountKernel<Keys>, warps_needed, &grid),
                          "sizing the count grid");
  CountKernel<Keys><<<grid, kThreads, 0, s>>>(keys, n, tiles, sc.state, sc.gt, sc.eq);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching CountKernel");
  size_t cub_bytes = sc.cub_bytes;
  DR_CUDA_RETURN_IF_ERROR(
      deepreduce_cub::cub::DeviceScan::ExclusiveSum(sc.cub_temp, cub_bytes, sc.eq,
                                                    sc.eq_before, static_cast<int>(tiles), s),
      "scanning the per-tile tie counts");
  DR_CUDA_RETURN_IF_ERROR(GridSize(TakeKernel, (tiles + kThreads - 1) / kThreads, &grid),
                          "sizing the take grid");
  TakeKernel<<<grid, kThreads, 0, s>>>(tiles, sc.state, sc.gt, sc.eq, sc.eq_before,
                                       sc.take, sc.sel);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching TakeKernel");
  cub_bytes = sc.cub_bytes;
  DR_CUDA_RETURN_IF_ERROR(
      deepreduce_cub::cub::DeviceScan::ExclusiveSum(sc.cub_temp, cub_bytes, sc.sel,
                                                    sc.offset, static_cast<int>(tiles), s),
      "scanning the per-tile selection counts");
  DR_CUDA_RETURN_IF_ERROR(GridSize(WriteKernel<Keys, Tidx>, warps_needed, &grid),
                          "sizing the write grid");
  WriteKernel<Keys, Tidx><<<grid, kThreads, 0, s>>>(
      keys, d_values, value_bytes, n, tiles, sc.state, sc.take, sc.offset,
      d_idx, d_val);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching WriteKernel");
  return Ok();
}

// Calls fn with the magnitude-key functor of (kind, U).
template <typename U, typename Fn>
GpuStatus WithMagKeys(FloatKind kind, const U* d_x, Fn fn) {
  if constexpr (sizeof(U) == 2) {
    if (kind == FloatKind::kHalf) return fn(MagKeys<Half>{d_x});
    return fn(MagKeys<BFloat16>{d_x});
  } else if constexpr (sizeof(U) == 4) {
    return fn(MagKeys<Float32>{d_x});
  } else {
    return fn(MagKeys<Float64>{d_x});
  }
}

// ------------------------------------------------------------- threshold --

// One warp per tile: the ballot of step `it` is mark word tile*32 + it (bit l
// = position tile*kTile + 32*it + l); lane `it` keeps it, the warp stores the
// tile's words coalesced, lane 0 the tile's count.
template <typename Keys>
__global__ void __launch_bounds__(kThreads)
    MarkKernel(Keys keys, int64_t n, int64_t num_tiles, typename Keys::U t_key,
               uint32_t* __restrict__ marks, long long* __restrict__ counts) {
  using U = typename Keys::U;
  const int lane = threadIdx.x % kWarp;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int64_t num_warps = static_cast<int64_t>(gridDim.x) * blockDim.x / kWarp;
  for (int64_t tile = warp; tile < num_tiles; tile += num_warps) {
    uint32_t mine = 0;
    long long count = 0;
    for (int it = 0; it < kTileSteps; ++it) {
      const int64_t pos = tile * kTile + kWarp * it + lane;
      const bool hit = pos < n && keys(pos) >= t_key;
      const uint32_t word = __ballot_sync(kFullMask, hit);
      if (lane == it) mine = word;
      count += __popc(word);
    }
    marks[tile * kTileSteps + lane] = mine;
    if (lane == 0) counts[tile] = count;
  }
}

// One warp per tile: lane l owns mark word l and writes its positions from
// the tile's offset plus the marks of lanes < l (a warp prefix sum).
template <typename U, typename Tidx>
__global__ void __launch_bounds__(kThreads)
    MarkWriteKernel(const U* __restrict__ x, int64_t num_tiles,
                    const uint32_t* __restrict__ marks,
                    const long long* __restrict__ offsets, Tidx* __restrict__ idx,
                    U* __restrict__ val) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int64_t num_warps = static_cast<int64_t>(gridDim.x) * blockDim.x / kWarp;
  for (int64_t tile = warp; tile < num_tiles; tile += num_warps) {
    uint32_t word = marks[tile * kTileSteps + lane];
    const int mine = __popc(word);
    int incl = mine;
    for (int d = 1; d < kWarp; d *= 2) {
      const int v = __shfl_up_sync(kFullMask, incl, d);
      if (lane >= d) incl += v;
    }
    long long o = offsets[tile] + incl - mine;
    const int64_t base = tile * kTile + kWarp * lane;
    while (word) {
      const int64_t pos = base + __ffs(word) - 1;
      word &= word - 1;
      idx[o] = static_cast<Tidx>(pos);
      val[o] = x[pos];
      ++o;
    }
  }
}

// ------------------------------------------------------------- segmented --
//
// The segmented select runs the per-tensor algorithm on every segment at
// once. Work units never cross a segment: a segment of len elements is cut
// into ceil(len / kTile) tiles (the count/write kernels' unit, as above) and
// ceil(len / kChunk) histogram chunks (the histogram kernel's unit: one
// block, one shared-memory histogram, then flushed into the segment's row of
// the global histograms). Only segments with 0 < k are "active"; the host
// lists them with their first tile and first chunk (prefix sums), and a warp
// or block finds the segment of its tile or chunk by binary search in that
// O(S) table. A segment with k == len takes everything (no radix levels; its
// tiles count every position as selected). Every other active segment has
// its own SelectState and histogram row; FindKernel runs one block per
// active segment. The per-tile tie counts are scanned over all tiles at once
// and rebased per segment (eq_before[t] - eq_before[first tile of the
// segment]); the selections' scan over all tiles is directly the output
// offset, because segments are laid out in order and each contributes
// exactly its k.

constexpr int64_t kChunk = 16 * kTile;

// One active segment, as the device sees it.
struct SegInfo {
  long long start;               // flat position of its first element
  long long len;
  long long k;                   // 0 < k <= len
  unsigned long long seed_mix;   // random-k: SeedMix(SegmentSeed(seed, i))
  int take_all;                  // k == len
};

template <typename F>
struct SegMagKeys {
  using U = typename F::U;
  const U* x;
  __host__ __device__ int KeyBits() const { return MagnitudeKeyBits<F>(); }
  __device__ U operator()(const SegInfo& s, int64_t j) const {
    return MagnitudeKey<F>(x[s.start + j]);
  }
};

struct SegRandKeys {
  using U = uint64_t;
  __host__ __device__ int KeyBits() const { return 64; }
  __device__ U operator()(const SegInfo& s, int64_t j) const {
    return RandomKKey(s.seed_mix, static_cast<uint64_t>(j));
  }
};

// The segmentation's shape: active segments, tiles and chunks.
struct SegShape {
  int64_t active = 0;
  int64_t tiles = 0;
  int64_t chunks = 0;
  int64_t total_k = 0;
};

SegShape ShapeOf(const int64_t* offsets, const int64_t* k, int64_t num_segments) {
  SegShape sh;
  for (int64_t i = 0; i < num_segments; ++i) {
    if (k[i] <= 0) continue;
    const int64_t len = offsets[i + 1] - offsets[i];
    ++sh.active;
    sh.tiles += (len + kTile - 1) / kTile;
    sh.chunks += (len + kChunk - 1) / kChunk;
    sh.total_k += k[i];
  }
  return sh;
}

// The device table, copied in one piece from the host: the active segments,
// their first tiles and chunks (active + 1 each, the last = the totals) and
// their initial SelectStates.
struct SegTable {
  SegInfo* segs;
  long long* first_tile;
  long long* first_chunk;
  SelectState* state;
  size_t bytes;  // of the four together
};

struct SegScratch {
  SegTable table;
  unsigned* hist;        // active * kMaxBins
  long long* gt;         // per tile
  long long* eq;
  long long* eq_before;
  long long* take;
  long long* sel;
  long long* offset;
  void* cub_temp;
  size_t cub_bytes;
  size_t total_bytes;
};

// Table offsets within a block starting at `base` (may be null).
SegTable TableLayout(int64_t active, char* base) {
  SegTable t;
  size_t at = 0;
  auto take = [&](size_t bytes) {
    char* q = base == nullptr ? nullptr : base + at;
    at += AlignUp(bytes);
    return q;
  };
  const size_t a = static_cast<size_t>(active);
  t.segs = reinterpret_cast<SegInfo*>(take(sizeof(SegInfo) * a));
  t.first_tile = reinterpret_cast<long long*>(take(sizeof(long long) * (a + 1)));
  t.first_chunk = reinterpret_cast<long long*>(take(sizeof(long long) * (a + 1)));
  t.state = reinterpret_cast<SelectState*>(take(sizeof(SelectState) * a));
  t.bytes = at;
  return t;
}

cudaError_t SegLayout(const SegShape& sh, void* base, SegScratch* s) {
  const int64_t tiles = sh.tiles > 0 ? sh.tiles : 1;
  size_t cub_bytes = 0;
  cudaError_t e = ScanTempBytes(tiles, &cub_bytes);
  if (e != cudaSuccess) return e;
  char* p = static_cast<char*>(base);
  s->table = TableLayout(sh.active, p);
  size_t at = s->table.bytes;
  auto take = [&](size_t bytes) {
    char* q = p == nullptr ? nullptr : p + at;
    at += AlignUp(bytes);
    return q;
  };
  const size_t tile_bytes = sizeof(long long) * static_cast<size_t>(tiles);
  s->hist = reinterpret_cast<unsigned*>(
      take(sizeof(unsigned) * kMaxBins * static_cast<size_t>(sh.active > 0 ? sh.active : 1)));
  s->gt = reinterpret_cast<long long*>(take(tile_bytes));
  s->eq = reinterpret_cast<long long*>(take(tile_bytes));
  s->eq_before = reinterpret_cast<long long*>(take(tile_bytes));
  s->take = reinterpret_cast<long long*>(take(tile_bytes));
  s->sel = reinterpret_cast<long long*>(take(tile_bytes));
  s->offset = reinterpret_cast<long long*>(take(tile_bytes));
  s->cub_temp = take(cub_bytes);
  s->cub_bytes = cub_bytes;
  s->total_bytes = at;
  return cudaSuccess;
}

// Index a of the active segment holding unit u, given first[0..active] (the
// prefix sums of the units per segment): the last a with first[a] <= u.
__device__ __forceinline__ int64_t SegmentOf(const long long* __restrict__ first,
                                             int64_t active, int64_t u) {
  int64_t lo = 0, hi = active - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (first[mid] <= u) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// One level's histograms: block-stride over chunks; a chunk's keys with its
// segment's current prefix are counted in shared memory and added to the
// segment's row. Segments that take everything are skipped.
template <typename Keys>
__global__ void __launch_bounds__(kThreads)
    SegHistKernel(Keys keys, int64_t active, int64_t num_chunks, RadixPlan plan, int level,
                  const SegInfo* __restrict__ segs, const long long* __restrict__ first_chunk,
                  const SelectState* __restrict__ st, unsigned* __restrict__ hist) {
  using U = typename Keys::U;
  __shared__ unsigned sh[kMaxBins];
  const int bins = 1 << plan.DigitBits(level);
  for (int64_t c = blockIdx.x; c < num_chunks; c += gridDim.x) {
    const int64_t a = SegmentOf(first_chunk, active, c);
    const SegInfo seg = segs[a];
    if (seg.take_all) continue;  // uniform over the block
    for (int b = threadIdx.x; b < bins; b += blockDim.x) sh[b] = 0;
    __syncthreads();
    const U prefix = static_cast<U>(st[a].prefix);
    const int64_t j0 = (c - first_chunk[a]) * kChunk;
    const int64_t j1 = j0 + kChunk < seg.len ? j0 + kChunk : seg.len;
    for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
      const U key = keys(seg, j);
      if (HasPrefix(plan, level, key, prefix)) atomicAdd(&sh[Digit(plan, level, key)], 1u);
    }
    __syncthreads();
    unsigned* row = hist + a * kMaxBins;
    for (int b = threadIdx.x; b < bins; b += blockDim.x) {
      if (sh[b] != 0) atomicAdd(&row[b], sh[b]);
    }
    __syncthreads();  // before the next chunk clears sh
  }
}

// Per tile (a warp each): keys > T and == T of its segment; a segment that
// takes everything counts every position as > T.
template <typename Keys>
__global__ void __launch_bounds__(kThreads)
    SegCountKernel(Keys keys, int64_t active, int64_t num_tiles,
                   const SegInfo* __restrict__ segs, const long long* __restrict__ first_tile,
                   const SelectState* __restrict__ st, long long* __restrict__ gt,
                   long long* __restrict__ eq) {
  using U = typename Keys::U;
  const int lane = threadIdx.x % kWarp;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int64_t num_warps = static_cast<int64_t>(gridDim.x) * blockDim.x / kWarp;
  for (int64_t tile = warp; tile < num_tiles; tile += num_warps) {
    const int64_t a = SegmentOf(first_tile, active, tile);
    const SegInfo seg = segs[a];
    const int64_t j0 = (tile - first_tile[a]) * kTile;
    if (seg.take_all) {
      if (lane == 0) {
        const int64_t left = seg.len - j0;
        gt[tile] = left < kTile ? left : kTile;
        eq[tile] = 0;
      }
      continue;
    }
    const U t = static_cast<U>(st[a].prefix);
    long long cg = 0, ce = 0;
    for (int it = 0; it < kTileSteps; ++it) {
      const int64_t j = j0 + kWarp * it + lane;
      const bool valid = j < seg.len;
      const U key = valid ? keys(seg, j) : U{0};
      cg += __popc(__ballot_sync(kFullMask, valid && key > t));
      ce += __popc(__ballot_sync(kFullMask, valid && key == t));
    }
    if (lane == 0) {
      gt[tile] = cg;
      eq[tile] = ce;
    }
  }
}

// Per tile: the ties it takes (its segment's need less the ties of the
// segment's earlier tiles) and its selections.
__global__ void __launch_bounds__(kThreads)
    SegTakeKernel(int64_t active, int64_t num_tiles, const long long* __restrict__ first_tile,
                  const SelectState* __restrict__ st, const long long* __restrict__ gt,
                  const long long* __restrict__ eq, const long long* __restrict__ eq_before,
                  long long* __restrict__ take, long long* __restrict__ sel) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       t < num_tiles; t += stride) {
    const int64_t a = SegmentOf(first_tile, active, t);
    const long long before = eq_before[t] - eq_before[first_tile[a]];
    long long tk = st[a].need - before;
    tk = tk < 0 ? 0 : (tk > eq[t] ? eq[t] : tk);
    take[t] = tk;
    sel[t] = gt[t] + tk;
  }
}

// One warp per tile, as WriteKernel; positions are written flat
// (seg.start + j), values bit for bit.
template <typename Keys, typename V>
__global__ void __launch_bounds__(kThreads)
    SegWriteKernel(Keys keys, const V* __restrict__ x, int64_t active, int64_t num_tiles, const SegInfo* __restrict__ segs,
                   const long long* __restrict__ first_tile, const SelectState* __restrict__ st,
                   const long long* __restrict__ take, const long long* __restrict__ offset,
                   int64_t* __restrict__ idx, V* __restrict__ val) {
  using U = typename Keys::U;
  const int lane = threadIdx.x % kWarp;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int64_t num_warps = static_cast<int64_t>(gridDim.x) * blockDim.x / kWarp;
  for (int64_t tile = warp; tile < num_tiles; tile += num_warps) {
    const int64_t a = SegmentOf(first_tile, active, tile);
    const SegInfo seg = segs[a];
    const int64_t j0 = (tile - first_tile[a]) * kTile;
    long long out = offset[tile];
    if (seg.take_all) {
      for (int it = 0; it < kTileSteps; ++it) {
        const int64_t j = j0 + kWarp * it + lane;
        if (j < seg.len) {
          idx[out + kWarp * it + lane] = seg.start + j;
          val[out + kWarp * it + lane] = x[seg.start + j];
        }
      }
      continue;
    }
    const U t = static_cast<U>(st[a].prefix);
    const long long tk = take[tile];
    long long eq_seen = 0;
    for (int it = 0; it < kTileSteps; ++it) {
      const int64_t j = j0 + kWarp * it + lane;
      const bool valid = j < seg.len;
      const U key = valid ? keys(seg, j) : U{0};
      const bool is_eq = valid && key == t;
      const unsigned eq_ballot = __ballot_sync(kFullMask, is_eq);
      const long long rank = eq_seen + __popc(eq_ballot & LanesBelow(lane));
      const bool s = valid && (key > t || (is_eq && rank < tk));
      const unsigned s_ballot = __ballot_sync(kFullMask, s);
      if (s) {
        const long long o = out + __popc(s_ballot & LanesBelow(lane));
        idx[o] = seg.start + j;
        val[o] = x[seg.start + j];
      }
      out += __popc(s_ballot);
      eq_seen += __popc(eq_ballot);
    }
  }
}

// The whole segmented selection for a key functor.
template <typename Keys, typename U>
GpuStatus SegSelect(const Keys& keys, uint64_t seed, bool random, const U* d_x,
                    const int64_t* h_offsets, const int64_t* h_k, int64_t num_segments,
                    int64_t* d_idx, U* d_val, void* d_scratch, size_t scratch_bytes,
                    void* stream) {
  const SegShape sh = ShapeOf(h_offsets, h_k, num_segments);
  if (sh.total_k == 0) return Ok();
  // CUB's scans take an int item count, and one block per active segment.
  if (sh.tiles > 0x7fffffff || sh.active > 0x7fffffff) {
    return Fail(cudaErrorInvalidValue, "more than 2^31 - 1 tiles or segments");
  }
  cudaStream_t s = AsStream(stream);
  SegScratch sc;
  DR_CUDA_RETURN_IF_ERROR(SegLayout(sh, d_scratch, &sc), "laying out the scratch");
  if (scratch_bytes < sc.total_bytes) {
    return Fail(cudaErrorInvalidValue, "scratch is smaller than SegmentedScratchBytes");
  }
  // The table, built on the host and copied in one piece. The source is
  // pageable: CUDA stages such a copy during the call (it may wait for the
  // stream to do so), so the vector can go when this function returns.
  std::vector<char> host(sc.table.bytes);
  const SegTable ht = TableLayout(sh.active, host.data());
  const char* dbase = reinterpret_cast<const char*>(sc.table.segs);
  bool any_radix = false;
  int64_t a = 0, tiles = 0, chunks = 0;
  for (int64_t i = 0; i < num_segments; ++i) {
    if (h_k[i] <= 0) continue;
    const int64_t len = h_offsets[i + 1] - h_offsets[i];
    SegInfo& info = ht.segs[a];
    info.start = h_offsets[i];
    info.len = len;
    info.k = h_k[i];
    info.seed_mix = random ? SeedMix(SegmentSeed(seed, static_cast<uint64_t>(i))) : 0;
    info.take_all = h_k[i] == len ? 1 : 0;
    any_radix = any_radix || !info.take_all;
    ht.first_tile[a] = tiles;
    ht.first_chunk[a] = chunks;
    ht.state[a].prefix = 0;
    ht.state[a].need = info.take_all ? 0 : h_k[i];
    tiles += (len + kTile - 1) / kTile;
    chunks += (len + kChunk - 1) / kChunk;
    ++a;
  }
  ht.first_tile[sh.active] = tiles;
  ht.first_chunk[sh.active] = chunks;
  DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(const_cast<char*>(dbase), host.data(), host.size(),
                                          cudaMemcpyHostToDevice, s),
                          "copying the segment table to the device");
  const SegTable& dt = sc.table;
  const RadixPlan plan = MakeRadixPlan(keys.KeyBits(), kGpuLevelBits);
  int grid = 0;
  if (any_radix) {
    DR_CUDA_RETURN_IF_ERROR(GridSize(SegHistKernel<Keys>, sh.chunks, &grid),
                            "sizing the histogram grid");
    for (int level = 0; level < plan.num_levels; ++level) {
      DR_CUDA_RETURN_IF_ERROR(
          cudaMemsetAsync(sc.hist, 0, sizeof(unsigned) * kMaxBins * sh.active, s),
          "clearing the histograms");
      SegHistKernel<Keys><<<grid, kThreads, 0, s>>>(keys, sh.active, sh.chunks, plan, level,
                                                    dt.segs, dt.first_chunk, dt.state,
                                                    sc.hist);
      DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching SegHistKernel");
      FindKernel<<<static_cast<unsigned>(sh.active), kFindThreads, 0, s>>>(sc.hist, plan,
                                                                           level, dt.state);
      DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching FindKernel");
    }
  }
  const int64_t warps_needed = (sh.tiles * kWarp + kThreads - 1) / kThreads;
  DR_CUDA_RETURN_IF_ERROR(GridSize(SegCountKernel<Keys>, warps_needed, &grid),
                          "sizing the count grid");
  SegCountKernel<Keys><<<grid, kThreads, 0, s>>>(keys, sh.active, sh.tiles, dt.segs,
                                                 dt.first_tile, dt.state, sc.gt, sc.eq);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching SegCountKernel");
  size_t cub_bytes = sc.cub_bytes;
  DR_CUDA_RETURN_IF_ERROR(
      deepreduce_cub::cub::DeviceScan::ExclusiveSum(sc.cub_temp, cub_bytes, sc.eq,
                                                    sc.eq_before, static_cast<int>(sh.tiles),
                                                    s),
      "scanning the per-tile tie counts");
  DR_CUDA_RETURN_IF_ERROR(GridSize(SegTakeKernel, (sh.tiles + kThreads - 1) / kThreads, &grid),
                          "sizing the take grid");
  SegTakeKernel<<<grid, kThreads, 0, s>>>(sh.active, sh.tiles, dt.first_tile, dt.state, sc.gt,
                                          sc.eq, sc.eq_before, sc.take, sc.sel);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching SegTakeKernel");
  cub_bytes = sc.cub_bytes;
  DR_CUDA_RETURN_IF_ERROR(
      deepreduce_cub::cub::DeviceScan::ExclusiveSum(sc.cub_temp, cub_bytes, sc.sel, sc.offset,
                                                    static_cast<int>(sh.tiles), s),
      "scanning the per-tile selection counts");
  DR_CUDA_RETURN_IF_ERROR(GridSize(SegWriteKernel<Keys, U>, warps_needed, &grid),
                          "sizing the write grid");
  SegWriteKernel<Keys, U><<<grid, kThreads, 0, s>>>(keys, d_x, sh.active, sh.tiles, dt.segs,
                                                    dt.first_tile, dt.state, sc.take,
                                                    sc.offset, d_idx, d_val);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching SegWriteKernel");
  return Ok();
}

}  // namespace

size_t ScratchBytes(int64_t n, GpuStatus* status) {
  Scratch sc;
  const cudaError_t e = Layout(n, nullptr, &sc);
  if (e != cudaSuccess) {
    *status = Fail(e, "sizing the CUB scan workspace");
    return 0;
  }
  *status = Ok();
  return sc.total_bytes;
}

template <typename U, typename Tidx>
GpuStatus TopK(FloatKind kind, const U* d_x, int64_t n, int64_t k, Tidx* d_idx,
               U* d_val, void* d_scratch, size_t scratch_bytes, void* stream) {
  return WithMagKeys(kind, d_x, [&](auto keys) {
    return Select(keys, d_x, static_cast<int>(sizeof(U)), n, k, d_idx, d_val, d_scratch,
                  scratch_bytes, stream);
  });
}

template <typename U, typename Tidx>
GpuStatus RandomK(uint64_t seed, const U* d_x, int64_t n, int64_t k, Tidx* d_idx,
                  U* d_val, void* d_scratch, size_t scratch_bytes, void* stream) {
  return Select(RandKeys{SeedMix(seed)}, d_x, static_cast<int>(sizeof(U)), n, k, d_idx,
                d_val, d_scratch, scratch_bytes, stream);
}

template <typename U>
GpuStatus ThresholdCount(FloatKind kind, const U* d_x, int64_t n, U t_key,
                         void* d_scratch, size_t scratch_bytes, void* stream,
                         int64_t* count) {
  *count = 0;
  if (n == 0) return Ok();
  cudaStream_t s = AsStream(stream);
  Scratch sc;
  DR_CUDA_RETURN_IF_ERROR(Layout(n, d_scratch, &sc), "laying out the scratch");
  if (scratch_bytes < sc.total_bytes) {
    return Fail(cudaErrorInvalidValue, "scratch is smaller than ScratchBytes(n)");
  }
  const int64_t tiles = NumTiles(n);
  const int64_t warps_needed = (tiles * kWarp + kThreads - 1) / kThreads;
  GpuStatus st = WithMagKeys(kind, d_x, [&](auto keys) {
    int grid = 0;
    DR_CUDA_RETURN_IF_ERROR(GridSize(MarkKernel<decltype(keys)>, warps_needed, &grid),
                            "sizing the mark grid");
    MarkKernel<decltype(keys)><<<grid, kThreads, 0, s>>>(keys, n, tiles, t_key, sc.marks,
                                                         sc.gt);
    DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching MarkKernel");
    return Ok();
  });
  if (!st.ok()) return st;
  size_t cub_bytes = sc.cub_bytes;
  DR_CUDA_RETURN_IF_ERROR(
      deepreduce_cub::cub::DeviceScan::ExclusiveSum(sc.cub_temp, cub_bytes, sc.gt,
                                                    sc.eq_before, static_cast<int>(tiles), s),
      "scanning the per-tile counts");
  long long last[2] = {0, 0};
  DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&last[0], sc.eq_before + tiles - 1, sizeof(long long),
                                          cudaMemcpyDeviceToHost, s),
                          "copying the last offset to the host");
  DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&last[1], sc.gt + tiles - 1, sizeof(long long),
                                          cudaMemcpyDeviceToHost, s),
                          "copying the last count to the host");
  DR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s), "running MarkKernel");
  *count = static_cast<int64_t>(last[0] + last[1]);
  return Ok();
}

template <typename U, typename Tidx>
GpuStatus ThresholdWrite(const U* d_x, int64_t n, const void* d_scratch,
                         size_t scratch_bytes, Tidx* d_idx, U* d_val, void* stream) {
  if (n == 0) return Ok();
  cudaStream_t s = AsStream(stream);
  Scratch sc;
  DR_CUDA_RETURN_IF_ERROR(Layout(n, const_cast<void*>(d_scratch), &sc),
                          "laying out the scratch");
  if (scratch_bytes < sc.total_bytes) {
    return Fail(cudaErrorInvalidValue, "scratch is smaller than ScratchBytes(n)");
  }
  const int64_t tiles = NumTiles(n);
  int grid = 0;
  DR_CUDA_RETURN_IF_ERROR(GridSize(MarkWriteKernel<U, Tidx>,
                                   (tiles * kWarp + kThreads - 1) / kThreads, &grid),
                          "sizing the write grid");
  MarkWriteKernel<U, Tidx><<<grid, kThreads, 0, s>>>(d_x, tiles, sc.marks, sc.eq_before,
                                                     d_idx, d_val);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching MarkWriteKernel");
  return Ok();
}

#define DR_INSTANTIATE(U, Tidx)                                                        \
  template GpuStatus TopK<U, Tidx>(FloatKind, const U*, int64_t, int64_t, Tidx*, U*,   \
                                   void*, size_t, void*);                              \
  template GpuStatus RandomK<U, Tidx>(uint64_t, const U*, int64_t, int64_t, Tidx*, U*, \
                                      void*, size_t, void*);                           \
  template GpuStatus ThresholdWrite<U, Tidx>(const U*, int64_t, const void*, size_t,  \
                                             Tidx*, U*, void*);
DR_INSTANTIATE(uint16_t, int32_t)
DR_INSTANTIATE(uint16_t, int64_t)
DR_INSTANTIATE(uint32_t, int32_t)
DR_INSTANTIATE(uint32_t, int64_t)
DR_INSTANTIATE(uint64_t, int32_t)
DR_INSTANTIATE(uint64_t, int64_t)
#undef DR_INSTANTIATE
template GpuStatus ThresholdCount<uint16_t>(FloatKind, const uint16_t*, int64_t, uint16_t,
                                            void*, size_t, void*, int64_t*);
template GpuStatus ThresholdCount<uint32_t>(FloatKind, const uint32_t*, int64_t, uint32_t,
                                            void*, size_t, void*, int64_t*);
template GpuStatus ThresholdCount<uint64_t>(FloatKind, const uint64_t*, int64_t, uint64_t,
                                            void*, size_t, void*, int64_t*);

size_t SegmentedScratchBytes(const int64_t* h_offsets, const int64_t* h_k,
                             int64_t num_segments, GpuStatus* status) {
  SegScratch sc;
  const cudaError_t e = SegLayout(ShapeOf(h_offsets, h_k, num_segments), nullptr, &sc);
  if (e != cudaSuccess) {
    *status = Fail(e, "sizing the CUB scan workspace");
    return 0;
  }
  *status = Ok();
  return sc.total_bytes;
}

template <typename U>
GpuStatus SegmentedTopK(FloatKind kind, const U* d_x, const int64_t* h_offsets,
                        const int64_t* h_k, int64_t num_segments, int64_t* d_idx,
                        U* d_val, void* d_scratch, size_t scratch_bytes, void* stream) {
  auto run = [&](auto keys) {
    return SegSelect(keys, 0, false, d_x, h_offsets, h_k, num_segments, d_idx, d_val,
                     d_scratch, scratch_bytes, stream);
  };
  if constexpr (sizeof(U) == 2) {
    if (kind == FloatKind::kHalf) return run(SegMagKeys<Half>{d_x});
    return run(SegMagKeys<BFloat16>{d_x});
  } else if constexpr (sizeof(U) == 4) {
    return run(SegMagKeys<Float32>{d_x});
  } else {
    return run(SegMagKeys<Float64>{d_x});
  }
}

template <typename U>
GpuStatus SegmentedRandomK(uint64_t seed, const U* d_x, const int64_t* h_offsets,
                           const int64_t* h_k, int64_t num_segments, int64_t* d_idx,
                           U* d_val, void* d_scratch, size_t scratch_bytes,
                           void* stream) {
  return SegSelect(SegRandKeys{}, seed, true, d_x, h_offsets, h_k, num_segments, d_idx,
                   d_val, d_scratch, scratch_bytes, stream);
}

#define DR_INSTANTIATE_SEG(U)                                                          \
  template GpuStatus SegmentedTopK<U>(FloatKind, const U*, const int64_t*,             \
                                      const int64_t*, int64_t, int64_t*, U*, void*,    \
                                      size_t, void*);                                  \
  template GpuStatus SegmentedRandomK<U>(uint64_t, const U*, const int64_t*,           \
                                         const int64_t*, int64_t, int64_t*, U*, void*, \
                                         size_t, void*);
DR_INSTANTIATE_SEG(uint16_t)
DR_INSTANTIATE_SEG(uint32_t)
DR_INSTANTIATE_SEG(uint64_t)
#undef DR_INSTANTIATE_SEG

}  // namespace gpu
}  // namespace sparsify
}  // namespace deepreduce
