// `golomb` index codec: Golomb-Rice coding of the gaps in independently
// decodable blocks, each with its own Rice parameter. Shared by CPU and CUDA
// code (no TF headers); one CPU task or one GPU thread handles one block.
//
// Format (version 1), after the common header (index_format.h):
//   u8      B: log2 of the block size (4..16; by default the encoder picks
//           the B in 4..12 giving the smallest payload, see PickLog2Block,
//           or writes the one it was given). Block b holds indices
//           [b * 2^B, min(K, (b + 1) * 2^B)); there are nb = ceil(K / 2^B).
//   varint  S: the byte length of the gap stream.
//   table   nb entries, bit-packed LSB-first (kernels/common/bit_io.h) and
//           zero-padded to a whole byte, each entry being
//             first  (w_idx = bit width of n - 1 bits): the block's first index
//             offset (w_off = bit width of S bits): where its bytes start in
//                    the stream; a block ends where the next one starts (the
//                    last one at S)
//             k      (6 bits, 0..56): its Rice parameter
//   stream  S bytes. A block of c indices holds its c - 1 gaps
//           d = idx_i - idx_{i-1} - 1, each as (d >> k) zero bits and a one
//           bit, then the low k bits of d LSB-first; zero-padded to a byte.
//
// The encoder picks each block's k to minimise that block's exact bit count,
// so dense clusters get small k and sparse stretches large k. Overhead per
// block: its table entry (about log2(n) + log2(S) + 6 bits) and < 1 byte of
// padding, i.e. ~0.04 bits per index at 1024 indices per block, ~2.5 at 16;
// small blocks pay that overhead back on clustered sets (real top-k
// gradients), which is why the default choice is made per payload.
//
// The decoder accepts a payload only if the table is consistent (offsets
// non-decreasing and inside the stream, first indices increasing with room
// for their blocks, all below n) and every block decodes to exactly its
// count of indices below the next block's first index, ending in its zero
// padding; any accepted payload therefore decodes to a strictly increasing
// set of K indices in [0, n).
#ifndef DEEPREDUCE_KERNELS_INDEX_GOLOMB_H_
#define DEEPREDUCE_KERNELS_INDEX_GOLOMB_H_

#include <cstdint>

#include "kernels/common/bit_io.h"
#include "kernels/common/platform.h"
#include "kernels/index/index_format.h"

namespace deepreduce {
namespace index {
namespace golomb {

// The codec's struct (index_format.h's CodecDefaults): its OpKernels are
// index_kernels.h's EncodeOp / DecodeOp specializations; its encode op takes
// block_size and is registered by hand (kernels/ops/index_ops.cc).
struct Codec : CodecDefaults {
  static constexpr bool kOwnEncodeOp = true;
};

constexpr int kDefaultLog2Block = 10;
constexpr int kMinLog2Block = 4;
constexpr int kMaxLog2Block = 16;
constexpr int kMaxRiceParam = 56;  // BitReader::Get reads at most 56 bits
constexpr int kRiceParamBits = 6;

// Sizes derived from (n, K, B, S): the same on encoder and decoder.
struct Layout {
  int log2_block;
  uint64_t num_blocks;
  uint64_t stream_bytes;
  int w_idx;
  int w_off;
  int entry_bits;
};

DR_HOST_DEVICE Layout MakeLayout(uint64_t n, uint64_t k, int log2_block,
                                 uint64_t stream_bytes) {
  Layout l;
  l.log2_block = log2_block;
  l.num_blocks = (k + (uint64_t{1} << log2_block) - 1) >> log2_block;
  l.stream_bytes = stream_bytes;
  l.w_idx = n > 0 ? BitWidth64(n - 1) : 0;
  l.w_off = BitWidth64(stream_bytes);
  l.entry_bits = l.w_idx + l.w_off + kRiceParamBits;
  return l;
}

DR_HOST_DEVICE uint64_t BlockCount(uint64_t k, int log2_block, uint64_t b) {
  const uint64_t begin = b << log2_block;
  const uint64_t size = uint64_t{1} << log2_block;
  return k - begin < size ? k - begin : size;
}

// Exact bit count of a block's gaps under Rice parameter r.
template <typename T>
DR_HOST_DEVICE uint64_t RiceBits(const T* idx, uint64_t count, int r) {
  uint64_t bits = (count - 1) * static_cast<uint64_t>(1 + r);
  for (uint64_t i = 1; i < count; ++i) {
    const uint64_t d = static_cast<uint64_t>(idx[i]) - static_cast<uint64_t>(idx[i - 1]) - 1;
    bits += d >> r;
  }
  return bits;
}

// Exact bit counts of a block's gaps under Rice parameters r - 1, r, r + 1
// (0 <= r - 1, r + 1 <= kMaxRiceParam) in one pass over the block.
template <typename T>
DR_HOST_DEVICE void RiceBits3(const T* idx, uint64_t count, int r, uint64_t out[3]) {
  const uint64_t base = (count - 1) * static_cast<uint64_t>(1 + r);
  uint64_t lo = base - (count - 1), mid = base, hi = base + (count - 1);
  for (uint64_t i = 1; i < count; ++i) {
    const uint64_t d = static_cast<uint64_t>(idx[i]) - static_cast<uint64_t>(idx[i - 1]) - 1;
    lo += d >> (r - 1);
    mid += d >> r;
    hi += d >> (r + 1);
  }
  out[0] = lo;
  out[1] = mid;
  out[2] = hi;
}

// The Rice parameter minimising the block's bits (count >= 1), the smallest
// one on ties. The cost (c - 1)(1 + r) + sum(d >> r) is convex in r (the
// decrease floor(d / 2^r) - floor(d / 2^(r+1)) shrinks as r grows), so a
// local search from floor(log2(mean gap)) finds the global minimum; the
// first step evaluates r - 1, r, r + 1 in one pass (usually the only one),
// further steps one r per pass. sum(d >> r) <= sum(d) < n cannot overflow.
//
// The search itself, given how to sum the block's gaps d: gap_sum = sum(d),
// costs3(r, c) sets c[0..2] to the bit counts under r - 1, r, r + 1 (as
// RiceBits3) and cost(r) returns RiceBits under r. The CPU sums in a loop
// (ChooseRiceParam below), a CUDA warp with its 32 lanes; integer sums, so
// both pick the same parameter.
template <typename Costs3, typename Cost>
DR_HOST_DEVICE int ChooseRiceParamWith(uint64_t count, uint64_t gap_sum, Costs3&& costs3,
                                       Cost&& cost, uint64_t* bits_out) {
  if (count <= 1) {
    *bits_out = 0;
    return 0;
  }
  const uint64_t mean = gap_sum / (count - 1);
  int r = mean == 0 ? 0 : BitWidth64(mean) - 1;
  if (r < 1) r = 1;
  if (r > kMaxRiceParam - 1) r = kMaxRiceParam - 1;
  uint64_t c[3];
  costs3(r, c);
  uint64_t best;
  if (c[0] <= c[1]) {  // descend: ties go to the smaller parameter
    best = c[0];
    --r;
    while (r > 0) {
      const uint64_t v = cost(r - 1);
      if (v > best) break;
      best = v;
      --r;
    }
  } else if (c[2] < c[1]) {
    best = c[2];
    ++r;
    while (r < kMaxRiceParam) {
      const uint64_t v = cost(r + 1);
      if (v >= best) break;
      best = v;
      ++r;
    }
  } else {
    best = c[1];
  }
  *bits_out = best;
  return r;
}

template <typename T>
DR_HOST_DEVICE int ChooseRiceParam(const T* idx, uint64_t count, uint64_t* bits_out) {
  const uint64_t gap_sum = count <= 1 ? 0
                                      : static_cast<uint64_t>(idx[count - 1]) -
                                            static_cast<uint64_t>(idx[0]) - (count - 1);
  return ChooseRiceParamWith(
      count, gap_sum, [&](int r, uint64_t* c) { RiceBits3(idx, count, r, c); },
      [&](int r) { return RiceBits(idx, count, r); }, bits_out);
}

// Block-size choice of the encoder's auto mode (block_size = 0): every
// 2^B for B in [kAutoMinLog2Block, kAutoMaxLog2Block] is sized exactly (the
// sum of its blocks' ChooseRiceParam bytes is its stream length S) and the
// smallest payload wins; ties go to the larger block (fewer, longer blocks
// decode with less table overhead per thread). Blocks past 4096 never won on
// the sets we measured and only cost encode time. The chosen B is written in
// the header like any explicit one, so decoders need no change.
constexpr int kAutoMinLog2Block = 4;
constexpr int kAutoMaxLog2Block = 12;
constexpr int kAutoCandidates = kAutoMaxLog2Block - kAutoMinLog2Block + 1;

// Bytes of the golomb body after the common header (B, varint S, table,
// stream) for block size 2^log2_block and stream length S.
DR_HOST_DEVICE uint64_t BodyBytes(uint64_t n, uint64_t k, int log2_block,
                                  uint64_t stream_bytes) {
  const Layout l = MakeLayout(n, k, log2_block, stream_bytes);
  return 1 + static_cast<uint64_t>(VarintSize(stream_bytes)) +
         (l.num_blocks * static_cast<uint64_t>(l.entry_bits) + 7) / 8 + stream_bytes;
}

// The auto choice from the candidates' stream lengths
// (stream_bytes[i] belongs to log2 block kAutoMinLog2Block + i).
DR_HOST_DEVICE int PickLog2Block(uint64_t n, uint64_t k, const int64_t* stream_bytes) {
  int best_log2 = kAutoMinLog2Block;
  uint64_t best = BodyBytes(n, k, best_log2, static_cast<uint64_t>(stream_bytes[0]));
  for (int i = 1; i < kAutoCandidates; ++i) {
    const int log2_block = kAutoMinLog2Block + i;
    const uint64_t bytes =
        BodyBytes(n, k, log2_block, static_cast<uint64_t>(stream_bytes[i]));
    if (bytes <= best) {
      best = bytes;
      best_log2 = log2_block;
    }
  }
  return best_log2;
}

// Writes a block's gaps into exactly ceil(RiceBits / 8) bytes at out.
template <typename T>
DR_HOST_DEVICE void EncodeBlock(const T* idx, uint64_t count, int r, uint8_t* out) {
  BitWriter w(out);
  for (uint64_t i = 1; i < count; ++i) {
    const uint64_t d = static_cast<uint64_t>(idx[i]) - static_cast<uint64_t>(idx[i - 1]) - 1;
    w.PutZeros(d >> r);
    w.Put(1, 1);
    w.Put(d, r);
  }
  w.Flush();
}

// Byte j of the block table, computed on its own (one GPU thread per byte):
// table bit g belongs to entry e = g / E (E = entry_bits) at bit r = g % E,
// whose fields are, LSB first, first (w_idx bits), offset (w_off bits) and
// the Rice parameter (6 bits); bits past nb * E are the zero padding. The
// same bytes as a BitWriter writing the entries in order (PutWide, PutWide,
// Put, Flush), which the CPU encoder does.
template <typename T, typename Toff, typename Tparam>
DR_HOST_DEVICE uint8_t TableByte(const Layout& l, const T* idx, const Toff* off,
                                 const Tparam* param, uint64_t j) {
  const uint64_t entry_bits = static_cast<uint64_t>(l.entry_bits);
  const uint64_t total_bits = l.num_blocks * entry_bits;
  const uint64_t w_idx = static_cast<uint64_t>(l.w_idx);
  const uint64_t w_off = static_cast<uint64_t>(l.w_off);
  uint32_t byte = 0;
  for (int t = 0; t < 8; ++t) {
    const uint64_t g = 8 * j + t;
    if (g >= total_bits) break;
    const uint64_t e = g / entry_bits;
    const uint64_t r = g - e * entry_bits;
    uint64_t v;
    if (r < w_idx) {
      v = static_cast<uint64_t>(idx[e << l.log2_block]) >> r;
    } else if (r < w_idx + w_off) {
      v = static_cast<uint64_t>(off[e]) >> (r - w_idx);
    } else {
      v = static_cast<uint64_t>(param[e]) >> (r - w_idx - w_off);
    }
    byte |= static_cast<uint32_t>(v & 1) << t;
  }
  return static_cast<uint8_t>(byte);
}

// Decodes one block of `count` indices from [begin, end) into out. first is
// the block's first index (< upper, checked with the table); every decoded
// index must stay below `upper` (the next block's first index, or n). False
// on any inconsistency; never reads outside [begin, end).
template <typename T>
DR_HOST_DEVICE bool DecodeBlock(const uint8_t* begin, const uint8_t* end, uint64_t first,
                                int r, uint64_t count, uint64_t upper, T* out) {
  BitReader rd(begin, end);
  uint64_t prev = first;
  out[0] = static_cast<T>(first);
  for (uint64_t i = 1; i < count; ++i) {
    if (upper - prev < 2) return false;
    const uint64_t room = upper - prev - 2;  // the largest gap that still fits
    uint64_t q, lo;
    if (!rd.GetUnary(room >> r, &q)) return false;
    if (!rd.Get(r, &lo)) return false;
    const uint64_t d = (q << r) | lo;
    if (d > room) return false;
    prev += 1 + d;
    out[i] = static_cast<T>(prev);
  }
  rd.Refill();
  return rd.AtPaddedEnd();
}

}  // namespace golomb
}  // namespace index
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_INDEX_GOLOMB_H_
