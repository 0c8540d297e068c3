// CPU kernels of the value codecs: the CPU functors of the OpKernels, which
// are shared with the GPU (value_kernels.h: the generic ones of the codecs
// that follow the family's convention, value_format.h's CodecDefaults:
// deflate, fp16, bf16; and polyfit's, dexp's and qsgd's), and the CPU
// registrations.
// Per-element and per-segment logic comes from the codec headers and is
// shared with CUDA code; this file adds sorting and threading. Every decoder
// checks the header and every length against the buffer it holds before
// reading a section.
#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "kernels/common/cpu_parallel.h"
#include "kernels/common/devices.h"
#include "kernels/common/parse_status_tf.h"
#include "kernels/value/dexp.h"
#include "kernels/value/lsq.h"
#include "kernels/value/polyfit.h"
#include "kernels/value/qsgd.h"
#include "kernels/value/value_args.h"
#include "kernels/value/value_decode.h"
#include "kernels/value/value_format.h"
#include "kernels/value/value_codecs.h"
#include "kernels/value/value_kernels.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/platform/threadpool.h"

namespace deepreduce {
namespace value {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

// Allocates a scratch buffer of `count` objects of T (trivially copyable).
template <typename T>
absl::Status AllocateScratch(OpKernelContext* ctx, int64_t count, Tensor* t, T** ptr) {
  const int64_t bytes = std::max<int64_t>(1, count * static_cast<int64_t>(sizeof(T)));
  absl::Status s = ctx->allocate_temp(tensorflow::DT_UINT8, TensorShape({bytes}), t);
  if (!s.ok()) return s;
  *ptr = reinterpret_cast<T*>(t->flat<uint8_t>().data());
  return absl::OkStatus();
}

// The first position of a NaN/Inf among the k values (k if none).
int64_t FirstNonFinite(OpKernelContext* ctx, const float* v, int64_t k) {
  std::atomic<int64_t> first_bad{k};
  CpuPool(ctx)->ParallelFor(k, 2, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if (!std::isfinite(v[i])) {
        AtomicMin(&first_bad, i);
        return;
      }
    }
  });
  return first_bad.load();
}

// `values` must be a float32 vector; the lossy codecs also require every
// value to be finite (a fit or a quantizer has no faithful image of NaN/Inf).
absl::Status CheckValues(OpKernelContext* ctx, const Tensor& t, const char* codec,
                         bool require_finite) {
  absl::Status st = CheckValuesShape(t, codec);
  if (!st.ok()) return st;
  const int64_t k = t.NumElements();
  if (!require_finite || k == 0) return absl::OkStatus();
  const float* v = t.flat<float>().data();
  const int64_t bad = FirstNonFinite(ctx, v, k);
  if (bad < k) return NonFiniteValue(codec, bad, v[bad]);
  return absl::OkStatus();
}

// ------------------------------------------------------------- sorting --

// Sorts the values in descending signed order (ties by position), writing
// perm (perm[i] = input position of the i-th sorted value) and the sorted
// values y. LSD radix sort over the 32-bit order key, stable, so equal values
// keep position order; 4 passes of 8 bits over (key << 32 | position).
template <typename Tidx>
absl::Status RadixSortDescending(OpKernelContext* ctx, const float* v, int64_t k, Tidx* perm,
                            float* y) {
  Tensor a_t, b_t;
  uint64_t *a, *b;
  absl::Status s = AllocateScratch(ctx, k, &a_t, &a);
  if (!s.ok()) return s;
  s = AllocateScratch(ctx, k, &b_t, &b);
  if (!s.ok()) return s;
  CpuPool(ctx)->ParallelFor(k, 5, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      a[i] = (static_cast<uint64_t>(DescendingKey(v[i])) << 32) | static_cast<uint64_t>(i);
    }
  });
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 32 + 8 * pass;
    int64_t count[257] = {0};
    for (int64_t i = 0; i < k; ++i) ++count[((a[i] >> shift) & 0xff) + 1];
    if (count[((a[0] >> shift) & 0xff) + 1] == k) continue;  // one bucket: no-op pass
    for (int d = 0; d < 256; ++d) count[d + 1] += count[d];
    for (int64_t i = 0; i < k; ++i) b[count[(a[i] >> shift) & 0xff]++] = a[i];
    std::swap(a, b);
  }
  CpuPool(ctx)->ParallelFor(k, 5, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t pos = static_cast<int64_t>(a[i] & 0xffffffffULL);
      perm[i] = static_cast<Tidx>(pos);
      y[i] = v[pos];
    }
  });
  return absl::OkStatus();
}

// ---------------------------------------------------------------- dexp --

// Jacquelin's integral-equation fit of one part (dexp.h's FitPartHost), the
// per-block steps on the thread pool.
absl::Status FitPart(OpKernelContext* ctx, const dexp::Part& part, dexp::Coefs* out) {
  *out = {0.0f, 0.0f, 0.0f, 0.0f};
  if (part.n == 0) return absl::OkStatus();
  const int64_t nb = dexp::NumBlocks(part.n);
  Tensor m_t, in_t, s0_t, lsq_t, sse_t;
  dexp::HostScratch hs;
  absl::Status st = AllocateScratch(ctx, nb, &m_t, &hs.moments);
  if (st.ok()) st = AllocateScratch(ctx, nb, &in_t, &hs.integral);
  if (st.ok()) st = AllocateScratch(ctx, 2 * nb, &s0_t, &hs.s0);
  if (st.ok()) st = AllocateScratch(ctx, nb, &lsq_t, &hs.lsq);
  if (st.ok()) st = AllocateScratch(ctx, nb, &sse_t, &hs.sse);
  if (!st.ok()) return st;
  hs.ss0 = hs.s0 + nb;
  auto pool = CpuPool(ctx);
  dexp::PartFit f;
  dexp::FitPartHost(part, hs, [&](auto&& fn) {
    pool->ParallelFor(nb, dexp::kFitBlock * 200, [&](int64_t begin, int64_t end) {
      BlockedLsq work;
      for (int64_t b = begin; b < end; ++b) fn(b, &work);
    });
  }, &f);
  if (f.error) return DexpMeanTooLarge(f.mean);
  *out = f.out;
  return absl::OkStatus();
}

}  // namespace

// The CPU halves of the value codecs' OpKernels (value_kernels.h).
namespace functor {

template <>
struct HostBytes<CpuDevice> {
  absl::Status operator()(OpKernelContext* /*ctx*/, const uint8_t* src, int64_t /*bytes*/,
                          Tensor* /*holder*/, const uint8_t** host) const {
    *host = src;
    return absl::OkStatus();
  }
};

// ------------------------------------------------------------- generic --

// The codec's host code: the body into a buffer of body_bytes bytes (a bound
// or exact), the payload its prefix (no copy); an element-wise codec's ranges
// on the thread pool, straight into the output.
template <typename Codec>
struct CodecEncode<CpuDevice, Codec> {
  absl::Status operator()(OpKernelContext* ctx, const float* v, int64_t k,
                          const EncodeArgs& args, uint64_t body_bytes) const {
    const char* name = CodecOf<Codec>::kName;
    const int64_t size = kHeaderBytes + static_cast<int64_t>(body_bytes);
    if constexpr (Codec::kValueBytes > 0) {
      Tensor* payload_t = nullptr;
      TF_RETURN_IF_ERROR(ctx->allocate_output(0, TensorShape({size}), &payload_t));
      uint8_t* p = payload_t->flat<uint8_t>().data();
      WriteHeader(p, CodecOf<Codec>::kId, static_cast<uint64_t>(k));
      uint8_t* body = p + kHeaderBytes;
      CpuPool(ctx)->ParallelFor(k, 4, [&](int64_t begin, int64_t end) {
        Codec::EncodeRange(v, begin, end, body);
      });
      return absl::OkStatus();
    } else {
      Tensor buf_t;
      TF_RETURN_IF_ERROR(ctx->allocate_temp(tensorflow::DT_UINT8, TensorShape({size}), &buf_t));
      uint8_t* p = buf_t.flat<uint8_t>().data();
      WriteHeader(p, CodecOf<Codec>::kId, static_cast<uint64_t>(k));
      uint64_t written = 0;
      TF_RETURN_IF_ERROR(
          ToAbsl(Codec::EncodeBody(v, k, args, p + kHeaderBytes, body_bytes, &written)));
      if (written > body_bytes) {
        return absl::InternalError(std::string(name) + ": the encoder wrote " +
                                   std::to_string(written) + " bytes into " +
                                   std::to_string(body_bytes));
      }
      ctx->set_output(0, buf_t.Slice(0, kHeaderBytes + static_cast<int64_t>(written)));
      return absl::OkStatus();
    }
  }
};

template <typename Codec>
struct CodecDecode<CpuDevice, Codec> {
  absl::Status operator()(OpKernelContext* ctx, uint64_t k, const uint8_t* body, uint64_t bytes,
                          float* out) const {
    if constexpr (Codec::kValueBytes > 0) {
      CpuPool(ctx)->ParallelFor(static_cast<int64_t>(k), 4, [&](int64_t begin, int64_t end) {
        Codec::DecodeRange(body, begin, end, out);
      });
      return absl::OkStatus();
    } else {
      return ToAbsl(Codec::DecodeBody(k, body, bytes, out));
    }
  }
};

// ---------------------------------------------------------------- qsgd --

// Elements per work item of the bit packer (value_decode.h).
using core::kQsgdChunk;

template <>
struct QsgdEncode<CpuDevice> {
  absl::Status operator()(OpKernelContext* ctx, const float* v, int64_t k,
                          const QsgdLayout& l, uint64_t seed, uint8_t* out,
                          int64_t* first_bad, float* bad_value) const {
    *first_bad = FirstNonFinite(ctx, v, k);
    if (*first_bad < k) {
      *bad_value = v[*first_bad];
      return absl::OkStatus();
    }
    const uint64_t seed_mix = qsgd::SeedMix(seed);
    WriteHeader(out, kCodecQsgd, static_cast<uint64_t>(k));
    PutU32(out + 16, l.s);
    PutU32(out + 20, l.bucket);
    if (k == 0) return absl::OkStatus();
    uint8_t* scales = out + qsgd::kFixedBytes;
    uint8_t* codes = scales + 4 * l.num_buckets;
    const int64_t nb = static_cast<int64_t>(l.num_buckets);
    const int64_t bucket = l.bucket;
    auto pool = CpuPool(ctx);
    pool->ParallelFor(nb, bucket * 2, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        float m = 0.0f;
        const int64_t hi = std::min(k, (b + 1) * bucket);
        for (int64_t i = b * bucket; i < hi; ++i) m = std::max(m, std::fabs(v[i]));
        PutF32(scales + 4 * b, m);
      }
    });
    const int w = l.w;
    const uint32_t s = l.s;
    const int64_t chunks = (k + kQsgdChunk - 1) / kQsgdChunk;
    pool->ParallelFor(chunks, kQsgdChunk * 30, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        const int64_t lo = c * kQsgdChunk, hi = std::min(k, lo + kQsgdChunk);
        uint8_t* dst = codes + lo * w / 8;
        uint64_t acc = 0;
        int nbits = 0;
        int64_t b = lo / bucket, next = (b + 1) * bucket;  // no division per element
        float scale = GetF32(scales + 4 * b);
        for (int64_t i = lo; i < hi; ++i) {
          if (i == next) {
            scale = GetF32(scales + 4 * ++b);
            next += bucket;
          }
          acc |= static_cast<uint64_t>(qsgd::Encode(v[i], scale, s, seed_mix,
                                                    static_cast<uint64_t>(i)))
                 << nbits;
          nbits += w;
          while (nbits >= 8) {
            *dst++ = static_cast<uint8_t>(acc);
            acc >>= 8;
            nbits -= 8;
          }
        }
        if (nbits > 0) *dst = static_cast<uint8_t>(acc);  // only the last chunk
      }
    });
    return absl::OkStatus();
  }
};

template <>
struct QsgdDecode<CpuDevice> {
  absl::Status operator()(OpKernelContext* ctx, const uint8_t* p, int64_t /*size*/,
                          const QsgdLayout& l, float* out, int64_t* first_bad_code) const {
    TF_RETURN_IF_ERROR(ToAbsl(core::CheckQsgdSections(p, l)));
    const int64_t kk = static_cast<int64_t>(l.k);
    const int64_t chunks = (kk + kQsgdChunk - 1) / kQsgdChunk;
    std::atomic<int64_t> first_bad{kk};
    CpuPool(ctx)->ParallelFor(chunks, kQsgdChunk * 10, [&](int64_t begin, int64_t end) {
      const int64_t bad = core::DecodeQsgdChunks(p, l, begin, end, out);
      if (bad < kk) AtomicMin(&first_bad, bad);
    });
    *first_bad_code = first_bad.load();
    return absl::OkStatus();
  }
};

// ------------------------------------------------------------- polyfit --

template <>
struct PolyfitDecode<CpuDevice> {
  absl::Status operator()(OpKernelContext* ctx, const PolyfitView& v, const int64_t* start,
                          const int64_t* coff, float* out) const {
    // Coefficients as float (the payload may be unaligned: copy once).
    Tensor cf_t;
    float* cf;
    TF_RETURN_IF_ERROR(AllocateScratch(ctx, coff[v.num_segs], &cf_t, &cf));
    std::memcpy(cf, v.coefs, 4 * coff[v.num_segs]);
    const int64_t k = static_cast<int64_t>(v.k);
    CpuPool(ctx)->ParallelFor(k, 4 * (v.degree + 2), [&](int64_t begin, int64_t end) {
      core::DecodePolyfitRange(v, start, coff, cf, begin, end, out);
    });
    return absl::OkStatus();
  }
};

template <>
struct PolyfitGreedy<CpuDevice> {
  absl::Status operator()(OpKernelContext* ctx, const float* y, int64_t k, int64_t p_count,
                          int64_t segs, int degree, int64_t* lens, int64_t* count) const {
    Tensor seg_t;
    polyfit::GreedySeg* seg;
    TF_RETURN_IF_ERROR(AllocateScratch(ctx, std::max<int64_t>(segs, 2), &seg_t, &seg));
    *count = polyfit::GreedyLayout(y, k, p_count, segs, degree, seg, lens);
    return absl::OkStatus();
  }
};

template <>
struct PolyfitFit<CpuDevice> {
  absl::Status operator()(OpKernelContext* ctx, const float* y, int64_t k, int degree,
                          uint8_t seg_kind, const polyfit::FitBlock* blocks, int64_t num_blocks,
                          const polyfit::SegPlan* plan, int64_t num_segs, uint8_t* out,
                          int64_t /*size*/, int64_t* bad_segment, int* code) const {
    Tensor lsq_t;
    GivensLsq* lsq;
    TF_RETURN_IF_ERROR(AllocateScratch(ctx, num_blocks, &lsq_t, &lsq));
    const int cols = degree + 1;
    CpuPool(ctx)->ParallelFor(num_blocks, polyfit::kFitBlock * cols * cols * 6,
                              [&](int64_t begin, int64_t end) {
      BlockedLsq work;
      for (int64_t b = begin; b < end; ++b) {
        polyfit::FitBlockRows(y, blocks[b], degree, &lsq[b], &work);
      }
    });
    polyfit::WriteFixed(out, static_cast<uint64_t>(k), degree, seg_kind, num_segs);
    for (int64_t s = 0; s < num_segs; ++s) {
      const int c = polyfit::FinishSegment(plan[s], s, num_segs, lsq + plan[s].first_block, out);
      if (c != polyfit::kSegOk) {
        *bad_segment = s;
        *code = c;
        break;
      }
    }
    return absl::OkStatus();
  }
};

// ---------------------------------------------------------------- dexp --

template <>
struct DexpDecode<CpuDevice> {
  absl::Status operator()(OpKernelContext* ctx, const dexp::Coefs c[2], int64_t pos, int64_t k,
                          float* out) const {
    const uint64_t p = static_cast<uint64_t>(pos), kk = static_cast<uint64_t>(k);
    CpuPool(ctx)->ParallelFor(k, 60, [&](int64_t begin, int64_t end) {
      core::DecodeDexpRange(c, p, kk, begin, end, out);
    });
    return absl::OkStatus();
  }
};

template <>
struct DexpFit<CpuDevice> {
  absl::Status operator()(OpKernelContext* ctx, const float* y, int64_t k, int64_t p_count,
                          uint8_t* out) const {
    dexp::Coefs coefs[2];
    // One part after the other, each parallel over its blocks.
    for (int i = 0; i < 2; ++i) {
      TF_RETURN_IF_ERROR(FitPart(ctx, dexp::MakePart(y, k, p_count, i), &coefs[i]));
    }
    dexp::WritePayload(out, static_cast<uint64_t>(k), static_cast<uint64_t>(p_count), coefs[0],
                       coefs[1]);
    return absl::OkStatus();
  }
};

// ------------------------------------------------ polyfit / dexp encode --

template <typename Tidx>
struct SortDescending<CpuDevice, Tidx> {
  absl::Status CheckFinite(OpKernelContext* ctx, const float* v, int64_t k,
                           const char* codec) const {
    const int64_t bad = FirstNonFinite(ctx, v, k);
    if (bad < k) return NonFiniteValue(codec, bad, v[bad]);
    return absl::OkStatus();
  }

  absl::Status operator()(OpKernelContext* ctx, const float* v, int64_t k, Tidx* perm, float* y,
                          const char* /*codec*/, int64_t* p_count) const {
    if (k > 0) TF_RETURN_IF_ERROR(RadixSortDescending(ctx, v, k, perm, y));
    *p_count = polyfit::SignSplit(y, k);
    return absl::OkStatus();
  }
};

}  // namespace functor

namespace {

// Registers a codec's generic CPU kernels unless it has its own
// (Codec::kOwnOps), the way REGISTER_KERNEL_BUILDER does.
template <typename Codec>
bool RegisterGenericKernels(const char* camel) {
  if constexpr (Codec::kOwnOps) {
    return false;
  } else {
    const std::string prefix = std::string("DeepReduce>") + camel;
    ::tensorflow::kernel_factory::OpKernelRegistrar(
        ::tensorflow::register_kernel::Name((prefix + "Encode").c_str())
            .Device(::tensorflow::DEVICE_CPU)
            .Build(),
        "deepreduce::value::EncodeOp",
        [](OpKernelConstruction* ctx) -> OpKernel* { return new EncodeOp<CpuDevice, Codec>(ctx); });
    ::tensorflow::kernel_factory::OpKernelRegistrar(
        ::tensorflow::register_kernel::Name((prefix + "Decode").c_str())
            .Device(::tensorflow::DEVICE_CPU)
            .Build(),
        "deepreduce::value::DecodeOp",
        [](OpKernelConstruction* ctx) -> OpKernel* { return new DecodeOp<CpuDevice, Codec>(ctx); });
    return true;
  }
}

#define DR_REGISTER_VALUE_CPU(name, Camel, id, kernels) \
  [[maybe_unused]] const bool value_kernels_##name =    \
      RegisterGenericKernels<name::Codec>(#Camel);
DR_VALUE_PAYLOAD_CODECS(DR_REGISTER_VALUE_CPU)
#undef DR_REGISTER_VALUE_CPU

#define REGISTER_SORTING_CPU(T)                                                      \
  REGISTER_KERNEL_BUILDER(                                                           \
      Name("DeepReduce>PolyfitEncode").Device(::tensorflow::DEVICE_CPU)              \
          .TypeConstraint<T>("out_idx"),                                             \
      PolyfitEncodeOp<CpuDevice, T>);                                                \
  REGISTER_KERNEL_BUILDER(                                                           \
      Name("DeepReduce>DexpEncode").Device(::tensorflow::DEVICE_CPU)                 \
          .TypeConstraint<T>("out_idx"),                                             \
      DexpEncodeOp<CpuDevice, T>);

REGISTER_SORTING_CPU(int32_t);
REGISTER_SORTING_CPU(int64_t);
#undef REGISTER_SORTING_CPU

#define DR_REGISTER_CPU(name, ...) \
  REGISTER_KERNEL_BUILDER(         \
      Name("DeepReduce>" name).Device(::tensorflow::DEVICE_CPU), __VA_ARGS__)

DR_REGISTER_CPU("PolyfitDecode", PolyfitDecodeOp<CpuDevice>);
DR_REGISTER_CPU("DexpDecode", DexpDecodeOp<CpuDevice>);
DR_REGISTER_CPU("QsgdEncode", QsgdEncodeOp<CpuDevice>);
DR_REGISTER_CPU("QsgdDecode", QsgdDecodeOp<CpuDevice>);
#undef DR_REGISTER_CPU

}  // namespace
}  // namespace value
}  // namespace deepreduce
