// TensorFlow-free checks of a received Bloom filter and the query that
// decodes it into its positives: the code the CPU kernels (bloom_kernels.cc)
// run, also compiled without TF by the fuzz harness (kernels/fuzz/). Checks
// return ParseStatus with the text of the kernels' InvalidArgumentError;
// bloom_args.h wraps them as absl::Status for the CPU and GPU kernels.
#ifndef DEEPREDUCE_KERNELS_BLOOM_BLOOM_DECODE_H_
#define DEEPREDUCE_KERNELS_BLOOM_BLOOM_DECODE_H_

#include <cstdint>
#include <string>

#include "kernels/bloom/bloom.h"
#include "kernels/common/parse_status.h"

namespace deepreduce {
namespace bloom {

// Upper bound on m: 2^34 bits is a 2 GiB filter, far beyond any gradient.
constexpr int64_t kMaxBits = int64_t{1} << 34;

// Positions handled per work item of the query: a multiple of 64 so that
// every item owns whole words of the scratch bitmap.
constexpr int64_t kQueryBlock = 4096;

namespace core {

inline ParseStatus CheckBitsAndHashes(int64_t m, int64_t h) {
  if (m < 1 || m > kMaxBits) {
    return ParseStatus::Invalid("filter_bits (m) must lie in [1, 2^34], got " +
                                std::to_string(m));
  }
  if (h < 1 || h > static_cast<int64_t>(kMaxHashes)) {
    return ParseStatus::Invalid("filter_hashes (h) must lie in [1, 32], got " +
                                std::to_string(h));
  }
  return ParseStatus();
}

// The padding bits past m (1 <= m) of a filter whose last 32-bit word (word
// NumWords(m) - 1, the only one that holds them) is last_word must be zero.
// The GPU kernels check the word they copy back from the device.
inline ParseStatus CheckPaddingWord(uint32_t last_word, int64_t m) {
  const int64_t word_start = (static_cast<int64_t>(NumWords(m)) - 1) * 32;
  for (int64_t b = m; b < word_start + 32; ++b) {
    if ((last_word >> (b - word_start)) & 1u) {
      return ParseStatus::Invalid("filter has bit " + std::to_string(b) +
                                  " set beyond filter_bits=" + std::to_string(m) +
                                  "; the filter is corrupted");
    }
  }
  return ParseStatus();
}

// The last 32-bit word of a filter of NumBytes(m) bytes in host memory (bit
// k of word w is bit k % 8 of byte 4w + k / 8: little-endian, bloom.h).
inline uint32_t LastWord(const uint8_t* bytes, int64_t m) {
  const uint8_t* p = bytes + NumBytes(m) - 4;
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

// A received filter of `size` bytes against its claimed m (checked by
// CheckBitsAndHashes). The byte count must match exactly; the padding bits
// past m must be zero (they are on every filter this library writes), which
// catches most truncated, extended or corrupted filters before they are
// queried.
inline ParseStatus CheckFilterBytes(const uint8_t* bytes, int64_t size, int64_t m,
                                    bool check_padding) {
  const int64_t want = static_cast<int64_t>(NumBytes(m));
  if (size != want) {
    return ParseStatus::Invalid(
        "filter holds " + std::to_string(size) + " bytes but filter_bits=" +
        std::to_string(m) + " needs exactly " + std::to_string(want) +
        " (4 * ceil(m / 32)); the filter is truncated, extended or paired with the wrong "
        "filter_bits");
  }
  if (check_padding) return CheckPaddingWord(LastWord(bytes, m), m);
  return ParseStatus();
}

// Queries positions [w0, w0 + len), len <= 64, into one bit each. The first
// (up to) four probes of every position are computed and tested without
// branches: in a filter sized for its rate about half the bits are set, so a
// negative position survives them with probability ~1/16 and the loop
// pipelines instead of mispredicting; the few survivors then test their
// remaining probes. Same answer as Contains() for every position.
template <uint32_t kFirst>
inline uint64_t QueryWordT(const BloomLayout& layout, const uint8_t* bytes, int64_t w0,
                           int len) {
  uint64_t word = 0;
  for (int t = 0; t < len; ++t) {
    const ProbeSeq p = Probes(layout, static_cast<uint64_t>(w0 + t));
    uint64_t all = 1;
    for (uint32_t j = 0; j < kFirst; ++j) all &= TestBit(bytes, ProbeBit(layout, p, j));
    word |= all << t;
  }
  if (layout.num_hashes == kFirst) return word;
  uint64_t pending = word;
  while (pending) {
    const int t = __builtin_ctzll(pending);
    pending &= pending - 1;
    const ProbeSeq p = Probes(layout, static_cast<uint64_t>(w0 + t));
    for (uint32_t j = kFirst; j < layout.num_hashes; ++j) {
      if (!TestBit(bytes, ProbeBit(layout, p, j))) {
        word &= ~(uint64_t{1} << t);
        break;
      }
    }
  }
  return word;
}

inline uint64_t QueryWord(const BloomLayout& layout, const uint8_t* bytes, int64_t w0,
                          int len) {
  switch (layout.num_hashes) {
    case 1: return QueryWordT<1>(layout, bytes, w0, len);
    case 2: return QueryWordT<2>(layout, bytes, w0, len);
    case 3: return QueryWordT<3>(layout, bytes, w0, len);
    default: return QueryWordT<4>(layout, bytes, w0, len);
  }
}

// Pass 1 of the query over positions [0, n): block `blk` (kQueryBlock
// positions) into its words of the bitmap `hits` (one bit per position);
// returns its number of positives.
inline int64_t QueryBlock(const BloomLayout& layout, const uint8_t* bytes, int64_t n,
                          int64_t blk, uint64_t* hits) {
  const int64_t lo = blk * kQueryBlock;
  const int64_t hi = n < lo + kQueryBlock ? n : lo + kQueryBlock;
  int64_t count = 0;
  for (int64_t w0 = lo; w0 < hi; w0 += 64) {
    const int len = static_cast<int>(hi - w0 < 64 ? hi - w0 : 64);
    const uint64_t word = QueryWord(layout, bytes, w0, len);
    hits[w0 >> 6] = word;
    count += __builtin_popcountll(word);
  }
  return count;
}

// Pass 2: the positives of block `blk` in increasing order, written to
// out[o], out[o + 1], ... (o: the positives of the blocks before it).
template <typename T>
inline void ExtractBlock(const uint64_t* hits, int64_t n, int64_t blk, int64_t o, T* out) {
  const int64_t lo = blk * kQueryBlock;
  const int64_t hi = n < lo + kQueryBlock ? n : lo + kQueryBlock;
  for (int64_t w0 = lo; w0 < hi; w0 += 64) {
    uint64_t word = hits[w0 >> 6];
    while (word) {
      out[o++] = static_cast<T>(w0 + __builtin_ctzll(word));
      word &= word - 1;
    }
  }
}

}  // namespace core
}  // namespace bloom
}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_BLOOM_BLOOM_DECODE_H_
