// Standalone test of the CUDA Bloom-filter kernels (kernels/bloom/
// bloom_kernels.cu) against a host reference, without TensorFlow.
//
// The reference below calls the very functions of bloom.h that the CPU
// OpKernels call (MakeLayout, Probes, ProbeBit, Contains), compiled for the
// host; the CUDA kernels call them compiled for the device. On random index
// sets (several n, K, h, m, seeds; int32 and int64) the test requires the same
// filter bytes, the same positives in the same order, and the same error
// reports for out-of-range and repeated indices.
//
// Build and run: bash build_deps/build_cuda_test.sh   (runs it if a GPU is
// present). Exit status: 0 all passed, 1 a mismatch, 77 no CUDA device
// (skipped; the host self-check still ran).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include "kernels/bloom/bloom.h"
#include "kernels/bloom/bloom_gpu.h"

namespace {

using deepreduce::bloom::BitsForFpr;
using deepreduce::bloom::BloomLayout;
using deepreduce::bloom::Contains;
using deepreduce::bloom::HashesForFpr;
using deepreduce::bloom::MakeLayout;
using deepreduce::bloom::NumBytes;
using deepreduce::bloom::ProbeBit;
using deepreduce::bloom::Probes;
using deepreduce::bloom::ProbeSeq;
using deepreduce::bloom::TestBit;
namespace gpu = deepreduce::bloom::gpu;

constexpr int kSkipped = 77;

// ------------------------------------------------------- host reference --

std::vector<uint8_t> RefInsert(const BloomLayout& layout,
                               const std::vector<int64_t>& indices) {
  std::vector<uint8_t> bytes(NumBytes(layout.num_bits), 0);
  for (int64_t v : indices) {
    const ProbeSeq p = Probes(layout, static_cast<uint64_t>(v));
    for (uint32_t j = 0; j < layout.num_hashes; ++j) {
      const uint64_t bit = ProbeBit(layout, p, j);
      bytes[bit >> 3] |= static_cast<uint8_t>(1u << (bit & 7));
    }
  }
  return bytes;
}

std::vector<int64_t> RefQuery(const BloomLayout& layout,
                              const std::vector<uint8_t>& bytes, int64_t n) {
  std::vector<int64_t> out;
  for (int64_t pos = 0; pos < n; ++pos) {
    if (Contains(layout, bytes.data(), static_cast<uint64_t>(pos))) out.push_back(pos);
  }
  return out;
}

// k distinct indices of [0, n) in random order.
std::vector<int64_t> RandomIndices(std::mt19937_64& rng, int64_t n, int64_t k) {
  std::vector<int64_t> out;
  out.reserve(k);
  if (2 * k > n) {
    std::vector<int64_t> all(n);
    std::iota(all.begin(), all.end(), int64_t{0});
    std::shuffle(all.begin(), all.end(), rng);
    out.assign(all.begin(), all.begin() + k);
    return out;
  }
  std::unordered_set<int64_t> seen;
  std::uniform_int_distribution<int64_t> pick(0, n - 1);
  while (static_cast<int64_t>(out.size()) < k) {
    const int64_t v = pick(rng);
    if (seen.insert(v).second) out.push_back(v);
  }
  return out;
}

// ------------------------------------------------------------- plumbing --

struct Failure {
  std::string what;
};

#define CHECK_CUDA(expr)                                                    \
  do {                                                                      \
    const cudaError_t e_ = (expr);                                          \
    if (e_ != cudaSuccess) {                                                \
      throw Failure{std::string(#expr) + ": " + cudaGetErrorString(e_)};   \
    }                                                                       \
  } while (0)

void CheckStatus(const gpu::GpuStatus& s) {
  if (!s.ok()) {
    throw Failure{std::string("launcher failed while ") + s.step + ": " +
                  gpu::ErrorString(s.cuda_error)};
  }
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

template <typename Tidx>
gpu::GpuStatus GpuInsert(const BloomLayout& layout, const Tidx* d_idx, int64_t k,
                         int64_t n, uint32_t* d_words, void* d_scratch,
                         size_t bytes, cudaStream_t s, gpu::InsertResult* r);
template <>
gpu::GpuStatus GpuInsert<int32_t>(const BloomLayout& layout, const int32_t* d_idx,
                                  int64_t k, int64_t n, uint32_t* d_words,
                                  void* d_scratch, size_t bytes, cudaStream_t s,
                                  gpu::InsertResult* r) {
  return gpu::InsertInt32(layout, d_idx, k, n, d_words, d_scratch, bytes, s, r);
}
template <>
gpu::GpuStatus GpuInsert<int64_t>(const BloomLayout& layout, const int64_t* d_idx,
                                  int64_t k, int64_t n, uint32_t* d_words,
                                  void* d_scratch, size_t bytes, cudaStream_t s,
                                  gpu::InsertResult* r) {
  return gpu::InsertInt64(layout, d_idx, k, n, d_words, d_scratch, bytes, s, r);
}
gpu::GpuStatus GpuQueryWrite(int64_t n, const void* scratch, size_t bytes,
                             int32_t* out, cudaStream_t s) {
  return gpu::QueryWriteInt32(n, scratch, bytes, out, s);
}
gpu::GpuStatus GpuQueryWrite(int64_t n, const void* scratch, size_t bytes,
                             int64_t* out, cudaStream_t s) {
  return gpu::QueryWriteInt64(n, scratch, bytes, out, s);
}

template <typename Tidx>
gpu::InsertResult RunInsert(const BloomLayout& layout, const std::vector<int64_t>& idx,
                            int64_t n, cudaStream_t s, std::vector<uint8_t>* bytes) {
  std::vector<Tidx> host(idx.begin(), idx.end());
  DeviceBuffer d_idx(sizeof(Tidx) * host.size());
  CHECK_CUDA(cudaMemcpy(d_idx.ptr, host.data(), sizeof(Tidx) * host.size(),
                        cudaMemcpyHostToDevice));
  const size_t filter_bytes = NumBytes(layout.num_bits);
  DeviceBuffer d_filter(filter_bytes);
  CHECK_CUDA(cudaMemset(d_filter.ptr, 0xab, filter_bytes));  // must be cleared
  const size_t scratch_bytes = gpu::InsertScratchBytes(n);
  DeviceBuffer d_scratch(scratch_bytes);
  CHECK_CUDA(cudaMemset(d_scratch.ptr, 0xcd, scratch_bytes));  // must be cleared
  gpu::InsertResult r;
  CheckStatus(GpuInsert<Tidx>(layout, d_idx.as<Tidx>(), static_cast<int64_t>(host.size()),
                              n, d_filter.as<uint32_t>(), d_scratch.ptr, scratch_bytes,
                              s, &r));
  bytes->resize(filter_bytes);
  CHECK_CUDA(cudaStreamSynchronize(s));
  CHECK_CUDA(cudaMemcpy(bytes->data(), d_filter.ptr, filter_bytes, cudaMemcpyDeviceToHost));
  return r;
}

// Queries [0, n) on the device from a copy of `bytes` placed at byte offset
// `misalign` (a filter sliced out of a payload need not be aligned).
template <typename Tidx>
std::vector<int64_t> RunQuery(const BloomLayout& layout, const std::vector<uint8_t>& bytes,
                              int64_t n, int misalign, cudaStream_t s,
                              uint32_t* last_word) {
  DeviceBuffer d_filter(bytes.size() + misalign);
  uint8_t* d_bytes = d_filter.as<uint8_t>() + misalign;
  CHECK_CUDA(cudaMemcpy(d_bytes, bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
  gpu::GpuStatus st;
  const size_t scratch_bytes = gpu::QueryScratchBytes(n, &st);
  CheckStatus(st);
  DeviceBuffer d_scratch(scratch_bytes);
  CHECK_CUDA(cudaMemset(d_scratch.ptr, 0xee, scratch_bytes));  // no reliance on zeros
  int64_t total = -1;
  CheckStatus(gpu::QueryCount(layout, d_bytes, n, d_scratch.ptr, scratch_bytes, s,
                              &total, last_word));
  DeviceBuffer d_out(sizeof(Tidx) * static_cast<size_t>(total));
  if (total > 0) {
    CheckStatus(GpuQueryWrite(n, d_scratch.ptr, scratch_bytes, d_out.as<Tidx>(), s));
  }
  std::vector<Tidx> host(static_cast<size_t>(total));
  CHECK_CUDA(cudaStreamSynchronize(s));
  CHECK_CUDA(cudaMemcpy(host.data(), d_out.ptr, sizeof(Tidx) * host.size(),
                        cudaMemcpyDeviceToHost));
  return std::vector<int64_t>(host.begin(), host.end());
}

struct Case {
  int64_t n;
  int64_t k;
  int64_t m;   // 0: derive from fpr
  int64_t h;   // 0: derive from fpr
  double fpr;
  uint64_t seed;
  bool query;  // false: insert only (universe too large to scan on the host)
};

std::string Describe(const Case& c, const char* dtype) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%s n=%lld k=%lld m=%lld h=%lld fpr=%g seed=%llu",
                dtype, static_cast<long long>(c.n), static_cast<long long>(c.k),
                static_cast<long long>(c.m), static_cast<long long>(c.h), c.fpr,
                static_cast<unsigned long long>(c.seed));
  return buf;
}

template <typename Tidx>
void RunCase(const Case& c, cudaStream_t s) {
  std::mt19937_64 rng(c.seed * 1000003 + c.n * 31 + c.k);
  const std::vector<int64_t> idx = RandomIndices(rng, c.n, c.k);
  const uint64_t m = c.m > 0 ? static_cast<uint64_t>(c.m) : BitsForFpr(c.k, c.fpr);
  const uint32_t h = c.h > 0 ? static_cast<uint32_t>(c.h) : HashesForFpr(c.fpr);
  const BloomLayout layout = MakeLayout(m, h, c.seed);

  const std::vector<uint8_t> want = RefInsert(layout, idx);
  std::vector<uint8_t> got;
  const gpu::InsertResult r = RunInsert<Tidx>(layout, idx, c.n, s, &got);
  if (r.first_bad != c.k) throw Failure{"insert reported a bad index at " + std::to_string(r.first_bad)};
  if (got != want) {
    size_t at = 0;
    while (at < got.size() && got[at] == want[at]) ++at;
    throw Failure{"insert bytes differ, first at byte " + std::to_string(at)};
  }
  if (!c.query) return;

  const std::vector<int64_t> want_pos = RefQuery(layout, want, c.n);
  for (int misalign : {0, 1}) {
    uint32_t last_word = 0;
    const std::vector<int64_t> got_pos = RunQuery<Tidx>(layout, want, c.n, misalign, s, &last_word);
    if (got_pos != want_pos) {
      throw Failure{"query positives differ (" + std::to_string(got_pos.size()) + " vs " +
                    std::to_string(want_pos.size()) + " expected, misalign=" +
                    std::to_string(misalign) + ")"};
    }
    uint32_t want_word;
    std::memcpy(&want_word, want.data() + want.size() - 4, 4);
    if (last_word != want_word) throw Failure{"query returned the wrong last word"};
  }
}

// A bad index must be reported at its position with its value; of a repeated
// index either copy may be flagged (thread timing), as on the CPU.
template <typename Tidx>
void RunErrorCase(cudaStream_t s) {
  const BloomLayout layout = MakeLayout(96, 3, 0);
  struct ErrCase {
    std::vector<int64_t> idx;
    int64_t n;
    std::vector<int64_t> positions;  // acceptable first_bad
    int64_t value;
  };
  std::vector<ErrCase> cases = {
      {{3, 1, 99, 4}, 50, {2}, 99},
      {{3, -1, 7}, 50, {1}, -1},
      {{3, 1, 50}, 50, {2}, 50},
      {{3, 1, 3}, 50, {0, 2}, 3},
      {{0, 49, 17, 49, 2}, 50, {1, 3}, 49},
  };
  // Many threads, one repeat far apart, and an out-of-range index after it.
  std::mt19937_64 rng(7);
  std::vector<int64_t> big = RandomIndices(rng, 1 << 20, 100000);
  big[90000] = big[1234];
  big[95000] = 1 << 20;
  cases.push_back({big, 1 << 20, {1234, 90000}, big[1234]});
  for (const ErrCase& e : cases) {
    std::vector<uint8_t> bytes;
    const gpu::InsertResult r = RunInsert<Tidx>(layout, e.idx, e.n, s, &bytes);
    if (std::find(e.positions.begin(), e.positions.end(), r.first_bad) == e.positions.end() ||
        r.bad_value != e.value) {
      throw Failure{"bad index reported at " + std::to_string(r.first_bad) + " value " +
                    std::to_string(r.bad_value) + ", expected value " +
                    std::to_string(e.value)};
    }
  }
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  // Tile and word boundaries of the query (1024 positions per warp tile).
  for (int64_t n : {1, 2, 31, 32, 33, 1023, 1024, 1025, 4097, 65537}) {
    cases.push_back({n, 0, 0, 0, 0.01, 0, true});
    cases.push_back({n, n, 0, 0, 0.01, 1, true});
    cases.push_back({n, (n + 9) / 10, 0, 0, 0.001, 2, true});
  }
  // Explicit m (including m < 32 and word edges) and h (1 .. 32).
  for (int64_t m : {1, 5, 31, 32, 33, 64, 1000}) {
    for (int64_t h : {1, 2, 3, 7, 32}) {
      cases.push_back({5000, 37, m, h, 0.0, static_cast<uint64_t>(m * 100 + h), true});
    }
  }
  // Rates of the paper (0.001 .. 0.6), larger universes, seeds with high bits.
  for (double fpr : {0.6, 0.1, 0.01, 0.001}) {
    cases.push_back({1000003, 10000, 0, 0, fpr, 0x8000000000000001ULL, true});
  }
  cases.push_back({4000037, 40000, 0, 0, 0.001, 42, true});
  cases.push_back({200000, 200000, 0, 0, 0.01, 5, true});
  return cases;
}

// Host-only sanity check of the reference itself (runs without a GPU):
// inserted indices are positives, padding bits past m stay zero.
bool HostSelfCheck() {
  std::mt19937_64 rng(1);
  for (int64_t m : {1, 33, 1000, 9586}) {
    const BloomLayout layout = MakeLayout(static_cast<uint64_t>(m), 7, 3);
    const std::vector<int64_t> idx = RandomIndices(rng, 100000, 1000);
    const std::vector<uint8_t> bytes = RefInsert(layout, idx);
    for (int64_t v : idx) {
      if (!Contains(layout, bytes.data(), static_cast<uint64_t>(v))) return false;
    }
    for (uint64_t b = static_cast<uint64_t>(m); b < 8 * bytes.size(); ++b) {
      if (TestBit(bytes.data(), b)) return false;
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
    std::printf("SKIP: no CUDA device available (cudaGetDeviceCount: %s%s); the "
                "CUDA kernels were compiled but not run\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices",
                e == cudaErrorInsufficientDriver
                    ? ": no NVIDIA driver, or one older than this CUDA runtime needs"
                    : "");
    return kSkipped;
  }
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
    std::printf("device 0: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
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
  for (const Case& c : Cases()) {
    if (c.n <= (int64_t{1} << 31)) {
      report(Describe(c, "int32"), [&] { RunCase<int32_t>(c, stream); });
    }
    report(Describe(c, "int64"), [&] { RunCase<int64_t>(c, stream); });
  }
  // int64 indices beyond 2^32 (insert only: the host cannot scan 5e9
  // positions quickly; the query of such universes is covered above).
  const Case huge = {5000000011LL, 100000, 0, 0, 0.001, 11, false};
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess &&
      free_bytes > gpu::InsertScratchBytes(huge.n) + (size_t{256} << 20)) {
    report(Describe(huge, "int64"), [&] { RunCase<int64_t>(huge, stream); });
  } else {
    std::printf("SKIP %s: needs %zu MiB of free device memory\n",
                Describe(huge, "int64").c_str(), gpu::InsertScratchBytes(huge.n) >> 20);
  }
  report("int32 bad indices", [&] { RunErrorCase<int32_t>(stream); });
  report("int64 bad indices", [&] { RunErrorCase<int64_t>(stream); });

  cudaStreamDestroy(stream);
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
