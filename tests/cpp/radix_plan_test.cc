// Host test of the radix-select arithmetic that sparsify.h shares with the
// CUDA kernels (no GPU here): RadixPlan/Digit/HasPrefix at the CPU's level
// width (16) and the GPU's (kGpuLevelBits = 11), driven exactly as the CUDA
// kernels drive them (HistKernel per level over all keys, FindKernel's scan
// from the top, the ordered compaction with its tie quota), checked against
// a brute-force sort by (key desc, index asc). Built and run by
// tests/ops/test_sparsifiers.py::test_radix_plan_host_emulation.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/sparsify/sparsify.h"

using namespace deepreduce::sparsify;

template <typename U, typename KeyFn>
std::vector<int64_t> Emulate(KeyFn key, int key_bits, int64_t n, int64_t k, int level_bits) {
  const RadixPlan plan = MakeRadixPlan(key_bits, level_bits);
  unsigned long long prefix = 0;
  long long need = k;
  for (int level = 0; level < plan.num_levels; ++level) {
    const int bins = 1 << plan.DigitBits(level);
    std::vector<long long> hist(bins, 0);
    for (int64_t i = 0; i < n; ++i) {
      const U kk = key(i);
      if (HasPrefix(plan, level, kk, static_cast<U>(prefix))) ++hist[Digit(plan, level, kk)];
    }
    long long acc = 0;
    for (int r = 0; r < bins; ++r) {
      const int b = bins - 1 - r;
      const long long incl = acc + hist[b];
      if (acc < need && incl >= need) {
        need -= acc;
        prefix = level == 0 ? static_cast<unsigned long long>(b)
                            : (prefix << plan.DigitBits(level)) | static_cast<unsigned long long>(b);
        break;
      }
      acc = incl;
    }
  }
  const U t = static_cast<U>(prefix);
  std::vector<int64_t> out;
  long long eq = 0;
  for (int64_t i = 0; i < n; ++i) {
    const U kk = key(i);
    if (kk > t || (kk == t && eq++ < need)) out.push_back(i);
  }
  return out;
}

template <typename U, typename KeyFn>
std::vector<int64_t> Brute(KeyFn key, int64_t n, int64_t k) {
  std::vector<int64_t> idx(n);
  for (int64_t i = 0; i < n; ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return key(a) > key(b); });
  idx.resize(k);
  std::sort(idx.begin(), idx.end());
  return idx;
}

int failures = 0;

template <typename U, typename KeyFn>
void Check(const char* what, KeyFn key, int key_bits, int64_t n) {
  for (int64_t k : {int64_t{1}, int64_t{2}, n / 3, n - 1, n}) {
    if (k < 1) continue;
    const std::vector<int64_t> want = Brute<U>(key, n, k);
    for (int lb : {kLevelBits, kGpuLevelBits}) {
      if (Emulate<U>(key, key_bits, n, k, lb) != want) {
        std::printf("FAIL %s n=%lld k=%lld level_bits=%d\n", what, (long long)n, (long long)k, lb);
        ++failures;
      }
    }
  }
}

template <typename F, typename Gen>
void CheckFloat(const char* what, Gen gen, int64_t n) {
  using U = typename F::U;
  std::vector<U> bits(n);
  for (int64_t i = 0; i < n; ++i) bits[i] = gen(i);
  Check<U>(what, [&](int64_t i) { return MagnitudeKey<F>(bits[i]); }, MagnitudeKeyBits<F>(), n);
}

int main() {
  std::mt19937_64 rng(7);
  const int64_t n = 3001;
  auto any_bits = [&](int64_t) { return rng(); };
  auto few = [&](int64_t) { return rng() % 5; };
  CheckFloat<Float32>("f32 random bits", [&](int64_t i) { return static_cast<uint32_t>(any_bits(i)); }, n);
  CheckFloat<Float64>("f64 random bits", [&](int64_t i) { return any_bits(i); }, n);
  CheckFloat<Half>("f16 random bits", [&](int64_t i) { return static_cast<uint16_t>(any_bits(i)); }, n);
  CheckFloat<BFloat16>("bf16 random bits", [&](int64_t i) { return static_cast<uint16_t>(any_bits(i)); }, n);
  const uint32_t f32_vals[5] = {0x3f800000u, 0xbf800000u, 0x7fc00000u, 0x00000000u, 0x80000000u};
  CheckFloat<Float32>("f32 ties", [&](int64_t i) { return f32_vals[few(i)]; }, n);
  const uint64_t f64_vals[5] = {0x3ff0000000000000ULL, 0xbff0000000000000ULL,
                                0x7ff0000000000000ULL, 0, 0x0000000000000001ULL};
  CheckFloat<Float64>("f64 ties", [&](int64_t i) { return f64_vals[few(i)]; }, n);
  CheckFloat<Half>("f16 all equal", [&](int64_t) { return uint16_t{0x3c00}; }, n);
  const uint64_t seed_mix = SeedMix(12345);
  Check<uint64_t>("random-k keys", [&](int64_t i) { return RandomKKey(seed_mix, i); }, 64, n);
  if (failures == 0) std::printf("OK\n");
  return failures == 0 ? 0 : 1;
}
