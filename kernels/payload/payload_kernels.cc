// CPU kernels of the self-checking payload container (PayloadPack,
// PayloadUnpack) and of the bit-packed permutation (PermEncode, PermDecode).
// Formats: kernels/payload/payload_format.h.
//
// All four run sequentially on purpose. The container ops touch a few header
// bytes, one memcpy per section and one CRC32C pass with the CPU's crc32
// instruction (~8 GB/s per core, kernels/common/crc32c_sse42.h); memcpy is
// bound by memory bandwidth, and the other replicas' containers are packed at
// the same time on the other cores. The permutation packer
// writes a single LSB-first bit stream, and its validation marks a bitmap at
// data-dependent positions; both are a few ns per entry, which for the
// K <= ~10^6 entries they see is well under a millisecond.
//
// These are host-side ops: they have no GPU kernels (tests/ops/test_cuda_build.py
// lists them as CPU-only).
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/crc/crc32c.h"
#include "absl/strings/string_view.h"
#include "kernels/common/bit_io.h"
#include "kernels/common/crc32c_sse42.h"
#include "kernels/common/parse_status_tf.h"
#include "kernels/payload/payload_format.h"
#include "kernels/payload/payload_parse.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"

namespace deepreduce {
namespace payload {
namespace {

using ::tensorflow::OpInputList;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::OpOutputList;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::TensorShapeUtils;

inline absl::Status Invalid(const std::string& msg) {
  return absl::InvalidArgumentError(msg);
}

// The SSE4.2 instruction where the CPU has it (TensorFlow's bundled absl
// computes CRC32C in software here: ~1.8 GB/s, the largest cost of packing
// and unpacking a dense 25 MB bucket), else absl.
uint32_t Crc32c(const uint8_t* data, int64_t size) {
  if (Crc32cSse42Available()) return Crc32cSse42(data, static_cast<size_t>(size));
  return static_cast<uint32_t>(absl::ComputeCrc32c(
      absl::string_view(reinterpret_cast<const char*>(data), static_cast<size_t>(size))));
}

absl::Status CheckKind(int64_t kind) {
  if (kind < 1 || kind > 255) {
    return Invalid("kind must lie in [1, 255], got " + std::to_string(kind));
  }
  return absl::OkStatus();
}

absl::Status CheckVector(const Tensor& t, const std::string& name) {
  if (!TensorShapeUtils::IsVector(t.shape())) {
    return Invalid(name + " must be a vector, got shape " + t.shape().DebugString());
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// PayloadPack

class PayloadPackOp : public OpKernel {
 public:
  explicit PayloadPackOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    int64_t kind;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("kind", &kind));
    OP_REQUIRES_OK(ctx, CheckKind(kind));
    kind_ = static_cast<uint8_t>(kind);
  }

  void Compute(OpKernelContext* ctx) override {
    OpInputList sections;
    OP_REQUIRES_OK(ctx, ctx->input_list("sections", &sections));
    const Tensor& meta_t = ctx->input(sections.size());
    OP_REQUIRES_OK(ctx, CheckVector(meta_t, "meta"));
    const auto meta = meta_t.flat<int64_t>();
    const int64_t m = meta.size();
    const int64_t s = sections.size();

    int64_t total = kFixedBytes + VarintSize(m) + VarintSize(s) + kCrcBytes;
    for (int64_t i = 0; i < m; ++i) {
      OP_REQUIRES(ctx, meta(i) >= 0,
                  Invalid("meta[" + std::to_string(i) + "] = " + std::to_string(meta(i)) +
                          " is negative; meta values must lie in [0, 2^63)"));
      total += VarintSize(static_cast<uint64_t>(meta(i)));
    }
    for (int64_t i = 0; i < s; ++i) {
      OP_REQUIRES_OK(ctx, CheckVector(sections[i], "sections[" + std::to_string(i) + "]"));
      const int64_t len = sections[i].NumElements();
      total += VarintSize(static_cast<uint64_t>(len)) + len;
    }

    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({total}), &out_t));
    uint8_t* const begin = out_t->flat<uint8_t>().data();
    uint8_t* p = begin;
    std::memcpy(p, kMagic, sizeof(kMagic));
    p += sizeof(kMagic);
    *p++ = kFormatVersion;
    *p++ = kind_;
    p = PutVarint(p, static_cast<uint64_t>(m));
    for (int64_t i = 0; i < m; ++i) p = PutVarint(p, static_cast<uint64_t>(meta(i)));
    p = PutVarint(p, static_cast<uint64_t>(s));
    for (int64_t i = 0; i < s; ++i) {
      p = PutVarint(p, static_cast<uint64_t>(sections[i].NumElements()));
    }
    for (int64_t i = 0; i < s; ++i) {
      const int64_t len = sections[i].NumElements();
      if (len > 0) std::memcpy(p, sections[i].flat<uint8_t>().data(), len);
      p += len;
    }
    StoreLE32(p, Crc32c(begin, p - begin));
  }

 private:
  uint8_t kind_;
};

// ---------------------------------------------------------------------------
// PayloadUnpack

// The container parse and checks: payload_parse.h (TF-free).

class PayloadUnpackOp : public OpKernel {
 public:
  explicit PayloadUnpackOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    int64_t kind;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("kind", &kind));
    OP_REQUIRES_OK(ctx, CheckKind(kind));
    kind_ = static_cast<uint8_t>(kind);
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_meta", &num_meta_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_sections", &num_sections_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("expected_fields", &expected_fields_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("expected_values", &expected_values_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("field_names", &field_names_));
    OP_REQUIRES(ctx, expected_fields_.size() == expected_values_.size(),
                Invalid("expected_fields has " + std::to_string(expected_fields_.size()) +
                        " entries but expected_values has " +
                        std::to_string(expected_values_.size()) + "; give one value per field"));
    for (size_t i = 0; i < expected_fields_.size(); ++i) {
      OP_REQUIRES(ctx, expected_fields_[i] >= 0 && expected_fields_[i] < num_meta_,
                  Invalid("expected_fields[" + std::to_string(i) + "] = " +
                          std::to_string(expected_fields_[i]) + " is not a meta index in [0, " +
                          "num_meta=" + std::to_string(num_meta_) + ")"));
    }
    OP_REQUIRES(ctx, field_names_.empty() ||
                         static_cast<int64_t>(field_names_.size()) == num_meta_,
                Invalid("field_names must be empty or name all num_meta=" +
                        std::to_string(num_meta_) + " meta fields, got " +
                        std::to_string(field_names_.size()) + " names"));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& payload_t = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckVector(payload_t, "payload"));
    const int64_t size = payload_t.NumElements();
    const uint8_t* begin = payload_t.flat<uint8_t>().data();
    core::Header h;
    OP_REQUIRES_OK(ctx, ToAbsl(core::ParseHeader(begin, size, &h)));
    OP_REQUIRES_OK(ctx, ToAbsl(core::CheckContainer(begin, size, h,
                                                    Crc32c(begin, size - kCrcBytes), kind_,
                                                    num_meta_, num_sections_)));
    Tensor* meta_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({num_meta_}), &meta_t));
    int64_t* meta = meta_t->flat<int64_t>().data();
    core::ReadMeta(begin, size, h, meta);
    OP_REQUIRES_OK(ctx, ToAbsl(core::CheckExpectedFields(meta, expected_fields_,
                                                         expected_values_, field_names_)));

    OpOutputList sections;
    OP_REQUIRES_OK(ctx, ctx->output_list("sections", &sections));
    // Sections are copied: a Tensor::Slice at an arbitrary byte offset would
    // be unaligned, which downstream Eigen kernels may not accept.
    core::ForEachSection(begin, size, h, [&](int64_t i, const uint8_t* bytes, int64_t len) {
      Tensor* out = nullptr;
      absl::Status st = sections.allocate(i, TensorShape({len}), &out);
      if (!st.ok()) {
        ctx->CtxFailure(st);
        return false;
      }
      if (len > 0) std::memcpy(out->flat<uint8_t>().data(), bytes, len);
      return true;
    });
  }

 private:
  uint8_t kind_;
  int64_t num_meta_;
  int64_t num_sections_;
  std::vector<int64_t> expected_fields_;
  std::vector<int64_t> expected_values_;
  std::vector<std::string> field_names_;
};

// ---------------------------------------------------------------------------
// PermEncode / PermDecode

template <typename T>
class PermEncodeOp : public OpKernel {
 public:
  explicit PermEncodeOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& perm_t = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckVector(perm_t, "perm"));
    const int64_t k = perm_t.NumElements();
    const T* perm = perm_t.flat<T>().data();

    Tensor seen_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_BOOL, TensorShape({k}), &seen_t));
    bool* seen = seen_t.flat<bool>().data();
    std::memset(seen, 0, k);
    for (int64_t i = 0; i < k; ++i) {
      const int64_t v = static_cast<int64_t>(perm[i]);
      OP_REQUIRES(ctx, v >= 0 && v < k,
                  Invalid("perm is not a permutation of 0.." + std::to_string(k - 1) +
                          ": perm[" + std::to_string(i) + "] = " + std::to_string(v) +
                          " is outside [0, K=" + std::to_string(k) + ")"));
      if (seen[v]) {
        int64_t first = 0;
        while (static_cast<int64_t>(perm[first]) != v) ++first;
        ctx->CtxFailure(Invalid("perm is not a permutation of 0.." + std::to_string(k - 1) +
                                ": perm[" + std::to_string(i) + "] = " + std::to_string(v) +
                                " repeats perm[" + std::to_string(first) + "]"));
        return;
      }
      seen[v] = true;
    }

    uint64_t bytes = 0;
    OP_REQUIRES(ctx, PermBytes(static_cast<uint64_t>(k), &bytes),
                Invalid("perm has too many entries: K=" + std::to_string(k)));
    const int b = PermBits(static_cast<uint64_t>(k));
    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({static_cast<int64_t>(bytes)}),
                                             &out_t));
    BitWriter w(out_t->flat<uint8_t>().data());
    for (int64_t i = 0; i < k; ++i) w.PutWide(static_cast<uint64_t>(perm[i]), b);
    w.Flush();
  }
};

template <typename T>
class PermDecodeOp : public OpKernel {
 public:
  explicit PermDecodeOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& data_t = ctx->input(0);
    const Tensor& k_t = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckVector(data_t, "data"));
    OP_REQUIRES(ctx, TensorShapeUtils::IsScalar(k_t.shape()),
                Invalid("k must be a scalar, got shape " + k_t.shape().DebugString()));
    const int64_t k = k_t.scalar<int64_t>()();
    const int64_t size = data_t.NumElements();
    // Checked before the output is allocated: k is bounded by the buffer.
    OP_REQUIRES_OK(ctx, ToAbsl(core::CheckPermSize(k, size, sizeof(T) == 4)));
    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({k}), &out_t));
    Tensor seen_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_BOOL, TensorShape({k}), &seen_t));
    OP_REQUIRES_OK(ctx, ToAbsl(core::DecodePerm(data_t.flat<uint8_t>().data(), size, k,
                                                seen_t.flat<bool>().data(),
                                                out_t->flat<T>().data())));
  }
};

REGISTER_KERNEL_BUILDER(Name("DeepReduce>PayloadPack").Device(::tensorflow::DEVICE_CPU),
                        PayloadPackOp);
REGISTER_KERNEL_BUILDER(Name("DeepReduce>PayloadUnpack").Device(::tensorflow::DEVICE_CPU),
                        PayloadUnpackOp);

#define REGISTER_PERM_CPU(T)                                                      \
  REGISTER_KERNEL_BUILDER(                                                        \
      Name("DeepReduce>PermEncode").Device(::tensorflow::DEVICE_CPU)              \
          .TypeConstraint<T>("T"), PermEncodeOp<T>);                              \
  REGISTER_KERNEL_BUILDER(                                                        \
      Name("DeepReduce>PermDecode").Device(::tensorflow::DEVICE_CPU)              \
          .TypeConstraint<T>("out_idx"), PermDecodeOp<T>);

REGISTER_PERM_CPU(int32_t);
REGISTER_PERM_CPU(int64_t);
#undef REGISTER_PERM_CPU

}  // namespace
}  // namespace payload
}  // namespace deepreduce
