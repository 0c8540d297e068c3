// TensorFlow-free parsing of the payload container and decoding of the
// bit-packed permutation (formats: payload_format.h): the code the CPU
// kernels (payload_kernels.cc) run, also compiled without TF by the fuzz
// harness (kernels/fuzz/). Every function returns ParseStatus with the text
// of the kernels' InvalidArgumentError; outputs go to caller-provided
// buffers whose sizes the parse returned first.
#ifndef DEEPREDUCE_KERNELS_PAYLOAD_PAYLOAD_PARSE_H_
#define DEEPREDUCE_KERNELS_PAYLOAD_PAYLOAD_PARSE_H_

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/common/bit_io.h"
#include "kernels/common/parse_status.h"
#include "kernels/common/varint.h"
#include "kernels/payload/payload_format.h"

namespace deepreduce {
namespace payload {
namespace core {

inline ParseStatus Invalid(const std::string& msg) { return ParseStatus::Invalid(msg); }

inline std::string Prefix(int64_t size) {
  return "payload (" + std::to_string(size) + " bytes): ";
}

inline std::string Hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

// What the header says, located in the payload; every offset and length has
// been checked against the payload's size.
struct Header {
  uint8_t version;
  uint8_t kind;
  uint64_t num_meta;
  int64_t meta_at;  // offset of the first meta varint
  uint64_t num_sections;
  int64_t lengths_at;   // offset of the first section-length varint
  int64_t body_at;      // offset of the first section
  uint64_t body_bytes;  // sum of the section lengths
};

// Parses magic, version and the varint header without trusting any count:
// every count is bounded by the bytes left before it is looped over.
inline ParseStatus ParseHeader(const uint8_t* begin, int64_t size, Header* h) {
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
  auto varint = [&](const std::string& what, uint64_t* v) -> ParseStatus {
    const VarintStatus st = ReadVarint(&p, end, v);
    if (st == VarintStatus::kOk) return ParseStatus();
    if (st == VarintStatus::kTruncated) {
      return Invalid(Prefix(size) + "truncated: it ends inside the header's " + what +
                     "; make sure the whole payload was received");
    }
    return Invalid(Prefix(size) + "malformed header varint (" + what + "): " +
                   VarintStatusText(st) + "; the payload is corrupted or was not written "
                   "by deepreduce_tf (a foreign payload)");
  };
  DR_RETURN_IF_PARSE_ERROR(varint("meta count M", &h->num_meta));
  // Each varint takes at least one byte.
  if (h->num_meta > static_cast<uint64_t>(end - p)) {
    return Invalid(Prefix(size) + "header claims M=" + std::to_string(h->num_meta) +
                   " meta fields, more than its remaining " + std::to_string(end - p) +
                   " bytes can hold; the payload is truncated, corrupted or foreign");
  }
  h->meta_at = p - begin;
  for (uint64_t i = 0; i < h->num_meta; ++i) {
    uint64_t unused;
    DR_RETURN_IF_PARSE_ERROR(varint("meta value " + std::to_string(i), &unused));
  }
  DR_RETURN_IF_PARSE_ERROR(varint("section count S", &h->num_sections));
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
    DR_RETURN_IF_PARSE_ERROR(varint("length of section " + std::to_string(i), &len));
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
  return ParseStatus();
}

// After ParseHeader: the stored CRC32C against `computed`, the CRC32C of
// every byte before the trailer (the caller's: the kernel uses absl's
// hardware CRC, the fuzz harness kernels/common/crc32c.h), then the kind and
// the counts the receiver expects. The structure is consistent; the checksum
// now tells corruption from a payload that is intact but of another kind or
// layout.
inline ParseStatus CheckContainer(const uint8_t* begin, int64_t size, const Header& h,
                                  uint32_t computed, uint8_t kind, int64_t num_meta,
                                  int64_t num_sections) {
  const uint32_t stored = LoadLE32(begin + size - kCrcBytes);
  if (stored != computed) {
    return Invalid(Prefix(size) + "CRC32C mismatch (stored " + Hex32(stored) + ", computed " +
                   Hex32(computed) + "): the payload was corrupted in transit");
  }
  if (h.kind != kind) {
    return Invalid(Prefix(size) + "is of kind " + std::to_string(h.kind) +
                   ", expected kind " + std::to_string(kind) +
                   ": a foreign payload (written for another purpose); unpack it "
                   "with the kind it was packed with");
  }
  if (!(h.num_meta == static_cast<uint64_t>(num_meta) &&
        h.num_sections == static_cast<uint64_t>(num_sections))) {
    return Invalid(Prefix(size) + "holds " + std::to_string(h.num_meta) +
                   " meta fields and " + std::to_string(h.num_sections) +
                   " sections, expected " + std::to_string(num_meta) + " and " +
                   std::to_string(num_sections) +
                   ": a foreign payload (written by another codec or compressor "
                   "layout); unpack it with the counts it was packed with");
  }
  return ParseStatus();
}

// Second pass over a checked header: the h.num_meta meta values into meta.
inline void ReadMeta(const uint8_t* begin, int64_t size, const Header& h, int64_t* meta) {
  const uint8_t* const end = begin + size - kCrcBytes;
  const uint8_t* p = begin + h.meta_at;
  for (uint64_t i = 0; i < h.num_meta; ++i) {
    uint64_t v = 0;
    ReadVarint(&p, end, &v);
    meta[i] = static_cast<int64_t>(v);
  }
}

// The meta values the receiver expects (expected_fields[i] holds
// expected_values[i]; field_names, if not empty, names every field).
inline ParseStatus CheckExpectedFields(const int64_t* meta,
                                       const std::vector<int64_t>& expected_fields,
                                       const std::vector<int64_t>& expected_values,
                                       const std::vector<std::string>& field_names) {
  for (size_t i = 0; i < expected_fields.size(); ++i) {
    const int64_t f = expected_fields[i];
    if (meta[f] == expected_values[i]) continue;
    const std::string field = field_names.empty() ? std::to_string(f) : field_names[f];
    return Invalid("payload field '" + field + "' is " + std::to_string(meta[f]) +
                   ", expected " + std::to_string(expected_values[i]) +
                   ": the payload was written by a differently configured compressor");
  }
  return ParseStatus();
}

// Second pass over a checked header: calls fn(i, bytes, length) for every
// section in order; fn returns false to stop.
template <typename Fn>
inline void ForEachSection(const uint8_t* begin, int64_t size, const Header& h, Fn fn) {
  const uint8_t* const end = begin + size - kCrcBytes;
  const uint8_t* p = begin + h.lengths_at;
  const uint8_t* body = begin + h.body_at;
  for (uint64_t i = 0; i < h.num_sections; ++i) {
    uint64_t len = 0;
    ReadVarint(&p, end, &len);
    if (!fn(static_cast<int64_t>(i), body, static_cast<int64_t>(len))) return;
    body += len;
  }
}

// ---------------------------------------------------------------------------
// Permutation

// k against the data's `size` bytes, before the k outputs are allocated:
// k >= 0, it fits out_idx (int32_out: out_idx is int32), and the data holds
// exactly the bytes k entries pack into (so k is bounded by the buffer).
inline ParseStatus CheckPermSize(int64_t k, int64_t size, bool int32_out) {
  if (k < 0) return Invalid("k must be >= 0, got " + std::to_string(k));
  // Values are < k: out_idx=int32 holds them iff k <= 2^31.
  if (int32_out && k > (int64_t{1} << 31)) {
    return Invalid("k = " + std::to_string(k) + " > 2^31: its permutation does not "
                   "fit out_idx=int32; decode with out_idx=tf.int64");
  }
  uint64_t want = 0;
  const bool fits = PermBytes(static_cast<uint64_t>(k), &want);
  if (!(fits && want == static_cast<uint64_t>(size))) {
    return Invalid("not a valid permutation: data holds " + std::to_string(size) +
                   " bytes, but a permutation of k=" + std::to_string(k) + " entries of " +
                   std::to_string(PermBits(static_cast<uint64_t>(k))) +
                   " bits packs into exactly " +
                   (fits ? std::to_string(want) : std::string("2^63 or more")) +
                   "; pass the data perm_encode() produced and its k");
  }
  return ParseStatus();
}

// Decodes the k entries of checked data (CheckPermSize) into out, checking
// that they form a permutation of 0..k-1 with zero padding; `seen` is
// scratch of k flags, cleared here.
template <typename T>
inline ParseStatus DecodePerm(const uint8_t* data, int64_t size, int64_t k, bool* seen,
                              T* out) {
  if (k > 0) std::memset(seen, 0, k);
  const int b = PermBits(static_cast<uint64_t>(k));
  BitReader r(data, data + size);
  for (int64_t i = 0; i < k; ++i) {
    uint64_t v = 0;
    // The length was checked: this read succeeds (b = 0 reads nothing).
    r.GetWide(b, &v);
    if (v >= static_cast<uint64_t>(k)) {
      return Invalid("not a valid permutation: entry " + std::to_string(i) + " is " +
                     std::to_string(v) + ", outside [0, k=" + std::to_string(k) +
                     "); the data is corrupted or k is wrong");
    }
    if (seen[v]) {
      int64_t first = 0;
      while (static_cast<uint64_t>(out[first]) != v) ++first;
      return Invalid("not a valid permutation: entry " + std::to_string(i) + " = " +
                     std::to_string(v) + " repeats entry " + std::to_string(first) +
                     "; the data is corrupted or k is wrong");
    }
    seen[v] = true;
    out[i] = static_cast<T>(v);
  }
  r.Refill();
  if (!r.AtPaddedEnd()) {
    return Invalid("not a valid permutation: the padding bits after the last of k=" +
                   std::to_string(k) + " entries are not zero; the data is corrupted");
  }
  return ParseStatus();
}

}  // namespace core
}  // namespace payload
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_PAYLOAD_PAYLOAD_PARSE_H_
