// Coverage-guided fuzz harness (libFuzzer) of every decoder of received
// bytes: the payload container, the permutation, the four index codecs, the
// Bloom-filter query and the value codecs. It runs the parsers and decoders
// the CPU kernels run (the TF-free headers *_decode.h, payload_parse.h; no
// copy), built without TensorFlow by build_deps/fuzz.sh:
//   clang++-14 -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -I. \
//       kernels/fuzz/decoders_fuzzer.cpp -lz
// (.cpp, not .cc: the op library's builds, setup.py, dev_build_lib.sh and
// BUILD, compile every kernels/**/*.cc, and this file is no part of it.)
//
// Targets: container, container_edit and perm, then one per codec with
// kernels in the codec table (kernels/common/codec_table.h: index codecs,
// then value codecs, each in wire-id order), handled by Fuzz<Camel>(): a
// codec added to the table without one does not build. An index codec's
// Fuzz<Camel>() is generated from the table: FuzzIndexCodec<its struct>(),
// generic for a codec without kernels of its own. DR_FUZZ_LIST=1
// prints the target names in order and exits (fuzz.sh reads them;
// deepreduce_tf/ops/codec_table.py's fuzz_targets() is the same list).
//
// Input (little-endian): byte 0 picks the target (byte 0 % kNumTargets),
// the next bytes are the receiver's parameters, the rest is the payload:
//   0 container       u8 kind, u8 num_meta, u8 num_sections | container
//   1 container_edit  u8 which real container | edits: (u16 offset, u8 xor)*
//   2 perm            u32 k, u8 flags (bit 0: out_idx int32) | packed data
//   3 int32, 4 bitmap, 5 rle, 6 golomb
//                     u8 flags (bit 0: out_idx int32) | index payload
//   7 bloom           u8 h, u32 m, u16 n, u32 seed | filter bytes
//   8 polyfit, 9 dexp u16 max_values | value payload
//   10 qsgd, 11 fp16, 12 bf16, 13 deflate
//                     (none) | value payload
// With DR_FUZZ_TARGET=<number> in the environment, inputs of other targets
// are skipped (fuzz.sh runs one target at a time for per-target numbers).
// tests/ops/test_fuzz_corpus.py reads the same layout.
//
// Oracles (a failure aborts, so libFuzzer keeps the input):
//  * crash, undefined behaviour, leak: the sanitizers; hang: -timeout;
//  * allocation: every output count a parse returns is asserted to be at
//    most a bound known before the decode (the receiver's n or max_values,
//    or 8 outputs per payload byte for the self-sized formats) BEFORE the
//    harness allocates it; -malloc_limit_mb / -rss_limit_mb in fuzz.sh;
//  * silent accept: an accepted lossless payload (container, permutation,
//    int32, bitmap, rle, golomb, fp16, bf16) must re-encode to exactly its
//    bytes (the formats are canonical), an accepted index set must be
//    strictly increasing below n, a Bloom query must match Contains() on
//    every position, and a real container with any byte edited but its
//    original CRC kept (container_edit) must be refused;
//  * polyfit, dexp and qsgd promise finite values: every decoded value
//    must be finite (qsgd's also at most its bucket's scale).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/bloom/bloom.h"
#include "kernels/bloom/bloom_decode.h"
#include "kernels/common/bit_io.h"
#include "kernels/common/codec_table.h"
#include "kernels/common/crc32c.h"
#include "kernels/common/parse_status.h"
#include "kernels/common/varint.h"
#include "kernels/index/golomb.h"
#include "kernels/index/index_codecs.h"
#include "kernels/index/index_decode.h"
#include "kernels/index/index_format.h"
#include "kernels/index/rle.h"
#include "kernels/payload/payload_format.h"
#include "kernels/payload/payload_parse.h"
#include "kernels/value/dexp.h"
#include "kernels/value/qsgd.h"
#include "kernels/value/value_codecs.h"
#include "kernels/value/value_decode.h"
#include "kernels/value/value_format.h"

namespace deepreduce {
namespace fuzz {
namespace {

// Real containers written by the compressors (tests/fuzz_corpus/make_corpus.py).
struct RealContainer {
  uint8_t kind, num_meta, num_sections;
  const uint8_t* bytes;
  size_t size;
};
#include "kernels/fuzz/real_containers.inc"

#define DR_FUZZ_TARGETS(X)                             \
  X(container, Container) X(container_edit, ContainerEdit) X(perm, Perm) \
  DR_INDEX_KERNEL_CODECS(DR_FUZZ_CODEC) DR_VALUE_KERNEL_CODECS(DR_FUZZ_CODEC)
#define DR_FUZZ_CODEC(name, Camel, id, kernels) X(name, Camel)

enum Target {
#define X(name, Camel) k##Camel,
  DR_FUZZ_TARGETS(X)
#undef X
  kNumTargets
};

const char* const kTargetNames[] = {
#define X(name, Camel) #name,
    DR_FUZZ_TARGETS(X)
#undef X
};

// Outputs per payload byte the self-sized formats can reach (a bitmap byte
// holds 8 indices; every other format spends at least one bit per output).
constexpr uint64_t kPerByte = 8;

int g_only_target = -1;
bool g_verbose = false;  // DR_FUZZ_VERBOSE=1: print why each input is refused

// A parse or decode result; prints its message when verbose.
bool Ok(const ParseStatus& s) {
  if (!s.ok() && g_verbose) std::fprintf(stderr, "refused: %s\n", s.message().c_str());
  return s.ok();
}

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "\n*** deepreduce fuzz finding: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// The allocation oracle: `count` outputs are about to be allocated.
void CheckBound(const char* target, uint64_t count, uint64_t bound) {
  if (g_verbose) std::fprintf(stderr, "%s: parse accepted, %llu outputs (bound %llu)\n", target,
                              static_cast<unsigned long long>(count),
                              static_cast<unsigned long long>(bound));
  if (count > bound) {
    Fail(std::string(target) + ": the parse accepted " + std::to_string(count) +
         " outputs, above the bound " + std::to_string(bound) + " known before decoding");
  }
}

void CheckSame(const char* target, const std::vector<uint8_t>& again, const uint8_t* p,
               size_t size) {
  if (again.size() != size || (size > 0 && std::memcmp(again.data(), p, size) != 0)) {
    Fail(std::string(target) + ": an accepted payload of " + std::to_string(size) +
         " bytes does not re-encode to itself (" + std::to_string(again.size()) +
         " bytes): a silent accept of a non-canonical payload");
  }
}

struct Reader {
  const uint8_t* p;
  size_t left;
  bool Take(size_t n, uint64_t* v) {
    if (left < n) return false;
    uint64_t x = 0;
    for (size_t i = 0; i < n; ++i) x |= static_cast<uint64_t>(p[i]) << (8 * i);
    p += n;
    left -= n;
    *v = x;
    return true;
  }
};

// ---------------------------------------------------------------- container --

// Parses like PayloadUnpack and, if accepted, returns the meta values and
// sections; the CRC is the portable one (the kernel uses absl's).
bool UnpackContainer(const uint8_t* p, size_t size, uint8_t kind, int64_t num_meta,
                     int64_t num_sections, std::vector<int64_t>* meta,
                     std::vector<std::vector<uint8_t>>* sections) {
  payload::core::Header h;
  if (!Ok(payload::core::ParseHeader(p, static_cast<int64_t>(size), &h))) return false;
  const uint32_t crc = Crc32cPortable(p, size - payload::kCrcBytes);
  if (!Ok(payload::core::CheckContainer(p, static_cast<int64_t>(size), h, crc, kind, num_meta,
                                     num_sections))) {
    return false;
  }
  CheckBound("container", h.num_meta + h.num_sections, size);
  meta->assign(h.num_meta, 0);
  payload::core::ReadMeta(p, static_cast<int64_t>(size), h, meta->data());
  sections->clear();
  payload::core::ForEachSection(p, static_cast<int64_t>(size), h,
                                [&](int64_t, const uint8_t* b, int64_t len) {
                                  sections->emplace_back(b, b + len);
                                  return true;
                                });
  return true;
}

// The container PayloadPack writes for (kind, meta, sections).
std::vector<uint8_t> PackContainer(uint8_t kind, const std::vector<int64_t>& meta,
                                   const std::vector<std::vector<uint8_t>>& sections) {
  std::vector<uint8_t> out(payload::kMagic, payload::kMagic + 4);
  out.push_back(payload::kFormatVersion);
  out.push_back(kind);
  uint8_t buf[kMaxVarintBytes];
  auto varint = [&](uint64_t v) { out.insert(out.end(), buf, PutVarint(buf, v)); };
  varint(meta.size());
  for (int64_t m : meta) varint(static_cast<uint64_t>(m));
  varint(sections.size());
  for (const auto& s : sections) varint(s.size());
  for (const auto& s : sections) out.insert(out.end(), s.begin(), s.end());
  uint8_t crc[4];
  payload::StoreLE32(crc, Crc32cPortable(out.data(), out.size()));
  out.insert(out.end(), crc, crc + 4);
  return out;
}

void FuzzContainer(Reader r) {
  uint64_t kind, num_meta, num_sections;
  if (!r.Take(1, &kind) || !r.Take(1, &num_meta) || !r.Take(1, &num_sections)) return;
  std::vector<int64_t> meta;
  std::vector<std::vector<uint8_t>> sections;
  if (!UnpackContainer(r.p, r.left, static_cast<uint8_t>(kind), num_meta, num_sections, &meta,
                       &sections)) {
    return;
  }
  for (int64_t m : meta) {
    if (m < 0) Fail("container: a meta value decoded negative");
  }
  CheckSame("container", PackContainer(static_cast<uint8_t>(kind), meta, sections), r.p,
            r.left);
}

void FuzzContainerEdit(Reader r) {
  constexpr size_t kCount = sizeof(kRealContainers) / sizeof(kRealContainers[0]);
  uint64_t which;
  if (!r.Take(1, &which)) return;
  const RealContainer& real = kRealContainers[which % kCount];
  // The original must be accepted (this also checks the portable CRC).
  std::vector<int64_t> meta;
  std::vector<std::vector<uint8_t>> sections;
  if (!UnpackContainer(real.bytes, real.size, real.kind, real.num_meta, real.num_sections,
                       &meta, &sections)) {
    Fail("container_edit: real container " + std::to_string(which % kCount) +
         " is refused unedited");
  }
  std::vector<uint8_t> edited(real.bytes, real.bytes + real.size);
  const size_t editable = real.size - payload::kCrcBytes;  // the CRC stays the original's
  uint64_t offset, mask;
  while (r.Take(2, &offset) && r.Take(1, &mask)) edited[offset % editable] ^= mask;
  if (std::memcmp(edited.data(), real.bytes, real.size) == 0) return;
  if (UnpackContainer(edited.data(), edited.size(), real.kind, real.num_meta,
                      real.num_sections, &meta, &sections)) {
    Fail("container_edit: an edited real container with its original CRC was accepted");
  }
}

// --------------------------------------------------------------------- perm --

void FuzzPerm(Reader r) {
  uint64_t k, flags;
  if (!r.Take(4, &k) || !r.Take(1, &flags)) return;
  const int64_t size = static_cast<int64_t>(r.left);
  if (!Ok(payload::core::CheckPermSize(static_cast<int64_t>(k), size, flags & 1))) return;
  CheckBound("perm", k, kPerByte * r.left + 1);
  std::vector<int64_t> out(k);
  std::unique_ptr<bool[]> seen(new bool[k + 1]);
  if (!Ok(payload::core::DecodePerm(r.p, size, static_cast<int64_t>(k), seen.get(), out.data()))) {
    return;
  }
  std::vector<int64_t> sorted(out);
  std::sort(sorted.begin(), sorted.end());
  for (uint64_t i = 0; i < k; ++i) {
    if (sorted[i] != static_cast<int64_t>(i)) Fail("perm: accepted data is not a bijection");
  }
  std::vector<uint8_t> again(r.left + 8, 0);
  BitWriter w(again.data());
  for (int64_t v : out) w.PutWide(static_cast<uint64_t>(v), payload::PermBits(k));
  w.Flush();
  again.resize(static_cast<size_t>(w.p - again.data()));
  CheckSame("perm", again, r.p, r.left);
}

// -------------------------------------------------------------------- index --

std::vector<uint8_t> IndexHeader(uint8_t codec, uint64_t n, uint64_t k) {
  std::vector<uint8_t> out(3 + 2 * kMaxVarintBytes);
  out.resize(static_cast<size_t>(index::PutCommonHeader(out.data(), codec, n, k) - out.data()));
  return out;
}

// Golomb re-encoded with the payload's block size and Rice parameters.
std::vector<uint8_t> GolombAgain(const index::CommonHeader& h, int log2_block,
                                 const std::vector<uint64_t>& param,
                                 const std::vector<int64_t>& idx) {
  const uint64_t blocks = param.size();
  std::vector<uint64_t> off(blocks + 1, 0);
  for (uint64_t b = 0; b < blocks; ++b) {
    const uint64_t count = index::golomb::BlockCount(h.k, log2_block, b);
    const uint64_t bits = index::golomb::RiceBits(idx.data() + (b << log2_block), count,
                                                  static_cast<int>(param[b]));
    off[b + 1] = off[b] + (bits + 7) / 8;
  }
  const uint64_t s = off[blocks];
  const index::golomb::Layout l = index::golomb::MakeLayout(h.n, h.k, log2_block, s);
  std::vector<uint8_t> out = IndexHeader(index::kCodecGolomb, h.n, h.k);
  out.push_back(static_cast<uint8_t>(log2_block));
  uint8_t buf[kMaxVarintBytes];
  out.insert(out.end(), buf, PutVarint(buf, s));
  const size_t table_at = out.size();
  const uint64_t table_bytes = index::core::GolombTableBytes(l);
  out.resize(table_at + table_bytes + s + 8, 0);
  BitWriter table(out.data() + table_at);
  for (uint64_t b = 0; b < blocks; ++b) {
    table.PutWide(static_cast<uint64_t>(idx[b << log2_block]), l.w_idx);
    table.PutWide(off[b], l.w_off);
    table.Put(param[b], index::golomb::kRiceParamBits);
  }
  table.Flush();
  uint8_t* stream = out.data() + table_at + table_bytes;
  for (uint64_t b = 0; b < blocks; ++b) {
    index::golomb::EncodeBlock(idx.data() + (b << log2_block),
                               index::golomb::BlockCount(h.k, log2_block, b),
                               static_cast<int>(param[b]), stream + off[b]);
  }
  out.resize(table_at + table_bytes + s);
  return out;
}

void FuzzIndex(uint8_t codec, Reader r) {
  const char* name = index::CodecName(codec);
  uint64_t flags;
  if (!r.Take(1, &flags)) return;
  const uint8_t* begin = r.p;
  const uint8_t* end = r.p + r.left;
  const int64_t size = static_cast<int64_t>(r.left);
  index::CommonHeader h;
  int64_t body_at;
  if (!Ok(index::core::ParseHeaderPrefix(begin, size, size, codec, flags & 1, &h, &body_at))) {
    return;
  }
  const uint8_t* body = begin + body_at;
  const uint64_t have = static_cast<uint64_t>(end - body);
  const uint64_t bound = kPerByte * r.left;
  const int64_t n = static_cast<int64_t>(h.n);
  const int64_t k = static_cast<int64_t>(h.k);
  std::vector<int64_t> out;
  std::vector<uint8_t> again = IndexHeader(codec, h.n, h.k);
  if (codec == index::kCodecInt32) {
    if (!Ok(index::core::ParseInt32Body(h, have))) return;
    CheckBound(name, h.k, bound);
    out.resize(k);
    index::core::DecodeInt32Range(body, 0, k, out.data());
    const int64_t bad = index::core::FirstUnsorted(out.data(), 0, k, n);
    if (bad != k) {
      Ok(index::core::SortedError("decoded index", bad, bad > 0 ? out[bad - 1] : 0, out[bad], n));
      return;
    }
    for (int64_t v : out) {
      uint8_t w[4];
      index::StoreLE32(w, static_cast<uint32_t>(v));
      again.insert(again.end(), w, w + 4);
    }
  } else if (codec == index::kCodecBitmap) {
    if (!Ok(index::core::ParseBitmapBody(h, body, have))) return;
    const int64_t total = index::core::CountBitmapBits(body, 0, static_cast<int64_t>(have));
    if (!Ok(total == k ? ParseStatus() : index::core::BitmapCountMismatch(h.k, total))) return;
    CheckBound(name, h.k, bound);
    out.resize(k);
    index::core::ExtractBitmapBits(body, 0, static_cast<int64_t>(have), 0, out.data());
    again.resize(again.size() + index::BitmapBytes(h.n), 0);
    uint8_t* bits = again.data() + again.size() - index::BitmapBytes(h.n);
    for (int64_t v : out) bits[v >> 3] |= static_cast<uint8_t>(1u << (v & 7));
  } else if (codec == index::kCodecRle) {
    if (!Ok(index::core::ParseRleCount(h, have))) return;
    CheckBound(name, h.k, bound);
    out.resize(k);
    if (!Ok(index::core::DecodeRle(h, body, end, out.data()))) return;
    uint64_t next = 0;
    for (int64_t v : out) {
      uint8_t gap[9];
      again.insert(again.end(), gap,
                   index::rle::PutGap(gap, static_cast<uint64_t>(v) - next));
      next = static_cast<uint64_t>(v) + 1;
    }
  } else {
    index::golomb::Layout layout;
    const uint8_t *table, *stream;
    if (!Ok(index::core::ParseGolombLayout(h, body, end, &layout, &table, &stream))) return;
    const uint64_t blocks = layout.num_blocks;
    CheckBound(name, 3 * blocks + 1, bound);
    std::vector<uint64_t> first(blocks), off(blocks + 1), param(blocks);
    if (!Ok(index::core::ParseGolombTable(h, layout, table, stream, first.data(), off.data(),
                                       param.data()))) {
      return;
    }
    CheckBound(name, h.k, bound);
    out.resize(k);
    const int64_t nb = static_cast<int64_t>(blocks);
    const int64_t bad = index::core::DecodeGolombBlocks(h, layout, stream, first.data(),
                                                        off.data(), param.data(), 0, nb,
                                                        out.data());
    if (bad != nb) {
      Ok(index::core::GolombBlockError(h, layout, off.data(), bad));
      return;
    }
    again = GolombAgain(h, layout.log2_block, param, out);
  }
  if (index::core::FirstUnsorted(out.data(), 0, k, n) != k) {
    Fail(std::string(name) + ": an accepted payload decodes to indices that are not strictly "
         "increasing below n");
  }
  CheckSame(name, again, begin, r.left);
}

// The target of an index codec's struct (kernels/index/<name>.h). The
// primary template fuzzes a codec without kernels of its own as its generic
// kernel decodes (index_format.h's CodecDefaults): header, CheckBody, the
// allocation bound, DecodeBody and the order check; an accepted payload must
// re-encode to exactly its bytes. The codecs with device kernels run
// FuzzIndex above.
template <typename Codec>
void FuzzIndexCodec(Reader r) {
  constexpr uint8_t codec = index::CodecOf<Codec>::kId;
  const char* name = index::CodecOf<Codec>::kName;
  uint64_t flags;
  if (!r.Take(1, &flags)) return;
  const int64_t size = static_cast<int64_t>(r.left);
  index::CommonHeader h;
  int64_t body_at;
  if (!Ok(index::core::ParseHeaderPrefix(r.p, size, size, codec, flags & 1, &h, &body_at))) {
    return;
  }
  const uint8_t* body = r.p + body_at;
  const uint64_t have = static_cast<uint64_t>(size - body_at);
  if (!Ok(Codec::CheckBody(h, body, have))) return;
  CheckBound(name, h.k, kPerByte * r.left);
  const int64_t k = static_cast<int64_t>(h.k);
  std::vector<int64_t> out(k);
  if (!Ok(Codec::DecodeBody(h, body, have, out.data()))) return;
  // The kernel's order check (index_kernels.h's generic DecodeOp) refuses the rest.
  const int64_t n = static_cast<int64_t>(h.n);
  const int64_t bad = index::core::FirstUnsorted(out.data(), 0, k, n);
  if (bad != k) {
    Ok(index::core::SortedError("decoded index", bad, bad > 0 ? out[bad - 1] : 0, out[bad], n));
    return;
  }
  EncodeArgs args;
  if constexpr (OpArgsOf<Codec>::kNumAttrs > 0) {
    if (!Codec::ArgsOf(h, body, have, &args)) {
      Fail(std::string(name) + ": ArgsOf cannot read the arguments of an accepted payload");
    }
  }
  std::vector<uint8_t> again = IndexHeader(codec, h.n, h.k);
  const size_t at = again.size();
  again.resize(at + Codec::BodyBytes(out.data(), k, h.n, args));
  Codec::EncodeBody(out.data(), k, h.n, args, again.data() + at);
  CheckSame(name, again, r.p, r.left);
}

template <>
void FuzzIndexCodec<index::int32::Codec>(Reader r) { FuzzIndex(index::kCodecInt32, r); }
template <>
void FuzzIndexCodec<index::bitmap::Codec>(Reader r) { FuzzIndex(index::kCodecBitmap, r); }
template <>
void FuzzIndexCodec<index::rle::Codec>(Reader r) { FuzzIndex(index::kCodecRle, r); }
template <>
void FuzzIndexCodec<index::golomb::Codec>(Reader r) { FuzzIndex(index::kCodecGolomb, r); }

// Fuzz<Camel>() of every codec with kernels="index" in the table.
#define DR_FUZZ_INDEX_CODEC(name, Camel, id, kernels) \
  void Fuzz##Camel(Reader r) { FuzzIndexCodec<index::name::Codec>(r); }
DR_INDEX_PAYLOAD_CODECS(DR_FUZZ_INDEX_CODEC)
#undef DR_FUZZ_INDEX_CODEC

// -------------------------------------------------------------------- bloom --

void FuzzBloom(Reader r) {
  uint64_t h, m, n, seed;
  if (!r.Take(1, &h) || !r.Take(4, &m) || !r.Take(2, &n) || !r.Take(4, &seed)) return;
  if (!Ok(bloom::core::CheckBitsAndHashes(static_cast<int64_t>(m), static_cast<int64_t>(h))) ||
      !Ok(bloom::core::CheckFilterBytes(r.p, static_cast<int64_t>(r.left),
                                     static_cast<int64_t>(m), true))) {
    return;
  }
  const bloom::BloomLayout layout =
      bloom::MakeLayout(m, static_cast<uint32_t>(h), seed);
  const int64_t nn = static_cast<int64_t>(n);
  const int64_t blocks = (nn + bloom::kQueryBlock - 1) / bloom::kQueryBlock;
  std::vector<uint64_t> hits((nn + 63) / 64);
  std::vector<int64_t> counts(blocks + 1, 0);
  for (int64_t b = 0; b < blocks; ++b) {
    counts[b + 1] = counts[b] + bloom::core::QueryBlock(layout, r.p, nn, b, hits.data());
  }
  CheckBound("bloom", static_cast<uint64_t>(counts[blocks]), n);
  std::vector<int64_t> out(counts[blocks]);
  for (int64_t b = 0; b < blocks; ++b) {
    bloom::core::ExtractBlock(hits.data(), nn, b, counts[b], out.data());
  }
  size_t o = 0;
  for (int64_t i = 0; i < nn; ++i) {
    const bool positive = o < out.size() && out[o] == i;
    if (positive != bloom::Contains(layout, r.p, static_cast<uint64_t>(i))) {
      Fail("bloom: the query disagrees with Contains() at position " + std::to_string(i));
    }
    o += positive;
  }
  if (o != out.size()) Fail("bloom: the query's positives are not increasing below n");
}

// -------------------------------------------------------------------- value --

void CheckFinite(const char* codec, const std::vector<float>& out) {
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) {
      Fail(std::string(codec) + ": an accepted payload decodes value " + std::to_string(i) +
           " to " + std::to_string(out[i]) + "; the format promises finite values");
    }
  }
}

// The target of a value codec's struct (kernels/value/<name>.h). The primary
// template fuzzes a codec without ops of its own through its host functions
// (value_format.h's CodecDefaults): header, CheckBody, the allocation bound,
// DecodeBody, then (kCanonical) an accepted payload must re-encode to exactly
// its bytes (once Codec::Canonicalize has run over its body). The codecs
// with ops of their own specialize it below.
template <typename Codec>
void FuzzValueCodec(Reader r) {
  constexpr uint8_t codec = value::CodecOf<Codec>::kId;
  const char* name = value::CodecOf<Codec>::kName;
  const int64_t size = static_cast<int64_t>(r.left);
  uint64_t k;
  if (!Ok(value::core::ParseHeaderBytes(r.p, size, codec, &k))) return;
  const uint8_t* body = r.p + value::kHeaderBytes;
  const uint64_t have = static_cast<uint64_t>(size - value::kHeaderBytes);
  if (!Ok(Codec::CheckBody(k, body, have))) return;
  CheckBound(name, k, Codec::kValuesPerByte * r.left + 16);
  std::vector<float> out(k);
  if (!Ok(Codec::DecodeBody(k, body, have, out.data()))) return;
  if constexpr (Codec::kCanonical) {
    using Args = OpArgsOf<Codec>;
    EncodeArgs args;
    if constexpr (Args::kNumAttrs > 0 || Args::kSeeded) {
      if (!Codec::ArgsOf(k, body, have, &args)) {
        Fail(std::string(name) + ": ArgsOf cannot read the arguments of an accepted payload");
      }
    }
    uint64_t capacity = 0;
    if (!Codec::BodyBytes(out.data(), static_cast<int64_t>(k), args, &capacity).ok()) {
      Fail(std::string(name) + ": the values of an accepted payload cannot be encoded again");
    }
    std::vector<uint8_t> again(value::kHeaderBytes + capacity);
    value::WriteHeader(again.data(), codec, k);
    uint64_t written = 0;
    if (!Codec::EncodeBody(out.data(), static_cast<int64_t>(k), args,
                           again.data() + value::kHeaderBytes, capacity, &written)
             .ok() ||
        written > capacity) {
      Fail(std::string(name) + ": the values of an accepted payload cannot be encoded again");
    }
    again.resize(value::kHeaderBytes + written);
    // What the encoder writes for the payload's values (fp16, bf16: NaNs
    // come back quiet).
    std::vector<uint8_t> want(r.p, r.p + r.left);
    Codec::Canonicalize(k, want.data() + value::kHeaderBytes, have);
    CheckSame(name, again, want.data(), want.size());
  }
}

template <>
void FuzzValueCodec<value::polyfit::Codec>(Reader r) {
  uint64_t max_values;
  if (!r.Take(2, &max_values)) return;
  value::PolyfitView v;
  if (!Ok(value::core::ParsePolyfitBytes(r.p, static_cast<int64_t>(r.left),
                                      static_cast<int64_t>(max_values), &v))) {
    return;
  }
  CheckBound("polyfit", v.k, max_values);
  std::vector<int64_t> start(v.num_segs + 1), coff(v.num_segs + 1);
  value::core::PolyfitTables(v, start.data(), coff.data());
  std::vector<float> cf(coff[v.num_segs]);
  if (!cf.empty()) std::memcpy(cf.data(), v.coefs, 4 * cf.size());
  std::vector<float> out(v.k);
  value::core::DecodePolyfitRange(v, start.data(), coff.data(), cf.data(), 0,
                                  static_cast<int64_t>(v.k), out.data());
  CheckFinite("polyfit", out);
}

template <>
void FuzzValueCodec<value::dexp::Codec>(Reader r) {
  uint64_t max_values;
  if (!r.Take(2, &max_values)) return;
  uint64_t k, pos;
  value::dexp::Coefs c[2];
  if (!Ok(value::core::ParseDexpBytes(r.p, static_cast<int64_t>(r.left),
                                   static_cast<int64_t>(max_values), &k, &pos, c))) {
    return;
  }
  CheckBound("dexp", k, max_values);
  std::vector<float> out(k);
  value::core::DecodeDexpRange(c, pos, k, 0, static_cast<int64_t>(k), out.data());
  CheckFinite("dexp", out);
}

template <>
void FuzzValueCodec<value::qsgd::Codec>(Reader r) {
  const int64_t size = static_cast<int64_t>(r.left);
  uint64_t k;
  if (!Ok(value::core::ParseHeaderBytes(r.p, size, value::kCodecQsgd, &k))) return;
  value::QsgdLayout l;
  if (!Ok(value::core::ParseQsgdFixed(r.p, size, k, &l))) return;
  if (!Ok(value::core::CheckQsgdSections(r.p, l))) return;
  CheckBound("qsgd", k, kPerByte * r.left);
  std::vector<float> out(k);
  const int64_t kk = static_cast<int64_t>(k);
  const int64_t chunks = (kk + value::core::kQsgdChunk - 1) / value::core::kQsgdChunk;
  const int64_t bad = value::core::DecodeQsgdChunks(r.p, l, 0, chunks, out.data());
  if (bad != kk) {
    Ok(value::core::QsgdBadCode(bad, l.s));
    return;
  }
  CheckFinite("qsgd", out);
  const uint8_t* scales = r.p + value::qsgd::kFixedBytes;
  for (int64_t i = 0; i < kk; ++i) {
    if (std::fabs(out[i]) > value::GetF32(scales + 4 * (i / l.bucket))) {
      Fail("qsgd: decoded value " + std::to_string(i) + " exceeds its bucket's scale");
    }
  }
}

// Fuzz<Camel>() of every codec with kernels="value" in the table.
#define DR_FUZZ_VALUE_CODEC(name, Camel, id, kernels) \
  void Fuzz##Camel(Reader r) { FuzzValueCodec<value::name::Codec>(r); }
DR_VALUE_PAYLOAD_CODECS(DR_FUZZ_VALUE_CODEC)
#undef DR_FUZZ_VALUE_CODEC

}  // namespace
}  // namespace fuzz
}  // namespace deepreduce

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* only = std::getenv("DR_FUZZ_TARGET");
  if (only != nullptr && *only != '\0') deepreduce::fuzz::g_only_target = std::atoi(only);
  const char* list = std::getenv("DR_FUZZ_LIST");
  if (list != nullptr && *list == '1') {
    for (const char* name : deepreduce::fuzz::kTargetNames) std::printf("%s\n", name);
    std::exit(0);
  }
  const char* verbose = std::getenv("DR_FUZZ_VERBOSE");
  deepreduce::fuzz::g_verbose = verbose != nullptr && *verbose == '1';
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace deepreduce::fuzz;  // NOLINT
  if (size == 0) return 0;
  const Target t = static_cast<Target>(data[0] % kNumTargets);
  if (g_only_target >= 0 && t != g_only_target) return 0;
  const Reader r{data + 1, size - 1};
  switch (t) {
#define X(name, Camel) \
  case k##Camel:       \
    Fuzz##Camel(r);    \
    break;
    DR_FUZZ_TARGETS(X)
#undef X
    case kNumTargets: break;
  }
  return 0;
}
