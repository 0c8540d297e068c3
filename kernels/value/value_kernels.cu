// CUDA kernels of the value codecs (fp16, bf16, qsgd; polyfit and dexp
// decode), behind the plain C++ launchers of value_gpu.h. No TensorFlow
// headers: memory and the stream come from the caller. The per-element logic
// is that of halfcast.h, qsgd.h, polyfit.h and dexp.h, shared with the CPU
// kernels, so both write the same bytes (dexp decode: see DexpDecode).
//
// No CUB here: the only reduction (qsgd's bucket max) is a warp reduction
// plus an atomicMax on the scale's bits. Should one be needed (the polyfit /
// dexp encoders' radix sort), wrap it as bloom_kernels.cu does
// (CUB_WRAPPED_NAMESPACE deepreduce_cub).
#include <cstdint>
#include <cstring>

#include <cuda_runtime.h>

#include "kernels/value/dexp.h"
#include "kernels/value/halfcast.h"
#include "kernels/value/polyfit.h"
#include "kernels/value/qsgd.h"
#include "kernels/value/value_format.h"
#include "kernels/value/value_gpu.h"

namespace deepreduce {
namespace value {
namespace gpu {
namespace {

constexpr int kWarp = 32;
// Threads per block of every kernel here: a multiple of the warp size (the
// bucket-max kernel works on whole warps). The grid size comes from the
// occupancy API: at most one full wave; the grid-stride loops do the rest.
constexpr int kThreads = 256;
static_assert(kThreads % kWarp == 0, "kThreads must be whole warps");
constexpr unsigned kFullMask = 0xffffffffu;
// qsgd: elements per bucket-max work item (one warp), so that one huge
// bucket is still spread over many warps.
constexpr int64_t kSliceElems = 8192;
// qsgd: elements per bit-packing work item (one thread). 8 codes of w bits
// are exactly w bytes, so every item starts on a byte boundary and owns its
// bytes (the CPU packs 4096-element chunks: the same bit stream).
constexpr int64_t kGroup = 8;

GpuStatus Ok() { return GpuStatus{0, ""}; }
GpuStatus Fail(cudaError_t e, const char* step) { return GpuStatus{static_cast<int>(e), step}; }
#define DR_CUDA_RETURN_IF_ERROR(expr, step)                    \
  do {                                                         \
    const cudaError_t dr_err_ = (expr);                        \
    if (dr_err_ != cudaSuccess) return Fail(dr_err_, step);    \
  } while (0)

cudaStream_t AsStream(void* stream) { return static_cast<cudaStream_t>(stream); }

// Blocks of kThreads for `work_blocks` blocks' worth of work: at most one
// full wave (SMs x resident blocks per SM, occupancy API), at least one.
template <typename Kernel>
cudaError_t GridSize(Kernel kernel, int64_t work_blocks, int* grid) {
  int device = 0, sms = 0, per_sm = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e != cudaSuccess) return e;
  e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0);
  if (e != cudaSuccess) return e;
  const int64_t wave = static_cast<int64_t>(sms) * (per_sm > 0 ? per_sm : 1);
  const int64_t g = work_blocks < wave ? work_blocks : wave;
  *grid = static_cast<int>(g < 1 ? 1 : g);
  return cudaSuccess;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

__device__ __forceinline__ int64_t GlobalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t GridThreads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// Up to 24 bytes of fixed payload fields, built on the host and written by
// thread 0 of the first kernel (passed by value: no host buffer to keep
// alive, no extra copy).
struct Prefix {
  uint8_t bytes[24];
  int n;
};

__device__ __forceinline__ void WritePrefix(const Prefix& p, uint8_t* out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    for (int j = 0; j < p.n; ++j) out[j] = p.bytes[j];
  }
}

// ------------------------------------------------------------ fp16/bf16 --

// Grid-stride over the k values: thread t converts values t, t + stride, ...
// into the u16 at payload byte 16 + 2i. Thread 0 also writes the header.
template <uint8_t kCodec>
__global__ void __launch_bounds__(kThreads)
    HalfEncodeKernel(const float* __restrict__ v, int64_t k, Prefix header,
                     uint8_t* __restrict__ payload) {
  WritePrefix(header, payload);
  uint8_t* dst = payload + kHeaderBytes;
  for (int64_t i = GlobalThread(); i < k; i += GridThreads()) {
    PutU16(dst + 2 * i, kCodec == kCodecFp16 ? halfcast::FloatToFp16(v[i])
                                             : halfcast::FloatToBf16(v[i]));
  }
}

// Grid-stride over the k codes: thread t decodes codes t, t + stride, ...
template <uint8_t kCodec>
__global__ void __launch_bounds__(kThreads)
    HalfDecodeKernel(const uint8_t* __restrict__ payload, int64_t k,
                     float* __restrict__ out) {
  const uint8_t* src = payload + kHeaderBytes;
  for (int64_t i = GlobalThread(); i < k; i += GridThreads()) {
    const uint16_t h = GetU16(src + 2 * i);
    out[i] = kCodec == kCodecFp16 ? halfcast::Fp16ToFloat(h) : halfcast::Bf16ToFloat(h);
  }
}

template <uint8_t kCodec>
GpuStatus HalfEncodeImpl(const float* d_values, int64_t k, uint8_t* d_payload,
                         cudaStream_t s) {
  Prefix header;
  header.n = static_cast<int>(kHeaderBytes);
  WriteHeader(header.bytes, kCodec, static_cast<uint64_t>(k));
  int grid = 0;
  DR_CUDA_RETURN_IF_ERROR(GridSize(HalfEncodeKernel<kCodec>, CeilDiv(k, kThreads), &grid),
                          "sizing the half-encode grid");
  HalfEncodeKernel<kCodec><<<grid, kThreads, 0, s>>>(d_values, k, header, d_payload);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching HalfEncodeKernel");
  return Ok();
}

template <uint8_t kCodec>
GpuStatus HalfDecodeImpl(const uint8_t* d_payload, int64_t k, float* d_out, cudaStream_t s) {
  if (k == 0) return Ok();
  int grid = 0;
  DR_CUDA_RETURN_IF_ERROR(GridSize(HalfDecodeKernel<kCodec>, CeilDiv(k, kThreads), &grid),
                          "sizing the half-decode grid");
  HalfDecodeKernel<kCodec><<<grid, kThreads, 0, s>>>(d_payload, k, d_out);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching HalfDecodeKernel");
  return Ok();
}

// ---------------------------------------------------------------- qsgd --

// Error records in the scratch buffer; ~0 = nothing found.
struct QsgdRecords {
  unsigned long long first_bad_value;  // encode: first non-finite value
  unsigned long long first_bad_scale;  // decode: first bad bucket scale
  unsigned long long first_bad_code;   // decode: first invalid code
};

// Bucket maxima. Work item = slice c of bucket b: positions
// [b * bucket + c * kSliceElems, min(that + kSliceElems, end of bucket, k)),
// with spb = ceil(min(bucket, k) / kSliceElems) slices per bucket. One warp
// per item (grid-stride over items by warps, so the loop bounds are
// warp-uniform and the shuffles are safe): lane l reads positions lo + l,
// lo + l + 32, ... (coalesced), the warp reduces the max of |v|, and lane 0
// raises the bucket's scale with atomicMax on its bits (non-negative floats
// order like their bit patterns; the scales start at +0). The max of a set
// is exact whatever the order, so the scale equals the CPU's. Also records
// the first non-finite value. Thread 0 writes the 24 fixed bytes.
__global__ void __launch_bounds__(kThreads)
    QsgdBucketMaxKernel(const float* __restrict__ v, int64_t k, int64_t bucket,
                        int64_t spb, int64_t num_items, Prefix fixed,
                        uint8_t* __restrict__ payload, unsigned int* __restrict__ scale_bits,
                        unsigned long long* __restrict__ first_bad) {
  WritePrefix(fixed, payload);
  const int lane = threadIdx.x % kWarp;
  const int64_t warp = GlobalThread() / kWarp;
  const int64_t num_warps = GridThreads() / kWarp;
  for (int64_t item = warp; item < num_items; item += num_warps) {
    const int64_t b = item / spb, c = item % spb;
    const int64_t bucket_end = (b + 1) * bucket < k ? (b + 1) * bucket : k;
    const int64_t lo = b * bucket + c * kSliceElems;
    const int64_t hi = lo + kSliceElems < bucket_end ? lo + kSliceElems : bucket_end;
    unsigned int m = 0;  // bits of +0.0f
    for (int64_t i = lo + lane; i < hi; i += kWarp) {
      const float x = v[i];
      if (!IsFinite(x)) atomicMin(first_bad, static_cast<unsigned long long>(i));
      unsigned int u;
      const float a = fabsf(x);
      memcpy(&u, &a, 4);
      m = u > m ? u : m;
    }
    for (int d = kWarp / 2; d > 0; d /= 2) {
      const unsigned int o = __shfl_xor_sync(kFullMask, m, d);
      m = o > m ? o : m;
    }
    if (lane == 0 && lo < hi) atomicMax(&scale_bits[b], m);
  }
}

// Bit packing. Grid-stride over groups of kGroup values: thread t packs
// values [8g, 8g + 8) for g = t, t + stride, ... into code bytes
// [g * w, g * w + ceil(n * w / 8)), n = values in the group, LSB first, as the
// CPU does (qsgd.h). Codes are masked to w bits: only non-finite input (an
// error the caller reports) could produce wider ones.
__global__ void __launch_bounds__(kThreads)
    QsgdPackKernel(const float* __restrict__ v, int64_t k, int64_t bucket, uint32_t s,
                   int w, uint64_t seed_mix, const uint8_t* __restrict__ scales,
                   uint8_t* __restrict__ codes) {
  const int64_t num_groups = (k + kGroup - 1) / kGroup;
  const uint32_t mask = (uint32_t{1} << w) - 1;
  for (int64_t g = GlobalThread(); g < num_groups; g += GridThreads()) {
    const int64_t lo = g * kGroup, hi = lo + kGroup < k ? lo + kGroup : k;
    uint8_t* dst = codes + g * w;
    uint64_t acc = 0;
    int nbits = 0;
    int64_t b = lo / bucket, next = (b + 1) * bucket;
    float scale = GetF32(scales + 4 * b);
    for (int64_t i = lo; i < hi; ++i) {
      if (i == next) {
        scale = GetF32(scales + 4 * ++b);
        next += bucket;
      }
      const uint32_t code =
          qsgd::Encode(v[i], scale, s, seed_mix, static_cast<uint64_t>(i)) & mask;
      acc |= static_cast<uint64_t>(code) << nbits;
      nbits += w;
      while (nbits >= 8) {
        *dst++ = static_cast<uint8_t>(acc);
        acc >>= 8;
        nbits -= 8;
      }
    }
    if (nbits > 0) *dst = static_cast<uint8_t>(acc);  // only the last group
  }
}

// Grid-stride over the buckets: records the first scale that is not finite
// and >= 0.
__global__ void __launch_bounds__(kThreads)
    QsgdScaleCheckKernel(const uint8_t* __restrict__ scales, int64_t num_buckets,
                         unsigned long long* __restrict__ first_bad) {
  for (int64_t b = GlobalThread(); b < num_buckets; b += GridThreads()) {
    const float m = GetF32(scales + 4 * b);
    if (!(IsFinite(m) && m >= 0.0f)) atomicMin(first_bad, static_cast<unsigned long long>(b));
  }
}

// Unpacking. Grid-stride over groups of kGroup values as in QsgdPackKernel:
// thread t reads exactly the ceil(n * w / 8) code bytes of group g and
// decodes its n values; an invalid code lowers *first_bad to its position.
__global__ void __launch_bounds__(kThreads)
    QsgdUnpackKernel(const uint8_t* __restrict__ scales, const uint8_t* __restrict__ codes,
                     int64_t k, int64_t bucket, uint32_t s, int w, float* __restrict__ out,
                     unsigned long long* __restrict__ first_bad) {
  const int64_t num_groups = (k + kGroup - 1) / kGroup;
  const uint32_t mask = (uint32_t{1} << w) - 1;
  for (int64_t g = GlobalThread(); g < num_groups; g += GridThreads()) {
    const int64_t lo = g * kGroup, hi = lo + kGroup < k ? lo + kGroup : k;
    const uint8_t* src = codes + g * w;
    uint64_t acc = 0;
    int nbits = 0;
    int64_t b = lo / bucket, next = (b + 1) * bucket;
    float scale = GetF32(scales + 4 * b);
    for (int64_t i = lo; i < hi; ++i) {
      if (i == next) {
        scale = GetF32(scales + 4 * ++b);
        next += bucket;
      }
      while (nbits < w) {
        acc |= static_cast<uint64_t>(*src++) << nbits;
        nbits += 8;
      }
      const uint32_t code = static_cast<uint32_t>(acc) & mask;
      acc >>= w;
      nbits -= w;
      float x;
      if (!qsgd::Decode(code, scale, s, &x)) {
        atomicMin(first_bad, static_cast<unsigned long long>(i));
        x = 0.0f;
      }
      out[i] = x;
    }
  }
}

// ------------------------------------------------------------- polyfit --

struct PolyfitTablesView {
  const int64_t* start;  // [num_segs + 1]
  const int64_t* coff;   // [num_segs + 1]
  const float* coefs;    // [num_coefs]
};

PolyfitTablesView TableLayout(const void* base, int64_t num_segs) {
  const char* p = static_cast<const char*>(base);
  PolyfitTablesView t;
  t.start = reinterpret_cast<const int64_t*>(p);
  t.coff = reinterpret_cast<const int64_t*>(p + 8 * (num_segs + 1));
  t.coefs = reinterpret_cast<const float*>(p + 16 * (num_segs + 1));
  return t;
}

// Grid-stride over the K sorted positions: thread t evaluates positions
// t, t + stride, ...; the segment q of position i (start[q] <= i <
// start[q + 1]) is found by binary search in start[0..num_segs], reading only
// entries 0..num_segs.
__global__ void __launch_bounds__(kThreads)
    PolyfitDecodeKernel(const int64_t* __restrict__ start, const int64_t* __restrict__ coff,
                        const float* __restrict__ coefs, int64_t num_segs, int degree,
                        float* __restrict__ out) {
  const int64_t k = start[num_segs];
  for (int64_t i = GlobalThread(); i < k; i += GridThreads()) {
    int64_t lo = 0, hi = num_segs;  // start[lo] <= i < start[hi]
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (start[mid] <= i) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    const int64_t len = start[lo + 1] - start[lo];
    out[i] = static_cast<float>(polyfit::ChebEval(coefs + coff[lo],
                                                  polyfit::SegmentDegree(degree, len),
                                                  polyfit::Abscissa(i - start[lo], len)));
  }
}

// ---------------------------------------------------------------- dexp --

// Grid-stride over the k sorted positions: thread t evaluates positions
// t, t + stride, ... with dexp.h's DecodeAt.
__global__ void __launch_bounds__(kThreads)
    DexpDecodeKernel(dexp::Coefs pos, dexp::Coefs neg, int64_t p_count, int64_t k,
                     float* __restrict__ out) {
  for (int64_t i = GlobalThread(); i < k; i += GridThreads()) {
    out[i] = dexp::DecodeAt(pos, neg, p_count, k, i);
  }
}

}  // namespace

const char* ErrorString(int cuda_error) {
  return cudaGetErrorString(static_cast<cudaError_t>(cuda_error));
}

GpuStatus HalfEncode(uint8_t codec, const float* d_values, int64_t k, uint8_t* d_payload,
                     void* stream) {
  if (codec == kCodecFp16) return HalfEncodeImpl<kCodecFp16>(d_values, k, d_payload, AsStream(stream));
  if (codec == kCodecBf16) return HalfEncodeImpl<kCodecBf16>(d_values, k, d_payload, AsStream(stream));
  return Fail(cudaErrorInvalidValue, "HalfEncode: codec is neither fp16 nor bf16");
}

GpuStatus HalfDecode(uint8_t codec, const uint8_t* d_payload, int64_t k, float* d_out,
                     void* stream) {
  if (codec == kCodecFp16) return HalfDecodeImpl<kCodecFp16>(d_payload, k, d_out, AsStream(stream));
  if (codec == kCodecBf16) return HalfDecodeImpl<kCodecBf16>(d_payload, k, d_out, AsStream(stream));
  return Fail(cudaErrorInvalidValue, "HalfDecode: codec is neither fp16 nor bf16");
}

size_t QsgdScratchBytes() { return sizeof(QsgdRecords); }

GpuStatus QsgdEncode(const float* d_values, int64_t k, uint32_t s, uint32_t bucket,
                     uint64_t seed, uint8_t* d_payload, int64_t payload_bytes,
                     void* d_scratch, size_t scratch_bytes, void* stream,
                     QsgdEncodeResult* result) {
  cudaStream_t st = AsStream(stream);
  result->first_bad = k;
  result->bad_value = 0.0f;
  const int w = qsgd::CodeBits(s);
  const int64_t nb = CeilDiv(k, bucket);
  const int64_t code_bytes = CeilDiv(k * w, 8);
  if (payload_bytes != qsgd::kFixedBytes + 4 * nb + code_bytes) {
    return Fail(cudaErrorInvalidValue, "qsgd encode: payload_bytes does not match K, s, bucket");
  }
  if (scratch_bytes < sizeof(QsgdRecords)) {
    return Fail(cudaErrorInvalidValue, "qsgd scratch is smaller than QsgdScratchBytes()");
  }
  if (reinterpret_cast<uintptr_t>(d_payload) % 4 != 0) {
    return Fail(cudaErrorInvalidValue, "qsgd encode: the payload must be 4-byte aligned");
  }
  QsgdRecords* rec = static_cast<QsgdRecords*>(d_scratch);
  uint8_t* scales = d_payload + qsgd::kFixedBytes;
  Prefix fixed;
  fixed.n = static_cast<int>(qsgd::kFixedBytes);
  WriteHeader(fixed.bytes, kCodecQsgd, static_cast<uint64_t>(k));
  PutU32(fixed.bytes + 16, s);
  PutU32(fixed.bytes + 20, bucket);
  DR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(rec, 0xff, sizeof(QsgdRecords), st),
                          "clearing the error records");
  if (nb > 0) {
    DR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(scales, 0, 4 * nb, st), "clearing the scales");
  }
  const int64_t b_eff = bucket < k ? static_cast<int64_t>(bucket) : k;
  const int64_t spb = b_eff > 0 ? CeilDiv(b_eff, kSliceElems) : 1;
  const int64_t items = nb * spb;
  int grid = 0;
  DR_CUDA_RETURN_IF_ERROR(
      GridSize(QsgdBucketMaxKernel, CeilDiv(items, kThreads / kWarp), &grid),
      "sizing the bucket-max grid");
  QsgdBucketMaxKernel<<<grid, kThreads, 0, st>>>(
      d_values, k, bucket, spb, items, fixed, d_payload,
      reinterpret_cast<unsigned int*>(scales), &rec->first_bad_value);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching QsgdBucketMaxKernel");
  if (k > 0) {
    DR_CUDA_RETURN_IF_ERROR(
        GridSize(QsgdPackKernel, CeilDiv(CeilDiv(k, kGroup), kThreads), &grid),
        "sizing the pack grid");
    QsgdPackKernel<<<grid, kThreads, 0, st>>>(d_values, k, bucket, s, w, qsgd::SeedMix(seed),
                                              scales, scales + 4 * nb);
    DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching QsgdPackKernel");
  }
  unsigned long long bad = 0;
  DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&bad, &rec->first_bad_value, sizeof(bad),
                                          cudaMemcpyDeviceToHost, st),
                          "copying the error record to the host");
  DR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st), "running the qsgd encoder");
  if (bad < static_cast<unsigned long long>(k)) {
    float x = 0.0f;
    DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&x, d_values + bad, sizeof(x),
                                            cudaMemcpyDeviceToHost, st),
                            "copying the bad value to the host");
    DR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st), "copying the bad value");
    result->first_bad = static_cast<int64_t>(bad);
    result->bad_value = x;
  }
  return Ok();
}

GpuStatus QsgdDecode(const uint8_t* d_payload, int64_t payload_bytes, int64_t k, uint32_t s,
                     uint32_t bucket, float* d_out, void* d_scratch, size_t scratch_bytes,
                     void* stream, QsgdDecodeResult* result) {
  cudaStream_t st = AsStream(stream);
  const int w = qsgd::CodeBits(s);
  const int64_t nb = CeilDiv(k, bucket);
  const int64_t code_bytes = CeilDiv(k * w, 8);
  result->first_bad_scale = nb;
  result->bad_scale = 0.0f;
  result->last_code_byte = 0;
  result->first_bad_code = k;
  if (payload_bytes != qsgd::kFixedBytes + 4 * nb + code_bytes) {
    return Fail(cudaErrorInvalidValue, "qsgd decode: payload_bytes does not match K, s, bucket");
  }
  if (k == 0) return Ok();
  if (scratch_bytes < sizeof(QsgdRecords)) {
    return Fail(cudaErrorInvalidValue, "qsgd scratch is smaller than QsgdScratchBytes()");
  }
  QsgdRecords* rec = static_cast<QsgdRecords*>(d_scratch);
  const uint8_t* scales = d_payload + qsgd::kFixedBytes;
  const uint8_t* codes = scales + 4 * nb;
  DR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(rec, 0xff, sizeof(QsgdRecords), st),
                          "clearing the error records");
  int grid = 0;
  DR_CUDA_RETURN_IF_ERROR(GridSize(QsgdScaleCheckKernel, CeilDiv(nb, kThreads), &grid),
                          "sizing the scale-check grid");
  QsgdScaleCheckKernel<<<grid, kThreads, 0, st>>>(scales, nb, &rec->first_bad_scale);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching QsgdScaleCheckKernel");
  DR_CUDA_RETURN_IF_ERROR(
      GridSize(QsgdUnpackKernel, CeilDiv(CeilDiv(k, kGroup), kThreads), &grid),
      "sizing the unpack grid");
  QsgdUnpackKernel<<<grid, kThreads, 0, st>>>(scales, codes, k, bucket, s, w, d_out,
                                              &rec->first_bad_code);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching QsgdUnpackKernel");
  QsgdRecords host;
  DR_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(&host, rec, sizeof(host), cudaMemcpyDeviceToHost, st),
      "copying the error records to the host");
  uint8_t last = 0;
  DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&last, codes + code_bytes - 1, 1,
                                          cudaMemcpyDeviceToHost, st),
                          "copying the last code byte to the host");
  DR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st), "running the qsgd decoder");
  result->last_code_byte = last;
  if (host.first_bad_code < static_cast<unsigned long long>(k)) {
    result->first_bad_code = static_cast<int64_t>(host.first_bad_code);
  }
  if (host.first_bad_scale < static_cast<unsigned long long>(nb)) {
    uint8_t bytes[4];
    DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(bytes, scales + 4 * host.first_bad_scale, 4,
                                            cudaMemcpyDeviceToHost, st),
                            "copying the bad scale to the host");
    DR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st), "copying the bad scale");
    result->first_bad_scale = static_cast<int64_t>(host.first_bad_scale);
    result->bad_scale = GetF32(bytes);
  }
  return Ok();
}

size_t PolyfitTableBytes(int64_t num_segs, int64_t num_coefs) {
  return static_cast<size_t>(16 * (num_segs + 1) + 4 * num_coefs);
}

GpuStatus PolyfitUploadTables(const int64_t* start, const int64_t* coff, const uint8_t* coefs,
                              int64_t num_segs, int64_t num_coefs, void* d_tables,
                              size_t table_bytes, void* stream) {
  cudaStream_t st = AsStream(stream);
  if (table_bytes < PolyfitTableBytes(num_segs, num_coefs)) {
    return Fail(cudaErrorInvalidValue, "polyfit tables are smaller than PolyfitTableBytes()");
  }
  char* base = static_cast<char*>(d_tables);
  const size_t n = static_cast<size_t>(8 * (num_segs + 1));
  DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(base, start, n, cudaMemcpyHostToDevice, st),
                          "uploading the segment starts");
  DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(base + n, coff, n, cudaMemcpyHostToDevice, st),
                          "uploading the coefficient offsets");
  if (num_coefs > 0) {
    DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(base + 2 * n, coefs, 4 * num_coefs,
                                            cudaMemcpyHostToDevice, st),
                            "uploading the coefficients");
  }
  DR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st), "uploading the polyfit tables");
  return Ok();
}

GpuStatus PolyfitDecode(const void* d_tables, int64_t num_segs, int degree, int64_t k,
                        float* d_out, void* stream) {
  if (num_segs == 0 || k == 0) return Ok();
  cudaStream_t st = AsStream(stream);
  const PolyfitTablesView t = TableLayout(d_tables, num_segs);
  int grid = 0;
  DR_CUDA_RETURN_IF_ERROR(GridSize(PolyfitDecodeKernel, CeilDiv(k, kThreads), &grid),
                          "sizing the polyfit grid");
  PolyfitDecodeKernel<<<grid, kThreads, 0, st>>>(t.start, t.coff, t.coefs, num_segs, degree,
                                                 d_out);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching PolyfitDecodeKernel");
  return Ok();
}

GpuStatus DexpDecode(const dexp::Coefs& pos, const dexp::Coefs& neg, int64_t p_count,
                     int64_t k, float* d_out, void* stream) {
  if (k == 0) return Ok();
  cudaStream_t st = AsStream(stream);
  int grid = 0;
  DR_CUDA_RETURN_IF_ERROR(GridSize(DexpDecodeKernel, CeilDiv(k, kThreads), &grid),
                          "sizing the dexp grid");
  DexpDecodeKernel<<<grid, kThreads, 0, st>>>(pos, neg, p_count, k, d_out);
  DR_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "launching DexpDecodeKernel");
  return Ok();
}

GpuStatus CopyToHost(void* host_dst, const void* d_src, size_t bytes, void* stream) {
  cudaStream_t st = AsStream(stream);
  if (bytes == 0) return Ok();
  DR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_dst, d_src, bytes, cudaMemcpyDeviceToHost, st),
                          "copying to the host");
  DR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st), "copying to the host");
  return Ok();
}

#undef DR_CUDA_RETURN_IF_ERROR

}  // namespace gpu
}  // namespace value
}  // namespace deepreduce
