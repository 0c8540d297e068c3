// The OpKernels of the value codecs, one class per op for every device
// (kernels/common/devices.h): the generic EncodeOp / DecodeOp of the codecs of
// the family's convention (value_format.h's CodecDefaults: deflate, fp16,
// bf16), and those of the codecs with ops of their own (qsgd, polyfit, dexp).
// Attribute, argument and header checks, payload sizing, the polyfit plan,
// output allocation and every message are this file's (the parsers: value_args.h and the TF-free value_decode.h); the
// passes over the values and the payload bodies are the device's functors
// (value_kernels.cc on the CPU, value_kernels_gpu.cc on the GPU).
//
// Decoders read the payload's header and fixed fields on the host
// (functor::HostBytes: the tensor itself on the CPU, a copy of the prefix on
// the GPU; all of it for the small polyfit and dexp payloads). Checks that
// need the large sections or the values (qsgd scales and codes, NaN/Inf) run
// where the data is, inside the functors; their messages are value_args.h's.
// Host code with TF headers.
#ifndef DEEPREDUCE_KERNELS_VALUE_VALUE_KERNELS_H_
#define DEEPREDUCE_KERNELS_VALUE_VALUE_KERNELS_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "kernels/common/devices.h"
#include "kernels/common/parse_status_tf.h"
#include "kernels/value/dexp.h"
#include "kernels/value/polyfit.h"
#include "kernels/value/qsgd.h"
#include "kernels/value/value_args.h"
#include "kernels/value/value_codecs.h"
#include "kernels/value/value_format.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"

namespace deepreduce {
namespace value {

namespace functor {

// HostBytes<Device>()(ctx, src, bytes, &holder, &host): the `bytes` bytes at
// src (device memory of the op) readable on the host at *host: src itself on
// the CPU, a copy in pinned memory held by `holder` on the GPU.
template <typename Device>
struct HostBytes;

// CodecEncode<Device, Codec>()(ctx, values, k, args, body_bytes): output 0,
// the payload of a codec of the convention: the header and the body (at most
// body_bytes bytes: Codec::BodyBytes). CodecDecode<Device, Codec>()(ctx, k,
// body, bytes, out): the k values of a body that Codec::CheckBody accepted.
template <typename Device, typename Codec>
struct CodecEncode;
template <typename Device, typename Codec>
struct CodecDecode;

// QsgdEncode<Device>()(ctx, values, k, layout, seed, payload, &first_bad,
// &bad_value): the whole payload of layout.size bytes, unless a value is
// NaN/Inf: then first_bad is the first such position (k: none) and
// bad_value its value.
template <typename Device>
struct QsgdEncode;
// QsgdDecode<Device>()(ctx, payload, size, layout, out, &first_bad_code): the
// k values of a payload whose header and fixed fields are checked. Fails
// with QsgdBadScale or QsgdBadPadding (the CPU kernel's order: scales, then
// padding) and sets first_bad_code to the first invalid code (k: none).
template <typename Device>
struct QsgdDecode;

// PolyfitDecode<Device>()(ctx, view, start, coff, out): the k > 0 values of
// a checked payload (view and tables in host memory: PolyfitTables).
template <typename Device>
struct PolyfitDecode;
// DexpDecode<Device>()(ctx, coefs, p_count, k, out).
template <typename Device>
struct DexpDecode;

// SortDescending<Device, Tidx>: the sort of polyfit and dexp encode.
//   CheckFinite(ctx, values, k, codec): the NaN/Inf check the CPU makes
//     before the size check (CheckSortable); on the GPU it is part of the
//     sort, reported by it;
//   operator()(ctx, values, k, perm, y, codec, &p_count): perm and the
//     values sorted in descending order (ties by position) into y (k floats
//     on the device), and p_count, the number of values >= 0.
template <typename Device, typename Tidx>
struct SortDescending;
// PolyfitGreedy<Device>()(ctx, y, k, p_count, segs, degree, lens, &count):
// polyfit's greedy segmentation of the k >= 1 sorted values into at most
// segs segments; lens (host memory, max(segs, 2) entries) gets the lengths.
template <typename Device>
struct PolyfitGreedy;
// PolyfitFit<Device>()(ctx, y, k, degree, seg_kind, blocks, num_blocks,
// plan, num_segs, payload, size, &bad_segment, &code): fits the segments in
// polyfit.h's fixed blocked order (plan and blocks in host memory) and writes
// the whole payload; bad_segment is the first segment whose fit fails
// (num_segs: none) and code polyfit::FinishSegment's code for it.
template <typename Device>
struct PolyfitFit;
// DexpFit<Device>()(ctx, y, k, p_count, payload): fits both sign parts and
// writes the payload, or fails with DexpMeanTooLarge.
template <typename Device>
struct DexpFit;

}  // namespace functor

// The first min(size, cap) bytes of the payload (input 0), readable on the
// host at *host (all of it on the CPU).
template <typename Device>
absl::Status ReadPrefix(tensorflow::OpKernelContext* ctx, int64_t cap,
                        tensorflow::Tensor* holder, const uint8_t** host) {
  const tensorflow::Tensor& payload = ctx->input(0);
  return functor::HostBytes<Device>()(ctx, payload.flat<uint8_t>().data(),
                                      std::min<int64_t>(payload.NumElements(), cap), holder,
                                      host);
}

// ------------------------------------------------------------- generic --
// The OpKernels of a codec of the table whose struct (kernels/value/<name>.h)
// does not set kOwnOps, for every device: attributes (the table's,
// codec_table.h's OpArgsOf, checked against their bounds), seed, argument,
// header and CheckBody checks and the sizes are written once here; the
// device's functors (CodecEncode, CodecDecode) run the codec's host code (CPU)
// or its CUDA launchers (GPU).

template <typename Device, typename Codec>
class EncodeOp : public tensorflow::OpKernel {
 public:
  using Args = OpArgsOf<Codec>;

  explicit EncodeOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    for (int i = 0; i < Args::kNumAttrs; ++i) {
      const IntAttr& attr = Args::kAttrs[i];
      int64_t v;
      OP_REQUIRES_OK(ctx, ctx->GetAttr(attr.name, &v));
      OP_REQUIRES(ctx, v >= attr.low && v <= attr.high,
                  Invalid(std::string(CodecOf<Codec>::kName) + ": " + attr.name +
                          " must lie in [" + std::to_string(attr.low) + ", " +
                          std::to_string(attr.high) + "], got " + std::to_string(v)));
      args_.attr[i] = v;
    }
  }

  // The seed is a host tensor on every device (HostMemory on the GPU).
  void Compute(tensorflow::OpKernelContext* ctx) override {
    const char* name = CodecOf<Codec>::kName;
    const tensorflow::Tensor& values_t = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckValuesShape(values_t, name));
    EncodeArgs args = args_;
    if constexpr (Args::kSeeded) {
      const tensorflow::Tensor& seed_t = ctx->input(1);
      OP_REQUIRES(ctx, tensorflow::TensorShapeUtils::IsScalar(seed_t.shape()),
                  Invalid(std::string(name) + ": seed must be a scalar, got shape " +
                          seed_t.shape().DebugString()));
      args.seed = static_cast<uint64_t>(seed_t.scalar<int64_t>()());
    }
    const int64_t k = values_t.NumElements();
    const float* v = values_t.flat<float>().data();
    // Off the CPU the values are device memory: the body's size may depend
    // on K and the arguments only.
    constexpr bool kOnHost = std::is_same<Device, CpuDevice>::value;
    uint64_t body_bytes = 0;
    OP_REQUIRES_OK(ctx, ToAbsl(Codec::BodyBytes(kOnHost ? v : nullptr, k, args, &body_bytes)));
    OP_REQUIRES_OK(ctx, functor::CodecEncode<Device, Codec>()(ctx, v, k, args, body_bytes));
  }

 private:
  EncodeArgs args_;
};

// The header and the first kCheckBytes of the body are read on the host (a
// copy on the GPU); CheckBody accepts or rejects the payload before the
// output is allocated.
template <typename Device, typename Codec>
class DecodeOp : public tensorflow::OpKernel {
 public:
  explicit DecodeOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(tensorflow::OpKernelContext* ctx) override {
    constexpr uint8_t kId = CodecOf<Codec>::kId;
    const tensorflow::Tensor& payload = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckPayloadShape(payload, kId));
    const int64_t size = payload.NumElements();
    tensorflow::Tensor holder;
    const uint8_t* host = nullptr;
    OP_REQUIRES_OK(ctx, ReadPrefix<Device>(
                            ctx, kHeaderBytes + static_cast<int64_t>(Codec::kCheckBytes),
                            &holder, &host));
    uint64_t k;
    OP_REQUIRES_OK(ctx, ParseHeaderBytes(host, size, kId, &k));
    const uint64_t bytes = static_cast<uint64_t>(size - kHeaderBytes);
    OP_REQUIRES_OK(ctx, ToAbsl(Codec::CheckBody(k, host + kHeaderBytes, bytes)));
    tensorflow::Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            0, tensorflow::TensorShape({static_cast<int64_t>(k)}), &out_t));
    OP_REQUIRES_OK(ctx, functor::CodecDecode<Device, Codec>()(
                            ctx, k, payload.flat<uint8_t>().data() + kHeaderBytes, bytes,
                            out_t->flat<float>().data()));
  }
};

// ---------------------------------------------------------------- qsgd --

// seed is a host tensor on every device (HostMemory on the GPU).
template <typename Device>
class QsgdEncodeOp : public tensorflow::OpKernel {
 public:
  explicit QsgdEncodeOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    int64_t levels, bucket;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("levels", &levels));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("bucket_size", &bucket));
    OP_REQUIRES(ctx, levels >= 1 && levels <= qsgd::kMaxLevels,
                Invalid("levels must lie in [1, 255] (1..8 bits), got " +
                        std::to_string(levels)));
    OP_REQUIRES(ctx, bucket >= 1 && bucket <= qsgd::kMaxBucket,
                Invalid("bucket_size must lie in [1, 2^30], got " + std::to_string(bucket)));
    levels_ = static_cast<uint32_t>(levels);
    bucket_ = static_cast<uint32_t>(bucket);
  }

  // A non-finite value is reported before a bad seed. The values are checked
  // where they are, by the encoder, which runs with seed 0 when the seed is
  // not a scalar; the op then fails.
  void Compute(tensorflow::OpKernelContext* ctx) override {
    const tensorflow::Tensor& values_t = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckValuesShape(values_t, "qsgd"));
    const tensorflow::Tensor& seed_t = ctx->input(1);
    const bool seed_ok = tensorflow::TensorShapeUtils::IsScalar(seed_t.shape());
    const uint64_t seed = seed_ok ? static_cast<uint64_t>(seed_t.scalar<int64_t>()()) : 0;
    const int64_t k = values_t.NumElements();
    const QsgdLayout l = MakeQsgdLayout(k, levels_, bucket_);
    tensorflow::Tensor* payload_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            0, tensorflow::TensorShape({static_cast<int64_t>(l.size)}),
                            &payload_t));
    int64_t first_bad = k;
    float bad_value = 0.0f;
    OP_REQUIRES_OK(ctx, functor::QsgdEncode<Device>()(ctx, values_t.flat<float>().data(), k, l,
                                                      seed, payload_t->flat<uint8_t>().data(),
                                                      &first_bad, &bad_value));
    OP_REQUIRES(ctx, first_bad >= k, NonFiniteValue("qsgd", first_bad, bad_value));
    OP_REQUIRES(ctx, seed_ok,
                Invalid("seed must be a scalar, got shape " + seed_t.shape().DebugString()));
  }

 private:
  uint32_t levels_, bucket_;
};

template <typename Device>
class QsgdDecodeOp : public tensorflow::OpKernel {
 public:
  explicit QsgdDecodeOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(tensorflow::OpKernelContext* ctx) override {
    const tensorflow::Tensor& payload = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckPayloadShape(payload, kCodecQsgd));
    tensorflow::Tensor holder;
    const uint8_t* fixed = nullptr;
    OP_REQUIRES_OK(ctx, ReadPrefix<Device>(ctx, qsgd::kFixedBytes, &holder, &fixed));
    const int64_t size = payload.NumElements();
    uint64_t k;
    OP_REQUIRES_OK(ctx, ParseHeaderBytes(fixed, size, kCodecQsgd, &k));
    QsgdLayout l;
    OP_REQUIRES_OK(ctx, ParseQsgdFixed(fixed, size, k, &l));
    tensorflow::Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            0, tensorflow::TensorShape({static_cast<int64_t>(k)}), &out_t));
    int64_t first_bad_code = static_cast<int64_t>(k);
    OP_REQUIRES_OK(ctx, functor::QsgdDecode<Device>()(ctx, payload.flat<uint8_t>().data(), size,
                                                      l, out_t->flat<float>().data(),
                                                      &first_bad_code));
    OP_REQUIRES(ctx, first_bad_code >= static_cast<int64_t>(k),
                QsgdBadCode(first_bad_code, l.s));
  }
};

// ------------------------------------------------------------- polyfit --

// The payload holds O(segments) bytes, not O(K): it is parsed and checked on
// the host in full before anything is decoded.
template <typename Device>
class PolyfitDecodeOp : public tensorflow::OpKernel {
 public:
  explicit PolyfitDecodeOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("max_values", &max_values_));
  }

  void Compute(tensorflow::OpKernelContext* ctx) override {
    const tensorflow::Tensor& payload = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckPayloadShape(payload, kCodecPolyfit));
    const int64_t size = payload.NumElements();
    tensorflow::Tensor holder;
    const uint8_t* bytes = nullptr;
    OP_REQUIRES_OK(ctx, ReadPrefix<Device>(ctx, size, &holder, &bytes));
    PolyfitView v;
    OP_REQUIRES_OK(ctx, ParsePolyfitBytes(bytes, size, max_values_, &v));
    const int64_t k = static_cast<int64_t>(v.k);
    tensorflow::Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tensorflow::TensorShape({k}), &out_t));
    if (k == 0) return;
    // start[q]: first sorted position of segment q; coef offsets likewise.
    tensorflow::Tensor tables_t;
    OP_REQUIRES_OK(ctx, AllocateHostTemp<Device>(ctx, tensorflow::DT_INT64,
                                                 2 * (v.num_segs + 1), &tables_t));
    int64_t* start = tables_t.flat<int64_t>().data();
    int64_t* coff = start + (v.num_segs + 1);
    PolyfitTables(v, start, coff);
    OP_REQUIRES_OK(ctx, functor::PolyfitDecode<Device>()(ctx, v, start, coff,
                                                         out_t->flat<float>().data()));
  }

 private:
  int64_t max_values_;
};

// ---------------------------------------------------------------- dexp --

template <typename Device>
class DexpDecodeOp : public tensorflow::OpKernel {
 public:
  explicit DexpDecodeOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("max_values", &max_values_));
  }

  void Compute(tensorflow::OpKernelContext* ctx) override {
    const tensorflow::Tensor& payload = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckPayloadShape(payload, kCodecDexp));
    tensorflow::Tensor holder;
    const uint8_t* bytes = nullptr;
    OP_REQUIRES_OK(ctx, ReadPrefix<Device>(ctx, dexp::kPayloadBytes, &holder, &bytes));
    uint64_t k, pos;
    dexp::Coefs c[2];
    OP_REQUIRES_OK(ctx, ParseDexpBytes(bytes, payload.NumElements(), max_values_, &k, &pos, c));
    tensorflow::Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            0, tensorflow::TensorShape({static_cast<int64_t>(k)}), &out_t));
    OP_REQUIRES_OK(ctx, functor::DexpDecode<Device>()(ctx, c, static_cast<int64_t>(pos),
                                                      static_cast<int64_t>(k),
                                                      out_t->flat<float>().data()));
  }

 private:
  int64_t max_values_;
};

// ------------------------------------------------ polyfit / dexp encode --

// The sort shared by both encoders: checks the values (shape; NaN/Inf and
// K in the CPU kernel's order), allocates perm (output 1) and the sorted
// values y_t (on the op's device), sorts, and returns the sign split (the
// number of values >= 0) in *p_count.
template <typename Device, typename Tidx>
absl::Status SortValues(tensorflow::OpKernelContext* ctx, const char* codec,
                        tensorflow::Tensor* y_t, int64_t* p_count) {
  const tensorflow::Tensor& values_t = ctx->input(0);
  TF_RETURN_IF_ERROR(CheckValuesShape(values_t, codec));
  const int64_t k = values_t.NumElements();
  const float* values = values_t.flat<float>().data();
  functor::SortDescending<Device, Tidx> sort;
  TF_RETURN_IF_ERROR(sort.CheckFinite(ctx, values, k, codec));
  TF_RETURN_IF_ERROR(CheckSortable<Tidx>(codec, k));
  tensorflow::Tensor* perm_t = nullptr;
  TF_RETURN_IF_ERROR(ctx->allocate_output(1, tensorflow::TensorShape({k}), &perm_t));
  TF_RETURN_IF_ERROR(ctx->allocate_temp(
      tensorflow::DT_UINT8, tensorflow::TensorShape({std::max<int64_t>(1, 4 * k)}), y_t));
  return sort(ctx, values, k, perm_t->flat<Tidx>().data(),
              reinterpret_cast<float*>(y_t->flat<uint8_t>().data()), codec, p_count);
}

template <typename Device, typename Tidx>
class PolyfitEncodeOp : public tensorflow::OpKernel {
 public:
  explicit PolyfitEncodeOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ParsePolyfitAttrs(ctx, &attrs_));
  }

  void Compute(tensorflow::OpKernelContext* ctx) override {
    tensorflow::Tensor y_t;
    int64_t p_count = 0;
    OP_REQUIRES_OK(ctx, (SortValues<Device, Tidx>(ctx, "polyfit", &y_t, &p_count)));
    const int64_t k = ctx->input(0).NumElements();
    const float* y = reinterpret_cast<const float*>(y_t.flat<uint8_t>().data());
    const int degree = attrs_.degree;

    // Segment lengths on the host: the geometric layout is a function of
    // (K, P, segments); the greedy knots come from the device.
    const int64_t want = polyfit::WantedSegments(k, attrs_.segments);
    tensorflow::Tensor lens_t;
    OP_REQUIRES_OK(ctx, AllocateHostTemp<Device>(ctx, tensorflow::DT_INT64,
                                                 std::max<int64_t>(want, 2), &lens_t));
    int64_t* lens = lens_t.flat<int64_t>().data();
    int64_t num_segs = 0;
    if (k > 0 && attrs_.seg_kind == polyfit::kSegGeometric) {
      num_segs = polyfit::GeometricLayout(k, p_count, want, lens);
    } else if (k > 0) {
      OP_REQUIRES_OK(ctx, functor::PolyfitGreedy<Device>()(ctx, y, k, p_count, want, degree,
                                                           lens, &num_segs));
    }

    // The fixed blocked order of polyfit.h's fit plan (the same on every
    // device), in host memory.
    int64_t num_blocks, num_coefs;
    polyfit::PlanSizes(lens, num_segs, degree, &num_blocks, &num_coefs);
    tensorflow::Tensor blocks_t, plan_t;
    OP_REQUIRES_OK(ctx, AllocateHostTemp<Device>(
                            ctx, tensorflow::DT_UINT8,
                            static_cast<int64_t>(sizeof(polyfit::FitBlock)) * num_blocks,
                            &blocks_t));
    OP_REQUIRES_OK(ctx, AllocateHostTemp<Device>(
                            ctx, tensorflow::DT_UINT8,
                            static_cast<int64_t>(sizeof(polyfit::SegPlan)) * num_segs, &plan_t));
    auto* blocks = reinterpret_cast<polyfit::FitBlock*>(blocks_t.flat<uint8_t>().data());
    auto* plan = reinterpret_cast<polyfit::SegPlan*>(plan_t.flat<uint8_t>().data());
    polyfit::MakePlan(lens, num_segs, degree, blocks, plan);

    const int64_t size = polyfit::PayloadBytes(num_segs, num_coefs);
    tensorflow::Tensor* payload_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tensorflow::TensorShape({size}), &payload_t));
    int64_t bad_segment = num_segs;
    int code = polyfit::kSegOk;
    OP_REQUIRES_OK(ctx, functor::PolyfitFit<Device>()(
                            ctx, y, k, degree, attrs_.seg_kind, blocks, num_blocks, plan,
                            num_segs, payload_t->flat<uint8_t>().data(), size, &bad_segment,
                            &code));
    OP_REQUIRES(ctx, bad_segment >= num_segs, PolyfitSegmentError(bad_segment, code));
  }

 private:
  PolyfitAttrs attrs_;
};

template <typename Device, typename Tidx>
class DexpEncodeOp : public tensorflow::OpKernel {
 public:
  explicit DexpEncodeOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(tensorflow::OpKernelContext* ctx) override {
    tensorflow::Tensor y_t;
    int64_t p_count = 0;
    OP_REQUIRES_OK(ctx, (SortValues<Device, Tidx>(ctx, "dexp", &y_t, &p_count)));
    const int64_t k = ctx->input(0).NumElements();
    tensorflow::Tensor* payload_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tensorflow::TensorShape({dexp::kPayloadBytes}),
                                             &payload_t));
    OP_REQUIRES_OK(ctx, functor::DexpFit<Device>()(
                            ctx, reinterpret_cast<const float*>(y_t.flat<uint8_t>().data()), k,
                            p_count, payload_t->flat<uint8_t>().data()));
  }
};

}  // namespace value
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_VALUE_VALUE_KERNELS_H_
