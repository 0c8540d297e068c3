// Standalone test of the CUDA index-codec kernels (kernels/index/
// index_kernels.cu) against a host reference, without TensorFlow.
//
// The reference below is the CPU kernels' algorithm, single-threaded, on the
// very functions of index_format.h, rle.h and golomb.h that the CPU OpKernels
// call; the CUDA kernels call them compiled for the device. For every codec
// and random / edge-case index sets (int32 and int64) the test runs the
// launchers in the order the GPU OpKernels do (index_kernels_gpu.cc) and
// requires the same payload bytes, the same decoded indices, and the same
// error reports for bad indices and corrupt bodies.
//
// Build and run: bash build_deps/build_cuda_test.sh   (runs it if a GPU is
// present). Exit status: 0 all passed, 1 a mismatch, 77 no CUDA device
// (skipped; the host self-check still ran).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kernels/common/bit_io.h"
#include "kernels/index/golomb.h"
#include "kernels/index/index_format.h"
#include "kernels/index/index_gpu.h"
#include "kernels/index/rle.h"

namespace {

namespace ix = deepreduce::index;
namespace golomb = deepreduce::index::golomb;
namespace rle = deepreduce::index::rle;
namespace gpu = deepreduce::index::gpu;
using Bytes = std::vector<uint8_t>;

constexpr int kSkipped = 77;
enum Codec { kInt32 = 1, kBitmap = 2, kRle = 3, kGolomb = 4 };
const char* CodecName(int c) {
  switch (c) {
    case kInt32: return "int32";
    case kBitmap: return "bitmap";
    case kRle: return "rle";
    default: return "golomb";
  }
}

// ------------------------------------------------------- host reference --

Bytes Header(int codec, uint64_t n, uint64_t k) {
  Bytes h(ix::CommonHeaderSize(n, k));
  ix::PutCommonHeader(h.data(), static_cast<uint8_t>(codec), n, k);
  return h;
}

Bytes RefEncode(int codec, const std::vector<int64_t>& idx, uint64_t n, int log2_block);

// Golomb auto mode (log2_block 0), independently of golomb::PickLog2Block:
// every candidate payload in full, the shortest wins, ties to the larger.
Bytes RefEncodeAuto(const std::vector<int64_t>& idx, uint64_t n) {
  Bytes best;
  for (int b = golomb::kAutoMinLog2Block; b <= golomb::kAutoMaxLog2Block; ++b) {
    Bytes p = RefEncode(kGolomb, idx, n, b);
    if (best.empty() || p.size() <= best.size()) best.swap(p);
  }
  return best;
}

Bytes RefEncode(int codec, const std::vector<int64_t>& idx, uint64_t n, int log2_block) {
  if (codec == kGolomb && log2_block == 0) return RefEncodeAuto(idx, n);
  const uint64_t k = idx.size();
  Bytes out = Header(codec, n, k);
  if (codec == kInt32) {
    for (int64_t v : idx) {
      uint8_t w[4];
      ix::StoreLE32(w, static_cast<uint32_t>(v));
      out.insert(out.end(), w, w + 4);
    }
  } else if (codec == kBitmap) {
    Bytes body(ix::BitmapBytes(n), 0);
    for (int64_t v : idx) body[v >> 3] |= static_cast<uint8_t>(1u << (v & 7));
    out.insert(out.end(), body.begin(), body.end());
  } else if (codec == kRle) {
    for (uint64_t i = 0; i < k; ++i) {
      const uint64_t gap = i == 0 ? idx[0] : idx[i] - idx[i - 1] - 1;
      uint8_t g[9];
      out.insert(out.end(), g, rle::PutGap(g, gap));
    }
  } else {
    const uint64_t blocks = (k + (uint64_t{1} << log2_block) - 1) >> log2_block;
    std::vector<int> param(blocks);
    std::vector<uint64_t> off(blocks + 1, 0);
    for (uint64_t b = 0; b < blocks; ++b) {
      uint64_t bits;
      param[b] = golomb::ChooseRiceParam(idx.data() + (b << log2_block),
                                         golomb::BlockCount(k, log2_block, b), &bits);
      off[b + 1] = off[b] + (bits + 7) / 8;
    }
    const uint64_t s = off[blocks];
    const golomb::Layout layout = golomb::MakeLayout(n, k, log2_block, s);
    out.push_back(static_cast<uint8_t>(log2_block));
    uint8_t v[9];
    out.insert(out.end(), v, ix::PutVarint(v, s));
    Bytes table((blocks * layout.entry_bits + 7) / 8 + 8, 0);
    deepreduce::BitWriter w(table.data());
    for (uint64_t b = 0; b < blocks; ++b) {
      w.PutWide(static_cast<uint64_t>(idx[b << log2_block]), layout.w_idx);
      w.PutWide(off[b], layout.w_off);
      w.Put(static_cast<uint64_t>(param[b]), golomb::kRiceParamBits);
    }
    w.Flush();
    table.resize((blocks * layout.entry_bits + 7) / 8);
    out.insert(out.end(), table.begin(), table.end());
    Bytes stream(s + 8, 0);
    for (uint64_t b = 0; b < blocks; ++b) {
      golomb::EncodeBlock(idx.data() + (b << log2_block), golomb::BlockCount(k, log2_block, b),
                          param[b], stream.data() + off[b]);
    }
    out.insert(out.end(), stream.begin(), stream.begin() + s);
  }
  return out;
}

// ------------------------------------------------------------ GPU side --

struct Failure {
  std::string what;
};

#define CHECK_CUDA(expr)                                                  \
  do {                                                                    \
    const cudaError_t e_ = (expr);                                        \
    if (e_ != cudaSuccess) {                                              \
      throw Failure{std::string(#expr) + ": " + cudaGetErrorString(e_)}; \
    }                                                                     \
  } while (0)

void CheckStatus(const gpu::GpuStatus& s) {
  if (!s.ok()) {
    throw Failure{std::string("launcher failed while ") + s.step + ": " +
                  gpu::ErrorString(s.cuda_error)};
  }
}

void Expect(bool ok, const std::string& what) {
  if (!ok) throw Failure{what};
}

// Device buffer freed on scope exit.
struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) { CHECK_CUDA(cudaMalloc(&ptr, bytes > 0 ? bytes : 1)); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T>
  T* as() const { return static_cast<T*>(ptr); }
};

template <typename T>
void ToDevice(const DeviceBuffer& d, const T* h, size_t count) {
  if (count > 0) CHECK_CUDA(cudaMemcpy(d.ptr, h, sizeof(T) * count, cudaMemcpyHostToDevice));
}

// The GPU encoder as EncodeGpuBase + Encode*GpuOp run it. Returns the payload
// or throws; *bad is the validation result.
template <typename T>
Bytes GpuEncode(int codec, const std::vector<T>& idx, int64_t n, int log2_block,
                cudaStream_t s, gpu::SortedCheck* check) {
  const int64_t k = static_cast<int64_t>(idx.size());
  DeviceBuffer d_idx(sizeof(T) * idx.size());
  ToDevice(d_idx, idx.data(), idx.size());
  DeviceBuffer flag(gpu::ValidateScratchBytes());
  CheckStatus(gpu::ValidateSorted(d_idx.as<T>(), k, n, flag.ptr, s, check));
  if (check->first_bad < k) return {};
  gpu::GpuStatus st;
  size_t scratch_bytes = 0;
  int64_t body = 0;
  Bytes extra;
  golomb::Layout layout{};
  if (codec == kInt32) {
    body = 4 * k;
  } else if (codec == kBitmap) {
    body = static_cast<int64_t>(ix::BitmapBytes(n));
    scratch_bytes = gpu::BitmapEncodeScratchBytes(n);
  } else if (codec == kRle) {
    scratch_bytes = gpu::RleEncodeScratchBytes(k, &st);
    CheckStatus(st);
  } else {
    if (log2_block == 0) {  // auto: pass 0 picks the block size
      DeviceBuffer totals(gpu::GolombAutoScratchBytes());
      CheckStatus(gpu::GolombAutoBlock(d_idx.as<T>(), k, n, totals.ptr,
                                       gpu::GolombAutoScratchBytes(), s, &log2_block));
      Expect(log2_block >= golomb::kAutoMinLog2Block && log2_block <= golomb::kAutoMaxLog2Block,
             "auto block size out of range: " + std::to_string(log2_block));
    }
    scratch_bytes = gpu::GolombEncodeScratchBytes(k, log2_block, &st);
    CheckStatus(st);
  }
  DeviceBuffer scratch(scratch_bytes);
  if (codec == kRle) {
    CheckStatus(gpu::RleSize(d_idx.as<T>(), k, scratch.ptr, scratch_bytes, s, &body));
  } else if (codec == kGolomb) {
    int64_t sb = 0;
    CheckStatus(gpu::GolombSize(d_idx.as<T>(), k, log2_block, scratch.ptr, scratch_bytes, s, &sb));
    layout = golomb::MakeLayout(n, k, log2_block, sb);
    extra.push_back(static_cast<uint8_t>(log2_block));
    uint8_t v[9];
    extra.insert(extra.end(), v, ix::PutVarint(v, sb));
    body = static_cast<int64_t>((layout.num_blocks * layout.entry_bits + 7) / 8) + sb;
  }
  Bytes header = Header(codec, n, k);
  header.insert(header.end(), extra.begin(), extra.end());
  const int64_t total = static_cast<int64_t>(header.size()) + body;
  // Poison the output so that a byte no kernel writes shows up.
  DeviceBuffer out(total);
  CHECK_CUDA(cudaMemset(out.ptr, 0xA5, total > 0 ? total : 1));
  uint8_t* d_out = out.as<uint8_t>();
  CheckStatus(gpu::WriteBytes(d_out, header.data(), static_cast<int>(header.size()), s));
  uint8_t* d_body = d_out + header.size();
  if (codec == kInt32) {
    CheckStatus(gpu::Int32Encode(d_idx.as<T>(), k, d_body, s));
  } else if (codec == kBitmap) {
    CheckStatus(gpu::BitmapEncode(d_idx.as<T>(), k, n, scratch.ptr, scratch_bytes, d_body, s));
  } else if (codec == kRle) {
    CheckStatus(gpu::RleWrite(d_idx.as<T>(), k, scratch.ptr, scratch_bytes, d_body, s));
  } else {
    const int64_t table_bytes = (layout.num_blocks * layout.entry_bits + 7) / 8;
    CheckStatus(gpu::GolombWrite(d_idx.as<T>(), k, layout, scratch.ptr, scratch_bytes, d_body,
                                 d_body + table_bytes, s));
  }
  Bytes result(total);
  CHECK_CUDA(cudaStreamSynchronize(s));
  if (total > 0) CHECK_CUDA(cudaMemcpy(result.data(), d_out, total, cudaMemcpyDeviceToHost));
  return result;
}

// The GPU decoder on a payload whose header is valid (the header and table
// checks are index_args.h's, tested through TF). Returns false with *why on
// a device-detected corruption.
template <typename T>
bool GpuDecode(int codec, const Bytes& payload, cudaStream_t s, std::vector<int64_t>* out,
               std::string* why) {
  ix::CommonHeader h;
  const uint8_t* body = nullptr;
  const char* err = ix::ParseCommonHeader(payload.data(), payload.data() + payload.size(),
                                          static_cast<uint8_t>(codec), &h, &body);
  Expect(err == nullptr, std::string("test payload header: ") + (err ? err : ""));
  const int64_t body_off = body - payload.data();
  const int64_t body_bytes = static_cast<int64_t>(payload.size()) - body_off;
  DeviceBuffer d_payload(payload.size());
  ToDevice(d_payload, payload.data(), payload.size());
  const uint8_t* d_body = d_payload.as<uint8_t>() + body_off;
  const int64_t k = static_cast<int64_t>(h.k);
  DeviceBuffer d_out(sizeof(T) * (k > 0 ? k : 1));
  int64_t count = k;
  if (codec == kInt32) {
    CheckStatus(gpu::Int32Decode(d_body, k, d_out.as<T>(), s));
    DeviceBuffer flag(gpu::ValidateScratchBytes());
    gpu::SortedCheck c;
    CheckStatus(gpu::ValidateSorted(d_out.as<T>(), k, static_cast<int64_t>(h.n), flag.ptr, s, &c));
    if (c.first_bad < k) {
      *why = "decoded index " + std::to_string(c.first_bad);
      return false;
    }
  } else if (codec == kBitmap) {
    gpu::GpuStatus st;
    const size_t sb = gpu::BitmapDecodeScratchBytes(body_bytes, &st);
    CheckStatus(st);
    DeviceBuffer scratch(sb);
    int64_t total = 0;
    CheckStatus(gpu::BitmapCount(d_body, body_bytes, scratch.ptr, sb, s, &total));
    if (total != k) {
      *why = std::to_string(total) + " bits set";
      return false;
    }
    CheckStatus(gpu::BitmapWrite(d_body, body_bytes, scratch.ptr, sb, d_out.as<T>(), s));
  } else if (codec == kRle) {
    const size_t sb = gpu::RleDecodeScratchBytes(body_bytes);
    DeviceBuffer scratch(sb);
    gpu::RleDecodeResult r;
    CheckStatus(gpu::RleDecode(d_body, body_bytes, k, h.n, scratch.ptr, sb, d_out.as<T>(), s, &r));
    if (r.error != gpu::kRleOk) {
      *why = "rle error " + std::to_string(r.error) + " at " + std::to_string(r.at);
      return false;
    }
  } else {
    const int log2_block = body[0];
    const uint8_t* p = body + 1;
    uint64_t sbytes = 0;
    Expect(ix::GetVarint(&p, payload.data() + payload.size(), &sbytes), "golomb S");
    const golomb::Layout layout = golomb::MakeLayout(h.n, h.k, log2_block, sbytes);
    const uint64_t nb = layout.num_blocks;
    std::vector<uint64_t> tab(3 * nb + 1);
    deepreduce::BitReader tr(p, payload.data() + payload.size());
    for (uint64_t b = 0; b < nb; ++b) {
      tr.GetWide(layout.w_idx, &tab[b]);
      tr.GetWide(layout.w_off, &tab[nb + b]);
      tr.Get(golomb::kRiceParamBits, &tab[2 * nb + 1 + b]);
    }
    tab[2 * nb] = sbytes;
    const int64_t table_bytes = (nb * layout.entry_bits + 7) / 8;
    const int64_t stream_at = (p - body) + table_bytes;
    const size_t sb = gpu::GolombDecodeScratchBytes(static_cast<int64_t>(nb));
    DeviceBuffer scratch(sb);
    int64_t bad = 0;
    CheckStatus(gpu::GolombDecode(d_body + stream_at, tab.data(), k, layout, h.n, scratch.ptr, sb,
                                  d_out.as<T>(), s, &bad));
    if (bad < static_cast<int64_t>(nb)) {
      *why = "golomb block " + std::to_string(bad);
      return false;
    }
  }
  std::vector<T> host(count);
  CHECK_CUDA(cudaStreamSynchronize(s));
  if (count > 0) {
    CHECK_CUDA(cudaMemcpy(host.data(), d_out.ptr, sizeof(T) * count, cudaMemcpyDeviceToHost));
  }
  out->assign(host.begin(), host.end());
  return true;
}

// --------------------------------------------------------------- cases --

struct Case {
  int64_t n;
  std::vector<int64_t> idx;
  std::string name;
};

std::vector<int64_t> RandomSet(std::mt19937_64& rng, int64_t n, double density) {
  std::vector<int64_t> out;
  std::bernoulli_distribution keep(density);
  for (int64_t i = 0; i < n; ++i) {
    if (keep(rng)) out.push_back(i);
  }
  return out;
}

std::vector<Case> Cases() {
  std::vector<Case> cases = {
      {1000, {}, "empty"},          {0, {}, "empty n=0"},
      {1, {0}, "n=1 full"},         {1000, {0}, "first"},
      {1000, {999}, "last"},        {13, {1, 2, 12}, "n=13"},
      {45, {0, 31, 32, 44}, "n=45"},
  };
  std::vector<int64_t> full(3000);
  for (int i = 0; i < 3000; ++i) full[i] = i;
  cases.push_back({3000, full, "full"});
  std::mt19937_64 rng(3);
  for (double d : {0.001, 0.01, 0.1, 0.5}) {
    cases.push_back({1000003, RandomSet(rng, 1000003, d), "random " + std::to_string(d)});
  }
  {  // dense runs in a sparse background: auto picks small blocks
    std::vector<int64_t> cl;
    for (int64_t i = 0; i < 2000003; i += 997) {
      cl.push_back(i);
      if ((i / 997) % 50 == 0) {
        for (int64_t j = 1; j < 300 && i + 3 * j < 2000003 && 3 * j < 997; ++j) cl.push_back(i + 3 * j);
      }
    }
    cases.push_back({2000003, cl, "clustered"});
  }
  cases.push_back({int64_t{1} << 40,
                   {0, 5, int64_t{1} << 33, (int64_t{1} << 40) - 1}, "huge n (int64)"});
  return cases;
}

template <typename T>
void RunCase(int codec, const Case& c, int log2_block, cudaStream_t s) {
  const Bytes want = RefEncode(codec, c.idx, c.n, log2_block);
  std::vector<T> idx(c.idx.begin(), c.idx.end());
  gpu::SortedCheck check;
  const Bytes got = GpuEncode(codec, idx, c.n, log2_block, s, &check);
  Expect(check.first_bad == static_cast<int64_t>(idx.size()), "valid indices were rejected");
  Expect(got.size() == want.size(), "payload length " + std::to_string(got.size()) + " != " +
                                        std::to_string(want.size()));
  for (size_t i = 0; i < got.size(); ++i) {
    Expect(got[i] == want[i], "payload byte " + std::to_string(i) + " differs");
  }
  std::vector<int64_t> out;
  std::string why;
  Expect(GpuDecode<T>(codec, want, s, &out, &why), "valid payload rejected: " + why);
  Expect(out == c.idx, "decoded indices differ");
}

template <typename T>
void RunErrorCases(int codec, cudaStream_t s) {
  struct Bad {
    std::vector<T> idx;
    int64_t first_bad;
  };
  const std::vector<Bad> bads = {{{1, 5, 10}, 2}, {{-1, 5}, 0}, {{1, 5, 5}, 2}, {{4, 3}, 1}};
  for (const Bad& b : bads) {
    gpu::SortedCheck check;
    GpuEncode(codec, b.idx, 10, golomb::kDefaultLog2Block, s, &check);
    Expect(check.first_bad == b.first_bad, "first bad index " + std::to_string(check.first_bad) +
                                               " != " + std::to_string(b.first_bad));
    Expect(check.value == static_cast<int64_t>(b.idx[b.first_bad]), "bad value");
  }
  // A body corruption the device must catch (the header stays valid).
  std::vector<int64_t> idx = {3, 4, 100, 101, 500};
  if (codec == kGolomb) {
    idx.clear();
    for (int64_t i = 0; i < 40; ++i) idx.push_back(7 * i + (i % 3));
  }
  Bytes p = RefEncode(codec, idx, 1000, 4);
  std::string why;
  std::vector<int64_t> out;
  if (codec == kInt32) {
    std::swap_ranges(p.end() - 8, p.end() - 4, p.end() - 4);  // last two words swapped
  } else if (codec == kBitmap) {
    p[p.size() - 10] ^= 0x10;  // one bit too many
  } else if (codec == kRle) {
    p.push_back(0);  // a trailing byte
  } else {
    // The last gaps lose their terminating one bits (r + 1 <= 24 here).
    std::fill(p.end() - 3, p.end(), 0);
  }
  Expect(!GpuDecode<T>(codec, p, s, &out, &why), "corrupt body accepted");
}

// Golomb blocks of >= 256 indices are decoded by a whole warp (three passes
// over a stop-bit chain, index_kernels.cu), the others by one lane running
// golomb::DecodeBlock. On valid and corrupted streams (bits flipped, bytes
// zeroed or replaced; header and table left valid) the device must reject
// exactly the blocks DecodeBlock rejects, report the first, and otherwise
// decode the same indices.
template <typename T>
void GolombWarpMatchesSequential(cudaStream_t s) {
  std::mt19937_64 rng(11);
  int rejected = 0;
  for (int trial = 0; trial < 240; ++trial) {
    const int log2_block = 8 + 2 * (trial % 3);  // 256, 1024, 4096
    const double density = trial % 4 == 0 ? 0.3 : (trial % 4 == 1 ? 0.02 : 0.004);
    const int64_t n = 300007;
    const std::vector<int64_t> idx = RandomSet(rng, n, density);
    Bytes p = RefEncode(kGolomb, idx, n, log2_block);
    ix::CommonHeader h;
    const uint8_t* body = nullptr;
    Expect(ix::ParseCommonHeader(p.data(), p.data() + p.size(), kGolomb, &h, &body) == nullptr,
           "header");
    const uint8_t* q = body + 1;
    uint64_t sbytes = 0;
    Expect(ix::GetVarint(&q, p.data() + p.size(), &sbytes), "golomb S");
    const golomb::Layout layout = golomb::MakeLayout(h.n, h.k, log2_block, sbytes);
    const int64_t stream_at = static_cast<int64_t>(p.size() - sbytes);
    const int kind = trial % 5;
    if (sbytes > 0 && kind != 0) {
      std::uniform_int_distribution<int64_t> at(stream_at, static_cast<int64_t>(p.size()) - 1);
      if (kind == 1) {
        p[at(rng)] ^= static_cast<uint8_t>(1u << (rng() % 8));
      } else if (kind == 2) {
        for (int f = 0; f < 3; ++f) p[at(rng)] ^= static_cast<uint8_t>(1u << (rng() % 8));
      } else if (kind == 3) {
        const int64_t a = at(rng);
        const int64_t len = std::min<int64_t>(1 + rng() % 6, static_cast<int64_t>(p.size()) - a);
        std::fill(p.begin() + a, p.begin() + a + len, 0);
      } else {
        p[at(rng)] = static_cast<uint8_t>(rng());
      }
    }
    // The host: DecodeBlock per block, the first failure.
    const uint64_t nb = layout.num_blocks;
    std::vector<uint64_t> first(nb), off(nb + 1), param(nb);
    deepreduce::BitReader tr(q, p.data() + p.size());
    for (uint64_t b = 0; b < nb; ++b) {
      tr.GetWide(layout.w_idx, &first[b]);
      tr.GetWide(layout.w_off, &off[b]);
      tr.Get(golomb::kRiceParamBits, &param[b]);
    }
    off[nb] = sbytes;
    std::vector<int64_t> want(h.k);
    int64_t want_bad = static_cast<int64_t>(nb);
    for (uint64_t b = 0; b < nb; ++b) {
      const uint8_t* st = p.data() + stream_at;
      if (!golomb::DecodeBlock(st + off[b], st + off[b + 1], first[b], static_cast<int>(param[b]),
                               golomb::BlockCount(h.k, log2_block, b),
                               b + 1 < nb ? first[b + 1] : h.n,
                               want.data() + (b << log2_block))) {
        want_bad = static_cast<int64_t>(b);
        break;
      }
    }
    std::vector<int64_t> got;
    std::string why;
    const bool ok = GpuDecode<T>(kGolomb, p, s, &got, &why);
    const std::string where = "trial " + std::to_string(trial) + " (B=2^" +
                              std::to_string(log2_block) + ", kind " + std::to_string(kind) + ")";
    if (want_bad < static_cast<int64_t>(nb)) {
      ++rejected;
      Expect(!ok, where + ": the host rejects block " + std::to_string(want_bad) +
                      ", the device accepted the payload");
      Expect(why == "golomb block " + std::to_string(want_bad),
             where + ": the host rejects block " + std::to_string(want_bad) + ", the device: " + why);
    } else {
      Expect(ok, where + ": the host accepts, the device: " + why);
      Expect(got == want, where + ": decoded indices differ");
    }
  }
  std::printf("golomb warp decode == DecodeBlock on 240 payloads (%d rejected)\n", rejected);
}

// The sequential rle decoder of the CPU kernel.
rle::DecodeResult SequentialRle(const Bytes& body, int64_t k, uint64_t n,
                                std::vector<int64_t>* out) {
  const uint8_t* p = body.data();
  const uint8_t* end = body.data() + body.size();
  uint64_t next = 0;
  out->assign(k, -1);
  for (int64_t i = 0; i < k; ++i) {
    uint64_t gap;
    if (!rle::GetGap(&p, end, &gap)) return {rle::kBadGap, i, 0, 0};
    if (!(gap < n - next)) return {rle::kPastEnd, i, gap, 0};
    (*out)[i] = static_cast<int64_t>(next + gap);
    next += gap + 1;
  }
  if (p != end) return {rle::kTrailing, k, 0, end - p};
  return {rle::kOk, 0, 0, 0};
}

// The chunked decoder of the GPU kernels, its passes run on the host.
rle::DecodeResult ChunkedRle(const Bytes& body, int64_t k, uint64_t n, int64_t chunk_bytes,
                             std::vector<int64_t>* out) {
  const int64_t bytes = static_cast<int64_t>(body.size());
  out->assign(k, -1);
  if (bytes == 0 && k == 0) return {rle::kOk, 0, 0, 0};
  const int64_t chunks = (bytes + chunk_bytes - 1) / chunk_bytes;
  std::vector<rle::ChunkScan> scans(chunks * rle::kEntries);
  for (int64_t t = 0; t < chunks * rle::kEntries; ++t) {
    scans[t] = rle::ScanChunk(body.data(), bytes, chunk_bytes, t / rle::kEntries,
                              static_cast<int>(t % rle::kEntries));
  }
  std::vector<rle::ChunkPlan> plans(chunks);
  int64_t total = 0, bad = 0;
  rle::ResolveChunks(scans.data(), chunks, plans.data(), &total, &bad);
  std::vector<rle::ChunkDecode> dec(chunks);
  for (int64_t c = chunks - 1; c >= 0; --c) {  // any order
    dec[c] = rle::DecodeChunk(body.data(), bytes, chunk_bytes, c, plans[c], k, n, out->data());
  }
  return rle::FinishChunks(dec.data(), chunks, bytes, k, total, bad);
}

// Random rle bodies - valid, truncated, extended, bit-flipped, random - with
// right and wrong K and n: the chunked decoder says what the sequential one
// says, and decodes the same indices.
bool RleChunkedMatchesSequential() {
  std::mt19937_64 rng(5);
  int checked = 0;
  int64_t outcomes[4] = {0, 0, 0, 0};  // by rle::DecodeError
  for (int trial = 0; trial < 4000; ++trial) {
    const int64_t n = 50 + static_cast<int64_t>(rng() % 5000);
    std::vector<int64_t> idx = RandomSet(rng, n, 0.002 * (1 + rng() % 300));
    if (trial % 7 == 0 && !idx.empty()) idx.back() = n - 1;
    if (trial % 11 == 0) idx = {static_cast<int64_t>(rng() % (int64_t{1} << 40))};
    const int64_t nn = trial % 11 == 0 ? (int64_t{1} << 40) + 1 : n;
    const Bytes full = RefEncode(kRle, idx, nn, 0);
    Bytes body(full.begin() + ix::CommonHeaderSize(nn, idx.size()), full.end());
    int64_t k = static_cast<int64_t>(idx.size());
    uint64_t n_claim = nn;
    switch (trial % 6) {
      case 1: body.resize(rng() % (body.size() + 1)); break;
      case 2: for (int e = 0; e < 1 + static_cast<int>(rng() % 12); ++e) body.push_back(rng()); break;
      case 3: if (!body.empty()) body[rng() % body.size()] ^= 1 << (rng() % 8); break;
      case 4: for (auto& b : body) b = static_cast<uint8_t>(rng() % 3 == 0 ? 240 + rng() % 16 : rng()); break;
      case 5: k += static_cast<int64_t>(rng() % 5) - 2; n_claim = rng() % (nn + 2); break;
      default: break;
    }
    if (k < 0) k = 0;
    if (k > static_cast<int64_t>(body.size())) k = static_cast<int64_t>(body.size());
    std::vector<int64_t> want_out, got_out;
    const rle::DecodeResult want = SequentialRle(body, k, n_claim, &want_out);
    ++outcomes[want.error];
    for (int64_t chunk : {9, 10, 16, 33, 1024}) {
      const rle::DecodeResult got = ChunkedRle(body, k, n_claim, chunk, &got_out);
      if (got.error != want.error || got.at != want.at || got.gap != want.gap ||
          got.trailing != want.trailing || (want.error == rle::kOk && got_out != want_out)) {
        std::printf("rle chunked decode differs: trial %d chunk %lld: error %lld/%lld at "
                    "%lld/%lld gap %llu/%llu trailing %lld/%lld\n",
                    trial, static_cast<long long>(chunk), static_cast<long long>(got.error),
                    static_cast<long long>(want.error), static_cast<long long>(got.at),
                    static_cast<long long>(want.at), static_cast<unsigned long long>(got.gap),
                    static_cast<unsigned long long>(want.gap),
                    static_cast<long long>(got.trailing), static_cast<long long>(want.trailing));
        return false;
      }
      ++checked;
    }
  }
  std::printf("rle chunked decode == sequential decode on %d (body, K, n, chunk) cases "
              "(bodies: %lld ok, %lld bad gap, %lld past n, %lld trailing)\n",
              checked, static_cast<long long>(outcomes[0]), static_cast<long long>(outcomes[1]),
              static_cast<long long>(outcomes[2]), static_cast<long long>(outcomes[3]));
  return true;
}

// Host-only checks (run without a GPU): the rle reference decodes back
// through the shared header, the chunked rle decode of the GPU (rle.h's
// passes, run here on the host) agrees with the sequential one on valid and
// corrupt bodies, and golomb::TableByte - the per-byte table
// assembly of the GPU encoder - gives the bytes of the CPU's BitWriter for
// many layouts (field widths crossing bytes, entries wider than 64 bits).
bool HostSelfCheck() {
  std::mt19937_64 rng(1);
  const std::vector<int64_t> idx = RandomSet(rng, 100000, 0.02);
  const Bytes r = RefEncode(kRle, idx, 100000, 0);
  const uint8_t* p = r.data() + ix::CommonHeaderSize(100000, idx.size());
  uint64_t next = 0;
  for (int64_t v : idx) {
    uint64_t gap;
    if (!rle::GetGap(&p, r.data() + r.size(), &gap) || next + gap != static_cast<uint64_t>(v)) {
      return false;
    }
    next = v + 1;
  }
  if (p != r.data() + r.size()) return false;
  if (!RleChunkedMatchesSequential()) return false;

  // golomb::PickLog2Block from the candidates' stream lengths (what the
  // GPU's pass 0 reduces) == the shortest full payload (RefEncodeAuto).
  for (const Case& c : Cases()) {
    int64_t sb[golomb::kAutoCandidates];
    for (int i = 0; i < golomb::kAutoCandidates; ++i) {
      const int b = golomb::kAutoMinLog2Block + i;
      const uint64_t k = c.idx.size();
      sb[i] = 0;
      for (uint64_t blk = 0; (blk << b) < k; ++blk) {
        uint64_t bits;
        golomb::ChooseRiceParam(c.idx.data() + (blk << b), golomb::BlockCount(k, b, blk), &bits);
        sb[i] += static_cast<int64_t>((bits + 7) / 8);
      }
    }
    const int picked = golomb::PickLog2Block(c.n, c.idx.size(), sb);
    const Bytes want = RefEncodeAuto(c.idx, c.n);
    if (RefEncode(kGolomb, c.idx, c.n, picked) != want) {
      std::printf("golomb auto choice B=%d differs from the shortest payload (%s)\n", picked,
                  c.name.c_str());
      return false;
    }
  }
  // ChooseRiceParam (fused local search) == the exhaustive argmin, smallest on ties.
  for (int trial = 0; trial < 2000; ++trial) {
    const int count = 1 + static_cast<int>(rng() % 40);
    std::vector<int64_t> blk(count);
    const int spread = static_cast<int>(rng() % 40);
    int64_t v = static_cast<int64_t>(rng() % 1000);
    for (int i = 0; i < count; ++i) {
      blk[i] = v;
      const uint64_t gap = spread == 0 ? 0 : (rng() >> (64 - spread)) >> (rng() % spread);
      v += 1 + static_cast<int64_t>(gap);
    }
    uint64_t bits;
    const int r = golomb::ChooseRiceParam(blk.data(), count, &bits);
    int best_r = 0;
    uint64_t best = count > 1 ? golomb::RiceBits(blk.data(), count, 0) : 0;
    for (int q = 1; q <= golomb::kMaxRiceParam && count > 1; ++q) {
      const uint64_t c = golomb::RiceBits(blk.data(), count, q);
      if (c < best) best = c, best_r = q;
    }
    if (r != best_r || bits != best) {
      std::printf("ChooseRiceParam r=%d bits=%llu, exhaustive r=%d bits=%llu (trial %d)\n", r,
                  static_cast<unsigned long long>(bits), best_r,
                  static_cast<unsigned long long>(best), trial);
      return false;
    }
  }

  for (int trial = 0; trial < 300; ++trial) {
    const int log2_block = 4 + static_cast<int>(rng() % 3);
    const uint64_t blocks = 1 + rng() % 40;
    const uint64_t k = (blocks - 1) * (uint64_t{1} << log2_block) + 1 + rng() % 16;
    const uint64_t n = uint64_t{1} << (1 + rng() % 62);
    const uint64_t s = rng() >> (rng() % 64);
    std::vector<int64_t> first_idx(k, 0);
    std::vector<int64_t> off(blocks);
    std::vector<int32_t> param(blocks);
    for (uint64_t b = 0; b < blocks; ++b) {
      first_idx[b << log2_block] = static_cast<int64_t>(rng() % n);
      off[b] = static_cast<int64_t>(s == 0 ? 0 : rng() % (s + 1));
      param[b] = static_cast<int32_t>(rng() % 57);
    }
    const golomb::Layout layout = golomb::MakeLayout(n, k, log2_block, s);
    if (layout.num_blocks != blocks) return false;
    const uint64_t table_bytes = (blocks * layout.entry_bits + 7) / 8;
    Bytes want(table_bytes + 8, 0);
    deepreduce::BitWriter w(want.data());
    for (uint64_t b = 0; b < blocks; ++b) {
      w.PutWide(static_cast<uint64_t>(first_idx[b << log2_block]), layout.w_idx);
      w.PutWide(static_cast<uint64_t>(off[b]), layout.w_off);
      w.Put(static_cast<uint64_t>(param[b]), golomb::kRiceParamBits);
    }
    w.Flush();
    for (uint64_t j = 0; j < table_bytes; ++j) {
      if (golomb::TableByte(layout, first_idx.data(), off.data(), param.data(), j) != want[j]) {
        std::printf("table byte %llu differs (trial %d)\n", static_cast<unsigned long long>(j),
                    trial);
        return false;
      }
    }
  }
  return true;
}

}  // namespace

int main() {
  if (!HostSelfCheck()) {
    std::printf("FAIL host reference self-check\n");
    return 1;
  }
  std::printf("PASS host reference self-check\n");

  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("SKIP: no CUDA device available (cudaGetDeviceCount: %s); the CUDA kernels "
                "were compiled but not run\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return kSkipped;
  }
  cudaStream_t stream;
  if (cudaStreamCreate(&stream) != cudaSuccess) {
    std::printf("FAIL could not create a CUDA stream\n");
    return 1;
  }
  int failed = 0, passed = 0;
  auto report = [&](const std::string& name, auto&& fn) {
    try {
      fn();
      ++passed;
      std::printf("PASS %s\n", name.c_str());
    } catch (const Failure& f) {
      ++failed;
      std::printf("FAIL %s: %s\n", name.c_str(), f.what.c_str());
    }
    std::fflush(stdout);
  };
  for (int codec : {kInt32, kBitmap, kRle, kGolomb}) {
    for (const Case& c : Cases()) {
      if (codec == kBitmap && c.n > (int64_t{1} << 24)) continue;
      if (codec == kInt32 && c.n > (int64_t{1} << 31)) continue;
      // golomb B=0: auto block size
      for (int log2_block : codec == kGolomb ? std::vector<int>{0, 4, 10, 16} : std::vector<int>{0}) {
        const std::string name =
            std::string(CodecName(codec)) + " " + c.name +
            (codec == kGolomb ? (log2_block == 0 ? std::string(" auto")
                                                 : " B=" + std::to_string(log2_block))
                              : "");
        if (c.n <= (int64_t{1} << 31)) {
          report(name + " int32", [&] { RunCase<int32_t>(codec, c, log2_block, stream); });
        }
        report(name + " int64", [&] { RunCase<int64_t>(codec, c, log2_block, stream); });
      }
    }
    report(std::string(CodecName(codec)) + " errors int32",
           [&] { RunErrorCases<int32_t>(codec, stream); });
    report(std::string(CodecName(codec)) + " errors int64",
           [&] { RunErrorCases<int64_t>(codec, stream); });
  }
  report("golomb warp decode vs DecodeBlock int32",
         [&] { GolombWarpMatchesSequential<int32_t>(stream); });
  report("golomb warp decode vs DecodeBlock int64",
         [&] { GolombWarpMatchesSequential<int64_t>(stream); });
  cudaStreamDestroy(stream);
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
