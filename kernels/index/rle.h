// `rle` index codec: run-length coding of the gaps, one byte-aligned varint
// per index. Shared by CPU and CUDA code (no TF headers).
//
// Format (version 1), after the common header (index_format.h):
//   K varints, the i-th being the run of zeros before index i:
//     gap_0 = idx_0,  gap_i = idx_i - idx_{i-1} - 1.
//   Nothing else: the body ends exactly after the K-th varint.
//
// The gap varint is the byte-oriented prefix varint of SQLite4 (first byte
// says the length), in the spirit of the original's "floor(L/255) bytes of
// 255, then L mod 255" but bounded at 9 bytes for any gap, and lossless for
// every run length (the original dropped runs whose length was a power of
// two). At 1 % density it costs 8.7 bits/index like the original's 8.65,
// at 0.1 % 15 instead of ~39:
//   A0 <= 240              v = A0                                   1 byte
//   241 <= A0 <= 248       v = 240 + 256 * (A0 - 241) + A1 > 240    2 bytes
//   A0 == 249              v = 2288 + 256 * A1 + A2                 3 bytes
//   A0 == 250 + j, j=0..5  v = the next 3 + j bytes, big-endian     4..9 bytes
// Only the shortest form of each value is accepted, so every index set has
// exactly one encoding.
#ifndef DEEPREDUCE_KERNELS_INDEX_RLE_H_
#define DEEPREDUCE_KERNELS_INDEX_RLE_H_

#include <cstdint>

#include "kernels/common/platform.h"
#include "kernels/index/index_format.h"

namespace deepreduce {
namespace index {
namespace rle {

// The codec's struct (index_format.h's CodecDefaults): its OpKernels are
// index_kernels.h's EncodeOp / DecodeOp specializations.
struct Codec : CodecDefaults {};

DR_HOST_DEVICE int GapSize(uint64_t v) {
  if (v <= 240) return 1;
  if (v <= 2287) return 2;
  if (v <= 67823) return 3;
  int bytes = 3;
  while (bytes < 8 && (v >> (8 * bytes)) != 0) ++bytes;
  return 1 + bytes;
}

DR_HOST_DEVICE uint8_t* PutGap(uint8_t* p, uint64_t v) {
  if (v <= 240) {
    *p++ = static_cast<uint8_t>(v);
  } else if (v <= 2287) {
    const uint64_t w = v - 240;
    *p++ = static_cast<uint8_t>(241 + (w >> 8));
    *p++ = static_cast<uint8_t>(w);
  } else if (v <= 67823) {
    const uint64_t w = v - 2288;
    *p++ = 249;
    *p++ = static_cast<uint8_t>(w >> 8);
    *p++ = static_cast<uint8_t>(w);
  } else {
    const int bytes = GapSize(v) - 1;
    *p++ = static_cast<uint8_t>(250 + bytes - 3);
    for (int i = bytes - 1; i >= 0; --i) *p++ = static_cast<uint8_t>(v >> (8 * i));
  }
  return p;
}

// Reads one gap from [*p, end); false on truncation or a non-shortest form.
DR_HOST_DEVICE bool GetGap(const uint8_t** p, const uint8_t* end, uint64_t* v) {
  const uint8_t* q = *p;
  if (q >= end) return false;
  const uint8_t a0 = *q++;
  if (a0 <= 240) {
    *v = a0;
  } else if (a0 <= 248) {
    if (q >= end) return false;
    // 241 0 would be 240, which has the 1-byte form.
    if (a0 == 241 && *q == 0) return false;
    *v = 240 + 256 * static_cast<uint64_t>(a0 - 241) + *q++;
  } else if (a0 == 249) {
    if (end - q < 2) return false;
    *v = 2288 + 256 * static_cast<uint64_t>(q[0]) + q[1];
    q += 2;
  } else {
    const int bytes = a0 - 250 + 3;
    if (end - q < bytes) return false;
    uint64_t w = 0;
    for (int i = 0; i < bytes; ++i) w = (w << 8) | q[i];
    q += bytes;
    // Shortest form: 3 bytes only above the 3-byte class, more only if the
    // value needs them.
    if (bytes == 3 ? w <= 67823 : (w >> (8 * (bytes - 1))) == 0) return false;
    *v = w;
  }
  *p = q;
  return true;
}

// ---------------------------------------------------------------------------
// Decoding. The sequential decoder (the CPU kernel) reads K gaps from the
// body and fails at the first gap i that is truncated / not in shortest form
// (kBadGap) or runs past n (kPastEnd), or when bytes follow the K-th gap
// (kTrailing). DecodeResult says which, for the caller's message.
enum DecodeError : int64_t { kOk = 0, kBadGap = 1, kPastEnd = 2, kTrailing = 3 };
struct DecodeResult {
  int64_t error;
  int64_t at;        // the gap (kBadGap, kPastEnd)
  uint64_t gap;      // its value (kPastEnd)
  int64_t trailing;  // bytes after the K-th gap (kTrailing)
};

// The GPU decodes the same in parallel chunks of the body without changing
// the format. A gap is at most 9 bytes, so the gap that crosses the end of a
// chunk ends at most 8 bytes into the next one: each chunk is decoded
// speculatively from each of the 9 possible entry offsets (ScanChunk), one
// sequential pass over the chunks picks the real entries (ResolveChunks),
// each chunk then decodes from its real entry and writes its indices
// (DecodeChunk), and a last pass over the chunks reports the first error in
// gap order, exactly as the sequential decoder would (FinishChunks).
constexpr int kEntries = 9;

struct ChunkScan {
  int64_t count;  // whole gaps starting in the chunk (before a bad one)
  uint64_t sum;   // sum of (gap + 1) over them, modulo 2^64
  int32_t exit;   // where the next chunk's first gap starts, past its start
  int32_t bad;    // 1 if a gap starting in the chunk is unreadable
};

DR_HOST_DEVICE ChunkScan ScanChunk(const uint8_t* body, int64_t bytes, int64_t chunk_bytes,
                                   int64_t c, int entry) {
  const int64_t begin = c * chunk_bytes;
  const int64_t stop = begin + chunk_bytes < bytes ? begin + chunk_bytes : bytes;
  ChunkScan r{0, 0, 0, 0};
  int64_t pos = begin + entry;
  if (pos >= stop) {  // only an entry that no real gap can produce, or an empty tail
    r.exit = static_cast<int32_t>(pos - stop);
    return r;
  }
  const uint8_t* p = body + pos;
  const uint8_t* end = body + bytes;
  while (p < body + stop) {
    uint64_t g;
    if (!GetGap(&p, end, &g)) {
      r.bad = 1;
      return r;
    }
    ++r.count;
    r.sum += g + 1;
  }
  r.exit = static_cast<int32_t>(p - (body + stop));
  return r;
}

struct ChunkPlan {
  int64_t first_gap;  // global number of the chunk's first gap
  uint64_t base;      // the smallest value its first index may take
  int32_t entry;      // where its first gap starts, past the chunk's start
  int32_t active;     // 0 past the first unreadable gap
};

// Sequential over the chunks: scans[c * kEntries + e] is chunk c from entry e.
// *total_gaps = the readable gaps; *bad_gap = the first unreadable one or -1.
DR_HOST_DEVICE void ResolveChunks(const ChunkScan* scans, int64_t chunks, ChunkPlan* plans,
                                  int64_t* total_gaps, int64_t* bad_gap) {
  int32_t entry = 0;
  int64_t gaps = 0;
  uint64_t base = 0;
  int64_t bad = -1;
  for (int64_t c = 0; c < chunks; ++c) {
    plans[c] = ChunkPlan{gaps, base, entry, bad < 0 ? 1 : 0};
    if (bad >= 0) continue;
    const ChunkScan& s = scans[c * kEntries + entry];
    if (s.bad) bad = gaps + s.count;
    gaps += s.count;
    base += s.sum;
    entry = s.exit;
  }
  *total_gaps = gaps;
  *bad_gap = bad;
}

struct ChunkDecode {
  int64_t past_at;   // the chunk's first gap that runs past n, or -1
  uint64_t past_gap;
  int64_t end_k;     // byte offset after gap K - 1 if it is in the chunk, else -1
};

// Decodes chunk c from its planned entry, writing out[g] for its gaps g < k;
// stops at an unreadable gap (reported by ResolveChunks) or one past n.
template <typename T>
DR_HOST_DEVICE ChunkDecode DecodeChunk(const uint8_t* body, int64_t bytes, int64_t chunk_bytes,
                                       int64_t c, const ChunkPlan& plan, int64_t k, uint64_t n,
                                       T* out) {
  ChunkDecode r{-1, 0, -1};
  if (!plan.active || plan.first_gap >= k) return r;
  const int64_t begin = c * chunk_bytes;
  const int64_t stop = begin + chunk_bytes < bytes ? begin + chunk_bytes : bytes;
  const uint8_t* p = body + begin + plan.entry;
  const uint8_t* end = body + bytes;
  int64_t g = plan.first_gap;
  uint64_t next = plan.base;
  while (p < body + stop && g < k) {
    uint64_t gap;
    if (!GetGap(&p, end, &gap)) break;
    if (!(next <= n && gap < n - next)) {
      r.past_at = g;
      r.past_gap = gap;
      break;
    }
    const uint64_t v = next + gap;
    out[g] = static_cast<T>(v);
    next = v + 1;
    ++g;
    if (g == k) r.end_k = p - body;
  }
  return r;
}

// Sequential over the chunks: the sequential decoder's verdict.
DR_HOST_DEVICE DecodeResult FinishChunks(const ChunkDecode* dec, int64_t chunks, int64_t bytes,
                                         int64_t k, int64_t total_gaps, int64_t bad_gap) {
  DecodeResult r{kOk, 0, 0, 0};
  int64_t end_k = k == 0 ? 0 : -1;
  for (int64_t c = 0; c < chunks; ++c) {
    if (dec[c].past_at >= 0) {
      // Every gap before it was readable and in range: nothing comes first.
      r.error = kPastEnd;
      r.at = dec[c].past_at;
      r.gap = dec[c].past_gap;
      return r;
    }
    if (dec[c].end_k >= 0) end_k = dec[c].end_k;
  }
  if (bad_gap >= 0 && bad_gap < k) {
    r.error = kBadGap;
    r.at = bad_gap;
    return r;
  }
  if (bad_gap < 0 && total_gaps < k) {  // the body ends before gap total_gaps
    r.error = kBadGap;
    r.at = total_gaps;
    return r;
  }
  if (end_k != bytes) {
    r.error = kTrailing;
    r.at = k;
    r.trailing = bytes - end_k;
  }
  return r;
}

}  // namespace rle
}  // namespace index
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_INDEX_RLE_H_
