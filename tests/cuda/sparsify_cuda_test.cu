// Standalone test of the CUDA sparsifier kernels (kernels/sparsify/
// sparsify_kernels.cu) against a host reference, without TensorFlow.
//
// The reference states the contract of sparsify.h / sparsify_gpu.h in the
// plainest form, independently of the radix select:
//   * top-k: decode every element to a double (exact for all four formats,
//     by this file's own decoder), order by (NaN first, then |x| descending,
//     then index ascending) with std::sort, keep the first k, sort them by
//     index;
//   * random-k: the same with the shared key RandomKKey(SeedMix(seed), i),
//     larger key first (keys are distinct);
//   * threshold: isnan(x) || |x| >= t, compared as doubles (exact, so the
//     same as comparing in x's dtype).
// The device results must be identical: the same indices and the same value
// bits (values are copied bit for bit). Inputs: float16, bfloat16, float32
// and float64 as raw bits, int32 and int64 indices, sizes from 1 to 5e6,
// k in {1, n/100, n/2, n-1, n} (k = 0 is the caller's job, see
// sparsify_gpu.h), many ties (small integers, all equal, all zero with
// mixed signs), negatives, subnormals, +-inf, NaNs of either sign and any
// payload (NaN ranks above +inf; all NaNs tie).
//
// Host self-checks (run even without a GPU): the decoder's magnitude order
// agrees with sparsify.h's MagnitudeKey on every 16-bit pattern and on
// random 32/64-bit patterns, and the reference agrees with an O(n^2)
// brute force (an element is selected iff fewer than k elements precede it)
// on many tiny inputs.
//
// Build and run: bash build_deps/build_cuda_test.sh (runs it if a GPU is
// present); `sparsify_cuda_test NAME` runs only the cases whose name contains
// NAME. Exit status: 0 all passed, 1 a mismatch, 77 no CUDA device
// (skipped; the host self-checks still ran).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/sparsify/sparsify.h"
#include "kernels/sparsify/sparsify_gpu.h"

namespace {

namespace ds = deepreduce::sparsify;
namespace gpu = deepreduce::sparsify::gpu;

constexpr int kSkipped = 77;

struct Failure {
  std::string what;
};

#define CHECK(cond, msg)                                                          \
  do {                                                                            \
    if (!(cond)) throw Failure{std::string(msg) + " [" #cond "] line " +         \
                               std::to_string(__LINE__)};                         \
  } while (0)

void CheckGpu(const gpu::GpuStatus& s) {
  if (!s.ok()) throw Failure{std::string("CUDA error while ") + s.step + ": " +
                             gpu::ErrorString(s.cuda_error)};
}
void CheckCuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Failure{std::string(what) + ": " + cudaGetErrorString(e)};
}

// Device buffer of `bytes` bytes (at least 1), freed on scope exit.
struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t n) { CheckCuda(cudaMalloc(&p, n > 0 ? n : 1), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T> T* as() const { return static_cast<T*>(p); }
};

template <typename T>
std::vector<T> Download(const void* d, size_t n) {
  std::vector<T> h(n);
  if (n > 0) {
    CheckCuda(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), "download");
  }
  return h;
}

// ------------------------------------------------------------ formats --

// A float format by its field widths; F is sparsify.h's layout (for the key
// functions and U), exp_bits/man_bits are stated here independently.
template <typename F_>
struct Fmt {
  using F = F_;
  using U = typename F::U;
  int exp_bits, man_bits;
  gpu::FloatKind kind;
  const char* name;
  int Bias() const { return (1 << (exp_bits - 1)) - 1; }
  U ExpMax() const { return static_cast<U>((U{1} << exp_bits) - 1); }
  U Make(bool neg, U e, U m) const {
    return static_cast<U>((static_cast<U>(neg) << (exp_bits + man_bits)) |
                          (static_cast<U>(e) << man_bits) | m);
  }
  U Inf(bool neg) const { return Make(neg, ExpMax(), 0); }
  U NaN(bool neg, U payload) const {
    const U mmask = static_cast<U>((U{1} << man_bits) - 1);
    payload &= mmask;
    return Make(neg, ExpMax(), payload ? payload : U{1});
  }
  // The exact value of the bits (every format here fits a double exactly).
  double Decode(U bits) const {
    const bool neg = (bits >> (exp_bits + man_bits)) & 1;
    const uint64_t e = (bits >> man_bits) & ExpMax();
    const uint64_t m = bits & ((U{1} << man_bits) - 1);
    double v;
    if (e == ExpMax()) {
      v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
    } else if (e == 0) {
      v = std::ldexp(static_cast<double>(m), 1 - Bias() - man_bits);
    } else {
      v = std::ldexp(static_cast<double>((uint64_t{1} << man_bits) | m),
                     static_cast<int>(e) - Bias() - man_bits);
    }
    return neg ? -v : v;
  }
  // The bits of a small integer (|v| < 2^(man_bits+1): exact).
  U FromInt(int v) const {
    if (v == 0) return 0;
    const bool neg = v < 0;
    const uint64_t a = neg ? -static_cast<int64_t>(v) : v;
    int e = 63 - __builtin_clzll(a);
    const uint64_t m = (a - (uint64_t{1} << e)) << (man_bits - e);
    return Make(neg, static_cast<U>(e + Bias()), static_cast<U>(m));
  }
};

const Fmt<ds::Half> kHalf{5, 10, gpu::FloatKind::kHalf, "float16"};
const Fmt<ds::BFloat16> kBf16{8, 7, gpu::FloatKind::kBFloat16, "bfloat16"};
const Fmt<ds::Float32> kF32{8, 23, gpu::FloatKind::kFloat32, "float32"};
const Fmt<ds::Float64> kF64{11, 52, gpu::FloatKind::kFloat64, "float64"};

// ------------------------------------------------------------- inputs --

enum Pattern { kRandom, kSmallInts, kAllEqual, kAllZero, kSpecials, kRawBits, kNumPatterns };
const char* PatternName(int p) {
  static const char* names[] = {"random", "small-ints", "all-equal", "all-zero", "specials",
                                "raw-bits"};
  return names[p];
}

template <typename FM>
std::vector<typename FM::U> MakeInput(const FM& f, int pattern, int64_t n, uint64_t seed) {
  using U = typename FM::U;
  std::mt19937_64 rng(seed);
  const U mmask = static_cast<U>((U{1} << f.man_bits) - 1);
  auto finite = [&](int spread) {
    const int e = f.Bias() + static_cast<int>(rng() % (2 * spread + 1)) - spread;
    return f.Make(rng() & 1, static_cast<U>(e), static_cast<U>(rng()) & mmask);
  };
  std::vector<U> x(n);
  const U same = finite(3);
  for (int64_t i = 0; i < n; ++i) {
    switch (pattern) {
      case kRandom: x[i] = finite(10); break;
      case kSmallInts: x[i] = f.FromInt(static_cast<int>(rng() % 17) - 8); break;
      case kAllEqual: x[i] = same; break;
      case kAllZero: x[i] = f.Make(rng() & 1, 0, 0); break;
      case kSpecials:
        switch (rng() % 16) {
          case 0: x[i] = f.Inf(rng() & 1); break;
          case 1: x[i] = f.NaN(rng() & 1, static_cast<U>(rng())); break;
          case 2: x[i] = f.Make(rng() & 1, 0, 0); break;
          case 3: x[i] = f.Make(rng() & 1, 0, static_cast<U>(rng()) & mmask); break;
          case 4: x[i] = f.Make(rng() & 1, static_cast<U>(f.ExpMax() - 1), mmask); break;
          case 5: x[i] = f.FromInt(static_cast<int>(rng() % 5) - 2); break;
          default: x[i] = finite(4); break;
        }
        break;
      default: x[i] = static_cast<U>(rng()); break;
    }
  }
  return x;
}

// ---------------------------------------------------------- reference --

// Magnitude rank of one element: NaN above everything, then |x|.
struct Rank {
  bool nan;
  double mag;
};
template <typename FM>
Rank RankOf(const FM& f, typename FM::U bits) {
  const double v = f.Decode(bits);
  return Rank{std::isnan(v), std::isnan(v) ? 0.0 : std::fabs(v)};
}
bool Before(const Rank& a, int64_t ia, const Rank& b, int64_t ib) {
  if (a.nan != b.nan) return a.nan;
  if (a.mag != b.mag) return a.mag > b.mag;
  return ia < ib;
}

template <typename FM>
std::vector<Rank> Ranks(const FM& f, const std::vector<typename FM::U>& x) {
  std::vector<Rank> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = RankOf(f, x[i]);
  return r;
}

// All positions in selection order (rank first, index ascending on ties).
std::vector<int64_t> TopOrder(const std::vector<Rank>& r) {
  std::vector<int64_t> order(r.size());
  for (size_t i = 0; i < r.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return Before(r[a], a, r[b], b); });
  return order;
}

std::vector<int64_t> RandomOrder(uint64_t seed, int64_t n) {
  const uint64_t mix = ds::SeedMix(seed);
  std::vector<uint64_t> key(n);
  for (int64_t i = 0; i < n; ++i) key[i] = ds::RandomKKey(mix, static_cast<uint64_t>(i));
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return key[a] != key[b] ? key[a] > key[b] : a < b;
  });
  return order;
}

std::vector<int64_t> FirstK(const std::vector<int64_t>& order, int64_t k) {
  std::vector<int64_t> s(order.begin(), order.begin() + k);
  std::sort(s.begin(), s.end());
  return s;
}

// t is a non-negative threshold (not NaN; -0.0 allowed).
std::vector<int64_t> ThresholdRef(const std::vector<Rank>& r, double t) {
  std::vector<int64_t> s;
  for (size_t i = 0; i < r.size(); ++i) {
    if (r[i].nan || r[i].mag >= t) s.push_back(static_cast<int64_t>(i));
  }
  return s;
}

// ------------------------------------------------- host self-checks --

// The decoder's order equals MagnitudeKey's order: sorting by key gives
// non-decreasing ranks, with equal ranks exactly where keys are equal.
template <typename FM>
bool KeyOrderAgrees(const FM& f, std::vector<typename FM::U> bits) {
  using F = typename FM::F;
  std::sort(bits.begin(), bits.end(), [](typename FM::U a, typename FM::U b) {
    return ds::MagnitudeKey<F>(a) < ds::MagnitudeKey<F>(b);
  });
  for (size_t i = 1; i < bits.size(); ++i) {
    const Rank a = RankOf(f, bits[i - 1]), b = RankOf(f, bits[i]);
    const bool key_eq = ds::MagnitudeKey<F>(bits[i - 1]) == ds::MagnitudeKey<F>(bits[i]);
    const bool rank_eq = a.nan == b.nan && a.mag == b.mag;
    if (key_eq != rank_eq || (!rank_eq && !Before(b, 0, a, 0))) {
      std::printf("  %s: key order and value order disagree at 0x%llx / 0x%llx\n", f.name,
                  static_cast<unsigned long long>(bits[i - 1]),
                  static_cast<unsigned long long>(bits[i]));
      return false;
    }
  }
  return true;
}

// Selected iff fewer than k elements come before it (any strict total order).
template <typename Less>
std::vector<int64_t> BruteForce(int64_t n, int64_t k, Less before) {
  std::vector<int64_t> s;
  for (int64_t i = 0; i < n; ++i) {
    int64_t ahead = 0;
    for (int64_t j = 0; j < n; ++j) ahead += j != i && before(j, i);
    if (ahead < k) s.push_back(i);
  }
  return s;
}

template <typename FM>
bool TinyBruteForce(const FM& f) {
  using F = typename FM::F;
  for (int pattern = 0; pattern < kNumPatterns; ++pattern) {
    for (int64_t n = 1; n <= 40; n += 3) {
      const auto x = MakeInput(f, pattern, n, 1000 * pattern + n);
      const auto r = Ranks(f, x);
      const auto order = TopOrder(r);
      const auto rorder = RandomOrder(n * 7 + pattern, n);
      const uint64_t mix = ds::SeedMix(n * 7 + pattern);
      for (int64_t k = 0; k <= n; ++k) {
        // Brute force on the shared key functions (the kernels' definition).
        const auto want = BruteForce(n, k, [&](int64_t j, int64_t i) {
          const auto kj = ds::MagnitudeKey<F>(x[j]), ki = ds::MagnitudeKey<F>(x[i]);
          return kj != ki ? kj > ki : j < i;
        });
        const auto rwant = BruteForce(n, k, [&](int64_t j, int64_t i) {
          return ds::RandomKKey(mix, j) > ds::RandomKKey(mix, i);
        });
        if (FirstK(order, k) != want || FirstK(rorder, k) != rwant) {
          std::printf("  %s %s n=%lld k=%lld: reference != brute force\n", f.name,
                      PatternName(pattern), static_cast<long long>(n),
                      static_cast<long long>(k));
          return false;
        }
      }
      // Threshold at every element's magnitude: the count by keys.
      for (int64_t j = 0; j < n; ++j) {
        if (RankOf(f, x[j]).nan) continue;
        const auto t = static_cast<typename FM::U>(x[j] & F::kAbsMask);
        std::vector<int64_t> want;
        for (int64_t i = 0; i < n; ++i) {
          if (ds::MagnitudeKey<F>(x[i]) >= ds::MagnitudeKey<F>(t)) want.push_back(i);
        }
        if (ThresholdRef(r, f.Decode(t)) != want) {
          std::printf("  %s threshold reference != key comparison (n=%lld)\n", f.name,
                      static_cast<long long>(n));
          return false;
        }
      }
    }
  }
  return true;
}

bool HostSelfCheck() {
  std::vector<uint16_t> all16(1 << 16);
  for (int i = 0; i < (1 << 16); ++i) all16[i] = static_cast<uint16_t>(i);
  std::mt19937_64 rng(12345);
  std::vector<uint32_t> r32(200000);
  std::vector<uint64_t> r64(200000);
  for (auto& v : r32) v = static_cast<uint32_t>(rng());
  for (auto& v : r64) v = rng();
  // Edge patterns: zeros, smallest subnormals, largest finite, inf, NaNs.
  for (uint32_t v : {0u, 0x80000000u, 1u, 0x80000001u, 0x7f7fffffu, 0x7f800000u, 0xff800000u,
                     0x7f800001u, 0xffffffffu, 0x7fc00000u}) {
    r32.push_back(v);
  }
  for (uint64_t v : {0ull, 0x8000000000000000ull, 1ull, 0x7fefffffffffffffull,
                     0x7ff0000000000000ull, 0x7ff0000000000001ull, 0xffffffffffffffffull}) {
    r64.push_back(v);
  }
  bool ok = KeyOrderAgrees(kHalf, all16) && KeyOrderAgrees(kBf16, all16) &&
            KeyOrderAgrees(kF32, r32) && KeyOrderAgrees(kF64, r64);
  // The decoder against the compiler's own float / double.
  for (uint32_t v : r32) {
    float f;
    std::memcpy(&f, &v, 4);
    const double d = kF32.Decode(v);
    if (!(std::isnan(f) ? std::isnan(d) : d == static_cast<double>(f))) ok = false;
  }
  for (uint64_t v : r64) {
    double f;
    std::memcpy(&f, &v, 8);
    const double d = kF64.Decode(v);
    if (!(std::isnan(f) ? std::isnan(d) : d == f)) ok = false;
  }
  for (int v = -8; v <= 8; ++v) {
    if (kHalf.Decode(kHalf.FromInt(v)) != v || kBf16.Decode(kBf16.FromInt(v)) != v ||
        kF32.Decode(kF32.FromInt(v)) != v || kF64.Decode(kF64.FromInt(v)) != v) {
      ok = false;
    }
  }
  if (!ok) std::printf("  decoder or key order check failed\n");
  return ok && TinyBruteForce(kHalf) && TinyBruteForce(kBf16) && TinyBruteForce(kF32) &&
         TinyBruteForce(kF64);
}

// -------------------------------------------------------- device runs --

template <typename Tidx>
void CompareSelection(const std::string& what, const std::vector<int64_t>& want,
                      const std::vector<Tidx>& got_idx) {
  CHECK(got_idx.size() == want.size(), what + ": size");
  for (size_t i = 0; i < want.size(); ++i) {
    CHECK(static_cast<int64_t>(got_idx[i]) == want[i],
          what + ": output " + std::to_string(i) + " is index " +
              std::to_string(static_cast<int64_t>(got_idx[i])) + ", want " +
              std::to_string(want[i]));
  }
}

template <typename U>
void CompareValues(const std::string& what, const std::vector<int64_t>& want,
                   const std::vector<U>& x, const std::vector<U>& got_val) {
  for (size_t i = 0; i < want.size(); ++i) {
    CHECK(got_val[i] == x[want[i]], what + ": value bits differ at output " + std::to_string(i));
  }
}

// k values of the brief: 0 (not launched: the caller's job), 1, n/100, n/2,
// n-1, n; duplicates and values outside [1, n] dropped.
std::vector<int64_t> Ks(int64_t n) {
  std::vector<int64_t> ks;
  for (int64_t k : {int64_t{1}, n / 100, n / 2, n - 1, n}) {
    if (k >= 1 && k <= n && std::find(ks.begin(), ks.end(), k) == ks.end()) ks.push_back(k);
  }
  return ks;
}

// Top-k and random-k for every k, then thresholds, on one input.
template <typename FM, typename Tidx>
void RunInput(const FM& f, const std::vector<typename FM::U>& x, uint64_t seed,
              cudaStream_t stream) {
  using U = typename FM::U;
  const int64_t n = static_cast<int64_t>(x.size());
  gpu::GpuStatus st{0, ""};
  const size_t scratch_bytes = gpu::ScratchBytes(n, &st);
  CheckGpu(st);
  DeviceBuffer d_x(n * sizeof(U)), d_idx(n * sizeof(Tidx)), d_val(n * sizeof(U)),
      d_scratch(scratch_bytes);
  CheckCuda(cudaMemcpy(d_x.p, x.data(), n * sizeof(U), cudaMemcpyHostToDevice), "upload");
  void* s = static_cast<void*>(stream);

  const auto ranks = Ranks(f, x);
  const auto order = TopOrder(ranks);
  const auto rorder = RandomOrder(seed, n);
  for (int64_t k : Ks(n)) {
    const std::string ks = " k=" + std::to_string(k);
    CheckCuda(cudaMemset(d_idx.p, 0xff, n * sizeof(Tidx)), "memset");
    CheckGpu(gpu::TopK<U, Tidx>(f.kind, d_x.as<U>(), n, k, d_idx.as<Tidx>(), d_val.as<U>(),
                                d_scratch.p, scratch_bytes, s));
    CheckCuda(cudaStreamSynchronize(stream), "TopK");
    auto want = FirstK(order, k);
    CompareSelection("top-k" + ks, want, Download<Tidx>(d_idx.p, k));
    CompareValues("top-k" + ks, want, x, Download<U>(d_val.p, k));

    CheckGpu(gpu::RandomK<U, Tidx>(seed, d_x.as<U>(), n, k, d_idx.as<Tidx>(), d_val.as<U>(),
                                   d_scratch.p, scratch_bytes, s));
    CheckCuda(cudaStreamSynchronize(stream), "RandomK");
    want = FirstK(rorder, k);
    CompareSelection("random-k" + ks, want, Download<Tidx>(d_idx.p, k));
    CompareValues("random-k" + ks, want, x, Download<U>(d_val.p, k));
  }

  // Thresholds: 0, -0.0, the smallest subnormal, 1, the magnitudes of a few
  // elements (ties at equality), the largest finite value, +inf.
  const U mmask = static_cast<U>((U{1} << f.man_bits) - 1);
  std::vector<U> ts = {0, f.Make(true, 0, 0), 1, f.FromInt(1), f.Make(false, f.ExpMax() - 1, mmask),
                       f.Inf(false)};
  std::mt19937_64 rng(seed);
  for (int j = 0; j < 4; ++j) {
    const U b = static_cast<U>(x[rng() % n] & ((U{1} << (f.exp_bits + f.man_bits)) - 1));
    if (!std::isnan(f.Decode(b))) ts.push_back(b);
  }
  for (U t : ts) {
    const std::string what = "threshold t=" + std::to_string(f.Decode(t));
    int64_t count = -1;
    CheckGpu(gpu::ThresholdCount<U>(f.kind, d_x.as<U>(), n, ds::MagnitudeKey<typename FM::F>(t),
                                    d_scratch.p, scratch_bytes, s, &count));
    const auto want = ThresholdRef(ranks, f.Decode(t));
    CHECK(count == static_cast<int64_t>(want.size()),
          what + ": count " + std::to_string(count) + ", want " + std::to_string(want.size()));
    CheckGpu(gpu::ThresholdWrite<U, Tidx>(d_x.as<U>(), n, d_scratch.p, scratch_bytes,
                                          d_idx.as<Tidx>(), d_val.as<U>(), s));
    CheckCuda(cudaStreamSynchronize(stream), "ThresholdWrite");
    CompareSelection(what, want, Download<Tidx>(d_idx.p, want.size()));
    CompareValues(what, want, x, Download<U>(d_val.p, want.size()));
  }
}

// ------------------------------------------------ segmented selection --
//
// SegmentedTopK / SegmentedRandomK against the per-segment reference: segment
// i of the bucket gets FirstK(order of its own slice, k[i]) shifted by
// offsets[i] (top-k: TopOrder of the slice's ranks; random-k: RandomOrder
// with seed SegmentSeed(seed, i) over the slice's positions), concatenated
// in segment order. Layouts: ResNet-20 as deepreduce_bench.models.resnet20
// builds it (59 tensors, 3-channel input), ResNet-50 as torchvision
// defines it (161 tensors, 25,557,032 elements), and random layouts of
// empty, tiny, tile-edge and chunk-edge segments with k[i] drawn from
// {0, 1, len/100, len/2, len-1, len}.

std::vector<int64_t> ResNet20Lengths() {
  std::vector<int64_t> len;
  auto conv_bn = [&](int64_t cin, int64_t cout) {
    len.push_back(3 * 3 * cin * cout);
    len.push_back(cout);  // gamma
    len.push_back(cout);  // beta
  };
  conv_bn(3, 16);
  int64_t cin = 16;
  for (int64_t f : {16, 32, 64}) {
    for (int b = 0; b < 3; ++b) {
      conv_bn(cin, f);
      conv_bn(f, f);
      cin = f;
    }
  }
  len.push_back(64 * 10);
  len.push_back(10);
  return len;
}

std::vector<int64_t> ResNet50Lengths() {
  std::vector<int64_t> len;
  auto conv_bn = [&](int64_t k, int64_t cin, int64_t cout) {
    len.push_back(k * k * cin * cout);
    len.push_back(cout);
    len.push_back(cout);
  };
  conv_bn(7, 3, 64);
  int64_t cin = 64;
  const int64_t widths[] = {64, 128, 256, 512};
  const int blocks[] = {3, 4, 6, 3};
  for (int s = 0; s < 4; ++s) {
    for (int b = 0; b < blocks[s]; ++b) {
      const int64_t w = widths[s], out = 4 * w;
      conv_bn(1, cin, w);
      conv_bn(3, w, w);
      conv_bn(1, w, out);
      if (b == 0) conv_bn(1, cin, out);  // downsample
      cin = out;
    }
  }
  len.push_back(2048 * 1000);
  len.push_back(1000);
  return len;
}

std::vector<int64_t> OffsetsOf(const std::vector<int64_t>& len) {
  std::vector<int64_t> off(len.size() + 1, 0);
  for (size_t i = 0; i < len.size(); ++i) off[i + 1] = off[i] + len[i];
  return off;
}

bool SegmentLayoutsAgree() {
  const auto r20 = ResNet20Lengths(), r50 = ResNet50Lengths();
  int64_t n20 = 0, n50 = 0;
  for (int64_t l : r20) n20 += l;
  for (int64_t l : r50) n50 += l;
  // Keras' ResNet-20 (3-channel input, 10 classes): 59 trainable tensors,
  // 269,722 elements (272,474 parameters less 2,752 BatchNorm statistics).
  return r20.size() == 59 && n20 == 269722 && r50.size() == 161 && n50 == 25557032;
}

// The reference selection of a whole bucket.
template <typename FM>
std::vector<int64_t> SegmentedRef(const FM& f, const std::vector<typename FM::U>& x,
                                  const std::vector<int64_t>& off,
                                  const std::vector<int64_t>& k, bool random, uint64_t seed) {
  std::vector<int64_t> out;
  for (size_t i = 0; i + 1 < off.size(); ++i) {
    if (k[i] == 0) continue;
    const int64_t len = off[i + 1] - off[i];
    std::vector<int64_t> order;
    if (random) {
      order = RandomOrder(ds::SegmentSeed(seed, i), len);
    } else {
      std::vector<typename FM::U> slice(x.begin() + off[i], x.begin() + off[i + 1]);
      order = TopOrder(Ranks(f, slice));
    }
    for (int64_t j : FirstK(order, k[i])) out.push_back(off[i] + j);
  }
  return out;
}

template <typename FM>
void RunSegmented(const std::string& what, const FM& f, const std::vector<typename FM::U>& x,
                  const std::vector<int64_t>& off, const std::vector<int64_t>& k,
                  uint64_t seed, cudaStream_t stream) {
  using U = typename FM::U;
  const int64_t n = static_cast<int64_t>(x.size());
  const int64_t num_segments = static_cast<int64_t>(k.size());
  int64_t total_k = 0;
  for (int64_t v : k) total_k += v;
  gpu::GpuStatus st{0, ""};
  const size_t scratch_bytes =
      gpu::SegmentedScratchBytes(off.data(), k.data(), num_segments, &st);
  CheckGpu(st);
  // One guard element after the outputs: nothing may be written past total_k.
  DeviceBuffer d_x(n * sizeof(U)), d_idx((total_k + 1) * sizeof(int64_t)),
      d_val((total_k + 1) * sizeof(U)), d_scratch(scratch_bytes);
  CheckCuda(cudaMemcpy(d_x.p, x.data(), n * sizeof(U), cudaMemcpyHostToDevice), "upload");
  void* s = static_cast<void*>(stream);
  for (int random = 0; random < 2; ++random) {
    const std::string name = what + (random ? " segmented random-k" : " segmented top-k");
    CheckCuda(cudaMemset(d_idx.p, 0xff, (total_k + 1) * sizeof(int64_t)), "memset");
    if (random) {
      CheckGpu(gpu::SegmentedRandomK<U>(seed, d_x.as<U>(), off.data(), k.data(), num_segments,
                                        d_idx.as<int64_t>(), d_val.as<U>(), d_scratch.p,
                                        scratch_bytes, s));
    } else {
      CheckGpu(gpu::SegmentedTopK<U>(f.kind, d_x.as<U>(), off.data(), k.data(), num_segments,
                                     d_idx.as<int64_t>(), d_val.as<U>(), d_scratch.p,
                                     scratch_bytes, s));
    }
    CheckCuda(cudaStreamSynchronize(stream), name.c_str());
    const auto want = SegmentedRef(f, x, off, k, random == 1, seed);
    CHECK(static_cast<int64_t>(want.size()) == total_k, name + ": reference size");
    const auto got = Download<int64_t>(d_idx.p, total_k + 1);
    CHECK(got[total_k] == -1, name + ": wrote past the last output");
    CompareSelection(name, want, std::vector<int64_t>(got.begin(), got.begin() + total_k));
    CompareValues(name, want, x, Download<U>(d_val.p, total_k));
  }
}

// k[i] = max(1, ceil(ratio * len)) for non-empty segments (the library's
// per-variable rule), 0 for empty ones.
std::vector<int64_t> RatioK(const std::vector<int64_t>& len, double ratio) {
  std::vector<int64_t> k(len.size());
  for (size_t i = 0; i < len.size(); ++i) {
    const int64_t c = static_cast<int64_t>(std::ceil(ratio * static_cast<double>(len[i])));
    k[i] = len[i] == 0 ? 0 : std::min(len[i], std::max<int64_t>(1, c));
  }
  return k;
}

// Random segment lengths around the unit edges (tile 1024, chunk 16384) and
// random k from the brief's set.
void RandomLayout(uint64_t seed, int num_segments, std::vector<int64_t>* len,
                  std::vector<int64_t>* k) {
  std::mt19937_64 rng(seed);
  const int64_t lens[] = {0, 0, 1, 2, 31, 32, 33, 1000, 1023, 1024, 1025, 2049,
                          16383, 16384, 16385, 40000};
  len->clear();
  k->clear();
  for (int i = 0; i < num_segments; ++i) {
    const int64_t l = lens[rng() % (sizeof(lens) / sizeof(lens[0]))];
    const int64_t choices[] = {0, 1, l / 100, l / 2, l - 1, l};
    int64_t kk = choices[rng() % 6];
    kk = std::max<int64_t>(0, std::min(kk, l));
    len->push_back(l);
    k->push_back(kk);
  }
}

template <typename FM>
void RunSegmentedCases(const FM& f, cudaStream_t stream,
                       const std::function<void(const std::string&, std::function<void()>)>&
                           report) {
  int case_no = 0;
  // Random layouts, every pattern (ties, specials with NaN/Inf, all zero).
  for (int layout = 0; layout < 3; ++layout) {
    std::vector<int64_t> len, k;
    RandomLayout(0x5e600000ull + layout, 40, &len, &k);
    const auto off = OffsetsOf(len);
    for (int pattern = 0; pattern < kNumPatterns; ++pattern) {
      const uint64_t seed = 0x5e610000ull + 97 * case_no++;
      const auto x = MakeInput(f, pattern, off.back(), seed);
      report(std::string(f.name) + " " + PatternName(pattern) + " random layout " +
                 std::to_string(layout) + " (n=" + std::to_string(off.back()) + ")",
             [&] { RunSegmented("random layout", f, x, off, k, seed, stream); });
    }
  }
  // Edge cases: every k zero, every k = len, one segment, empty segments only.
  {
    const std::vector<int64_t> len = {5, 0, 1025, 3};
    const auto off = OffsetsOf(len);
    const auto x = MakeInput(f, kSpecials, off.back(), 77);
    report(std::string(f.name) + " all k = 0",
           [&] { RunSegmented("k=0", f, x, off, {0, 0, 0, 0}, 7, stream); });
    report(std::string(f.name) + " all k = len",
           [&] { RunSegmented("k=len", f, x, off, len, 7, stream); });
    report(std::string(f.name) + " empty segments only",
           [&] { RunSegmented("empty", f, {}, {0, 0, 0}, {0, 0}, 7, stream); });
    const auto y = MakeInput(f, kSmallInts, 70000, 78);
    report(std::string(f.name) + " one segment of 70000, k=700",
           [&] { RunSegmented("one", f, y, {0, 70000}, {700}, 7, stream); });
  }
  // ResNet-20 at 1 % and 10 %.
  {
    const auto len = ResNet20Lengths();
    const auto off = OffsetsOf(len);
    const auto x = MakeInput(f, kRandom, off.back(), 20);
    for (double r : {0.01, 0.1}) {
      report(std::string(f.name) + " ResNet-20 layout ratio " + std::to_string(r),
             [&] { RunSegmented("resnet20", f, x, off, RatioK(len, r), 20, stream); });
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  // An optional argument runs only the cases whose name contains it (e.g.
  // "layout" under compute-sanitizer --tool racecheck, which is slow).
  const std::string only = argc > 1 ? argv[1] : "";
  if (!HostSelfCheck() || !SegmentLayoutsAgree()) {
    std::printf("FAIL host reference self-check\n");
    return 1;
  }
  std::printf("PASS host reference self-check\n");

  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("SKIP: no CUDA device available (cudaGetDeviceCount: %s); the CUDA "
                "kernels were compiled but not run\n",
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
    if (name.find(only) == std::string::npos) return;
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
  const int64_t sizes[] = {1, 31, 32, 33, 1000, (int64_t{1} << 18) + 7, 5000000};
  auto run_format = [&](const auto& f) {
    int case_no = 0;
    for (int64_t n : sizes) {
      for (int pattern = 0; pattern < kNumPatterns; ++pattern) {
        // The largest size: the patterns that differ in kind (keeps the run short).
        if (n == 5000000 && (pattern == kAllEqual || pattern == kRawBits)) continue;
        const uint64_t seed = 0x5eed0000ull + 131 * case_no;
        // Index type alternating over patterns and sizes.
        const bool idx64 = (case_no++ / kNumPatterns + pattern) % 2 == 1;
        const auto x = MakeInput(f, pattern, n, seed);
        report(std::string(f.name) + " " + PatternName(pattern) + " n=" + std::to_string(n) +
                   (idx64 ? " int64" : " int32"),
               [&] {
                 if (idx64) {
                   RunInput<std::decay_t<decltype(f)>, int64_t>(f, x, seed, stream);
                 } else {
                   RunInput<std::decay_t<decltype(f)>, int32_t>(f, x, seed, stream);
                 }
               });
      }
    }
  };
  run_format(kF32);
  run_format(kHalf);
  run_format(kBf16);
  run_format(kF64);
  // Segmented selection: every format on the random and ResNet-20 layouts,
  // float32 also on ResNet-50's whole bucket (25.6 M elements, 1 %).
  const std::function<void(const std::string&, std::function<void()>)> rep =
      [&](const std::string& name, std::function<void()> fn) { report(name, fn); };
  RunSegmentedCases(kF32, stream, rep);
  RunSegmentedCases(kHalf, stream, rep);
  RunSegmentedCases(kBf16, stream, rep);
  RunSegmentedCases(kF64, stream, rep);
  {
    const auto len = ResNet50Lengths();
    const auto off = OffsetsOf(len);
    const auto x = MakeInput(kF32, kRandom, off.back(), 50);
    rep("float32 ResNet-50 layout ratio 0.01", [&] {
      RunSegmented("resnet50", kF32, x, off, RatioK(len, 0.01), 50, stream);
    });
  }
  cudaStreamDestroy(stream);
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
