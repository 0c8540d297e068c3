// CUDA side of tensor fusion: packing and unpacking copy contiguous pieces,
// device to device, on the op's stream, without synchronizing.
//
// One cudaMemcpyAsync per piece costs a few microseconds of launch each:
// ResNet-50's 161 variables took 0.70 ms to pack on an H100 that way (146
// GB/s; a single 102 MB copy takes 0.08 ms). So the pieces are copied by one
// kernel per batch of up to kMaxPieces: the batch's table (source,
// destination, length of each piece, and each piece's first block) travels
// in the kernel's parameters (no device scratch, no host-to-device copy);
// each block copies kUnitsPerBlock units of one piece, found by a binary
// search of its block index in the table. Each piece's unit is the widest
// of 16, 8, 4, 2, 1 bytes that divides its two addresses and its length (4
// for float32 pieces at element offsets), so the copies are aligned vector
// loads and stores, coalesced across the block, and an odd piece slows only
// itself.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/fusion/fusion_gpu.h"

namespace deepreduce {
namespace fusion {
namespace gpu {
namespace {

constexpr int64_t kUnitsPerBlock = kThreads * 8;
// Pieces per launch: the table must fit the 4 KB of kernel parameters.
constexpr int kMaxPieces = 96;

struct CopyBatch {
  const char* src[kMaxPieces];
  char* dst[kMaxPieces];
  long long units[kMaxPieces];
  long long block_start[kMaxPieces + 1];  // prefix sums of the blocks per piece
  unsigned char unit_shift[kMaxPieces];   // log2 of the piece's unit in bytes
  int count;
};
static_assert(sizeof(CopyBatch) <= 4000, "the batch must fit the kernel parameters");

template <typename W>
__device__ __forceinline__ void CopyUnits(const char* src, char* dst, long long first,
                                          long long end) {
  const W* __restrict__ s = reinterpret_cast<const W*>(src);
  W* __restrict__ d = reinterpret_cast<W*>(dst);
  for (long long u = first + threadIdx.x; u < end; u += kThreads) d[u] = s[u];
}

__global__ void __launch_bounds__(kThreads) CopyKernel(const __grid_constant__ CopyBatch b) {
  const long long block = blockIdx.x;
  // The last piece whose first block is <= this one (the table holds no
  // piece without blocks).
  int lo = 0, hi = b.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (b.block_start[mid] <= block) lo = mid; else hi = mid - 1;
  }
  const long long first = (block - b.block_start[lo]) * kUnitsPerBlock;
  const long long end =
      first + kUnitsPerBlock < b.units[lo] ? first + kUnitsPerBlock : b.units[lo];
  switch (b.unit_shift[lo]) {  // uniform over the block
    case 4: CopyUnits<uint4>(b.src[lo], b.dst[lo], first, end); break;
    case 3: CopyUnits<unsigned long long>(b.src[lo], b.dst[lo], first, end); break;
    case 2: CopyUnits<unsigned>(b.src[lo], b.dst[lo], first, end); break;
    case 1: CopyUnits<unsigned short>(b.src[lo], b.dst[lo], first, end); break;
    default: CopyUnits<unsigned char>(b.src[lo], b.dst[lo], first, end); break;
  }
}

// log2 of the widest unit (at most 16 bytes) dividing both addresses and the length.
int UnitShift(const void* dst, const void* src, int64_t bytes) {
  const uint64_t bits = 16 | reinterpret_cast<uintptr_t>(dst) |
                        reinterpret_cast<uintptr_t>(src) | static_cast<uint64_t>(bytes);
  return __builtin_ctzll(bits);
}

}  // namespace

GpuStatus CopyPieces(void* const* dst, const void* const* src, const int64_t* bytes,
                     int count, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  for (int i = 0; i < count; ++i) {
    if (bytes[i] < 0) return {static_cast<int>(cudaErrorInvalidValue), "a negative length"};
  }
  for (int begin = 0; begin < count;) {
    // The next batch: up to kMaxPieces non-empty pieces.
    CopyBatch b;
    b.count = 0;
    long long blocks = 0;
    int i = begin;
    for (; i < count && b.count < kMaxPieces; ++i) {
      if (bytes[i] == 0) continue;
      const int shift = UnitShift(dst[i], src[i], bytes[i]);
      const long long units = bytes[i] >> shift;
      b.src[b.count] = static_cast<const char*>(src[i]);
      b.dst[b.count] = static_cast<char*>(dst[i]);
      b.units[b.count] = units;
      b.unit_shift[b.count] = static_cast<unsigned char>(shift);
      b.block_start[b.count] = blocks;
      blocks += (units + kUnitsPerBlock - 1) / kUnitsPerBlock;
      ++b.count;
    }
    b.block_start[b.count] = blocks;
    begin = i;
    if (b.count == 0) continue;
    if (blocks > 0x7fffffffLL) return {static_cast<int>(cudaErrorInvalidValue), "too many blocks"};
    CopyKernel<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(b);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return {static_cast<int>(e), "launching CopyKernel"};
  }
  return {0, ""};
}

}  // namespace gpu
}  // namespace fusion
}  // namespace deepreduce
