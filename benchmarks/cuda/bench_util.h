// Helpers shared by the standalone CUDA benchmarks (codec_throughput.cu,
// step_throughput.cu): error checks, a device buffer, pinned host memory, the
// timing method and the table rows. Header-only, no TensorFlow.
//
// Timing: the median (and min) of g_reps repetitions, after 3 warm-ups, of
// host wall clock around the launchers plus a stream synchronize.
#ifndef DEEPREDUCE_BENCHMARKS_CUDA_BENCH_UTIL_H_
#define DEEPREDUCE_BENCHMARKS_CUDA_BENCH_UTIL_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace deepreduce_bench {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void Cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(std::string(what) + ": " + cudaGetErrorString(e));
}

// A launcher's GpuStatus (any of the families' structs: cuda_error, step, ok()).
template <typename S>
void Launch(const S& s) {
  if (!s.ok()) {
    throw Error(std::string(s.step) + ": " +
                cudaGetErrorString(static_cast<cudaError_t>(s.cuda_error)));
  }
}

inline void Expect(bool ok, const std::string& what) {
  if (!ok) throw Error(what);
}

// Device memory (at least one byte, so the pointer is always valid).
struct Buf {
  void* p = nullptr;
  size_t bytes = 0;
  Buf() = default;
  explicit Buf(size_t b) : bytes(b) { Cuda(cudaMalloc(&p, b > 0 ? b : 1), "cudaMalloc"); }
  ~Buf() {
    if (p != nullptr) cudaFree(p);
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  Buf(Buf&& o) noexcept : p(o.p), bytes(o.bytes) {
    o.p = nullptr;
    o.bytes = 0;
  }
  Buf& operator=(Buf&& o) noexcept {
    std::swap(p, o.p);
    std::swap(bytes, o.bytes);
    return *this;
  }
  template <typename T>
  T* as() const { return static_cast<T*>(p); }
};

// Page-locked host memory (for asynchronous copies).
struct HostBuf {
  void* p = nullptr;
  size_t bytes = 0;
  HostBuf() = default;
  explicit HostBuf(size_t b) : bytes(b) {
    Cuda(cudaMallocHost(&p, b > 0 ? b : 1), "cudaMallocHost");
  }
  ~HostBuf() {
    if (p != nullptr) cudaFreeHost(p);
  }
  HostBuf(const HostBuf&) = delete;
  HostBuf& operator=(const HostBuf&) = delete;
  HostBuf(HostBuf&& o) noexcept : p(o.p), bytes(o.bytes) {
    o.p = nullptr;
    o.bytes = 0;
  }
  HostBuf& operator=(HostBuf&& o) noexcept {
    std::swap(p, o.p);
    std::swap(bytes, o.bytes);
    return *this;
  }
  template <typename T>
  T* as() const { return static_cast<T*>(p); }
};

template <typename T>
std::vector<T> Download(const void* d, size_t count) {
  std::vector<T> h(count);
  if (count > 0) {
    Cuda(cudaMemcpy(h.data(), d, count * sizeof(T), cudaMemcpyDeviceToHost), "download");
  }
  return h;
}

inline cudaStream_t g_stream = nullptr;
inline int g_reps = 20;
constexpr int kWarmups = 3;

struct Timing {
  double median_ms, min_ms;
};

// Median and min of g_reps runs of fn (after kWarmups warm-ups), each
// followed by a stream synchronize.
inline Timing Time(const std::function<void()>& fn) {
  for (int i = 0; i < kWarmups; ++i) {
    fn();
    Cuda(cudaStreamSynchronize(g_stream), "sync");
  }
  std::vector<double> ms;
  for (int i = 0; i < g_reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    Cuda(cudaStreamSynchronize(g_stream), "sync");
    const auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front()};
}

// The table: | step | reads | median ms | min ms | GB/s | check |.
inline void TableHeader() {
  std::printf("| %-34s | %-22s | %9s | %9s | %8s | %s\n", "step", "reads", "median ms", "min ms",
              "GB/s", "check");
  std::printf("|%s|%s|%s|%s|%s|%s\n", std::string(36, '-').c_str(),
              std::string(24, '-').c_str(), std::string(10, '-').append(":").c_str(),
              std::string(10, '-').append(":").c_str(), std::string(9, '-').append(":").c_str(),
              "---");
}

// One row; "GB/s" = bytes_read / median time, "-" when bytes_read <= 0.
inline void Row(const char* step, const char* reads, double bytes_read, const Timing& t,
                const std::string& note = "") {
  if (bytes_read > 0) {
    std::printf("| %-34s | %-22s | %9.3f | %9.3f | %8.1f | %s\n", step, reads, t.median_ms,
                t.min_ms, bytes_read / (t.median_ms * 1e-3) / 1e9, note.c_str());
  } else {
    std::printf("| %-34s | %-22s | %9.3f | %9.3f | %8s | %s\n", step, reads, t.median_ms,
                t.min_ms, "-", note.c_str());
  }
  std::fflush(stdout);
}

inline void Failed(const char* step, const std::exception& e) {
  std::printf("| %-34s | FAILED: %s\n", step, e.what());
  std::fflush(stdout);
}

// Runs one benchmark section; a failure is reported and the others go on.
inline int g_failures = 0;
inline void Section(const char* name, const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    Failed(name, e);
    ++g_failures;
  }
}

}  // namespace deepreduce_bench

#endif  // DEEPREDUCE_BENCHMARKS_CUDA_BENCH_UTIL_H_
