// CPU kernels of the self-checking payload container (PayloadPack,
// PayloadUnpack) and of the bit-packed permutation (PermEncode, PermDecode).
// Formats: kernels/payload/payload_format.h.
//
// All four run sequentially on purpose. The container ops touch a few header
// bytes, one memcpy per section and one CRC32C pass; absl's CRC32C uses the
// CPU's crc32/pclmul instructions (several GB/s per core) and memcpy is bound
// by memory bandwidth, so splitting a buffer of at most a few MB across the
// pool would cost more in scheduling than it saves. The permutation packer
// writes a single LSB-first bit stream, and its validation marks a bitmap at
// data-dependent positions; both are a few ns per entry, which for the
// K <= ~10^6 entries they see is well under a millisecond.
//
// These are host-side ops: they have no GPU kernels (tests/test_cuda_build.py
// lists them as CPU-only).
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/crc/crc32c.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "kernels/common/bit_io.h"
#include "kernels/payload/payload_format.h"
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

uint32_t Crc32c(const uint8_t* data, int64_t size) {
  return static_cast<uint32_t>(absl::ComputeCrc32c(
      absl::string_view(reinterpret_cast<const char*>(data), static_cast<size_t>(size))));
}

std::string Hex32(uint32_t v) { return absl::StrFormat("0x%08x", v); }

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

// What the header says, located in the payload; every offset and length has
// been checked against the payload's size.
struct Header {
  uint8_t version;
  uint8_t kind;
  uint64_t num_meta;
  int64_t meta_at;  // offset of the first meta varint
  uint64_t num_sections;
  int64_t lengths_at;  // offset of the first section-length varint
  int64_t body_at;     // offset of the first section
  uint64_t body_bytes;  // sum of the section lengths
};

std::string Prefix(int64_t size) {
  return "payload (" + std::to_string(size) + " bytes): ";
}

// Parses magic, version and the varint header without trusting any count:
// every count is bounded by the bytes left before it is looped over.
absl::Status ParseHeader(const uint8_t* begin, int64_t size, Header* h) {
  const int64_t magic_bytes = size < 4 ? size : 4;
  if (std::memcmp(begin, kMagic, magic_bytes) != 0) {
    return Invalid(Prefix(size) + "not a deepreduce_tf payload: it does not start with the "
                   "magic bytes 'DRPK'; pass the uint8 tensor that payload.pack() produced");
  }
  if (size < kMinPayloadBytes) {
    return Invalid(Prefix(size) + "truncated: too short to hold a header (a payload has at "
                   "least " + std::to_string(kMinPayloadBytes) + " bytes); make sure the "
                   "whole payload was received");
  }
  h->version = begin[4];
  h->kind = begin[5];
  if (h->version == 0) {
    return Invalid(Prefix(size) + "format version 0 does not exist: the payload is "
                   "corrupted");
  }
  if (h->version > kFormatVersion) {
    return Invalid(Prefix(size) + "payload format version " + std::to_string(h->version) +
                   " is newer than this build of deepreduce_tf reads (" +
                   std::to_string(kFormatVersion) +
                   "); upgrade deepreduce_tf on the receiving side");
  }
  // The header never overlaps the CRC trailer: varints are read before it.
  const uint8_t* const end = begin + size - kCrcBytes;
  const uint8_t* p = begin + kFixedBytes;
  auto varint = [&](const std::string& what, uint64_t* v) -> absl::Status {
    const VarintStatus st = ReadVarint(&p, end, v);
    if (st == VarintStatus::kOk) return absl::OkStatus();
    if (st == VarintStatus::kTruncated) {
      return Invalid(Prefix(size) + "truncated: it ends inside the header's " + what +
                     "; make sure the whole payload was received");
    }
    return Invalid(Prefix(size) + "malformed header varint (" + what + "): " +
                   VarintStatusText(st) + "; the payload is corrupted or was not written "
                   "by deepreduce_tf (a foreign payload)");
  };
  TF_RETURN_IF_ERROR(varint("meta count M", &h->num_meta));
  // Each varint takes at least one byte.
  if (h->num_meta > static_cast<uint64_t>(end - p)) {
    return Invalid(Prefix(size) + "header claims M=" + std::to_string(h->num_meta) +
                   " meta fields, more than its remaining " + std::to_string(end - p) +
                   " bytes can hold; the payload is truncated, corrupted or foreign");
  }
  h->meta_at = p - begin;
  for (uint64_t i = 0; i < h->num_meta; ++i) {
    uint64_t unused;
    TF_RETURN_IF_ERROR(varint("meta value " + std::to_string(i), &unused));
  }
  TF_RETURN_IF_ERROR(varint("section count S", &h->num_sections));
  if (h->num_sections > static_cast<uint64_t>(end - p)) {
    return Invalid(Prefix(size) + "header claims S=" + std::to_string(h->num_sections) +
                   " sections, more than its remaining " + std::to_string(end - p) +
                   " bytes can hold; the payload is truncated, corrupted or foreign");
  }
  h->lengths_at = p - begin;
  // Each length is < 2^63 and there are fewer than 2^63 of them, so the sum
  // is checked against the size before it could overflow.
  uint64_t body = 0;
  for (uint64_t i = 0; i < h->num_sections; ++i) {
    uint64_t len;
    TF_RETURN_IF_ERROR(varint("length of section " + std::to_string(i), &len));
    if (len > static_cast<uint64_t>(size)) {
      return Invalid(Prefix(size) + "truncated: section " + std::to_string(i) +
                     " alone claims " + std::to_string(len) +
                     " bytes, more than the whole payload holds; make sure the whole "
                     "payload was received");
    }
    body += len;
    if (body > static_cast<uint64_t>(size)) {
      return Invalid(Prefix(size) + "truncated: its first " + std::to_string(i + 1) +
                     " sections claim " + std::to_string(body) +
                     " bytes, more than the whole payload holds");
    }
  }
  h->body_at = p - begin;
  h->body_bytes = body;
  const uint64_t want = static_cast<uint64_t>(h->body_at) + body + kCrcBytes;
  if (static_cast<uint64_t>(size) < want) {
    return Invalid(Prefix(size) + "truncated: its header (" + std::to_string(h->body_at) +
                   " bytes) and section lengths imply " + std::to_string(want) +
                   " bytes, but only " + std::to_string(size) +
                   " arrived; make sure the whole payload was received");
  }
  if (static_cast<uint64_t>(size) > want) {
    return Invalid(Prefix(size) + "has " + std::to_string(static_cast<uint64_t>(size) - want) +
                   " unexpected trailing bytes after the " + std::to_string(want) +
                   " its header implies; pass exactly one payload");
  }
  return absl::OkStatus();
}

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
    Header h;
    OP_REQUIRES_OK(ctx, ParseHeader(begin, size, &h));
    // The structure is consistent; the checksum now tells corruption from a
    // payload that is intact but of another kind or layout.
    const uint32_t stored = LoadLE32(begin + size - kCrcBytes);
    const uint32_t computed = Crc32c(begin, size - kCrcBytes);
    OP_REQUIRES(ctx, stored == computed,
                Invalid(Prefix(size) + "CRC32C mismatch (stored " + Hex32(stored) +
                        ", computed " + Hex32(computed) +
                        "): the payload was corrupted in transit"));
    OP_REQUIRES(ctx, h.kind == kind_,
                Invalid(Prefix(size) + "is of kind " + std::to_string(h.kind) +
                        ", expected kind " + std::to_string(kind_) +
                        ": a foreign payload (written for another purpose); unpack it "
                        "with the kind it was packed with"));
    OP_REQUIRES(ctx, h.num_meta == static_cast<uint64_t>(num_meta_) &&
                         h.num_sections == static_cast<uint64_t>(num_sections_),
                Invalid(Prefix(size) + "holds " + std::to_string(h.num_meta) +
                        " meta fields and " + std::to_string(h.num_sections) +
                        " sections, expected " + std::to_string(num_meta_) + " and " +
                        std::to_string(num_sections_) +
                        ": a foreign payload (written by another codec or compressor "
                        "layout); unpack it with the counts it was packed with"));

    // Second pass over the checked header: the varints parse as before.
    Tensor* meta_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({num_meta_}), &meta_t));
    auto meta = meta_t->flat<int64_t>();
    const uint8_t* const end = begin + size - kCrcBytes;
    const uint8_t* p = begin + h.meta_at;
    for (int64_t i = 0; i < num_meta_; ++i) {
      uint64_t v = 0;
      ReadVarint(&p, end, &v);
      meta(i) = static_cast<int64_t>(v);
    }
    for (size_t i = 0; i < expected_fields_.size(); ++i) {
      const int64_t f = expected_fields_[i];
      if (meta(f) == expected_values_[i]) continue;
      const std::string field =
          field_names_.empty() ? std::to_string(f) : field_names_[f];
      ctx->CtxFailure(Invalid(
          "payload field '" + field + "' is " + std::to_string(meta(f)) + ", expected " +
          std::to_string(expected_values_[i]) +
          ": the payload was written by a differently configured compressor"));
      return;
    }

    OpOutputList sections;
    OP_REQUIRES_OK(ctx, ctx->output_list("sections", &sections));
    p = begin + h.lengths_at;
    const uint8_t* body = begin + h.body_at;
    // Sections are copied: a Tensor::Slice at an arbitrary byte offset would
    // be unaligned, which downstream Eigen kernels may not accept.
    for (int64_t i = 0; i < num_sections_; ++i) {
      uint64_t len = 0;
      ReadVarint(&p, end, &len);
      Tensor* out = nullptr;
      OP_REQUIRES_OK(ctx, sections.allocate(i, TensorShape({static_cast<int64_t>(len)}), &out));
      if (len > 0) std::memcpy(out->flat<uint8_t>().data(), body, len);
      body += len;
    }
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
    OP_REQUIRES(ctx, k >= 0, Invalid("k must be >= 0, got " + std::to_string(k)));
    // Values are < k: out_idx=int32 holds them iff k <= 2^31.
    OP_REQUIRES(ctx, sizeof(T) == 8 || k <= (int64_t{1} << 31),
                Invalid("k = " + std::to_string(k) + " > 2^31: its permutation does not "
                        "fit out_idx=int32; decode with out_idx=tf.int64"));
    const int64_t size = data_t.NumElements();
    uint64_t want = 0;
    const bool fits = PermBytes(static_cast<uint64_t>(k), &want);
    // Checked before the output is allocated: k is bounded by the buffer.
    OP_REQUIRES(ctx, fits && want == static_cast<uint64_t>(size),
                Invalid("not a valid permutation: data holds " + std::to_string(size) +
                        " bytes, but a permutation of k=" + std::to_string(k) + " entries of " +
                        std::to_string(PermBits(static_cast<uint64_t>(k))) +
                        " bits packs into exactly " +
                        (fits ? std::to_string(want) : std::string("2^63 or more")) +
                        "; pass the data perm_encode() produced and its k"));

    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({k}), &out_t));
    T* out = out_t->flat<T>().data();
    Tensor seen_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_BOOL, TensorShape({k}), &seen_t));
    bool* seen = seen_t.flat<bool>().data();
    std::memset(seen, 0, k);
    const uint8_t* data = data_t.flat<uint8_t>().data();
    const int b = PermBits(static_cast<uint64_t>(k));
    BitReader r(data, data + size);
    for (int64_t i = 0; i < k; ++i) {
      uint64_t v = 0;
      // The length was checked: this read succeeds (b = 0 reads nothing).
      r.GetWide(b, &v);
      OP_REQUIRES(ctx, v < static_cast<uint64_t>(k),
                  Invalid("not a valid permutation: entry " + std::to_string(i) + " is " +
                          std::to_string(v) + ", outside [0, k=" + std::to_string(k) +
                          "); the data is corrupted or k is wrong"));
      if (seen[v]) {
        int64_t first = 0;
        while (static_cast<uint64_t>(out[first]) != v) ++first;
        ctx->CtxFailure(Invalid("not a valid permutation: entry " + std::to_string(i) +
                                " = " + std::to_string(v) + " repeats entry " +
                                std::to_string(first) +
                                "; the data is corrupted or k is wrong"));
        return;
      }
      seen[v] = true;
      out[i] = static_cast<T>(v);
    }
    r.Refill();
    OP_REQUIRES(ctx, r.AtPaddedEnd(),
                Invalid("not a valid permutation: the padding bits after the last of k=" +
                        std::to_string(k) + " entries are not zero; the data is corrupted"));
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
