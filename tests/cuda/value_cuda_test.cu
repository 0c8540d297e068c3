// Standalone test of the CUDA value-codec kernels (kernels/value/
// value_kernels.cu) against a host reference, without TensorFlow.
//
// The reference calls the very functions of halfcast.h, qsgd.h, polyfit.h,
// dexp.h and value_format.h that the CPU OpKernels call, compiled for the
// host, in the simplest sequential form (one bit at a time for qsgd's
// packing); the CUDA kernels call them compiled for the device. Required:
// the same payload bytes (fp16, bf16, qsgd and polyfit encode; polyfit's
// perm and segment lengths too), the same float bits (fp16, bf16, qsgd and
// polyfit decode), dexp decode within 1 float ulp (CUDA's and glibc's double
// exp() may differ in the last bit), dexp encode within the tolerance of
// dexp.h (same perm, header, P and exponents; amplitudes within 4 float
// ulps, or an equally good candidate on a tie), and the same error records
// for non-finite values and corrupted qsgd payloads.
//
// Build and run: bash build_deps/build_cuda_test.sh (runs it if a GPU is
// present). Exit status: 0 all passed, 1 a mismatch, 77 no CUDA device
// (skipped; the host self-check still ran).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/value/bf16.h"
#include "kernels/value/dexp.h"
#include "kernels/value/fp16.h"
#include "kernels/value/halfcast.h"
#include "kernels/value/lsq.h"
#include "kernels/value/polyfit.h"
#include "kernels/value/qsgd.h"
#include "kernels/value/value_format.h"
#include "kernels/value/value_gpu.h"

namespace {

namespace dv = deepreduce::value;
namespace gpu = deepreduce::value::gpu;

constexpr int kSkipped = 77;

struct Failure {
  std::string what;
};

#define CHECK(cond, msg)                                                          \
  do {                                                                            \
    if (!(cond)) throw Failure{std::string(msg) + " [" #cond "] line " +         \
                               std::to_string(__LINE__)};                         \
  } while (0)

void CheckGpu(const gpu::GpuStatus& s) {
  if (!s.ok()) throw Failure{std::string("CUDA error while ") + s.step + ": " +
                             gpu::ErrorString(s.cuda_error)};
}
void CheckCuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Failure{std::string(what) + ": " + cudaGetErrorString(e)};
}

// Device buffer of `bytes` bytes (at least 1), freed on scope exit.
struct DeviceBuffer {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n) {
    CheckCuda(cudaMalloc(&p, n > 0 ? n : 1), "cudaMalloc");
  }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T> T* as() const { return static_cast<T*>(p); }
};

template <typename T>
void Upload(const DeviceBuffer& d, const std::vector<T>& h) {
  if (!h.empty()) {
    CheckCuda(cudaMemcpy(d.p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice),
              "upload");
  }
}
template <typename T>
std::vector<T> Download(const DeviceBuffer& d, size_t n) {
  std::vector<T> h(n);
  if (n > 0) {
    CheckCuda(cudaMemcpy(h.data(), d.p, n * sizeof(T), cudaMemcpyDeviceToHost), "download");
  }
  return h;
}

uint32_t Bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
float FromBits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// First position where two float vectors differ in their bits, or -1.
int64_t FirstBitDiff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (Bits(a[i]) != Bits(b[i])) return static_cast<int64_t>(i);
  }
  return -1;
}

int64_t FirstByteDiff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  }
  return -1;
}

// Random floats: normal values, random bit patterns, NaN/Inf, subnormals.
std::vector<float> RandomFloats(std::mt19937_64& rng, int64_t k, bool finite) {
  std::vector<float> v(k);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < k; ++i) {
    switch (rng() % 4) {
      case 0: v[i] = normal(rng) * 1e-3f; break;
      case 1: v[i] = normal(rng) * 1e4f; break;
      case 2: v[i] = FromBits(static_cast<uint32_t>(rng())); break;
      default: v[i] = FromBits(static_cast<uint32_t>(rng()) | 0x00001000u); break;
    }
    if (finite && !dv::IsFinite(v[i])) v[i] = 0.5f;
  }
  if (!finite && k > 4) {
    v[0] = std::numeric_limits<float>::quiet_NaN();
    v[1] = -std::numeric_limits<float>::infinity();
    v[2] = 65520.0f;
    v[3] = 2.9802322e-8f;
  }
  return v;
}

// ------------------------------------------------------------ fp16/bf16 --

std::vector<uint8_t> RefHalfEncode(uint8_t codec, const std::vector<float>& v) {
  std::vector<uint8_t> out(dv::kHeaderBytes + 2 * v.size());
  dv::WriteHeader(out.data(), codec, v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    dv::PutU16(out.data() + dv::kHeaderBytes + 2 * i,
               codec == dv::kCodecFp16 ? dv::halfcast::FloatToFp16(v[i])
                                       : dv::halfcast::FloatToBf16(v[i]));
  }
  return out;
}

// The launchers of the fp16 and bf16 codecs' structs (fp16.cu, bf16.cu).
deepreduce::gpu_launch::GpuStatus HalfEncode(uint8_t codec, const float* d_v, int64_t k,
                                             uint8_t* d_payload, cudaStream_t stream) {
  const dv::HeaderBytes header = dv::MakeHeader(codec, static_cast<uint64_t>(k));
  const deepreduce::EncodeArgs args;
  const uint64_t body = 2 * static_cast<uint64_t>(k);
  return codec == dv::kCodecFp16
             ? dv::fp16::Codec::EncodeGpu(d_v, k, args, header, d_payload, body, stream)
             : dv::bf16::Codec::EncodeGpu(d_v, k, args, header, d_payload, body, stream);
}

deepreduce::gpu_launch::GpuStatus HalfDecode(uint8_t codec, const uint8_t* d_payload, int64_t k,
                                             float* d_out, cudaStream_t stream) {
  const uint8_t* body = d_payload + dv::kHeaderBytes;
  const uint64_t n = static_cast<uint64_t>(k);
  return codec == dv::kCodecFp16 ? dv::fp16::Codec::DecodeGpu(n, body, 2 * n, d_out, stream)
                                 : dv::bf16::Codec::DecodeGpu(n, body, 2 * n, d_out, stream);
}

void RunHalf(uint8_t codec, int64_t k, cudaStream_t stream) {
  std::mt19937_64 rng(k * 3 + codec);
  const std::vector<float> v = RandomFloats(rng, k, false);
  const std::vector<uint8_t> want = RefHalfEncode(codec, v);
  DeviceBuffer d_v(4 * k), d_p(want.size());
  Upload(d_v, v);
  CheckGpu(HalfEncode(codec, d_v.as<float>(), k, d_p.as<uint8_t>(), stream));
  CheckCuda(cudaStreamSynchronize(stream), "HalfEncode");
  const std::vector<uint8_t> got = Download<uint8_t>(d_p, want.size());
  CHECK(FirstByteDiff(got, want) < 0,
        "encode differs at byte " + std::to_string(FirstByteDiff(got, want)));

  // Decode: every 16-bit pattern, at an odd payload address.
  const int64_t n = 1 << 16;
  std::vector<uint8_t> payload(1 + dv::kHeaderBytes + 2 * n);
  dv::WriteHeader(payload.data() + 1, codec, n);
  std::vector<float> ref(n);
  for (int64_t h = 0; h < n; ++h) {
    dv::PutU16(payload.data() + 1 + dv::kHeaderBytes + 2 * h, static_cast<uint16_t>(h));
    ref[h] = codec == dv::kCodecFp16 ? dv::halfcast::Fp16ToFloat(static_cast<uint16_t>(h))
                                     : dv::halfcast::Bf16ToFloat(static_cast<uint16_t>(h));
  }
  DeviceBuffer d_payload(payload.size()), d_out(4 * n);
  Upload(d_payload, payload);
  CheckGpu(HalfDecode(codec, d_payload.as<uint8_t>() + 1, n, d_out.as<float>(), stream));
  CheckCuda(cudaStreamSynchronize(stream), "HalfDecode");
  const std::vector<float> dec = Download<float>(d_out, n);
  CHECK(FirstBitDiff(dec, ref) < 0,
        "decode differs at pattern " + std::to_string(FirstBitDiff(dec, ref)));
}

// ---------------------------------------------------------------- qsgd --

struct QsgdRef {
  std::vector<uint8_t> payload;
  int64_t first_bad;  // first non-finite value, or k
};

QsgdRef RefQsgdEncode(const std::vector<float>& v, uint32_t s, uint32_t bucket, uint64_t seed) {
  const int64_t k = static_cast<int64_t>(v.size());
  const int w = dv::qsgd::CodeBits(s);
  const int64_t nb = (k + bucket - 1) / bucket;
  const int64_t code_bytes = (k * w + 7) / 8;
  QsgdRef r;
  r.payload.assign(dv::qsgd::kFixedBytes + 4 * nb + code_bytes, 0);
  r.first_bad = k;
  uint8_t* p = r.payload.data();
  dv::WriteHeader(p, dv::kCodecQsgd, k);
  dv::PutU32(p + 16, s);
  dv::PutU32(p + 20, bucket);
  std::vector<float> scale(nb, 0.0f);
  for (int64_t i = 0; i < k; ++i) {
    scale[i / bucket] = std::max(scale[i / bucket], std::fabs(v[i]));
    if (!dv::IsFinite(v[i]) && r.first_bad == k) r.first_bad = i;
  }
  for (int64_t b = 0; b < nb; ++b) dv::PutF32(p + 24 + 4 * b, scale[b]);
  uint8_t* codes = p + 24 + 4 * nb;
  const uint64_t mix = dv::qsgd::SeedMix(seed);
  for (int64_t i = 0; i < k; ++i) {
    const uint32_t code = dv::qsgd::Encode(v[i], scale[i / bucket], s, mix, i);
    for (int j = 0; j < w; ++j) {
      const int64_t bit = i * w + j;
      if ((code >> j) & 1u) codes[bit / 8] |= static_cast<uint8_t>(1u << (bit % 8));
    }
  }
  return r;
}

// Decodes with the reference; returns the first invalid code (or k).
int64_t RefQsgdDecode(const std::vector<uint8_t>& payload, int64_t k, uint32_t s,
                      uint32_t bucket, std::vector<float>* out) {
  const int w = dv::qsgd::CodeBits(s);
  const int64_t nb = (k + bucket - 1) / bucket;
  const uint8_t* codes = payload.data() + 24 + 4 * nb;
  out->assign(k, 0.0f);
  int64_t bad = k;
  for (int64_t i = 0; i < k; ++i) {
    uint32_t code = 0;
    for (int j = 0; j < w; ++j) {
      const int64_t bit = i * w + j;
      code |= static_cast<uint32_t>((codes[bit / 8] >> (bit % 8)) & 1u) << j;
    }
    float x;
    if (!dv::qsgd::Decode(code, dv::GetF32(payload.data() + 24 + 4 * (i / bucket)), s, &x)) {
      if (bad == k) bad = i;
      x = 0.0f;
    }
    (*out)[i] = x;
  }
  return bad;
}

gpu::QsgdDecodeResult GpuQsgdDecode(const std::vector<uint8_t>& payload, int64_t k,
                                    uint32_t s, uint32_t bucket, cudaStream_t stream,
                                    std::vector<float>* out) {
  DeviceBuffer d_p(payload.size()), d_out(4 * k), d_scratch(gpu::QsgdScratchBytes());
  Upload(d_p, payload);
  gpu::QsgdDecodeResult r;
  CheckGpu(gpu::QsgdDecode(d_p.as<uint8_t>(), static_cast<int64_t>(payload.size()), k, s,
                           bucket, d_out.as<float>(), d_scratch.p, d_scratch.bytes, stream,
                           &r));
  *out = Download<float>(d_out, k);
  return r;
}

void RunQsgd(int64_t k, uint32_t s, uint32_t bucket, uint64_t seed, bool finite,
             cudaStream_t stream) {
  std::mt19937_64 rng(k * 7 + s * 131 + bucket);
  std::vector<float> v = RandomFloats(rng, k, finite);
  if (k > 10) v[5] = -0.0f;
  const QsgdRef want = RefQsgdEncode(v, s, bucket, seed);
  DeviceBuffer d_v(4 * k), d_p(want.payload.size()), d_scratch(gpu::QsgdScratchBytes());
  Upload(d_v, v);
  gpu::QsgdEncodeResult er;
  CheckGpu(gpu::QsgdEncode(d_v.as<float>(), k, s, bucket, seed, d_p.as<uint8_t>(),
                           static_cast<int64_t>(want.payload.size()), d_scratch.p,
                           d_scratch.bytes, stream, &er));
  CHECK(er.first_bad == want.first_bad,
        "first non-finite value " + std::to_string(er.first_bad) + ", want " +
            std::to_string(want.first_bad));
  if (want.first_bad < k) {
    CHECK(Bits(er.bad_value) == Bits(v[want.first_bad]), "reported bad value");
    return;  // the payload is unspecified
  }
  const std::vector<uint8_t> got = Download<uint8_t>(d_p, want.payload.size());
  CHECK(FirstByteDiff(got, want.payload) < 0,
        "encode differs at byte " + std::to_string(FirstByteDiff(got, want.payload)));

  std::vector<float> ref, dec;
  CHECK(RefQsgdDecode(want.payload, k, s, bucket, &ref) == k, "reference decode failed");
  const gpu::QsgdDecodeResult r = GpuQsgdDecode(want.payload, k, s, bucket, stream, &dec);
  CHECK(r.first_bad_code == k && r.first_bad_scale == (k + bucket - 1) / bucket,
        "valid payload rejected");
  CHECK(FirstBitDiff(dec, ref) < 0,
        "decode differs at value " + std::to_string(FirstBitDiff(dec, ref)));
}

// Corrupted payloads: the error records the TF kernel turns into messages.
void RunQsgdCorrupt(cudaStream_t stream) {
  const int64_t k = 1001;
  const uint32_t s = 7, bucket = 100;  // w = 4, 11 buckets, 4004 bits: 4 padding bits
  std::mt19937_64 rng(99);
  const std::vector<float> v = RandomFloats(rng, k, true);
  const std::vector<uint8_t> good = RefQsgdEncode(v, s, bucket, 5).payload;
  const int64_t nb = 11, codes = 24 + 4 * nb;
  std::vector<float> dec, ref;
  {  // bad scales at buckets 7 (-1) and 3 (NaN): the first is reported
    std::vector<uint8_t> q = good;
    dv::PutF32(q.data() + 24 + 4 * 7, -1.0f);
    dv::PutF32(q.data() + 24 + 4 * 3, std::numeric_limits<float>::quiet_NaN());
    const gpu::QsgdDecodeResult r = GpuQsgdDecode(q, k, s, bucket, stream, &dec);
    CHECK(r.first_bad_scale == 3 && std::isnan(r.bad_scale), "bad scale record");
  }
  {  // padding bit
    std::vector<uint8_t> q = good;
    q.back() |= 0x80;
    const gpu::QsgdDecodeResult r = GpuQsgdDecode(q, k, s, bucket, stream, &dec);
    CHECK(r.last_code_byte == q.back(), "last code byte");
  }
  {  // invalid codes (w = 4, s = 7: code 8 is a sign on level 0, "-0") at values
     // 21 and 11; 11 is reported
    std::vector<uint8_t> q = good;
    q[codes + 10] = static_cast<uint8_t>((q[codes + 10] & 0x0f) | 0x80);  // value 21
    q[codes + 5] = static_cast<uint8_t>((q[codes + 5] & 0x0f) | 0x80);    // value 11
    const int64_t want = RefQsgdDecode(q, k, s, bucket, &ref);
    const gpu::QsgdDecodeResult r = GpuQsgdDecode(q, k, s, bucket, stream, &dec);
    CHECK(want == 11 && r.first_bad_code == want,
          "first bad code " + std::to_string(r.first_bad_code) + ", want " +
              std::to_string(want));
    CHECK(FirstBitDiff(dec, ref) < 0, "decode of the other values");
  }
}

// ------------------------------------------------------------- polyfit --

void RunPolyfit(int64_t k, int degree, int64_t max_segs, cudaStream_t stream) {
  std::mt19937_64 rng(k * 11 + degree);
  // Random segment lengths summing to k, and random coefficients.
  const int64_t num_segs = std::max<int64_t>(1, std::min<int64_t>(k, 1 + rng() % max_segs));
  std::vector<int64_t> cuts;
  for (int64_t j = 1; j < k && static_cast<int64_t>(cuts.size()) < num_segs - 1; ++j) {
    if (static_cast<int64_t>(rng() % k) < num_segs) cuts.push_back(j);
  }
  std::vector<int64_t> start(1, 0);
  for (int64_t c : cuts) start.push_back(c);
  start.push_back(k);
  const int64_t segs = static_cast<int64_t>(start.size()) - 1;
  std::vector<int64_t> coff(segs + 1, 0);
  for (int64_t q = 0; q < segs; ++q) {
    coff[q + 1] = coff[q] + dv::polyfit::SegmentDegree(degree, start[q + 1] - start[q]) + 1;
  }
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> coefs(coff[segs]);
  for (float& c : coefs) c = normal(rng) * 0.01f;
  std::vector<float> ref(k);
  for (int64_t q = 0; q < segs; ++q) {
    const int64_t len = start[q + 1] - start[q];
    for (int64_t j = 0; j < len; ++j) {
      ref[start[q] + j] = static_cast<float>(dv::polyfit::ChebEval(
          coefs.data() + coff[q], dv::polyfit::SegmentDegree(degree, len),
          dv::polyfit::Abscissa(j, len)));
    }
  }
  // Coefficients as payload bytes, at an odd offset (any alignment).
  std::vector<uint8_t> coef_bytes(1 + 4 * coefs.size());
  for (size_t c = 0; c < coefs.size(); ++c) dv::PutF32(coef_bytes.data() + 1 + 4 * c, coefs[c]);
  const size_t table_bytes = gpu::PolyfitTableBytes(segs, coff[segs]);
  DeviceBuffer d_tables(table_bytes), d_out(4 * k);
  CheckGpu(gpu::PolyfitUploadTables(start.data(), coff.data(), coef_bytes.data() + 1, segs,
                                    coff[segs], d_tables.p, table_bytes, stream));
  CheckGpu(gpu::PolyfitDecode(d_tables.p, segs, degree, k, d_out.as<float>(), stream));
  CheckCuda(cudaStreamSynchronize(stream), "PolyfitDecode");
  const std::vector<float> dec = Download<float>(d_out, k);
  CHECK(FirstBitDiff(dec, ref) < 0,
        "decode differs at value " + std::to_string(FirstBitDiff(dec, ref)));
}

// ---------------------------------------------------------------- dexp --

int64_t UlpDistance(float a, float b) {
  auto key = [](float f) {
    const int64_t u = Bits(f);
    return u & 0x80000000 ? -(u & 0x7fffffff) : u;
  };
  const int64_t d = key(a) - key(b);
  return d < 0 ? -d : d;
}

void RunDexp(int64_t k, int64_t p_count, cudaStream_t stream, int64_t* exact) {
  std::mt19937_64 rng(k * 13 + p_count);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  const dv::dexp::Coefs pos = {unit(rng), -8.0f * unit(rng), 0.1f * unit(rng), -unit(rng)};
  const dv::dexp::Coefs neg = {unit(rng), -20.0f * unit(rng), -0.01f, 0.5f};
  DeviceBuffer d_out(4 * k);
  CheckGpu(gpu::DexpDecode(pos, neg, p_count, k, d_out.as<float>(), stream));
  CheckCuda(cudaStreamSynchronize(stream), "DexpDecode");
  const std::vector<float> dec = Download<float>(d_out, k);
  for (int64_t i = 0; i < k; ++i) {
    const float want = dv::dexp::DecodeAt(pos, neg, p_count, k, i);
    CHECK(UlpDistance(dec[i], want) <= 1 && std::signbit(dec[i]) == std::signbit(want),
          "value " + std::to_string(i) + " differs by more than 1 ulp");
    *exact += Bits(dec[i]) == Bits(want);
  }
}

// ------------------------------------------------- polyfit / dexp encode --
//
// Host reference: the CPU kernel's encoders, sequential. Sorting by
// std::stable_sort on the CPU kernel's key (its LSD radix sort is stable:
// the same order); GeometricLayout, GreedyLayout, MakePlan, FitBlockRows,
// FinishSegment and FitPartHost are the very functions the CPU kernel calls.

// Top-k-like test values: heavy-tailed, both signs, some exact ties and
// zeros (the sort's tie rule and the sign split are exercised).
std::vector<float> EncoderInput(std::mt19937_64& rng, int64_t k) {
  std::exponential_distribution<double> expo(1.0);
  std::vector<float> v(k);
  for (int64_t i = 0; i < k; ++i) {
    const double m = 1.0 + expo(rng);
    v[i] = static_cast<float>((rng() & 1) ? m : -m);
    if (i % 17 == 3) v[i] = std::round(v[i] * 4.0f) / 4.0f;  // ties
    if (i % 101 == 5) v[i] = (i % 2) ? 0.0f : -0.0f;
  }
  return v;
}

struct Sorted {
  std::vector<int64_t> perm;
  std::vector<float> y;
  int64_t p_count;
};

Sorted RefSort(const std::vector<float>& v) {
  Sorted s;
  const int64_t k = static_cast<int64_t>(v.size());
  s.perm.resize(k);
  for (int64_t i = 0; i < k; ++i) s.perm[i] = i;
  std::stable_sort(s.perm.begin(), s.perm.end(), [&](int64_t a, int64_t b) {
    return dv::DescendingKey(v[a]) < dv::DescendingKey(v[b]);
  });
  s.y.resize(k);
  for (int64_t i = 0; i < k; ++i) s.y[i] = v[s.perm[i]];
  s.p_count = dv::polyfit::SignSplit(s.y.data(), k);
  return s;
}

std::vector<int64_t> RefPolyfitLens(const Sorted& s, int degree, uint8_t seg_kind,
                                    int64_t segments) {
  const int64_t k = static_cast<int64_t>(s.y.size());
  const int64_t want = dv::polyfit::WantedSegments(k, segments);
  std::vector<int64_t> lens(std::max<int64_t>(want, 2));
  int64_t n = 0;
  if (k > 0 && seg_kind == dv::polyfit::kSegGeometric) {
    n = dv::polyfit::GeometricLayout(k, s.p_count, want, lens.data());
  } else if (k > 0) {
    std::vector<dv::polyfit::GreedySeg> seg(lens.size());
    n = dv::polyfit::GreedyLayout(s.y.data(), k, s.p_count, want, degree, seg.data(),
                                  lens.data());
  }
  lens.resize(n);
  return lens;
}

struct Plan {
  std::vector<dv::polyfit::FitBlock> blocks;
  std::vector<dv::polyfit::SegPlan> segs;
  int64_t num_coefs = 0;
};

Plan MakePlan(const std::vector<int64_t>& lens, int degree) {
  Plan p;
  int64_t nb = 0;
  dv::polyfit::PlanSizes(lens.data(), lens.size(), degree, &nb, &p.num_coefs);
  p.blocks.resize(nb);
  p.segs.resize(lens.size());
  dv::polyfit::MakePlan(lens.data(), lens.size(), degree, p.blocks.data(), p.segs.data());
  return p;
}

std::vector<uint8_t> RefPolyfitPayload(const Sorted& s, const std::vector<int64_t>& lens,
                                       int degree, uint8_t seg_kind) {
  const Plan plan = MakePlan(lens, degree);
  const int64_t num_segs = static_cast<int64_t>(lens.size());
  std::vector<uint8_t> out(dv::polyfit::PayloadBytes(num_segs, plan.num_coefs));
  dv::polyfit::WriteFixed(out.data(), s.y.size(), degree, seg_kind, num_segs);
  std::vector<dv::GivensLsq> lsq(plan.blocks.size());
  dv::BlockedLsq work;
  for (size_t b = 0; b < plan.blocks.size(); ++b) {
    dv::polyfit::FitBlockRows(s.y.data(), plan.blocks[b], degree, &lsq[b], &work);
  }
  for (int64_t q = 0; q < num_segs; ++q) {
    const int code = dv::polyfit::FinishSegment(plan.segs[q], q, num_segs,
                                                lsq.data() + plan.segs[q].first_block,
                                                out.data());
    CHECK(code == dv::polyfit::kSegOk, "host reference fit failed");
  }
  return out;
}

// The GPU sort; perm64 picks the perm dtype. Returns the result record.
gpu::SortResult GpuSort(const std::vector<float>& v, bool perm64, cudaStream_t stream,
                        const DeviceBuffer& d_y, std::vector<int64_t>* perm) {
  const int64_t k = static_cast<int64_t>(v.size());
  DeviceBuffer d_v(4 * k), d_perm((perm64 ? 8 : 4) * k);
  Upload(d_v, v);
  const size_t bytes = gpu::SortScratchBytes(k);
  DeviceBuffer scratch(bytes);
  gpu::SortResult r;
  CheckGpu(gpu::SortDescending(d_v.as<float>(), k, perm64, d_perm.p, d_y.as<float>(), scratch.p,
                               bytes, stream, &r));
  perm->resize(k);
  if (perm64) {
    *perm = Download<int64_t>(d_perm, k);
  } else {
    const std::vector<int32_t> p32 = Download<int32_t>(d_perm, k);
    for (int64_t i = 0; i < k; ++i) (*perm)[i] = p32[i];
  }
  return r;
}

void RunPolyfitEncode(int64_t k, int degree, uint8_t seg_kind, int64_t segments, bool perm64,
                      cudaStream_t stream) {
  std::mt19937_64 rng(k * 7 + degree * 3 + seg_kind);
  const std::vector<float> v = EncoderInput(rng, k);
  const Sorted ref = RefSort(v);
  const std::vector<int64_t> ref_lens = RefPolyfitLens(ref, degree, seg_kind, segments);
  const std::vector<uint8_t> want = RefPolyfitPayload(ref, ref_lens, degree, seg_kind);

  DeviceBuffer d_y(4 * k);
  std::vector<int64_t> perm;
  const gpu::SortResult r = GpuSort(v, perm64, stream, d_y, &perm);
  CHECK(r.first_bad == k, "no value is non-finite");
  CHECK(r.p_count == ref.p_count, "sign split " + std::to_string(r.p_count) + ", want " +
                                       std::to_string(ref.p_count));
  CHECK(perm == ref.perm, "perm differs from the stable descending order");
  CHECK(FirstBitDiff(Download<float>(d_y, k), ref.y) < 0, "sorted values differ");

  // Segmentation: the geometric one is host code (the CPU's); greedy runs on
  // the device.
  const int64_t want_segs = dv::polyfit::WantedSegments(k, segments);
  std::vector<int64_t> lens(std::max<int64_t>(want_segs, 2));
  int64_t n = 0;
  if (k > 0 && seg_kind == dv::polyfit::kSegGeometric) {
    n = dv::polyfit::GeometricLayout(k, r.p_count, want_segs, lens.data());
  } else if (k > 0) {
    const size_t gb = gpu::PolyfitGreedyScratchBytes(want_segs);
    DeviceBuffer gs(gb);
    CheckGpu(gpu::PolyfitGreedy(d_y.as<float>(), k, r.p_count, want_segs, degree, gs.p, gb,
                                stream, lens.data(), &n));
  }
  lens.resize(n);
  CHECK(lens == ref_lens, "segment lengths differ (" + std::to_string(n) + " segments, want " +
                              std::to_string(ref_lens.size()) + ")");

  const Plan plan = MakePlan(lens, degree);
  const int64_t size = dv::polyfit::PayloadBytes(n, plan.num_coefs);
  const size_t fb = gpu::PolyfitFitScratchBytes(n, plan.blocks.size());
  DeviceBuffer fit_scratch(fb), d_payload(size);
  gpu::PolyfitFitResult fr;
  CheckGpu(gpu::PolyfitFit(d_y.as<float>(), k, degree, seg_kind, plan.blocks.data(),
                           plan.blocks.size(), plan.segs.data(), n, d_payload.as<uint8_t>(),
                           size, fit_scratch.p, fb, stream, &fr));
  CHECK(fr.bad_segment == n, "a segment fit failed on the device");
  const std::vector<uint8_t> got = Download<uint8_t>(d_payload, size);
  CHECK(FirstByteDiff(got, want) < 0,
        "payload differs at byte " + std::to_string(FirstByteDiff(got, want)) + " of " +
            std::to_string(size));
}

void RunSortNonFinite(cudaStream_t stream) {
  std::mt19937_64 rng(5);
  std::vector<float> v = EncoderInput(rng, 1000);
  v[700] = std::numeric_limits<float>::infinity();
  v[321] = std::numeric_limits<float>::quiet_NaN();
  DeviceBuffer d_y(4 * v.size());
  std::vector<int64_t> perm;
  const gpu::SortResult r = GpuSort(v, true, stream, d_y, &perm);
  CHECK(r.first_bad == 321 && std::isnan(r.bad_value), "first non-finite value");
}

std::vector<uint8_t> RefDexpPayload(const Sorted& s) {
  const int64_t k = static_cast<int64_t>(s.y.size());
  dv::dexp::Coefs c[2];
  for (int which = 0; which < 2; ++which) {
    const dv::dexp::Part part = dv::dexp::MakePart(s.y.data(), k, s.p_count, which);
    const int64_t nb = dv::dexp::NumBlocks(part.n);
    std::vector<dv::dexp::BlockMoments> m(nb);
    std::vector<dv::dexp::BlockIntegral> in(nb);
    std::vector<double> s0(nb), ss0(nb);
    std::vector<dv::GivensLsq> lsq(nb);
    std::vector<dv::dexp::BlockSse> sse(nb);
    const dv::dexp::HostScratch hs = {m.data(), in.data(), s0.data(), ss0.data(), lsq.data(),
                                      sse.data()};
    dv::dexp::PartFit f;
    dv::BlockedLsq work;
    dv::dexp::FitPartHost(part, hs, [&](auto&& fn) {
      for (int64_t b = 0; b < nb; ++b) fn(b, &work);
    }, &f);
    CHECK(!f.error, "host reference dexp fit failed");
    c[which] = part.n > 0 ? f.out : dv::dexp::Coefs{0.0f, 0.0f, 0.0f, 0.0f};
  }
  std::vector<uint8_t> out(dv::dexp::kPayloadBytes);
  dv::dexp::WritePayload(out.data(), k, s.p_count, c[0], c[1]);
  return out;
}

// Sum of squared errors of a dexp payload's decoded values against y.
double DexpSse(const std::vector<uint8_t>& payload, const std::vector<float>& y) {
  dv::dexp::Coefs c[2];
  for (int i = 0; i < 2; ++i) {
    c[i] = {dv::GetF32(&payload[24 + 16 * i]), dv::GetF32(&payload[28 + 16 * i]),
            dv::GetF32(&payload[32 + 16 * i]), dv::GetF32(&payload[36 + 16 * i])};
  }
  const int64_t k = static_cast<int64_t>(y.size());
  const int64_t p = static_cast<int64_t>(dv::GetU64(&payload[16]));
  double sse = 0.0;
  for (int64_t i = 0; i < k; ++i) {
    const double d = dv::dexp::DecodeAt(c[0], c[1], p, k, i) - static_cast<double>(y[i]);
    sse += d * d;
  }
  return sse;
}

// dexp encode tolerance (dexp.h): same perm, header, P and exponents; a, b
// within 4 float ulps; or, where the candidate choice differs (a tie within
// exp()'s last-bit difference), a fit as good to 1e-5 relative.
void RunDexpEncode(int64_t k, bool perm64, cudaStream_t stream, int64_t* exact) {
  std::mt19937_64 rng(k * 5 + 1);
  const std::vector<float> v = EncoderInput(rng, k);
  const Sorted ref = RefSort(v);
  const std::vector<uint8_t> want = RefDexpPayload(ref);
  DeviceBuffer d_y(4 * k);
  std::vector<int64_t> perm;
  const gpu::SortResult r = GpuSort(v, perm64, stream, d_y, &perm);
  CHECK(perm == ref.perm && r.p_count == ref.p_count, "sort");
  const size_t bytes = gpu::DexpScratchBytes(k);
  DeviceBuffer scratch(bytes), d_payload(dv::dexp::kPayloadBytes);
  gpu::DexpFitResult fr;
  CheckGpu(gpu::DexpFit(d_y.as<float>(), k, r.p_count, d_payload.as<uint8_t>(), scratch.p,
                        bytes, stream, &fr));
  CHECK(fr.bad_part < 0, "dexp fit failed on the device");
  const std::vector<uint8_t> got = Download<uint8_t>(d_payload, dv::dexp::kPayloadBytes);
  CHECK(std::equal(got.begin(), got.begin() + 24, want.begin()), "header or P differs");
  if (got == want) {
    ++*exact;
    return;
  }
  for (int part = 0; part < 2; ++part) {
    const uint8_t* g = got.data() + 24 + 16 * part;
    const uint8_t* w = want.data() + 24 + 16 * part;
    const bool same_exponents = dv::GetU32(g + 4) == dv::GetU32(w + 4) &&
                                dv::GetU32(g + 12) == dv::GetU32(w + 12);
    if (same_exponents) {
      CHECK(UlpDistance(dv::GetF32(g), dv::GetF32(w)) <= 4 &&
                UlpDistance(dv::GetF32(g + 8), dv::GetF32(w + 8)) <= 4,
            "part " + std::to_string(part) + ": amplitudes differ by more than 4 ulps");
    } else {
      const double eg = DexpSse(got, ref.y), ew = DexpSse(want, ref.y);
      CHECK(eg <= ew * (1.0 + 1e-5) + 1e-30,
            "part " + std::to_string(part) + ": a different and worse candidate");
    }
  }
}

// Host-only sanity check of the reference (runs without a GPU): the
// bit-at-a-time qsgd packer round-trips, the casts round-trip exactly.
bool HostSelfCheck() {
  std::mt19937_64 rng(1);
  const std::vector<float> v = RandomFloats(rng, 777, true);
  const QsgdRef r = RefQsgdEncode(v, 7, 50, 3);
  std::vector<float> dec;
  if (RefQsgdDecode(r.payload, 777, 7, 50, &dec) != 777) return false;
  for (int64_t i = 0; i < 777; ++i) {
    const float scale = dv::GetF32(r.payload.data() + 24 + 4 * (i / 50));
    if (std::fabs(dec[i] - v[i]) > scale / 7 * 1.0001f) return false;
  }
  {  // the host encoder reference fits a sorted smooth curve closely
    std::vector<float> w(5000);
    for (int64_t i = 0; i < 5000; ++i) {
      const double x = (i - 2500) / 2500.0;
      w[i] = static_cast<float>(-(x + 0.3 * x * x * x));
    }
    const Sorted s = RefSort(w);
    for (uint8_t kind : {dv::polyfit::kSegGreedy, dv::polyfit::kSegGeometric}) {
      const std::vector<int64_t> lens = RefPolyfitLens(s, 5, kind, 0);
      const std::vector<uint8_t> p = RefPolyfitPayload(s, lens, 5, kind);
      int64_t start = 0, coef = 0;
      const uint8_t* coefs = p.data() + 24 + 4 * lens.size();
      for (int64_t len : lens) {
        const int deg = dv::polyfit::SegmentDegree(5, len);
        float c[16];
        for (int j = 0; j <= deg; ++j) c[j] = dv::GetF32(coefs + 4 * (coef + j));
        for (int64_t j = 0; j < len; ++j) {
          const double d = dv::polyfit::ChebEval(c, deg, dv::polyfit::Abscissa(j, len));
          if (std::fabs(d - s.y[start + j]) > 1e-5) return false;
        }
        start += len;
        coef += deg + 1;
      }
    }
  }
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = dv::halfcast::Fp16ToFloat(static_cast<uint16_t>(h));
    if (dv::IsFinite(f) && dv::halfcast::FloatToFp16(f) != h) return false;
  }
  return true;
}

}  // namespace

int main() {
  if (!HostSelfCheck()) {
    std::printf("FAIL host reference self-check\n");
    return 1;
  }
  std::printf("PASS host reference self-check\n");

  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("SKIP: no CUDA device available (cudaGetDeviceCount: %s); the CUDA "
                "kernels were compiled but not run\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return kSkipped;
  }
  cudaStream_t stream;
  if (cudaStreamCreate(&stream) != cudaSuccess) {
    std::printf("FAIL could not create a CUDA stream\n");
    return 1;
  }
  int failed = 0, passed = 0;
  auto report = [&](const std::string& name, auto&& fn) {
    try {
      fn();
      ++passed;
      std::printf("PASS %s\n", name.c_str());
    } catch (const Failure& f) {
      ++failed;
      std::printf("FAIL %s: %s\n", name.c_str(), f.what.c_str());
    }
    std::fflush(stdout);
  };
  const int64_t sizes[] = {0, 1, 7, 8, 9, 1000, 100003, 1000000};
  for (uint8_t codec : {dv::kCodecFp16, dv::kCodecBf16}) {
    for (int64_t k : sizes) {
      report(std::string(dv::CodecName(codec)) + " K=" + std::to_string(k),
             [&] { RunHalf(codec, k, stream); });
    }
  }
  for (int64_t k : sizes) {
    for (uint32_t s : {1u, 3u, 7u, 127u, 255u}) {
      for (uint32_t bucket : {1u, 7u, 512u, 10000u, 1u << 30}) {
        if (bucket == 1 && k > 100003) continue;
        report("qsgd K=" + std::to_string(k) + " s=" + std::to_string(s) +
                   " bucket=" + std::to_string(bucket),
               [&] { RunQsgd(k, s, bucket, 0x8000000000000000ULL + k, true, stream); });
      }
    }
  }
  report("qsgd non-finite values", [&] { RunQsgd(100003, 127, 512, 1, false, stream); });
  report("qsgd corrupted payloads", [&] { RunQsgdCorrupt(stream); });
  for (int64_t k : {1, 2, 7, 1000, 100003, 1000000}) {
    for (int degree : {0, 1, 5, 15}) {
      for (int64_t max_segs : {1, 16, 5000}) {
        report("polyfit K=" + std::to_string(k) + " degree=" + std::to_string(degree) +
                   " segments<=" + std::to_string(max_segs),
               [&] { RunPolyfit(k, degree, max_segs, stream); });
      }
    }
  }
  int64_t exact = 0, total = 0;
  for (int64_t k : {0, 1, 2, 1000, 1000000}) {
    for (int64_t p : {int64_t{0}, k / 3, k}) {
      report("dexp K=" + std::to_string(k) + " P=" + std::to_string(p),
             [&] { RunDexp(k, p, stream, &exact); });
      total += k;
    }
  }
  std::printf("dexp: %lld of %lld values bit-identical to the host (the rest within 1 ulp)\n",
              static_cast<long long>(exact), static_cast<long long>(total));
  report("sort: first non-finite value", [&] { RunSortNonFinite(stream); });
  for (int64_t k : {0, 1, 7, 1000, 250000}) {
    for (uint8_t seg_kind : {dv::polyfit::kSegGreedy, dv::polyfit::kSegGeometric}) {
      for (int degree : {0, 1, 5}) {
        for (int64_t segments : {0, 40}) {
          const bool perm64 = (k + degree) % 2 == 0;
          report("polyfit encode K=" + std::to_string(k) + " " +
                     (seg_kind == dv::polyfit::kSegGreedy ? "greedy" : "geometric") +
                     " degree=" + std::to_string(degree) + " segments=" +
                     std::to_string(segments) + (perm64 ? " int64" : " int32"),
                 [&] { RunPolyfitEncode(k, degree, seg_kind, segments, perm64, stream); });
        }
      }
    }
  }
  int64_t dexp_exact = 0, dexp_runs = 0;
  for (int64_t k : {0, 1, 7, 1000, 250000}) {
    for (bool perm64 : {false, true}) {
      report("dexp encode K=" + std::to_string(k) + (perm64 ? " int64" : " int32"),
             [&] { RunDexpEncode(k, perm64, stream, &dexp_exact); });
      ++dexp_runs;
    }
  }
  std::printf("dexp encode: %lld of %lld payloads byte-identical to the host\n",
              static_cast<long long>(dexp_exact), static_cast<long long>(dexp_runs));
  cudaStreamDestroy(stream);
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
