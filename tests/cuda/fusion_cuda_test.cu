// Standalone test of the CUDA fusion launcher (kernels/fusion/
// fusion_kernels.cu), without TensorFlow: packing pieces back to back on the
// device and unpacking them again must give the host bytes back exactly, the
// packed buffer must equal the host concatenation, and the guard bytes after
// the buffers must be untouched. Cases: assorted sizes (0 bytes, odd byte
// counts, unaligned offsets, 1 MiB: 1-byte units), 300 float32-like pieces
// at element offsets (4-byte units, four kernel batches of <= 96 pieces),
// 16-byte multiples (16-byte units), odd pieces between aligned ones (each
// piece its own unit) and pieces that are all empty.
//
// Build and run: bash build_deps/build_cuda_test.sh. Exit status: 0 all
// passed, 1 a mismatch, 77 no CUDA device (skipped).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/fusion/fusion_gpu.h"

namespace {

constexpr int kSkipped = 77;
constexpr uint8_t kGuard = 0xab;
namespace fg = deepreduce::fusion::gpu;

bool Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::printf("FAIL %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

// Packs and unpacks the pieces of `sizes` bytes; the flat buffer starts
// `shift` bytes into its allocation. Returns the number of failures.
int RunCase(const std::string& name, const std::vector<int64_t>& sizes, int shift,
            uint32_t seed, cudaStream_t stream) {
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  std::mt19937 rng(seed);
  std::vector<std::vector<uint8_t>> pieces;
  std::vector<uint8_t> want;
  for (int64_t s : sizes) {
    std::vector<uint8_t> p(s);
    for (auto& b : p) b = static_cast<uint8_t>(rng());
    want.insert(want.end(), p.begin(), p.end());
    pieces.push_back(std::move(p));
  }
  const int n = static_cast<int>(sizes.size());
  std::vector<uint8_t*> d_pieces(n, nullptr);
  for (int i = 0; i < n; ++i) {
    if (!Check(cudaMalloc(&d_pieces[i], sizes[i] + 1), "cudaMalloc")) return 1;
    if (!Check(cudaMemcpy(d_pieces[i], pieces[i].data(), sizes[i], cudaMemcpyHostToDevice),
               "cudaMemcpy H2D") ||
        !Check(cudaMemset(d_pieces[i] + sizes[i], kGuard, 1), "guard")) {
      return 1;
    }
  }
  uint8_t* d_alloc = nullptr;
  if (!Check(cudaMalloc(&d_alloc, total + shift + 1), "cudaMalloc flat") ||
      !Check(cudaMemset(d_alloc, kGuard, total + shift + 1), "guard")) {
    return 1;
  }
  uint8_t* d_flat = d_alloc + shift;
  std::vector<void*> dst(n);
  std::vector<const void*> src(n);
  int64_t offset = 0;
  for (int i = 0; i < n; ++i) {
    dst[i] = d_flat + offset;
    src[i] = d_pieces[i];
    offset += sizes[i];
  }
  int failed = 0;
  fg::GpuStatus st = fg::CopyPieces(dst.data(), src.data(), sizes.data(), n, stream);
  if (!st.ok()) {
    std::printf("FAIL %s pack: %s: %s\n", name.c_str(), st.step, fg::ErrorString(st.cuda_error));
    return 1;
  }
  std::vector<uint8_t> got(total + shift + 1);
  if (!Check(cudaStreamSynchronize(stream), "sync") ||
      !Check(cudaMemcpy(got.data(), d_alloc, got.size(), cudaMemcpyDeviceToHost), "D2H")) {
    return 1;
  }
  bool guards = got.back() == kGuard;
  for (int i = 0; i < shift; ++i) guards = guards && got[i] == kGuard;
  if (std::vector<uint8_t>(got.begin() + shift, got.end() - 1) != want || !guards) {
    std::printf("FAIL %s pack: the packed bytes differ from the host concatenation%s\n",
                name.c_str(), guards ? "" : " (a guard byte was overwritten)");
    ++failed;
  } else {
    std::printf("PASS %s pack (%lld bytes in %d pieces)\n", name.c_str(),
                static_cast<long long>(total), n);
  }
  // Unpack into the (cleared) piece buffers: dst[i] = the piece buffers,
  // src[i] = offsets into the flat buffer.
  for (int i = 0; i < n; ++i) {
    if (!Check(cudaMemset(d_pieces[i], 0, sizes[i]), "cudaMemset")) return 1;
  }
  offset = 0;
  for (int i = 0; i < n; ++i) {
    src[i] = d_flat + offset;
    dst[i] = d_pieces[i];
    offset += sizes[i];
  }
  st = fg::CopyPieces(dst.data(), src.data(), sizes.data(), n, stream);
  if (!st.ok()) {
    std::printf("FAIL %s unpack: %s: %s\n", name.c_str(), st.step,
                fg::ErrorString(st.cuda_error));
    return 1;
  }
  if (!Check(cudaStreamSynchronize(stream), "sync")) return 1;
  bool same = true;
  for (int i = 0; i < n; ++i) {
    std::vector<uint8_t> back(sizes[i] + 1);
    if (!Check(cudaMemcpy(back.data(), d_pieces[i], sizes[i] + 1, cudaMemcpyDeviceToHost),
               "D2H")) {
      return 1;
    }
    same = same && back.back() == kGuard &&
           std::vector<uint8_t>(back.begin(), back.end() - 1) == pieces[i];
  }
  if (!same) {
    std::printf("FAIL %s unpack: a piece differs from its host bytes or its guard\n",
                name.c_str());
    ++failed;
  } else {
    std::printf("PASS %s unpack\n", name.c_str());
  }
  for (void* p : d_pieces) cudaFree(p);
  cudaFree(d_alloc);
  return failed;
}

}  // namespace

int main() {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("SKIP: no CUDA device available (cudaGetDeviceCount: %s); the CUDA "
                "kernels were compiled but not run\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return kSkipped;
  }
  cudaStream_t stream;
  if (!Check(cudaStreamCreate(&stream), "cudaStreamCreate")) return 1;
  int failed = 0;
  failed += RunCase("assorted", {0, 1, 3, 4, 7, 4096, 1 << 20, 13, 0, 65537}, 0, 7, stream);
  failed += RunCase("assorted, flat buffer shifted by 3", {5, 1 << 16, 2, 0, 9999}, 3, 8,
                    stream);
  std::vector<int64_t> floats;
  std::mt19937 rng(9);
  for (int i = 0; i < 300; ++i) {
    const int64_t choices[] = {0, 4, 64 * 4, 2048 * 4, 4 * 1000, 4 * (int64_t{1} << 18) + 4};
    floats.push_back(choices[rng() % 6]);
  }
  failed += RunCase("300 float32 pieces", floats, 0, 10, stream);
  failed += RunCase("16-byte multiples", {16, 4096, 0, 16 * 100003, 32}, 0, 11, stream);
  // Each piece has its own unit: odd pieces between aligned ones.
  failed += RunCase("mixed units", {16 * 4096, 3, 4 * 5001, 2 * 777, 8 * 999, 1, 16 * 64}, 0, 14,
                    stream);
  failed += RunCase("all empty", {0, 0, 0}, 0, 12, stream);
  failed += RunCase("no pieces", {}, 0, 13, stream);
  cudaStreamDestroy(stream);
  std::printf("%s\n", failed ? "FAILED" : "all passed");
  return failed ? 1 : 0;
}
