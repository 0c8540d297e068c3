// CUDA kernels of the golomb index codec behind the plain launchers of
// index_gpu.h. No TensorFlow headers. The per-block logic is golomb.h's,
// shared with the CPU kernels.
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/index/golomb.h"
#include "kernels/index/index_gpu.h"

namespace deepreduce {
namespace index {
namespace gpu {
namespace {

// Threads per CUDA block: a multiple of the warp size. One thread owns one
// golomb block (1024 indices by default), so a 25 M-position tensor at 1 %
// has ~250 busy threads: the kernels are latency-bound and a single wave of
// small CUDA blocks spreads them over the SMs.
constexpr int kThreads = 64;
static_assert(kThreads % 32 == 0, "kThreads must be whole warps");

GpuStatus Ok() { return GpuStatus{0, ""}; }
GpuStatus Check(const char* step) {
  const cudaError_t e = cudaGetLastError();
  return GpuStatus{static_cast<int>(e), e == cudaSuccess ? "" : step};
}

int Grid(int64_t blocks) {
  const int64_t g = (blocks + kThreads - 1) / kThreads;
  return static_cast<int>(g < 65535 ? (g < 1 ? 1 : g) : 65535);
}

// Grid-stride loops: thread t handles golomb blocks t, t + stride, ...
template <typename T>
__global__ void PlanKernel(const T* idx, int64_t k, int log2_block, int64_t blocks,
                           int32_t* param, int64_t* bytes) {
  for (int64_t b = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; b < blocks;
       b += int64_t{gridDim.x} * blockDim.x) {
    uint64_t bits;
    param[b] = golomb::ChooseRiceParam(idx + (b << log2_block),
                                       golomb::BlockCount(k, log2_block, b), &bits);
    bytes[b] = static_cast<int64_t>((bits + 7) / 8);
  }
}

template <typename T>
__global__ void EncodeKernel(const T* idx, int64_t k, int log2_block, int64_t blocks,
                             const int32_t* param, const int64_t* off, uint8_t* out) {
  for (int64_t b = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; b < blocks;
       b += int64_t{gridDim.x} * blockDim.x) {
    golomb::EncodeBlock(idx + (b << log2_block), golomb::BlockCount(k, log2_block, b),
                        param[b], out + off[b]);
  }
}

template <typename T>
__global__ void DecodeKernel(const uint8_t* stream, const uint64_t* first, const uint64_t* off,
                             const uint64_t* param, int64_t k, int log2_block, int64_t blocks,
                             uint64_t n, T* out, unsigned long long* first_bad) {
  for (int64_t b = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; b < blocks;
       b += int64_t{gridDim.x} * blockDim.x) {
    const uint64_t upper = b + 1 < blocks ? first[b + 1] : n;
    if (!golomb::DecodeBlock(stream + off[b], stream + off[b + 1], first[b],
                             static_cast<int>(param[b]), golomb::BlockCount(k, log2_block, b),
                             upper, out + (b << log2_block))) {
      atomicMin(first_bad, static_cast<unsigned long long>(b));
    }
  }
}

int64_t NumBlocks(int64_t k, int log2_block) {
  return (k + (int64_t{1} << log2_block) - 1) >> log2_block;
}

template <typename T>
GpuStatus Plan(const T* idx, int64_t k, int log2_block, int32_t* param, int64_t* bytes,
               void* stream) {
  const int64_t blocks = NumBlocks(k, log2_block);
  if (blocks == 0) return Ok();
  PlanKernel<<<Grid(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      idx, k, log2_block, blocks, param, bytes);
  return Check("golomb plan kernel launch");
}

template <typename T>
GpuStatus Encode(const T* idx, int64_t k, int log2_block, const int32_t* param,
                 const int64_t* off, uint8_t* out, void* stream) {
  const int64_t blocks = NumBlocks(k, log2_block);
  if (blocks == 0) return Ok();
  EncodeKernel<<<Grid(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      idx, k, log2_block, blocks, param, off, out);
  return Check("golomb encode kernel launch");
}

template <typename T>
GpuStatus Decode(const uint8_t* s, const uint64_t* first, const uint64_t* off,
                 const uint64_t* param, int64_t k, int log2_block, uint64_t n, T* out,
                 unsigned long long* first_bad, void* stream) {
  const int64_t blocks = NumBlocks(k, log2_block);
  if (blocks == 0) return Ok();
  DecodeKernel<<<Grid(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      s, first, off, param, k, log2_block, blocks, n, out, first_bad);
  return Check("golomb decode kernel launch");
}

}  // namespace

GpuStatus GolombPlanInt32(const int32_t* d_idx, int64_t k, int log2_block, int32_t* d_param,
                          int64_t* d_bytes, void* stream) {
  return Plan(d_idx, k, log2_block, d_param, d_bytes, stream);
}
GpuStatus GolombPlanInt64(const int64_t* d_idx, int64_t k, int log2_block, int32_t* d_param,
                          int64_t* d_bytes, void* stream) {
  return Plan(d_idx, k, log2_block, d_param, d_bytes, stream);
}
GpuStatus GolombEncodeInt32(const int32_t* d_idx, int64_t k, int log2_block,
                            const int32_t* d_param, const int64_t* d_off, uint8_t* d_stream,
                            void* stream) {
  return Encode(d_idx, k, log2_block, d_param, d_off, d_stream, stream);
}
GpuStatus GolombEncodeInt64(const int64_t* d_idx, int64_t k, int log2_block,
                            const int32_t* d_param, const int64_t* d_off, uint8_t* d_stream,
                            void* stream) {
  return Encode(d_idx, k, log2_block, d_param, d_off, d_stream, stream);
}
GpuStatus GolombDecodeInt32(const uint8_t* d_stream, const uint64_t* d_first,
                            const uint64_t* d_off, const uint64_t* d_param, int64_t k,
                            int log2_block, uint64_t n, int32_t* d_out,
                            unsigned long long* d_first_bad, void* stream) {
  return Decode(d_stream, d_first, d_off, d_param, k, log2_block, n, d_out, d_first_bad, stream);
}
GpuStatus GolombDecodeInt64(const uint8_t* d_stream, const uint64_t* d_first,
                            const uint64_t* d_off, const uint64_t* d_param, int64_t k,
                            int log2_block, uint64_t n, int64_t* d_out,
                            unsigned long long* d_first_bad, void* stream) {
  return Decode(d_stream, d_first, d_off, d_param, k, log2_block, n, d_out, d_first_bad, stream);
}

}  // namespace gpu
}  // namespace index
}  // namespace deepreduce
