// CUDA launchers of the golomb index codec's per-block passes: plain C++
// declarations with no TensorFlow and no CUDA headers (see bloom_gpu.h for
// the conventions: d_* is device memory owned by the caller, `stream` is a
// cudaStream_t passed as void*, launchers only enqueue work).
//
// One CUDA thread handles one golomb block (golomb.h's ChooseRiceParam,
// EncodeBlock, DecodeBlock, the same functions the CPU kernels call), so a
// payload written on either device decodes on the other, byte for byte.
// The sequential glue - the prefix sum of block sizes, the header and the
// block table (nb entries, a few hundred at 25 M positions) - stays on the
// host side of the future GPU OpKernel.
//
// STATUS: compile-checked only (no GPU on the build machines); no TF GPU
// OpKernel calls these yet, so TF places the index ops on the CPU.
#ifndef DEEPREDUCE_KERNELS_INDEX_INDEX_GPU_H_
#define DEEPREDUCE_KERNELS_INDEX_INDEX_GPU_H_

#include <cstdint>

namespace deepreduce {
namespace index {
namespace gpu {

// cuda_error is a cudaError_t (0 == cudaSuccess); step names the failed call.
struct GpuStatus {
  int cuda_error;
  const char* step;
  bool ok() const { return cuda_error == 0; }
};

// Pass 1 of an encode: for each of the ceil(k / 2^log2_block) blocks of the
// sorted, validated indices, its Rice parameter (d_param) and its byte count
// in the stream (d_bytes).
GpuStatus GolombPlanInt32(const int32_t* d_idx, int64_t k, int log2_block,
                          int32_t* d_param, int64_t* d_bytes, void* stream);
GpuStatus GolombPlanInt64(const int64_t* d_idx, int64_t k, int log2_block,
                          int32_t* d_param, int64_t* d_bytes, void* stream);

// Pass 2: writes every block at d_stream + d_off[b] (the exclusive prefix sum
// of d_bytes).
GpuStatus GolombEncodeInt32(const int32_t* d_idx, int64_t k, int log2_block,
                            const int32_t* d_param, const int64_t* d_off,
                            uint8_t* d_stream, void* stream);
GpuStatus GolombEncodeInt64(const int64_t* d_idx, int64_t k, int log2_block,
                            const int32_t* d_param, const int64_t* d_off,
                            uint8_t* d_stream, void* stream);

// Decodes every block of a checked table (d_first, d_off with the sentinel
// d_off[nb] = S, d_param; see DecodeGolombOp for the checks) into d_out.
// *d_first_bad must hold nb beforehand; it ends as the smallest block that
// failed to decode (nb if none).
GpuStatus GolombDecodeInt32(const uint8_t* d_stream, const uint64_t* d_first,
                            const uint64_t* d_off, const uint64_t* d_param, int64_t k,
                            int log2_block, uint64_t n, int32_t* d_out,
                            unsigned long long* d_first_bad, void* stream);
GpuStatus GolombDecodeInt64(const uint8_t* d_stream, const uint64_t* d_first,
                            const uint64_t* d_off, const uint64_t* d_param, int64_t k,
                            int log2_block, uint64_t n, int64_t* d_out,
                            unsigned long long* d_first_bad, void* stream);

}  // namespace gpu
}  // namespace index
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_INDEX_INDEX_GPU_H_
