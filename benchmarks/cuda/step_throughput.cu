// Whole-step GPU benchmark (issue 30, item 4): the compressed step's kernel
// sequence per replica, and the receiver's decode + sum, without TensorFlow,
// on real model layouts. Every step runs the op library's CUDA launchers (or,
// where the library has no GPU kernel, a small kernel of this file), the way
// the recommended configuration (docs/compressor.md: top-k 1 % per variable,
// golomb indices, QSGD 7 bit, residual memory) uses them in
// Compressor.compress_bucket / decompress_buckets_sum:
//
//   sender, per fused bucket (deepreduce_tf/fusion.py: tensors grouped in
//   order into buckets of at most --bucket-mb MiB; tensors of fewer than
//   --min-size elements travel raw in the bucket's dense section):
//     fusion pack      FlattenConcat: the members' gradients -> one flat
//                      bucket (fusion CopyPieces; a bucket of one tensor is
//                      that tensor, no copy)
//     compensate       AddWithin: u = g + residual over the sparse section,
//                      and whether every |u| <= 1e30 (QSGD's range), read
//                      back as the step's tf.cond does (kernel of this file)
//     segmented top-k  SegmentedTopK, k_i = min(n_i, max(1, ceil(ratio n_i)))
//                      per tensor (deepreduce_tf/ops/sparsify.py:
//                      segment_ks), int64 positions
//     golomb encode    auto block size, header + table + stream
//     qsgd encode      s = 127 (bits = 7), bucket 512 (deepreduce_tf
//                      defaults; the recommended configuration's bits = 7)
//     qsgd local dec.  the sender decodes its own values (the residual keeps
//                      the quantization error: Sent(rest, positions, decoded))
//     residual update  residual = u, then residual[pos] -= decoded (copy +
//                      scatter-subtract, ResidualMemory.update_sent; kernel
//                      of this file)
//     pack             the bucket payload container (payload_format.h, kind
//                      3: magic, version, 12 meta varints, 4 section lengths,
//                      sections index | value | perm (empty) | dense, CRC32C):
//                      a host-built header copied from pinned memory, the
//                      sections by CopyPieces. The CRC32C trailer is left
//                      zero: the library has no GPU CRC32C (its payload
//                      framing is host-side), so it is not timed here.
//   receiver, per bucket, for P = 2 and P = 8 payloads (one per replica,
//   each from its own gradient):
//     parse            container header, golomb header and block table, qsgd
//                      fixed fields: copied to the host and checked with the
//                      library's parsers (payload_parse.h, index_decode.h,
//                      value_decode.h) as the GPU decode ops do
//     golomb decode, qsgd decode
//     scatter-sum      zeros, then every payload's values added at its
//                      positions in payload order and the dense sections
//                      added (kernels of this file; positions are distinct
//                      within a payload and the payloads are added by
//                      successive kernels, so the sum is the in-order float
//                      sum, as TF's ScatterSum adds in update order)
//     fusion unpack    SplitReshape: the summed bucket -> the tensors
//
// Layouts: ResNet-50 as torchvision builds it (161 tensors, 25,557,032
// elements) and a GPT-style 1.3 B model (token and position embeddings, 24
// blocks, final LayerNorm; every gradient a dense tensor, as the benchmark's
// brief asks: a real embedding gradient would be IndexedSlices). Gradients and initial
// residuals: N(0, 1) with 1 % of the values ten times larger, generated on
// the GPU by a hash (replica r has its own seeds).
//
//   bash benchmarks/cuda/step_throughput.sh [--layout resnet50|gpt1.3b|all]
//       [--reps R] [--ratio R] [--bucket-mb MB (0: one bucket)] [--min-size N]
//       [--plan-only]
//
// Times: median and min of --reps runs after 3 warm-ups, host wall clock
// around the launchers plus a stream synchronize (benchmarks/cuda/
// bench_util.h). A step row covers every bucket (and every payload); the
// totals run the whole sequence bucket by bucket. "GB/s" = the bytes the step
// reads / median time. The sender's residual evolves during its total's runs
// (error feedback), as in training.
//
// Checks (after the timings; any failure prints FAILED and exits 1):
//   * fusion pack, compensate and residual update bit-exact on sampled
//     tensors (u = g + r in float; r' = u, minus the decoded value where
//     selected);
//   * segmented top-k: every segment holds exactly k_i ascending positions
//     inside it; on sampled segments (the first, the largest, the last and
//     three random ones) the positions are the host's exact top-k (keys =
//     |x| bits, descending, ties to the lower index) and the values x there;
//   * golomb decode reproduces every position of replica 0 exactly;
//   * QSGD: the receiver's values equal the sender's local decode bit for
//     bit and are within one level (bucket max / 127) of the selected values;
//   * scatter-sum of P replicas' payloads equals, on the sampled segments
//     and every dense section, the host's in-order float sum of the decoded
//     payloads (bit-exact); with P copies of one payload it equals the
//     P-fold in-order float sum of its values (bit-exact: all addends equal,
//     so any order gives the same bits) and zero elsewhere;
//   * fusion unpack bit-exact on the sampled tensors.
// --plan-only prints the layouts and bucket plans and runs the host-side
// self-checks (header round trip, the top-k reference against a full sort);
// it needs no GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "benchmarks/cuda/bench_util.h"
#include "kernels/common/hash.h"
#include "kernels/common/varint.h"
#include "kernels/fusion/fusion_gpu.h"
#include "kernels/index/golomb.h"
#include "kernels/index/index_decode.h"
#include "kernels/index/index_format.h"
#include "kernels/index/index_gpu.h"
#include "kernels/payload/payload_format.h"
#include "kernels/payload/payload_parse.h"
#include "kernels/sparsify/sparsify.h"
#include "kernels/sparsify/sparsify_gpu.h"
#include "kernels/value/qsgd.h"
#include "kernels/value/value_decode.h"
#include "kernels/value/value_format.h"
#include "kernels/value/value_gpu.h"

namespace {

using namespace deepreduce_bench;  // Error, Cuda, Launch, Expect, Buf, Time, Row

namespace fg = deepreduce::fusion::gpu;
namespace ig = deepreduce::index::gpu;
namespace sg = deepreduce::sparsify::gpu;
namespace vg = deepreduce::value::gpu;
namespace dv = deepreduce::value;
namespace di = deepreduce::index;
namespace dp = deepreduce::payload;
namespace golomb = deepreduce::index::golomb;

// ------------------------------------------------------------ settings --

constexpr uint32_t kQsgdLevels = 127;  // bits = 7: s = 2^7 - 1
constexpr uint32_t kQsgdBucket = 512;
constexpr float kValueLimit = 1e30f;   // Compressor.value_limit for qsgd
constexpr int kReceivers[2] = {2, 8};  // payloads summed by the receiver
constexpr int kMaxReplicas = 8;
// Bucket payload container (compressors.py: KIND_BUCKET, BUCKET_FIELDS,
// BUCKET_SECTIONS).
constexpr uint8_t kKindBucket = 3;
constexpr int kMetaFields = 12;
constexpr int kSections = 4;
// The largest container header: 6 fixed bytes, M, 12 meta values, S, 4
// lengths, each varint at most 9 bytes.
constexpr int kMaxContainerHeader = 6 + 9 + kMetaFields * 9 + 9 + kSections * 9;
// Bytes of a payload's head copied to the host by the receiver: the
// container header, the index header and golomb's fixed fields.
constexpr int kPrefixBytes = 256;
static_assert(kMaxContainerHeader + 3 + 2 * 9 + 1 + 10 <= kPrefixBytes, "prefix too short");

struct Options {
  std::string layout = "all";
  double ratio = 0.01;
  double bucket_mb = 25.0;  // fusion.DEFAULT_BUCKET_CAP_MB; 0: one bucket
  int64_t min_size = 1024;  // compressors.DEFAULT_MIN_SIZE
  bool plan_only = false;
};

// -------------------------------------------------------------- layouts --

struct TensorSpec {
  std::string name;
  int64_t n;
};

// torchvision.models.resnet50: conv1, bn1, layer1..4 of Bottleneck blocks
// [3, 4, 6, 3] (1x1, 3x3, 1x1 convolutions, expansion 4, a 1x1 downsample
// convolution + BatchNorm in each stage's first block), fc; convolutions
// have no bias. Parameters in named_parameters() order.
std::vector<TensorSpec> ResNet50() {
  std::vector<TensorSpec> t;
  auto conv = [&](const std::string& name, int64_t out, int64_t in, int64_t kh) {
    t.push_back({name + ".weight", out * in * kh * kh});
  };
  auto bn = [&](const std::string& name, int64_t c) {
    t.push_back({name + ".weight", c});
    t.push_back({name + ".bias", c});
  };
  conv("conv1", 64, 3, 7);
  bn("bn1", 64);
  int64_t inplanes = 64;
  const int blocks[4] = {3, 4, 6, 3};
  const int64_t planes[4] = {64, 128, 256, 512};
  for (int s = 0; s < 4; ++s) {
    const int64_t p = planes[s];
    for (int b = 0; b < blocks[s]; ++b) {
      const std::string pre = "layer" + std::to_string(s + 1) + "." + std::to_string(b);
      conv(pre + ".conv1", p, inplanes, 1);
      bn(pre + ".bn1", p);
      conv(pre + ".conv2", p, p, 3);
      bn(pre + ".bn2", p);
      conv(pre + ".conv3", 4 * p, p, 1);
      bn(pre + ".bn3", 4 * p);
      if (b == 0) {
        conv(pre + ".downsample.0", 4 * p, inplanes, 1);
        bn(pre + ".downsample.1", 4 * p);
      }
      inplanes = 4 * p;
    }
  }
  t.push_back({"fc.weight", 1000 * 2048});
  t.push_back({"fc.bias", 1000});
  return t;
}

// GPT-style, d = 2048, 24 blocks, vocabulary 50257, context 2048.
std::vector<TensorSpec> Gpt13b() {
  const int64_t d = 2048, vocab = 50257, ctx = 2048, ff = 4 * d;
  std::vector<TensorSpec> t;
  t.push_back({"wte", vocab * d});
  t.push_back({"wpe", ctx * d});
  for (int b = 0; b < 24; ++b) {
    const std::string pre = "h" + std::to_string(b) + ".";
    t.push_back({pre + "ln1.gamma", d});
    t.push_back({pre + "ln1.beta", d});
    t.push_back({pre + "attn.qkv.weight", d * 3 * d});
    t.push_back({pre + "attn.qkv.bias", 3 * d});
    t.push_back({pre + "attn.proj.weight", d * d});
    t.push_back({pre + "attn.proj.bias", d});
    t.push_back({pre + "ln2.gamma", d});
    t.push_back({pre + "ln2.beta", d});
    t.push_back({pre + "mlp.fc1.weight", d * ff});
    t.push_back({pre + "mlp.fc1.bias", ff});
    t.push_back({pre + "mlp.fc2.weight", ff * d});
    t.push_back({pre + "mlp.fc2.bias", d});
  }
  t.push_back({"ln_f.gamma", d});
  t.push_back({"ln_f.beta", d});
  return t;
}

// ----------------------------------------------------------------- plan --

struct Member {
  int tensor;       // index into the layout
  int64_t n;
  int64_t src;      // offset of the tensor in the tensor arena (elements)
  int64_t at;       // offset within the bucket (elements)
  bool dense;
};

struct Bucket {
  std::vector<Member> members;  // sparse section first, then dense
  int64_t base = 0;             // offset in the bucket-ordered arenas (elements)
  int64_t sparse_n = 0, dense_n = 0, n = 0;
  std::vector<int64_t> offsets;  // segment boundaries, S + 1, relative
  std::vector<int64_t> ks;       // k per segment
  std::vector<int64_t> kofs;     // S + 1, prefix sums of ks
  int64_t k = 0;                 // sum of ks
  int64_t kbase = 0;             // offset in the K-sized arenas
  dv::QsgdLayout ql{};           // value payload layout (k values)
  int64_t icap = 0, ioff = 0;    // index payload slot: capacity, offset
  int64_t voff = 0;              // value payload slot offset (ql.size bytes)
  int64_t pcap = 0, poff = 0;    // container slot: capacity, offset
  bool alias() const { return members.size() == 1; }  // one tensor: no copy
};

// Every tensor, bucket and per-bucket K slice starts on a 256-byte boundary
// of its arena, as its own TensorFlow allocation would.
constexpr int64_t kAlignElems = 64;
int64_t AlignElems(int64_t v) { return (v + kAlignElems - 1) / kAlignElems * kAlignElems; }

struct Plan {
  std::string name;
  std::vector<TensorSpec> tensors;
  std::vector<int64_t> tensor_off;  // where each tensor starts in the tensor arena
  int64_t n = 0;                    // elements
  int64_t tensor_arena = 0, bucket_arena = 0, k_arena = 0;  // elements, padded
  std::vector<Bucket> buckets;
  int64_t total_k = 0, segments = 0, dense_tensors = 0, dense_n = 0;
  int64_t index_arena = 0, value_arena = 0, payload_arena = 0;  // bytes
};

// k = min(n, max(1, ceil(ratio * n))), the product in double
// (sparsify.py: _k_for_static_n).
int64_t KForRatio(int64_t n, double ratio) {
  const double c = std::ceil(ratio * static_cast<double>(n));
  return std::min<int64_t>(n, std::max<int64_t>(1, static_cast<int64_t>(c)));
}

// A bound on a golomb index payload of k positions in [0, n) (header,
// fields, table at the smallest auto block size, and the stream: the chosen
// Rice parameter costs at most that of floor(log2(mean gap)), <= 3 + log2(n/k)
// bits per gap). The encoder's real size is checked against it every run.
int64_t GolombCap(int64_t n, int64_t k) {
  const int64_t nb = (k + 15) / 16;
  const double bits = static_cast<double>(k) * (5.0 + std::log2(static_cast<double>(n) / k + 1.0));
  return 64 + nb * 18 + static_cast<int64_t>(bits / 8.0) + nb + 64;
}

Plan MakePlan(const std::string& name, std::vector<TensorSpec> tensors, const Options& o) {
  Plan p;
  p.name = name;
  p.tensors = std::move(tensors);
  for (const TensorSpec& t : p.tensors) {
    p.tensor_off.push_back(p.tensor_arena);
    p.tensor_arena = AlignElems(p.tensor_arena + t.n);
    p.n += t.n;
  }
  // fusion.make_plan: one dtype (float32); in order; a bucket is closed when
  // the next tensor would take it over the cap (a tensor larger than the cap
  // gets a bucket of its own).
  const int64_t cap = static_cast<int64_t>(o.bucket_mb * (1 << 20));
  std::vector<std::vector<int>> groups;
  std::vector<int> current;
  int64_t size = 0;
  for (int i = 0; i < static_cast<int>(p.tensors.size()); ++i) {
    const int64_t bytes = 4 * p.tensors[i].n;
    if (cap > 0 && !current.empty() && size + bytes > cap) {
      groups.push_back(current);
      current.clear();
      size = 0;
    }
    current.push_back(i);
    size += bytes;
  }
  if (!current.empty()) groups.push_back(current);
  int64_t base = 0, kbase = 0, ioff = 0, voff = 0, poff = 0, covered = 0;
  auto align = [](int64_t v) { return (v + 255) / 256 * 256; };
  for (const std::vector<int>& g : groups) {
    Bucket b;
    for (int pass = 0; pass < 2; ++pass) {  // sparse members, then dense
      for (int i : g) {
        const bool dense = p.tensors[i].n < o.min_size;
        if (dense != (pass == 1)) continue;
        b.members.push_back({i, p.tensors[i].n, p.tensor_off[i], b.n, dense});
        b.n += p.tensors[i].n;
        if (dense) {
          b.dense_n += p.tensors[i].n;
          ++p.dense_tensors;
        } else {
          b.sparse_n += p.tensors[i].n;
        }
      }
    }
    b.offsets.push_back(0);
    b.kofs.push_back(0);
    for (const Member& m : b.members) {
      if (m.dense) continue;
      b.offsets.push_back(b.offsets.back() + m.n);
      b.ks.push_back(KForRatio(m.n, o.ratio));
      b.kofs.push_back(b.kofs.back() + b.ks.back());
    }
    b.k = b.kofs.back();
    b.base = base;
    b.kbase = kbase;
    b.ql = dv::core::MakeQsgdLayout(static_cast<uint64_t>(b.k), kQsgdLevels, kQsgdBucket);
    b.icap = b.k > 0 ? GolombCap(b.sparse_n, b.k) : 0;
    b.ioff = ioff;
    b.voff = voff;
    b.pcap = kMaxContainerHeader + b.icap + (b.k > 0 ? static_cast<int64_t>(b.ql.size) : 0) +
             4 * b.dense_n + dp::kCrcBytes;
    b.poff = poff;
    base = AlignElems(base + b.n);
    kbase = AlignElems(kbase + b.k);
    covered += b.n;
    p.total_k += b.k;
    ioff += align(b.icap);
    voff += align(b.k > 0 ? static_cast<int64_t>(b.ql.size) : 0);
    poff += align(b.pcap);
    p.segments += static_cast<int64_t>(b.ks.size());
    p.dense_n += b.dense_n;
    p.buckets.push_back(std::move(b));
  }
  p.bucket_arena = base;
  p.k_arena = kbase;
  p.index_arena = ioff;
  p.value_arena = voff;
  p.payload_arena = poff;
  Expect(covered == p.n, "plan: buckets do not cover the layout");
  return p;
}

void PrintPlan(const Plan& p, const Options& o) {
  int64_t dense_only = 0, alias = 0;
  for (const Bucket& b : p.buckets) {
    dense_only += b.sparse_n == 0;
    alias += b.alias();
  }
  std::printf("# layout %s: %zu tensors, %lld elements (%.1f MB float32); %zu buckets (cap %g "
              "MiB%s, %lld of one tensor, %lld without a sparse section), %lld sparse segments, "
              "%lld dense tensors (< %lld elements, %lld elements); top-k ratio %g: K = %lld\n",
              p.name.c_str(), p.tensors.size(), static_cast<long long>(p.n), 4e-6 * p.n,
              p.buckets.size(), o.bucket_mb, o.bucket_mb > 0 ? "" : ": none, one bucket",
              static_cast<long long>(alias), static_cast<long long>(dense_only),
              static_cast<long long>(p.segments), static_cast<long long>(p.dense_tensors),
              static_cast<long long>(o.min_size), static_cast<long long>(p.dense_n), o.ratio,
              static_cast<long long>(p.total_k));
  std::fflush(stdout);
}

// --------------------------------------------------------- host helpers --

// The exact top-k of x[0, len) (sparsify.h: keys = MagnitudeKey of the bits,
// the k largest, ties to the lower index), ascending.
std::vector<int64_t> HostTopK(const float* x, int64_t len, int64_t k) {
  namespace sp = deepreduce::sparsify;
  std::vector<int64_t> out;
  if (k <= 0) return out;
  std::vector<uint32_t> keys(len);
  for (int64_t j = 0; j < len; ++j) {
    uint32_t bits;
    std::memcpy(&bits, &x[j], 4);
    keys[j] = sp::MagnitudeKey<sp::Float32>(bits);
  }
  std::vector<uint32_t> tmp = keys;
  std::nth_element(tmp.begin(), tmp.begin() + (k - 1), tmp.end(), std::greater<uint32_t>());
  const uint32_t t = tmp[k - 1];  // the k-th largest key
  int64_t above = 0;
  for (int64_t j = 0; j < len; ++j) above += keys[j] > t;
  int64_t ties = k - above;
  out.reserve(k);
  for (int64_t j = 0; j < len; ++j) {
    if (keys[j] > t || (keys[j] == t && ties-- > 0)) out.push_back(j);
  }
  return out;
}

// The bucket container's header (payload_format.h) into out (at least
// kMaxContainerHeader bytes); returns its length.
int BuildContainerHeader(uint8_t* out, const int64_t* meta, const int64_t* sections) {
  uint8_t* p = out;
  std::memcpy(p, dp::kMagic, 4);
  p[4] = dp::kFormatVersion;
  p[5] = kKindBucket;
  p += dp::kFixedBytes;
  p = deepreduce::PutVarint(p, kMetaFields);
  for (int i = 0; i < kMetaFields; ++i) {
    p = deepreduce::PutVarint(p, static_cast<uint64_t>(meta[i]));
  }
  p = deepreduce::PutVarint(p, kSections);
  for (int i = 0; i < kSections; ++i) {
    p = deepreduce::PutVarint(p, static_cast<uint64_t>(sections[i]));
  }
  return static_cast<int>(p - out);
}

// BUCKET_FIELDS: mode, index_codec, value_codec, dtype, n, config, k, count,
// aux0, aux1, dense_n, layout. The codec, dtype and config ids are this
// program's (the wire sizes are what matter here).
void BucketMeta(const Bucket& b, int index, int64_t* meta) {
  const int64_t m[kMetaFields] = {b.sparse_n > 0 ? 1 : 0, di::kCodecGolomb, dv::kCodecQsgd, 1,
                                  b.sparse_n, 0, b.k, b.k, 0, 0, b.dense_n, 0x5eed0000 + index};
  std::memcpy(meta, m, sizeof(m));
}

// Host self-checks (no GPU): the top-k reference against a full sort, the
// container header against the library's parser.
void HostSelfCheck() {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t len = 1 + static_cast<int64_t>(rng() % 300);
    const int64_t k = 1 + static_cast<int64_t>(rng() % len);
    std::vector<float> x(len);
    for (float& v : x) {
      const int r = static_cast<int>(rng() % 8);  // plenty of ties, +-0, NaN, Inf
      v = r == 0 ? 0.0f : r == 1 ? -0.0f : r == 2 ? NAN : r == 3 ? -INFINITY
                                                         : static_cast<float>(rng() % 5) - 2.0f;
    }
    std::vector<std::pair<uint32_t, int64_t>> order(len);
    for (int64_t j = 0; j < len; ++j) {
      uint32_t bits;
      std::memcpy(&bits, &x[j], 4);
      order[j] = {deepreduce::sparsify::MagnitudeKey<deepreduce::sparsify::Float32>(bits), j};
    }
    std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    std::vector<int64_t> want;
    for (int64_t j = 0; j < k; ++j) want.push_back(order[j].second);
    std::sort(want.begin(), want.end());
    Expect(HostTopK(x.data(), len, k) == want, "self-check: HostTopK differs from a full sort");
  }
  Bucket b;
  b.sparse_n = 1315725312;
  b.k = 13157254;
  b.dense_n = 40000;
  int64_t meta[kMetaFields];
  BucketMeta(b, 3, meta);
  const int64_t sections[kSections] = {16000000, 13300000, 0, 160000};
  std::vector<uint8_t> buf(kMaxContainerHeader + 16, 0);
  const int len = BuildContainerHeader(buf.data(), meta, sections);
  Expect(len <= kMaxContainerHeader, "self-check: header too long");
  const int64_t size = len + sections[0] + sections[1] + sections[3] + dp::kCrcBytes;
  dp::core::Header h;
  const auto st = dp::core::ParseHeader(buf.data(), size, &h);
  Expect(st.ok(), "self-check: container header does not parse: " + st.message());
  Expect(h.kind == kKindBucket && h.num_meta == kMetaFields && h.num_sections == kSections &&
             h.body_at == len,
         "self-check: container header fields");
  int64_t got[kMetaFields];
  dp::core::ReadMeta(buf.data(), size, h, got);
  Expect(std::memcmp(got, meta, sizeof(got)) == 0, "self-check: container meta round trip");
  std::printf("# host self-checks passed (top-k reference vs full sort, 200 cases; container "
              "header round trip)\n");
}

// -------------------------------------------------------------- kernels --

constexpr int kThreads = 256;
int g_grid = 1024;  // blocks of the grid-stride kernels (set from the SM count)

int Blocks(int64_t n) {
  const int64_t want = (n + kThreads - 1) / kThreads;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(g_grid, want)));
}

// N(0, 1) * scale with 1 % ten times larger, a pure function of (seed, i).
__global__ void GradientKernel(float* x, int64_t n, uint64_t seed, float scale) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const uint64_t h = deepreduce::Mix64(seed ^ deepreduce::Mix64(static_cast<uint64_t>(i) +
                                                                  deepreduce::kGolden64));
    const float u1 = (static_cast<float>(h >> 40) + 0.5f) * (1.0f / 16777216.0f);
    const float u2 = static_cast<float>((h >> 16) & 0xffffffu) * (1.0f / 16777216.0f);
    float z = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    if ((h & 0xffffu) % 100u == 0u) z *= 10.0f;
    x[i] = z * scale;
  }
}

// u = g + r; *bad = 1 if some |u| > limit or is NaN (AddWithin).
__global__ void AddWithinKernel(const float* g, const float* r, float* u, int64_t n, float limit,
                                unsigned* bad) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  bool ok = true;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float v = g[i] + r[i];
    u[i] = v;
    ok = ok && fabsf(v) <= limit;
  }
  if (__any_sync(0xffffffffu, !ok) && (threadIdx.x & 31) == 0) *bad = 1u;
}

// r[idx[i]] -= dec[i] (positions distinct).
__global__ void ScatterSubtractKernel(float* r, const int64_t* idx, const float* dec, int64_t k) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < k;
       i += stride) {
    const int64_t p = idx[i];
    r[p] = r[p] - dec[i];
  }
}

// sum[idx[i]] += val[i] (positions distinct within one payload; payloads are
// added by successive launches on one stream, so the order is payload order).
__global__ void ScatterAddKernel(float* sum, const int64_t* idx, const float* val, int64_t k) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < k;
       i += stride) {
    const int64_t p = idx[i];
    sum[p] = sum[p] + val[i];
  }
}

// sum[i] += the i-th little-endian float32 of raw (any alignment).
__global__ void DenseAddKernel(float* sum, const uint8_t* raw, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const uint8_t* q = raw + 4 * i;
    const uint32_t bits = static_cast<uint32_t>(q[0]) | (static_cast<uint32_t>(q[1]) << 8) |
                          (static_cast<uint32_t>(q[2]) << 16) | (static_cast<uint32_t>(q[3]) << 24);
    sum[i] = sum[i] + __uint_as_float(bits);
  }
}

void Generate(float* d, int64_t n, uint64_t seed, float scale) {
  if (n == 0) return;
  GradientKernel<<<Blocks(n), kThreads, 0, g_stream>>>(d, n, seed, scale);
  Cuda(cudaGetLastError(), "GradientKernel launch");
}

// ------------------------------------------------------------ the step --

// One received payload of one bucket, parsed.
struct Parsed {
  int64_t k = 0;
  golomb::Layout gl{};
  std::vector<uint64_t> tab;  // first[nb], off[nb + 1], param[nb]
  const uint8_t* d_gstream = nullptr;
  const uint8_t* d_value = nullptr;
  int64_t value_bytes = 0;
  dv::QsgdLayout ql{};
  const uint8_t* d_dense = nullptr;
};

struct Step {
  const Plan& plan;
  void* s = nullptr;  // the stream as the launchers take it
  // Device memory.
  Buf tensors;   // the model's gradient tensors (tensor order); the receiver's output
  Buf flat;      // fused buckets (bucket order; unused for one-tensor buckets)
  Buf u;         // compensated sparse sections (bucket order)
  Buf residual;  // residual memory (bucket order)
  Buf sum;       // the receiver's summed buckets (bucket order)
  Buf idx, val, dec;     // per bucket: K positions, values (bits), local decode
  Buf ipay, vpay, pay;   // index payloads, value payloads, containers
  Buf store;             // kMaxReplicas copies of the containers
  Buf ridx, rval;        // receiver: kMaxReplicas x K positions and values
  Buf flags;             // compensate's per-bucket range flags
  Buf topk_scratch, auto_scratch, genc_scratch, gdec_scratch, qsgd_scratch;
  size_t topk_bytes = 0, genc_bytes = 0, gdec_bytes = 0;
  HostBuf hflags, hhead, hprefix, hstage;
  size_t stage_bytes = 0;
  // Per bucket, of the last sender run: index and container payload sizes.
  std::vector<int64_t> ilen, plen;
  std::vector<std::vector<int64_t>> store_len;  // [replica][bucket]

  explicit Step(const Plan& p) : plan(p), s(static_cast<void*>(g_stream)) {}

  float* Flat(const Bucket& b) const {
    return b.alias() ? tensors.as<float>() + b.members[0].src : flat.as<float>() + b.base;
  }

  void Allocate() {
    const int64_t nt = plan.tensor_arena, n = plan.bucket_arena, k = plan.k_arena;
    // Scratch sizes: the largest over the buckets.
    for (const Bucket& b : plan.buckets) {
      if (b.k == 0) continue;
      sg::GpuStatus st{0, ""};
      topk_bytes = std::max(topk_bytes, sg::SegmentedScratchBytes(
                                            b.offsets.data(), b.ks.data(),
                                            static_cast<int64_t>(b.ks.size()), &st));
      Launch(st);
      for (int lb = golomb::kAutoMinLog2Block; lb <= golomb::kAutoMaxLog2Block; ++lb) {
        ig::GpuStatus gs{0, ""};
        genc_bytes = std::max(genc_bytes, ig::GolombEncodeScratchBytes(b.k, lb, &gs));
        Launch(gs);
      }
      const int64_t nb = (b.k + (int64_t{1} << golomb::kMinLog2Block) - 1) >> golomb::kMinLog2Block;
      gdec_bytes = std::max(gdec_bytes, ig::GolombDecodeScratchBytes(nb));
      stage_bytes = std::max<size_t>(stage_bytes, b.icap);
    }
    const double gb = 1e-9 * (4.0 * nt + 4.0 * n * 4 + 16.0 * k + 12.0 * kMaxReplicas * k +
                              plan.index_arena + plan.value_arena +
                              (1.0 + kMaxReplicas) * plan.payload_arena + topk_bytes);
    size_t free_b = 0, total_b = 0;
    Cuda(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    std::printf("# device memory: %.2f GB of buffers (top-k scratch %.1f MB), %.1f GB free\n", gb,
                topk_bytes / 1e6, free_b / 1e9);
    std::fflush(stdout);
    Expect(gb * 1e9 < 0.95 * static_cast<double>(free_b), "not enough device memory");
    tensors = Buf(4 * nt);
    flat = Buf(4 * n);
    u = Buf(4 * n);
    residual = Buf(4 * n);
    sum = Buf(4 * n);
    idx = Buf(8 * k);
    val = Buf(4 * k);
    dec = Buf(4 * k);
    ipay = Buf(plan.index_arena);
    vpay = Buf(plan.value_arena);
    pay = Buf(plan.payload_arena);
    store = Buf(static_cast<size_t>(kMaxReplicas) * plan.payload_arena);
    ridx = Buf(8 * k * kMaxReplicas);
    rval = Buf(4 * k * kMaxReplicas);
    flags = Buf(4 * plan.buckets.size());
    topk_scratch = Buf(topk_bytes);
    auto_scratch = Buf(ig::GolombAutoScratchBytes());
    genc_scratch = Buf(genc_bytes);
    gdec_scratch = Buf(gdec_bytes);
    qsgd_scratch = Buf(vg::QsgdScratchBytes());
    hflags = HostBuf(4 * plan.buckets.size());
    hhead = HostBuf(static_cast<size_t>(kMaxContainerHeader) * plan.buckets.size());
    hprefix = HostBuf(kPrefixBytes);
    hstage = HostBuf(stage_bytes + 64);
    ilen.assign(plan.buckets.size(), 0);
    plen.assign(plan.buckets.size(), 0);
    store_len.assign(kMaxReplicas, std::vector<int64_t>(plan.buckets.size(), 0));
    // No uninitialised bytes where whole arenas are copied or compared (the
    // padding between slots included).
    for (Buf* b : {&flat, &pay, &ipay, &vpay, &idx, &val, &dec, &ridx, &rval}) {
      Cuda(cudaMemsetAsync(b->p, 0, b->bytes, g_stream), "memset");
    }
  }

  // Replica r's gradient and initial residual.
  void Init(int replica) {
    Generate(tensors.as<float>(), plan.tensor_arena, 1 + replica, 1.0f);
    Generate(residual.as<float>(), plan.bucket_arena, 1001 + replica, 1.0f);
  }

  // ---- sender steps, one bucket each ----
  void FusionPack(const Bucket& b) {
    if (b.alias()) return;  // Bucket.pack of one tensor is a reshape
    std::vector<void*> dst;
    std::vector<const void*> src;
    std::vector<int64_t> bytes;
    for (const Member& m : b.members) {
      dst.push_back(flat.as<float>() + b.base + m.at);
      src.push_back(tensors.as<float>() + m.src);
      bytes.push_back(4 * m.n);
    }
    Launch(fg::CopyPieces(dst.data(), src.data(), bytes.data(), static_cast<int>(dst.size()), s));
  }

  void Compensate(const Bucket& b, int bi) {
    if (b.sparse_n == 0) return;
    unsigned* flag = flags.as<unsigned>() + bi;
    Cuda(cudaMemsetAsync(flag, 0, 4, g_stream), "memset flag");
    AddWithinKernel<<<Blocks(b.sparse_n), kThreads, 0, g_stream>>>(
        Flat(b), residual.as<float>() + b.base, u.as<float>() + b.base, b.sparse_n, kValueLimit,
        flag);
    Cuda(cudaGetLastError(), "AddWithinKernel launch");
    unsigned* h = hflags.as<unsigned>() + bi;
    Cuda(cudaMemcpyAsync(h, flag, 4, cudaMemcpyDeviceToHost, g_stream), "flag to host");
    Cuda(cudaStreamSynchronize(g_stream), "sync");
    Expect(*h == 0, "compensate: a value is out of QSGD's range (the dense fallback is not "
                    "benchmarked)");
  }

  void TopK(const Bucket& b) {
    if (b.k == 0) return;
    Launch(sg::SegmentedTopK<uint32_t>(
        sg::FloatKind::kFloat32, reinterpret_cast<const uint32_t*>(u.as<float>() + b.base),
        b.offsets.data(), b.ks.data(), static_cast<int64_t>(b.ks.size()),
        idx.as<int64_t>() + b.kbase, val.as<uint32_t>() + b.kbase, topk_scratch.p, topk_bytes,
        s));
  }

  void GolombEncode(const Bucket& b, int bi) {
    if (b.k == 0) {
      ilen[bi] = 0;
      return;
    }
    const int64_t* d_idx = idx.as<int64_t>() + b.kbase;
    const uint64_t n = static_cast<uint64_t>(b.sparse_n);
    int lb = 0;
    Launch(ig::GolombAutoBlock(d_idx, b.k, n, auto_scratch.p, auto_scratch.bytes, s, &lb));
    int64_t sbytes = 0;
    Launch(ig::GolombSize(d_idx, b.k, lb, genc_scratch.p, genc_bytes, s, &sbytes));
    const golomb::Layout layout = golomb::MakeLayout(n, static_cast<uint64_t>(b.k), lb,
                                                     static_cast<uint64_t>(sbytes));
    const int64_t table_bytes = static_cast<int64_t>(di::core::GolombTableBytes(layout));
    uint8_t header[ig::kMaxWriteBytes + 32];
    uint8_t* p = di::PutCommonHeader(header, di::kCodecGolomb, n, static_cast<uint64_t>(b.k));
    *p++ = static_cast<uint8_t>(lb);
    p = deepreduce::PutVarint(p, static_cast<uint64_t>(sbytes));
    const int hlen = static_cast<int>(p - header);
    Expect(hlen <= ig::kMaxWriteBytes, "golomb header longer than WriteBytes takes");
    const int64_t total = hlen + table_bytes + sbytes;
    Expect(total <= b.icap, "golomb payload of " + std::to_string(total) +
                                " bytes exceeds its slot (" + std::to_string(b.icap) + ")");
    uint8_t* d_out = ipay.as<uint8_t>() + b.ioff;
    Launch(ig::WriteBytes(d_out, header, hlen, s));
    Launch(ig::GolombWrite(d_idx, b.k, layout, genc_scratch.p, genc_bytes, d_out + hlen,
                           d_out + hlen + table_bytes, s));
    ilen[bi] = total;
  }

  void QsgdEncode(const Bucket& b, int bi) {
    if (b.k == 0) return;
    vg::QsgdEncodeResult er;
    Launch(vg::QsgdEncode(reinterpret_cast<const float*>(val.as<uint32_t>() + b.kbase), b.k,
                          kQsgdLevels, kQsgdBucket, 1000 + bi, vpay.as<uint8_t>() + b.voff,
                          static_cast<int64_t>(b.ql.size), qsgd_scratch.p, qsgd_scratch.bytes, s,
                          &er));
    Expect(er.first_bad == b.k, "qsgd encode flagged value " + std::to_string(er.first_bad));
  }

  void CheckQsgdDecode(const vg::QsgdDecodeResult& dr, const dv::QsgdLayout& l, int64_t k) {
    Expect(dr.first_bad_scale == static_cast<int64_t>(l.num_buckets) && dr.first_bad_code == k &&
               (l.code_bytes == 0 || dv::core::QsgdPaddingOk(l, dr.last_code_byte)),
           "qsgd decode rejected a payload");
  }

  void LocalDecode(const Bucket& b) {
    if (b.k == 0) return;
    vg::QsgdDecodeResult dr;
    Launch(vg::QsgdDecode(vpay.as<uint8_t>() + b.voff, static_cast<int64_t>(b.ql.size), b.k,
                          kQsgdLevels, kQsgdBucket, dec.as<float>() + b.kbase, qsgd_scratch.p,
                          qsgd_scratch.bytes, s, &dr));
    CheckQsgdDecode(dr, b.ql, b.k);
  }

  void ResidualUpdate(const Bucket& b) {
    if (b.sparse_n == 0) return;
    Cuda(cudaMemcpyAsync(residual.as<float>() + b.base, u.as<float>() + b.base, 4 * b.sparse_n,
                         cudaMemcpyDeviceToDevice, g_stream),
         "residual copy");
    ScatterSubtractKernel<<<Blocks(b.k), kThreads, 0, g_stream>>>(
        residual.as<float>() + b.base, idx.as<int64_t>() + b.kbase, dec.as<float>() + b.kbase,
        b.k);
    Cuda(cudaGetLastError(), "ScatterSubtractKernel launch");
  }

  void Pack(const Bucket& b, int bi) {
    int64_t meta[kMetaFields];
    BucketMeta(b, bi, meta);
    const int64_t vbytes = b.k > 0 ? static_cast<int64_t>(b.ql.size) : 0;
    const int64_t sections[kSections] = {ilen[bi], vbytes, 0, 4 * b.dense_n};
    uint8_t* h = hhead.as<uint8_t>() + static_cast<size_t>(kMaxContainerHeader) * bi;
    const int hl = BuildContainerHeader(h, meta, sections);
    const int64_t size = hl + ilen[bi] + vbytes + 4 * b.dense_n + dp::kCrcBytes;
    Expect(size <= b.pcap, "container exceeds its slot");
    uint8_t* d = pay.as<uint8_t>() + b.poff;
    Cuda(cudaMemcpyAsync(d, h, hl, cudaMemcpyHostToDevice, g_stream), "header copy");
    void* dst[3] = {d + hl, d + hl + ilen[bi], d + hl + ilen[bi] + vbytes};
    const void* src[3] = {ipay.as<uint8_t>() + b.ioff, vpay.as<uint8_t>() + b.voff,
                          Flat(b) + b.sparse_n};
    const int64_t bytes[3] = {ilen[bi], vbytes, 4 * b.dense_n};
    Launch(fg::CopyPieces(dst, src, bytes, 3, s));
    Cuda(cudaMemsetAsync(d + size - dp::kCrcBytes, 0, dp::kCrcBytes, g_stream), "crc");
    plen[bi] = size;
  }

  void SendBucket(const Bucket& b, int bi) {
    FusionPack(b);
    Compensate(b, bi);
    TopK(b);
    GolombEncode(b, bi);
    QsgdEncode(b, bi);
    LocalDecode(b);
    ResidualUpdate(b);
    Pack(b, bi);
  }

  void SendAll() {
    for (size_t bi = 0; bi < plan.buckets.size(); ++bi) {
      SendBucket(plan.buckets[bi], static_cast<int>(bi));
    }
  }

  // ---- receiver steps ----
  const uint8_t* Payload(int replica, const Bucket& b) const {
    return store.as<uint8_t>() + static_cast<size_t>(replica) * plan.payload_arena + b.poff;
  }

  // The section lengths of a container (for the statistics).
  void SectionLengths(const uint8_t* d, int64_t size, int64_t* len) {
    const int64_t prefix = std::min<int64_t>(size, kPrefixBytes);
    uint8_t* hp = hprefix.as<uint8_t>();
    Cuda(cudaMemcpy(hp, d, prefix, cudaMemcpyDeviceToHost), "prefix to host");
    dp::core::Header h;
    const auto st = dp::core::ParseHeader(hp, size, &h);
    Expect(st.ok(), "container: " + st.message());
    const uint8_t* p = hp + h.lengths_at;
    for (int i = 0; i < kSections; ++i) {
      uint64_t v = 0;
      Expect(deepreduce::ReadVarint(&p, hp + h.body_at, &v) == deepreduce::VarintStatus::kOk,
             "container: section length");
      len[i] = static_cast<int64_t>(v);
    }
  }

  Parsed Parse(const Bucket& b, const uint8_t* d, int64_t size) {
    Parsed r;
    const int64_t prefix = std::min<int64_t>(size, kPrefixBytes);
    uint8_t* hp = hprefix.as<uint8_t>();
    Cuda(cudaMemcpyAsync(hp, d, prefix, cudaMemcpyDeviceToHost, g_stream), "prefix to host");
    Cuda(cudaStreamSynchronize(g_stream), "sync");
    dp::core::Header h;
    auto st = dp::core::ParseHeader(hp, size, &h);
    Expect(st.ok(), "container: " + st.message());
    Expect(h.kind == kKindBucket && h.num_meta == kMetaFields && h.num_sections == kSections,
           "container: not a bucket payload");
    int64_t meta[kMetaFields];
    dp::core::ReadMeta(hp, size, h, meta);
    Expect(meta[4] == b.sparse_n && meta[6] == b.k && meta[10] == b.dense_n,
           "container: fields of another bucket");
    int64_t off[kSections], len[kSections];
    {
      const uint8_t* p = hp + h.lengths_at;
      int64_t at = h.body_at;
      for (int i = 0; i < kSections; ++i) {
        uint64_t v = 0;
        Expect(deepreduce::ReadVarint(&p, hp + h.body_at, &v) == deepreduce::VarintStatus::kOk,
               "container: section length");
        off[i] = at;
        len[i] = static_cast<int64_t>(v);
        at += len[i];
      }
    }
    Expect(len[2] == 0 && len[3] == 4 * b.dense_n, "container: perm or dense section size");
    r.d_dense = d + off[3];
    r.k = b.k;
    if (b.k == 0) {
      Expect(len[0] == 0 && len[1] == 0, "container: sections of an empty sparse part");
      return r;
    }
    // Index section: common header and golomb fields from the prefix.
    Expect(off[0] < prefix, "container: index header outside the prefix");
    di::CommonHeader ih;
    int64_t ibody = 0;
    st = di::core::ParseHeaderPrefix(hp + off[0], std::min<int64_t>(prefix - off[0], len[0]),
                                     len[0], di::kCodecGolomb, false, &ih, &ibody);
    Expect(st.ok(), "index: " + st.message());
    Expect(ih.n == static_cast<uint64_t>(b.sparse_n) && ih.k == static_cast<uint64_t>(b.k),
           "index: header of another bucket");
    uint64_t table_at = 0, stream_at = 0;
    st = di::core::ParseGolombLayoutPrefix(ih, hp + off[0] + ibody,
                                           hp + std::min<int64_t>(prefix, off[0] + len[0]),
                                           static_cast<uint64_t>(len[0] - ibody), &r.gl,
                                           &table_at, &stream_at);
    Expect(st.ok(), "golomb: " + st.message());
    const int64_t table_bytes = static_cast<int64_t>(stream_at - table_at);
    Expect(static_cast<size_t>(table_bytes) + dv::qsgd::kFixedBytes <= hstage.bytes,
           "golomb table larger than the staging buffer");
    // The table and the qsgd fixed fields, one synchronization.
    uint8_t* hs = hstage.as<uint8_t>();
    const int64_t vfix = std::min<int64_t>(len[1], dv::qsgd::kFixedBytes);
    if (table_bytes > 0) {
      Cuda(cudaMemcpyAsync(hs, d + off[0] + ibody + table_at, table_bytes,
                           cudaMemcpyDeviceToHost, g_stream),
           "table to host");
    }
    Cuda(cudaMemcpyAsync(hs + table_bytes, d + off[1], vfix, cudaMemcpyDeviceToHost, g_stream),
         "qsgd fields to host");
    Cuda(cudaStreamSynchronize(g_stream), "sync");
    const uint64_t nb = r.gl.num_blocks;
    r.tab.assign(3 * nb + 1, 0);
    st = di::core::ParseGolombTable(ih, r.gl, hs, hs + table_bytes, r.tab.data(),
                                    r.tab.data() + nb, r.tab.data() + 2 * nb + 1);
    Expect(st.ok(), "golomb table: " + st.message());
    r.d_gstream = d + off[0] + ibody + stream_at;
    uint64_t vk = 0;
    st = dv::core::ParseHeaderBytes(hs + table_bytes, len[1], dv::kCodecQsgd, &vk);
    Expect(st.ok(), "qsgd: " + st.message());
    Expect(vk == static_cast<uint64_t>(b.k), "qsgd: K differs from the index's");
    st = dv::core::ParseQsgdFixed(hs + table_bytes, len[1], vk, &r.ql);
    Expect(st.ok(), "qsgd: " + st.message());
    r.d_value = d + off[1];
    r.value_bytes = len[1];
    return r;
  }

  int64_t* RIdx(int p, const Bucket& b) const {
    return ridx.as<int64_t>() + static_cast<size_t>(p) * plan.k_arena + b.kbase;
  }
  float* RVal(int p, const Bucket& b) const {
    return rval.as<float>() + static_cast<size_t>(p) * plan.k_arena + b.kbase;
  }

  void DecodeIndex(const Bucket& b, const Parsed& r, int p) {
    if (b.k == 0) return;
    int64_t bad = -1;
    Launch(ig::GolombDecode(r.d_gstream, r.tab.data(), b.k, r.gl,
                            static_cast<uint64_t>(b.sparse_n), gdec_scratch.p, gdec_bytes,
                            RIdx(p, b), s, &bad));
    Expect(bad == static_cast<int64_t>(r.gl.num_blocks),
           "golomb decode rejected block " + std::to_string(bad));
  }

  void DecodeValues(const Bucket& b, const Parsed& r, int p) {
    if (b.k == 0) return;
    vg::QsgdDecodeResult dr;
    Launch(vg::QsgdDecode(r.d_value, r.value_bytes, b.k, r.ql.s, r.ql.bucket, RVal(p, b),
                          qsgd_scratch.p, qsgd_scratch.bytes, s, &dr));
    CheckQsgdDecode(dr, r.ql, b.k);
  }

  void ZeroSum(const Bucket& b) {
    Cuda(cudaMemsetAsync(sum.as<float>() + b.base, 0, 4 * b.n, g_stream), "zero sum");
  }

  void AddPayload(const Bucket& b, const Parsed& r, int p) {
    float* out = sum.as<float>() + b.base;
    if (b.k > 0) {
      ScatterAddKernel<<<Blocks(b.k), kThreads, 0, g_stream>>>(out, RIdx(p, b), RVal(p, b), b.k);
      Cuda(cudaGetLastError(), "ScatterAddKernel launch");
    }
    if (b.dense_n > 0) {
      DenseAddKernel<<<Blocks(b.dense_n), kThreads, 0, g_stream>>>(out + b.sparse_n, r.d_dense,
                                                                   b.dense_n);
      Cuda(cudaGetLastError(), "DenseAddKernel launch");
    }
  }

  void Unpack(const Bucket& b) {
    if (b.alias()) return;  // the summed bucket is the tensor
    std::vector<void*> dst;
    std::vector<const void*> src;
    std::vector<int64_t> bytes;
    for (const Member& m : b.members) {
      dst.push_back(tensors.as<float>() + m.src);
      src.push_back(sum.as<float>() + b.base + m.at);
      bytes.push_back(4 * m.n);
    }
    Launch(fg::CopyPieces(dst.data(), src.data(), bytes.data(), static_cast<int>(dst.size()), s));
  }

  // The whole receiver for payloads[0..P) (replica numbers into the store).
  void ReceiveAll(const std::vector<int>& from) {
    for (size_t bi = 0; bi < plan.buckets.size(); ++bi) {
      const Bucket& b = plan.buckets[bi];
      ZeroSum(b);
      for (size_t p = 0; p < from.size(); ++p) {
        const Parsed r = Parse(b, Payload(from[p], b), store_len[from[p]][bi]);
        DecodeIndex(b, r, static_cast<int>(p));
        DecodeValues(b, r, static_cast<int>(p));
        AddPayload(b, r, static_cast<int>(p));
      }
      Unpack(b);
    }
  }
};

// ---------------------------------------------------------------- rows --

struct PendingRow {
  std::string step, reads;
  double bytes;
  Timing t;
  std::string note;
};

std::string Mb(double bytes, const char* what) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f MB %s", bytes / 1e6, what);
  return buf;
}

// A sampled segment: bucket, segment, and its tensor.
struct Sample {
  int bucket, segment;
};

std::vector<Sample> PickSamples(const Plan& p) {
  std::vector<Sample> all;
  int64_t best = -1;
  Sample largest{-1, -1};
  for (int bi = 0; bi < static_cast<int>(p.buckets.size()); ++bi) {
    const Bucket& b = p.buckets[bi];
    for (int si = 0; si < static_cast<int>(b.ks.size()); ++si) {
      all.push_back({bi, si});
      const int64_t len = b.offsets[si + 1] - b.offsets[si];
      if (len > best) {
        best = len;
        largest = {bi, si};
      }
    }
  }
  std::vector<Sample> out;
  if (all.empty()) return out;
  auto add = [&](Sample s) {
    for (const Sample& o : out) {
      if (o.bucket == s.bucket && o.segment == s.segment) return;
    }
    out.push_back(s);
  };
  add(all.front());
  add(largest);
  add(all.back());
  std::mt19937_64 rng(11);
  for (int i = 0; i < 3; ++i) add(all[rng() % all.size()]);
  return out;
}

// Everything for one layout; returns normally only if every check passed.
void RunLayout(const Plan& plan, const Options& o) {
  PrintPlan(plan, o);
  Step st(plan);
  st.Allocate();
  const size_t nb = plan.buckets.size();
  std::vector<PendingRow> rows;
  auto row = [&](const std::string& step, const std::string& reads, double bytes, Timing t,
                 const std::string& note = "") { rows.push_back({step, reads, bytes, t, note}); };
  auto print_rows = [&]() {
    TableHeader();
    for (const PendingRow& r : rows) Row(r.step.c_str(), r.reads.c_str(), r.bytes, r.t, r.note);
  };
  try {
    const double dense_bytes = 4.0 * plan.n;
    int64_t sparse_n = 0;
    for (const Bucket& b : plan.buckets) sparse_n += b.sparse_n;
    const double sparse_bytes = 4.0 * sparse_n, K = static_cast<double>(plan.total_k);
    const std::string rd_dense = Mb(dense_bytes, "dense"), rd_sparse = Mb(sparse_bytes, "dense");
    double fused = 0;  // bytes fusion copies (buckets of several tensors)
    for (const Bucket& b : plan.buckets) fused += b.alias() ? 0.0 : 4.0 * b.n;
    const std::string rd_fused = Mb(fused, "copied");

    // ------------------------------------------------------ sender --
    st.Init(0);
    st.SendAll();  // sizes every payload, fails early on an error
    Cuda(cudaStreamSynchronize(g_stream), "sync");
    auto each = [&](const std::function<void(const Bucket&, int)>& fn) {
      return [&, fn]() {
        for (size_t bi = 0; bi < nb; ++bi) fn(plan.buckets[bi], static_cast<int>(bi));
      };
    };
    row("fusion pack (CopyPieces)", rd_fused, fused,
        Time(each([&](const Bucket& b, int) { st.FusionPack(b); })), "one-tensor buckets: none");
    row("compensate u = g + r (+ range)", rd_sparse, 2 * sparse_bytes,
        Time(each([&](const Bucket& b, int bi) { st.Compensate(b, bi); })), "reads g and r");
    row("segmented top-k", rd_sparse, sparse_bytes,
        Time(each([&](const Bucket& b, int) { st.TopK(b); })));
    row("golomb encode (auto block)", Mb(8 * K, "positions"), 8 * K,
        Time(each([&](const Bucket& b, int bi) { st.GolombEncode(b, bi); })), "int64 positions");
    row("qsgd encode (7 bit, bucket 512)", Mb(4 * K, "values"), 4 * K,
        Time(each([&](const Bucket& b, int bi) { st.QsgdEncode(b, bi); })));
    row("qsgd local decode", Mb(4 * K, "values"), 4 * K,
        Time(each([&](const Bucket& b, int) { st.LocalDecode(b); })), "for the residual");
    row("residual update (copy + scatter)", rd_sparse, sparse_bytes,
        Time(each([&](const Bucket& b, int) { st.ResidualUpdate(b); })));
    int64_t payload = 0;
    for (size_t bi = 0; bi < nb; ++bi) payload += st.plen[bi];
    row("pack payload (header + CopyPieces)", Mb(static_cast<double>(payload), "payload"),
        static_cast<double>(payload),
        Time(each([&](const Bucket& b, int bi) { st.Pack(b, bi); })), "CRC32C not computed");
    row("SENDER TOTAL", rd_dense, dense_bytes, Time([&] { st.SendAll(); }),
        std::to_string(nb) + " buckets in sequence");

    // ------------------------------------------ replicas and checks --
    const std::vector<Sample> samples = PickSamples(plan);
    struct SampleData {
      std::vector<float> g, r_old;
    };
    std::vector<SampleData> before(samples.size());
    std::vector<int64_t> h_idx;
    std::vector<uint32_t> h_val;
    std::vector<float> h_dec;
    for (int rep = 0; rep < kMaxReplicas; ++rep) {
      st.Init(rep);
      Cuda(cudaStreamSynchronize(g_stream), "sync");
      if (rep == 0) {
        for (size_t i = 0; i < samples.size(); ++i) {
          const Bucket& b = plan.buckets[samples[i].bucket];
          const int64_t off = b.offsets[samples[i].segment];
          const int64_t len = b.offsets[samples[i].segment + 1] - off;
          const Member& m = b.members[samples[i].segment];  // sparse members come first
          before[i].g = Download<float>(st.tensors.as<float>() + m.src, len);
          before[i].r_old = Download<float>(st.residual.as<float>() + b.base + off, len);
        }
      }
      st.SendAll();
      Cuda(cudaStreamSynchronize(g_stream), "sync");
      Cuda(cudaMemcpy(st.store.as<uint8_t>() + static_cast<size_t>(rep) * plan.payload_arena,
                      st.pay.p, plan.payload_arena, cudaMemcpyDeviceToDevice),
           "payload store");
      st.store_len[rep] = st.plen;
      if (rep != 0) continue;
      // Sender checks on replica 0.
      h_idx = Download<int64_t>(st.idx.p, plan.k_arena);
      h_val = Download<uint32_t>(st.val.p, plan.k_arena);
      h_dec = Download<float>(st.dec.p, plan.k_arena);
      for (const Bucket& b : plan.buckets) {
        for (size_t si = 0; si < b.ks.size(); ++si) {
          const int64_t lo = b.offsets[si], hi = b.offsets[si + 1];
          for (int64_t j = b.kofs[si]; j < b.kofs[si + 1]; ++j) {
            const int64_t p = h_idx[b.kbase + j];
            Expect(p >= lo && p < hi && (j == b.kofs[si] || p > h_idx[b.kbase + j - 1]),
                   "segmented top-k: positions not ascending inside their segment");
          }
        }
        // The local decode within one level of the selected values.
        for (int64_t q = 0; q < b.k; q += kQsgdBucket) {
          const int64_t e = std::min<int64_t>(b.k, q + kQsgdBucket);
          float mx = 0.0f;
          for (int64_t i = q; i < e; ++i) {
            float v;
            std::memcpy(&v, &h_val[b.kbase + i], 4);
            mx = std::max(mx, std::fabs(v));
          }
          for (int64_t i = q; i < e; ++i) {
            float v;
            std::memcpy(&v, &h_val[b.kbase + i], 4);
            Expect(std::fabs(h_dec[b.kbase + i] - v) <= mx / kQsgdLevels * 1.0001f,
                   "qsgd: local decode error above one level");
          }
        }
      }
      for (size_t i = 0; i < samples.size(); ++i) {
        const Bucket& b = plan.buckets[samples[i].bucket];
        const int si = samples[i].segment;
        const int64_t off = b.offsets[si], len = b.offsets[si + 1] - off;
        const std::vector<float> packed = Download<float>(st.Flat(b) + off, len);
        const std::vector<float> uu = Download<float>(st.u.as<float>() + b.base + off, len);
        const std::vector<float> r_new =
            Download<float>(st.residual.as<float>() + b.base + off, len);
        Expect(std::memcmp(packed.data(), before[i].g.data(), 4 * len) == 0,
               "fusion pack: bucket differs from the tensor");
        for (int64_t j = 0; j < len; ++j) {
          const float want = before[i].g[j] + before[i].r_old[j];
          Expect(std::memcmp(&uu[j], &want, 4) == 0, "compensate: u != g + r");
        }
        const std::vector<int64_t> ref = HostTopK(uu.data(), len, b.ks[si]);
        std::vector<float> r_want = uu;
        for (int64_t j = 0; j < b.ks[si]; ++j) {
          const int64_t at = b.kbase + b.kofs[si] + j;
          Expect(h_idx[at] - off == ref[j],
                 "segmented top-k: segment " + std::to_string(si) + " of bucket " +
                     std::to_string(samples[i].bucket) + " differs from the host's exact top-k");
          Expect(std::memcmp(&h_val[at], &uu[ref[j]], 4) == 0, "segmented top-k: value != x");
          r_want[ref[j]] = uu[ref[j]] - h_dec[at];
        }
        Expect(std::memcmp(r_new.data(), r_want.data(), 4 * len) == 0,
               "residual update: r' != u - decoded at the positions, u elsewhere");
      }
    }
    // Replica 0's payload, section by section.
    int64_t hdr = 0, ib = 0, vb = 0, db = 0;
    for (size_t bi = 0; bi < nb; ++bi) {
      int64_t len[kSections];
      const int64_t size = st.store_len[0][bi];
      st.SectionLengths(st.Payload(0, plan.buckets[bi]), size, len);
      ib += len[0];
      vb += len[1];
      db += len[3];
      hdr += size - len[0] - len[1] - len[2] - len[3];  // container header + CRC
    }
    const int64_t payload0 = hdr + ib + vb + db;

    // ---------------------------------------------------- receiver --
    for (int P : kReceivers) {
      std::vector<int> from(P);
      for (int p = 0; p < P; ++p) from[p] = p;
      std::vector<Parsed> parsed(nb * P);
      auto parse_all = [&]() {
        for (size_t bi = 0; bi < nb; ++bi) {
          for (int p = 0; p < P; ++p) {
            parsed[bi * P + p] = st.Parse(plan.buckets[bi], st.Payload(p, plan.buckets[bi]),
                                          st.store_len[p][bi]);
          }
        }
      };
      parse_all();
      int64_t pay = 0;
      for (int p = 0; p < P; ++p) {
        for (size_t bi = 0; bi < nb; ++bi) pay += st.store_len[p][bi];
      }
      const std::string pre = "recv P=" + std::to_string(P) + ": ";
      row(pre + "parse (headers, tables)", Mb(static_cast<double>(pay), "payload"), 0,
          Time(parse_all), "host round trips");
      row(pre + "golomb decode", Mb(8 * K * P, "positions"), 8 * K * P, Time([&] {
            for (size_t bi = 0; bi < nb; ++bi) {
              for (int p = 0; p < P; ++p) st.DecodeIndex(plan.buckets[bi], parsed[bi * P + p], p);
            }
          }),
          "int64 positions out");
      row(pre + "qsgd decode", Mb(4 * K * P, "values"), 4 * K * P, Time([&] {
            for (size_t bi = 0; bi < nb; ++bi) {
              for (int p = 0; p < P; ++p) st.DecodeValues(plan.buckets[bi], parsed[bi * P + p], p);
            }
          }));
      row(pre + "scatter-sum (zero + add)", Mb(12 * K * P, "positions+values"),
          12 * K * P + 4.0 * plan.dense_n * P, Time([&] {
            for (size_t bi = 0; bi < nb; ++bi) {
              st.ZeroSum(plan.buckets[bi]);
              for (int p = 0; p < P; ++p) st.AddPayload(plan.buckets[bi], parsed[bi * P + p], p);
            }
          }),
          "in payload order");
      row(pre + "fusion unpack", rd_fused, fused, Time([&] {
            for (const Bucket& b : plan.buckets) st.Unpack(b);
          }),
          "CopyPieces; one-tensor buckets: none");
      row(pre + "RECEIVER TOTAL", Mb(static_cast<double>(pay), "payload"),
          static_cast<double>(pay), Time([&] { st.ReceiveAll(from); }),
          "parse + decode + sum + unpack");

      // Checks: a fresh receive of the P replicas' payloads.
      st.ReceiveAll(from);
      Cuda(cudaStreamSynchronize(g_stream), "sync");
      // Replica 0's slices (the padding between them is zero in both).
      const std::vector<int64_t> got_idx = Download<int64_t>(st.ridx.p, plan.k_arena);
      const std::vector<float> got_val = Download<float>(st.rval.p, plan.k_arena);
      Expect(got_idx == h_idx, "golomb decode: positions differ from the sender's");
      Expect(std::memcmp(got_val.data(), h_dec.data(), 4 * plan.k_arena) == 0,
             "qsgd decode: values differ from the sender's local decode");
      for (const Sample& smp : samples) {
        const Bucket& b = plan.buckets[smp.bucket];
        const int si = smp.segment;
        const int64_t off = b.offsets[si], len = b.offsets[si + 1] - off, k = b.ks[si];
        std::vector<float> want(len, 0.0f);
        for (int p = 0; p < P; ++p) {
          const std::vector<int64_t> pi = Download<int64_t>(st.RIdx(p, b) + b.kofs[si], k);
          const std::vector<float> pv = Download<float>(st.RVal(p, b) + b.kofs[si], k);
          for (int64_t j = 0; j < k; ++j) {
            Expect(pi[j] >= off && pi[j] < off + len, "decoded position outside its segment");
            want[pi[j] - off] = want[pi[j] - off] + pv[j];
          }
        }
        const std::vector<float> got = Download<float>(st.sum.as<float>() + b.base + off, len);
        Expect(std::memcmp(got.data(), want.data(), 4 * len) == 0,
               "scatter-sum of " + std::to_string(P) + " payloads differs from the host's "
               "in-order sum");
        if (!b.alias()) {
          const std::vector<float> t =
              Download<float>(st.tensors.as<float>() + b.members[si].src, len);
          Expect(std::memcmp(t.data(), got.data(), 4 * len) == 0, "fusion unpack: tensor != sum");
        }
      }
      for (size_t bi = 0; bi < nb; ++bi) {
        const Bucket& b = plan.buckets[bi];
        if (b.dense_n == 0) continue;
        std::vector<float> want(b.dense_n, 0.0f);
        for (int p = 0; p < P; ++p) {
          const std::vector<float> raw = Download<float>(
              st.Payload(p, b) + st.store_len[p][bi] - dp::kCrcBytes - 4 * b.dense_n, b.dense_n);
          for (int64_t j = 0; j < b.dense_n; ++j) want[j] = want[j] + raw[j];
        }
        const std::vector<float> got =
            Download<float>(st.sum.as<float>() + b.base + b.sparse_n, b.dense_n);
        Expect(std::memcmp(got.data(), want.data(), 4 * b.dense_n) == 0,
               "scatter-sum: dense section differs from the host's in-order sum");
      }
      // P copies of replica 0's payload: P-fold in-order sums, zero elsewhere.
      st.ReceiveAll(std::vector<int>(P, 0));
      Cuda(cudaStreamSynchronize(g_stream), "sync");
      for (const Sample& smp : samples) {
        const Bucket& b = plan.buckets[smp.bucket];
        const int si = smp.segment;
        const int64_t off = b.offsets[si], len = b.offsets[si + 1] - off;
        std::vector<float> want(len, 0.0f);
        for (int64_t j = b.kofs[si]; j < b.kofs[si + 1]; ++j) {
          float acc = 0.0f;
          for (int p = 0; p < P; ++p) acc = acc + h_dec[b.kbase + j];
          want[h_idx[b.kbase + j] - off] = acc;
        }
        const std::vector<float> got = Download<float>(st.sum.as<float>() + b.base + off, len);
        Expect(std::memcmp(got.data(), want.data(), 4 * len) == 0,
               "scatter-sum of " + std::to_string(P) + " identical payloads != P-fold sum");
      }
    }

    print_rows();
    char note[512];
    std::snprintf(note, sizeof(note),
                  "# payload per replica: %lld bytes = container headers + CRC %lld, golomb %lld "
                  "(%.3f bits/position), qsgd %lld (%.3f bits/value), dense sections %lld; "
                  "dense gradient %.0f bytes: compression ratio %.1fx\n",
                  static_cast<long long>(payload0), static_cast<long long>(hdr),
                  static_cast<long long>(ib), 8.0 * ib / std::max(1.0, K),
                  static_cast<long long>(vb), 8.0 * vb / std::max(1.0, K),
                  static_cast<long long>(db), dense_bytes, dense_bytes / payload0);
    std::printf("%s", note);
    std::printf("# checks passed: fusion pack, compensate, residual update and top-k (exact, host "
                "reference) on %zu sampled segments; every segment's k_i positions ascending; "
                "golomb round trip exact and qsgd within one level (%lld values); scatter-sum of "
                "P = 2 and 8 payloads and of P identical payloads bit-exact on the samples and "
                "dense sections; fusion unpack\n\n",
                samples.size(), static_cast<long long>(plan.total_k));
    std::fflush(stdout);
  } catch (...) {
    if (!rows.empty()) {
      std::printf("# rows measured before the failure (NOT verified):\n");
      print_rows();
    }
    throw;
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  auto usage = [&]() {
    std::fprintf(stderr,
                 "usage: %s [--layout resnet50|gpt1.3b|all] [--reps R>=1] [--ratio 0<R<=1] "
                 "[--bucket-mb MB>=0 (0: one bucket)] [--min-size N>=0] [--plan-only]\n",
                 argv[0]);
    return 2;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--plan-only") {
      o.plan_only = true;
      continue;
    }
    if (i + 1 >= argc) return usage();
    const char* v = argv[++i];
    if (a == "--layout") o.layout = v;
    else if (a == "--reps") g_reps = std::atoi(v);
    else if (a == "--ratio") o.ratio = std::atof(v);
    else if (a == "--bucket-mb") o.bucket_mb = std::atof(v);
    else if (a == "--min-size") o.min_size = std::atoll(v);
    else return usage();
  }
  if (!(o.layout == "resnet50" || o.layout == "gpt1.3b" || o.layout == "all") || g_reps < 1 ||
      !(o.ratio > 0.0 && o.ratio <= 1.0) || !(o.bucket_mb >= 0.0) || o.min_size < 0) {
    return usage();
  }
  std::vector<Plan> plans;
  try {
    if (o.layout != "gpt1.3b") {
      Plan p = MakePlan("resnet50", ResNet50(), o);
      Expect(p.tensors.size() == 161 && p.n == 25557032,
             "ResNet-50 layout: " + std::to_string(p.tensors.size()) + " tensors, " +
                 std::to_string(p.n) + " elements; torchvision has 161 and 25,557,032");
      plans.push_back(std::move(p));
    }
    if (o.layout != "resnet50") plans.push_back(MakePlan("gpt1.3b", Gpt13b(), o));
    if (o.plan_only) {
      for (const Plan& p : plans) PrintPlan(p, o);
      HostSelfCheck();
      return 0;
    }
    HostSelfCheck();
  } catch (const std::exception& e) {
    std::printf("FAILED: %s\n", e.what());
    return 1;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop;
  int failures = 0;
  try {
    Cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    Cuda(cudaStreamCreate(&g_stream), "cudaStreamCreate");
    g_grid = prop.multiProcessorCount * 8;
  } catch (const std::exception& e) {
    std::printf("FAILED: %s\n", e.what());
    return 1;
  }
  std::printf("# %s (%d SMs), CUDA runtime %d; float32 gradients; top-k %g per tensor, golomb "
              "(auto block), qsgd 7 bit bucket 512; buckets of %g MiB (0: one), min_size %lld; "
              "median and min of %d runs after %d warm-ups\n\n",
              prop.name, prop.multiProcessorCount, CUDART_VERSION, o.ratio, o.bucket_mb,
              static_cast<long long>(o.min_size), g_reps, kWarmups);
  for (const Plan& p : plans) {
    try {
      RunLayout(p, o);
    } catch (const std::exception& e) {
      std::printf("FAILED (%s): %s\n\n", p.name.c_str(), e.what());
      ++failures;
    }
  }
  std::printf("# %d layout(s) failed\n", failures);
  return failures == 0 ? 0 : 1;
}
