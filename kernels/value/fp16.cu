// CUDA kernels of the fp16 value codec (fp16.h), behind its struct's
// launchers. No TensorFlow headers; the per-value conversion is halfcast.h's,
// the CPU's, so both write the same bytes.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/gpu_launch.h"
#include "kernels/value/fp16.h"
#include "kernels/value/halfcast.h"
#include "kernels/value/value_format.h"

namespace deepreduce {
namespace value {
namespace fp16 {
namespace {

using namespace ::deepreduce::gpu_launch;  // NOLINT

// Grid-stride over the k values: thread t converts values t, t + stride, ...
// into the u16 at body byte 2i. Thread 0 also writes the header.
__global__ void __launch_bounds__(kThreads)
    EncodeKernel(const float* __restrict__ v, int64_t k, HeaderBytes header,
                 uint8_t* __restrict__ payload) {
  if (blockIdx.x == 0 && threadIdx.x == 0) CopyHeader(header, payload);
  uint8_t* body = payload + kHeaderBytes;
  for (int64_t i = GlobalThread(); i < k; i += GridThreads()) {
    PutU16(body + 2 * i, halfcast::FloatToFp16(v[i]));
  }
}

// Grid-stride over the k codes: thread t decodes codes t, t + stride, ...
__global__ void __launch_bounds__(kThreads)
    DecodeKernel(const uint8_t* __restrict__ body, int64_t k, float* __restrict__ out) {
  for (int64_t i = GlobalThread(); i < k; i += GridThreads()) {
    out[i] = halfcast::Fp16ToFloat(GetU16(body + 2 * i));
  }
}

}  // namespace

// With k == 0 one block still writes the header.
gpu_launch::GpuStatus Codec::EncodeGpu(const float* d_values, int64_t k, const EncodeArgs& /*a*/,
                                       const HeaderBytes& header, uint8_t* d_payload,
                                       uint64_t /*body_bytes*/, void* stream) {
  int grid = 0;
  DR_CUDA_RETURN_IF_ERROR(gpu_launch::GridSize(EncodeKernel, gpu_launch::CeilDiv(k, kThreads),
                                               &grid),
                          "sizing the fp16 encode grid");
  EncodeKernel<<<grid, kThreads, 0, gpu_launch::AsStream(stream)>>>(d_values, k, header,
                                                                    d_payload);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching the fp16 encode kernel");
  return gpu_launch::Ok();
}

gpu_launch::GpuStatus Codec::DecodeGpu(uint64_t k, const uint8_t* d_body, uint64_t /*bytes*/,
                                       float* d_out, void* stream) {
  if (k == 0) return gpu_launch::Ok();
  const int64_t kk = static_cast<int64_t>(k);
  int grid = 0;
  DR_CUDA_RETURN_IF_ERROR(gpu_launch::GridSize(DecodeKernel, gpu_launch::CeilDiv(kk, kThreads),
                                               &grid),
                          "sizing the fp16 decode grid");
  DecodeKernel<<<grid, kThreads, 0, gpu_launch::AsStream(stream)>>>(d_body, kk, d_out);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching the fp16 decode kernel");
  return gpu_launch::Ok();
}

}  // namespace fp16
}  // namespace value
}  // namespace deepreduce
