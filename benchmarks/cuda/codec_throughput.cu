// GPU codec throughput: times every CUDA launcher of the op library on one
// gradient-sized input, without TensorFlow, the way the GPU OpKernels call
// them (scratch from the *ScratchBytes functions, the host round trips of the
// multi-pass launchers included). Each lossless codec's decode is checked
// against its encoder's input, so a row is printed only for a correct result.
//
//   bash benchmarks/cuda/codec_throughput.sh [--n N] [--ratio R] [--reps R]
//
// Input: n float32 values, normal with a 1 % heavy tail (a gradient), top-k
// of ratio R (default: ResNet-50's 25,557,032 values, R = 0.01). Times are
// the median of R repetitions (after 3 warm-ups) of host wall clock around
// the launchers plus a stream synchronize; "GB/s" divides the bytes the step
// reads (dense input for selection and Bloom query, K indices or values for
// the codecs) by that time. The first row is cudaMemcpy of the dense input,
// device to device, for scale.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "benchmarks/cuda/bench_util.h"
#include "kernels/bloom/bloom.h"
#include "kernels/bloom/bloom_gpu.h"
#include "kernels/common/bit_io.h"
#include "kernels/index/golomb.h"
#include "kernels/index/index_format.h"
#include "kernels/index/index_gpu.h"
#include "kernels/sparsify/sparsify.h"
#include "kernels/sparsify/sparsify_gpu.h"
#include "kernels/value/dexp.h"
#include "kernels/value/fp16.h"
#include "kernels/value/polyfit.h"
#include "kernels/value/value_decode.h"
#include "kernels/value/value_format.h"
#include "kernels/value/value_gpu.h"

namespace {

namespace bg = deepreduce::bloom::gpu;
namespace ig = deepreduce::index::gpu;
namespace sg = deepreduce::sparsify::gpu;
namespace vg = deepreduce::value::gpu;
namespace dv = deepreduce::value;
namespace golomb = deepreduce::index::golomb;

using namespace deepreduce_bench;  // Error, Cuda, Launch, Buf, Time, Row, Section

}  // namespace

int main(int argc, char** argv) {
  int64_t n = 25557032;
  double ratio = 0.01;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--n") n = std::atoll(argv[i + 1]);
    else if (a == "--ratio") ratio = std::atof(argv[i + 1]);
    else if (a == "--reps") g_reps = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown option %s; usage: %s [--n N] [--ratio R] [--reps R]\n",
                   argv[i], argv[0]);
      return 2;
    }
  }
  if ((argc - 1) % 2 != 0 || n < 2 || !(ratio > 0.0 && ratio <= 1.0) || g_reps < 1) {
    std::fprintf(stderr, "usage: %s [--n N>=2] [--ratio 0<R<=1] [--reps R>=1]\n", argv[0]);
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop;
  Cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  Cuda(cudaStreamCreate(&g_stream), "cudaStreamCreate");
  void* s = static_cast<void*>(g_stream);
  const int64_t k = std::max<int64_t>(1, static_cast<int64_t>(std::llround(ratio * n)));

  // The gradient: N(0, 1) with 1 % of the values ten times larger.
  std::vector<float> x(n);
  {
    std::mt19937_64 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t i = 0; i < n; ++i) x[i] = normal(rng) * ((rng() % 100 == 0) ? 10.0f : 1.0f);
  }
  std::printf("# %s (%d SMs), CUDA runtime %d; n = %lld float32 values, top-k K = %lld "
              "(ratio %g), int32 indices; median and min of %d runs\n",
              prop.name, prop.multiProcessorCount, CUDART_VERSION, static_cast<long long>(n),
              static_cast<long long>(k), ratio, g_reps);
  TableHeader();

  Buf d_x(4 * n), d_copy(4 * n);
  Cuda(cudaMemcpy(d_x.p, x.data(), 4 * n, cudaMemcpyHostToDevice), "upload");
  const double dense = 4.0 * n;
  char reads[64];
  std::snprintf(reads, sizeof(reads), "%.1f MB dense", dense / 1e6);
  char kidx[64], kval[64];
  std::snprintf(kidx, sizeof(kidx), "%.2f MB indices", 4.0 * k / 1e6);
  std::snprintf(kval, sizeof(kval), "%.2f MB values", 4.0 * k / 1e6);

  Section("cudaMemcpy D2D", [&] {
    const Timing t = Time([&] {
      Cuda(cudaMemcpyAsync(d_copy.p, d_x.p, 4 * n, cudaMemcpyDeviceToDevice, g_stream), "copy");
    });
    Row("cudaMemcpy D2D (scale)", reads, dense, t, "-");
  });

  // ------------------------------------------------------ selection --
  Buf d_idx(4 * k), d_val(4 * k);
  std::vector<int32_t> idx;
  std::vector<float> val;
  Section("top-k", [&] {
    sg::GpuStatus st{0, ""};
    const size_t sb = sg::ScratchBytes(n, &st);
    Launch(st);
    Buf scratch(sb);
    const Timing t = Time([&] {
      Launch(sg::TopK<uint32_t, int32_t>(sg::FloatKind::kFloat32, d_x.as<uint32_t>(), n, k,
                                         d_idx.as<int32_t>(), d_val.as<uint32_t>(), scratch.p,
                                         sb, s));
    });
    idx = Download<int32_t>(d_idx.p, k);
    val = Download<float>(d_val.p, k);
    // Check: ascending, values are x[idx], and every unselected magnitude is
    // at most the smallest selected one.
    float min_sel = INFINITY;
    std::vector<char> chosen(n, 0);
    for (int64_t i = 0; i < k; ++i) {
      Expect(idx[i] >= 0 && idx[i] < n && (i == 0 || idx[i] > idx[i - 1]), "top-k indices not ascending");
      Expect(std::memcmp(&val[i], &x[idx[i]], 4) == 0, "top-k value is not x[index]");
      min_sel = std::min(min_sel, std::fabs(val[i]));
      chosen[idx[i]] = 1;
    }
    for (int64_t i = 0; i < n; ++i) {
      Expect(chosen[i] || std::fabs(x[i]) <= min_sel, "an unselected value is larger than a selected one");
    }
    Row("top-k select", reads, dense, t, "exact top-k vs host");
  });
  if (idx.empty()) {
    std::printf("top-k failed: the codec rows need its output\n");
    return 1;
  }

  Section("random-k", [&] {
    sg::GpuStatus st{0, ""};
    const size_t sb = sg::ScratchBytes(n, &st);
    Launch(st);
    Buf scratch(sb), r_idx(4 * k), r_val(4 * k);
    const Timing t = Time([&] {
      Launch(sg::RandomK<uint32_t, int32_t>(7, d_x.as<uint32_t>(), n, k, r_idx.as<int32_t>(),
                                            r_val.as<uint32_t>(), scratch.p, sb, s));
    });
    const std::vector<int32_t> r = Download<int32_t>(r_idx.p, k);
    for (int64_t i = 1; i < k; ++i) Expect(r[i] > r[i - 1], "random-k indices not ascending");
    Row("random-k select", reads, dense, t, "ascending");
  });

  Section("threshold", [&] {
    // The threshold at the K-th largest magnitude: selects about K values.
    std::vector<float> mag(n);
    for (int64_t i = 0; i < n; ++i) mag[i] = std::fabs(x[i]);
    std::nth_element(mag.begin(), mag.begin() + (n - k), mag.end());
    const float thr = mag[n - k];
    uint32_t bits;
    std::memcpy(&bits, &thr, 4);
    const uint32_t key = deepreduce::sparsify::MagnitudeKey<deepreduce::sparsify::Float32>(bits);
    sg::GpuStatus st{0, ""};
    const size_t sb = sg::ScratchBytes(n, &st);
    Launch(st);
    Buf scratch(sb), t_idx(4 * n), t_val(4 * n);
    int64_t count = 0;
    const Timing t = Time([&] {
      Launch(sg::ThresholdCount<uint32_t>(sg::FloatKind::kFloat32, d_x.as<uint32_t>(), n, key,
                                          scratch.p, sb, s, &count));
      Launch(sg::ThresholdWrite<uint32_t, int32_t>(d_x.as<uint32_t>(), n, scratch.p, sb,
                                                   t_idx.as<int32_t>(), t_val.as<uint32_t>(), s));
    });
    int64_t want = 0;
    for (int64_t i = 0; i < n; ++i) want += std::fabs(x[i]) >= thr;
    Expect(count == want, "threshold count " + std::to_string(count) + ", want " + std::to_string(want));
    Row("threshold select (count+write)", reads, dense, t, "count = host's " + std::to_string(want));
  });

  // ------------------------------------------------- index codecs --
  const double ib = 4.0 * k;
  auto same_indices = [&](const void* d_out, const char* what) {
    Expect(Download<int32_t>(d_out, k) == idx, std::string(what) + ": decoded indices differ");
  };

  Section("golomb", [&] {
    Buf totals(ig::GolombAutoScratchBytes());
    int log2_block = 0;
    ig::GpuStatus st{0, ""};
    Launch(ig::GolombAutoBlock(d_idx.as<int32_t>(), k, n, totals.p, ig::GolombAutoScratchBytes(),
                               s, &log2_block));
    const size_t sb = ig::GolombEncodeScratchBytes(k, log2_block, &st);
    Launch(st);
    Buf scratch(sb);
    int64_t sbytes = 0;
    Launch(ig::GolombSize(d_idx.as<int32_t>(), k, log2_block, scratch.p, sb, s, &sbytes));
    const golomb::Layout layout = golomb::MakeLayout(n, k, log2_block, sbytes);
    const int64_t table_bytes = (layout.num_blocks * layout.entry_bits + 7) / 8;
    Buf body(table_bytes + sbytes + 8);
    const Timing enc = Time([&] {
      int lb = 0;
      int64_t sz = 0;
      Launch(ig::GolombAutoBlock(d_idx.as<int32_t>(), k, n, totals.p,
                                 ig::GolombAutoScratchBytes(), s, &lb));
      Launch(ig::GolombSize(d_idx.as<int32_t>(), k, lb, scratch.p, sb, s, &sz));
      Launch(ig::GolombWrite(d_idx.as<int32_t>(), k, golomb::MakeLayout(n, k, lb, sz), scratch.p,
                             sb, body.as<uint8_t>(), body.as<uint8_t>() + table_bytes, s));
    });
    // The decoder's table, parsed on the host as the op does.
    const std::vector<uint8_t> tb = Download<uint8_t>(body.p, table_bytes);
    const uint64_t nb = layout.num_blocks;
    std::vector<uint64_t> tab(3 * nb + 1);
    deepreduce::BitReader r(tb.data(), tb.data() + tb.size());
    for (uint64_t b = 0; b < nb; ++b) {
      r.GetWide(layout.w_idx, &tab[b]);
      r.GetWide(layout.w_off, &tab[nb + b]);
      r.Get(golomb::kRiceParamBits, &tab[2 * nb + 1 + b]);
    }
    tab[2 * nb] = sbytes;
    const size_t db = ig::GolombDecodeScratchBytes(static_cast<int64_t>(nb));
    Buf dscratch(db), out(4 * k);
    int64_t bad = 0;
    const Timing dec = Time([&] {
      Launch(ig::GolombDecode(body.as<uint8_t>() + table_bytes, tab.data(), k, layout, n,
                              dscratch.p, db, out.as<int32_t>(), s, &bad));
    });
    Expect(bad == static_cast<int64_t>(nb), "golomb decode reported block " + std::to_string(bad));
    same_indices(out.p, "golomb");
    char note[96];
    std::snprintf(note, sizeof(note), "%.3f bits/index, block 2^%d", 8.0 * (table_bytes + sbytes) / k,
                  log2_block);
    Row("golomb encode (auto block)", kidx, ib, enc, note);
    Row("golomb decode", kidx, ib, dec, "round trip exact");
  });

  Section("rle", [&] {
    ig::GpuStatus st{0, ""};
    const size_t sb = ig::RleEncodeScratchBytes(k, &st);
    Launch(st);
    Buf scratch(sb);
    int64_t bytes = 0;
    Launch(ig::RleSize(d_idx.as<int32_t>(), k, scratch.p, sb, s, &bytes));
    Buf body(bytes);
    const Timing enc = Time([&] {
      int64_t b = 0;
      Launch(ig::RleSize(d_idx.as<int32_t>(), k, scratch.p, sb, s, &b));
      Launch(ig::RleWrite(d_idx.as<int32_t>(), k, scratch.p, sb, body.as<uint8_t>(), s));
    });
    const size_t db = ig::RleDecodeScratchBytes(bytes);
    Buf dscratch(db), out(4 * k);
    ig::RleDecodeResult res;
    const Timing dec = Time([&] {
      Launch(ig::RleDecode(body.as<uint8_t>(), bytes, k, n, dscratch.p, db, out.as<int32_t>(), s,
                           &res));
    });
    Expect(res.error == ig::kRleOk, "rle decode error " + std::to_string(res.error));
    same_indices(out.p, "rle");
    char note[64];
    std::snprintf(note, sizeof(note), "%.3f bits/index", 8.0 * bytes / k);
    Row("rle encode", kidx, ib, enc, note);
    Row("rle decode", kidx, ib, dec, "round trip exact");
  });

  Section("bitmap", [&] {
    const int64_t bytes = static_cast<int64_t>(deepreduce::index::BitmapBytes(n));
    const size_t sb = ig::BitmapEncodeScratchBytes(n);
    Buf scratch(sb), body(bytes);
    const Timing enc = Time([&] {
      Launch(ig::BitmapEncode(d_idx.as<int32_t>(), k, n, scratch.p, sb, body.as<uint8_t>(), s));
    });
    ig::GpuStatus st{0, ""};
    const size_t db = ig::BitmapDecodeScratchBytes(bytes, &st);
    Launch(st);
    Buf dscratch(db), out(4 * k);
    int64_t total = 0;
    const Timing dec = Time([&] {
      Launch(ig::BitmapCount(body.as<uint8_t>(), bytes, dscratch.p, db, s, &total));
      Launch(ig::BitmapWrite(body.as<uint8_t>(), bytes, dscratch.p, db, out.as<int32_t>(), s));
    });
    Expect(total == k, "bitmap decode counted " + std::to_string(total));
    same_indices(out.p, "bitmap");
    Row("bitmap encode", kidx, ib, enc, "-");
    char bm[64];
    std::snprintf(bm, sizeof(bm), "%.2f MB bitmap", bytes / 1e6);
    Row("bitmap decode (count+write)", bm, bytes, dec, "round trip exact");
  });

  Section("bloom", [&] {
    const double fpr = 0.001;
    const auto layout = deepreduce::bloom::MakeLayout(deepreduce::bloom::BitsForFpr(k, fpr),
                                                      deepreduce::bloom::HashesForFpr(fpr), 0);
    const size_t fb = deepreduce::bloom::NumBytes(layout.num_bits);
    const size_t ib_scratch = bg::InsertScratchBytes(n);
    Buf filter(fb + 4), iscratch(ib_scratch);
    bg::InsertResult ir;
    const Timing enc = Time([&] {
      Launch(bg::InsertInt32(layout, d_idx.as<int32_t>(), k, n, filter.as<uint32_t>(), iscratch.p,
                             ib_scratch, s, &ir));
    });
    Expect(ir.first_bad == k, "bloom insert flagged index " + std::to_string(ir.first_bad));
    bg::GpuStatus st{0, ""};
    const size_t qb = bg::QueryScratchBytes(n, &st);
    Launch(st);
    Buf qscratch(qb);
    int64_t positives = 0;
    uint32_t last = 0;
    Buf out(4 * std::min<int64_t>(n, 4 * k + 1024));
    const Timing dec = Time([&] {
      Launch(bg::QueryCount(layout, filter.as<uint8_t>(), n, qscratch.p, qb, s, &positives, &last));
      Expect(positives <= 4 * k + 1024, "too many positives");
      Launch(bg::QueryWriteInt32(n, qscratch.p, qb, out.as<int32_t>(), s));
    });
    // Every inserted index is a positive; the false positives are about fpr * n.
    const std::vector<int32_t> pos = Download<int32_t>(out.p, positives);
    Expect(std::includes(pos.begin(), pos.end(), idx.begin(), idx.end()),
           "an inserted index is not a positive");
    char note[96];
    std::snprintf(note, sizeof(note), "%.2f bits/index, h=%u; %lld false positives (%.2e of n)",
                  8.0 * fb / k, layout.num_hashes, static_cast<long long>(positives - k),
                  static_cast<double>(positives - k) / n);
    Row("bloom insert (fpr 0.001)", kidx, ib, enc, note);
    Row("bloom query (count+write)", reads, dense, dec, "all inserted found");
  });

  // -------------------------------------------------- value codecs --
  const double vb = 4.0 * k;
  Section("fp16", [&] {
    Buf payload(dv::kHeaderBytes + 2 * k), out(4 * k);
    const Timing enc = Time([&] {
      Launch(dv::fp16::Codec::EncodeGpu(d_val.as<float>(), k, deepreduce::EncodeArgs(),
                                        dv::MakeHeader(dv::kCodecFp16, k), payload.as<uint8_t>(),
                                        2 * k, s));
    });
    const Timing dec = Time([&] {
      Launch(dv::fp16::Codec::DecodeGpu(k, payload.as<uint8_t>() + dv::kHeaderBytes, 2 * k,
                                        out.as<float>(), s));
    });
    const std::vector<float> got = Download<float>(out.p, k);
    for (int64_t i = 0; i < k; ++i) {
      Expect(std::fabs(got[i] - val[i]) <= std::fabs(val[i]) * (1.0f / 1024.0f), "fp16 error above half an ulp");
    }
    Row("fp16 encode", kval, vb, enc, "-");
    Row("fp16 decode", kval, vb, dec, "rel. error <= 2^-10");
  });

  Section("qsgd", [&] {
    const uint32_t levels = 127, bucket = 512;
    const dv::QsgdLayout l = dv::core::MakeQsgdLayout(k, levels, bucket);
    Buf payload(l.size), scratch(vg::QsgdScratchBytes()), out(4 * k);
    vg::QsgdEncodeResult er;
    const Timing enc = Time([&] {
      Launch(vg::QsgdEncode(d_val.as<float>(), k, levels, bucket, 3, payload.as<uint8_t>(),
                            static_cast<int64_t>(l.size), scratch.p, scratch.bytes, s, &er));
    });
    Expect(er.first_bad == k, "qsgd encode flagged a value");
    vg::QsgdDecodeResult dr;
    const Timing dec = Time([&] {
      Launch(vg::QsgdDecode(payload.as<uint8_t>(), static_cast<int64_t>(l.size), k, levels, bucket,
                            out.as<float>(), scratch.p, scratch.bytes, s, &dr));
    });
    Expect(dr.first_bad_code == k && dr.first_bad_scale == static_cast<int64_t>(l.num_buckets),
           "qsgd decode flagged the payload");
    // Stochastic rounding: each value within one level (bucket max / s).
    const std::vector<float> got = Download<float>(out.p, k);
    for (int64_t b = 0; b * bucket < k; ++b) {
      const int64_t e = std::min<int64_t>(k, (b + 1) * bucket);
      float m = 0.0f;
      for (int64_t i = b * bucket; i < e; ++i) m = std::max(m, std::fabs(val[i]));
      for (int64_t i = b * bucket; i < e; ++i) {
        Expect(std::fabs(got[i] - val[i]) <= m / levels * 1.0001f, "qsgd error above one level");
      }
    }
    char note[64];
    std::snprintf(note, sizeof(note), "%.3f bits/value", 8.0 * l.size / k);
    Row("qsgd encode (7 bit, bucket 512)", kval, vb, enc, note);
    Row("qsgd decode", kval, vb, dec, "error <= one level");
  });

  // polyfit and dexp: sort, then fit.
  Section("polyfit", [&] {
    const int degree = 5;
    const size_t sortb = vg::SortScratchBytes(k);
    Buf sscratch(sortb), perm(4 * k), y(4 * k);
    vg::SortResult sr;
    Launch(vg::SortDescending(d_val.as<float>(), k, false, perm.p, y.as<float>(), sscratch.p, sortb,
                              s, &sr));
    Expect(sr.first_bad == k, "sort flagged a value");
    const int64_t want = dv::polyfit::WantedSegments(k, 0);
    const size_t gb = vg::PolyfitGreedyScratchBytes(want);
    Buf gscratch(gb);
    std::vector<int64_t> lens(std::max<int64_t>(want, 2));
    int64_t segs = 0;
    int64_t size = 0;
    std::vector<uint8_t> host_payload;
    Buf* payload_keep = nullptr;
    Buf* fit_scratch = nullptr;  // kept across runs, as TF's allocator would
    std::vector<dv::polyfit::FitBlock> blocks;
    std::vector<dv::polyfit::SegPlan> plan;
    int64_t num_coefs = 0;
    // One encode: sort, greedy segmentation, plan (host), fit.
    auto encode = [&](Buf** payload) {
      Launch(vg::SortDescending(d_val.as<float>(), k, false, perm.p, y.as<float>(), sscratch.p,
                                sortb, s, &sr));
      Launch(vg::PolyfitGreedy(y.as<float>(), k, sr.p_count, want, degree, gscratch.p, gb, s,
                               lens.data(), &segs));
      int64_t nb = 0;
      dv::polyfit::PlanSizes(lens.data(), segs, degree, &nb, &num_coefs);
      blocks.resize(nb);
      plan.resize(segs);
      dv::polyfit::MakePlan(lens.data(), segs, degree, blocks.data(), plan.data());
      size = dv::polyfit::PayloadBytes(segs, num_coefs);
      if (*payload == nullptr || (*payload)->bytes < static_cast<size_t>(size)) {
        delete *payload;
        *payload = new Buf(size);
      }
      const size_t fb = vg::PolyfitFitScratchBytes(segs, nb);
      if (fit_scratch == nullptr || fit_scratch->bytes < fb) {
        delete fit_scratch;
        fit_scratch = new Buf(fb);
      }
      vg::PolyfitFitResult fr;
      Launch(vg::PolyfitFit(y.as<float>(), k, degree, dv::polyfit::kSegGreedy, blocks.data(), nb,
                            plan.data(), segs, (*payload)->as<uint8_t>(), size, fit_scratch->p,
                            fb, s, &fr));
      Expect(fr.bad_segment == segs, "polyfit fit failed");
    };
    const Timing enc = Time([&] { encode(&payload_keep); });
    host_payload = Download<uint8_t>(payload_keep->p, size);
    dv::PolyfitView v;
    const auto ps = dv::core::ParsePolyfitBytes(host_payload.data(), size, k, &v);
    Expect(ps.ok(), "polyfit payload does not parse: " + ps.message());
    std::vector<int64_t> start(segs + 1), coff(segs + 1);
    dv::core::PolyfitTables(v, start.data(), coff.data());
    const size_t tb = vg::PolyfitTableBytes(segs, coff[segs]);
    Buf tables(tb), out(4 * k);
    const Timing dec = Time([&] {
      Launch(vg::PolyfitUploadTables(start.data(), coff.data(), v.coefs, segs, coff[segs], tables.p,
                                     tb, s));
      Launch(vg::PolyfitDecode(tables.p, segs, degree, k, out.as<float>(), s));
    });
    // Fit quality: relative L2 error of the decoded sorted values.
    const std::vector<float> got = Download<float>(out.p, k), want_y = Download<float>(y.p, k);
    double se = 0.0, ss = 0.0;
    for (int64_t i = 0; i < k; ++i) {
      se += (static_cast<double>(got[i]) - want_y[i]) * (static_cast<double>(got[i]) - want_y[i]);
      ss += static_cast<double>(want_y[i]) * want_y[i];
    }
    // The encoder's steps apart (the same sorted values and plan).
    const Timing t_sort = Time([&] {
      Launch(vg::SortDescending(d_val.as<float>(), k, false, perm.p, y.as<float>(), sscratch.p,
                                sortb, s, &sr));
    });
    const Timing t_greedy = Time([&] {
      Launch(vg::PolyfitGreedy(y.as<float>(), k, sr.p_count, want, degree, gscratch.p, gb, s,
                               lens.data(), &segs));
    });
    const size_t fb = vg::PolyfitFitScratchBytes(segs, static_cast<int64_t>(blocks.size()));
    const Timing t_fit = Time([&] {
      vg::PolyfitFitResult fr;
      Launch(vg::PolyfitFit(y.as<float>(), k, degree, dv::polyfit::kSegGreedy, blocks.data(),
                            static_cast<int64_t>(blocks.size()), plan.data(), segs,
                            payload_keep->as<uint8_t>(), size, fit_scratch->p, fb, s, &fr));
    });
    delete payload_keep;
    delete fit_scratch;
    char note[96];
    std::snprintf(note, sizeof(note), "%lld segments, %.3f bits/value, rel. L2 error %.2e",
                  static_cast<long long>(segs), 8.0 * size / k, std::sqrt(se / ss));
    Row("polyfit encode (sort+greedy+fit)", kval, vb, enc, note);
    Row("polyfit decode (tables+eval)", kval, vb, dec, "-");
    Row("  polyfit step: sort", kval, vb, t_sort, "CUB radix sort + gather");
    Row("  polyfit step: greedy segmentation", kval, vb, t_greedy, "one thread block");
    char fit_note[64];
    std::snprintf(fit_note, sizeof(fit_note), "%zu fit blocks", blocks.size());
    Row("  polyfit step: fit", kval, vb, t_fit, fit_note);
  });

  Section("dexp", [&] {
    const size_t sortb = vg::SortScratchBytes(k);
    Buf sscratch(sortb), perm(4 * k), y(4 * k), payload(dv::dexp::kPayloadBytes);
    const size_t db = vg::DexpScratchBytes(k);
    Buf dscratch(db), out(4 * k);
    vg::SortResult sr;
    vg::DexpFitResult fr;
    const Timing enc = Time([&] {
      Launch(vg::SortDescending(d_val.as<float>(), k, false, perm.p, y.as<float>(), sscratch.p,
                                sortb, s, &sr));
      Launch(vg::DexpFit(y.as<float>(), k, sr.p_count, payload.as<uint8_t>(), dscratch.p, db, s, &fr));
    });
    Expect(fr.bad_part < 0, "dexp fit failed");
    const std::vector<uint8_t> hp = Download<uint8_t>(payload.p, dv::dexp::kPayloadBytes);
    uint64_t kk = 0, pos = 0;
    dv::dexp::Coefs c[2];
    const auto ps = dv::core::ParseDexpBytes(hp.data(), dv::dexp::kPayloadBytes, k, &kk, &pos, c);
    Expect(ps.ok() && kk == static_cast<uint64_t>(k), "dexp payload does not parse");
    const Timing dec = Time([&] {
      Launch(vg::DexpDecode(c[0], c[1], static_cast<int64_t>(pos), k, out.as<float>(), s));
    });
    const Timing t_fit = Time([&] {
      Launch(vg::DexpFit(y.as<float>(), k, sr.p_count, payload.as<uint8_t>(), dscratch.p, db, s, &fr));
    });
    Row("dexp encode (sort+fit)", kval, vb, enc, "56-byte payload");
    Row("  dexp step: fit", kval, vb, t_fit, "-");
    Row("dexp decode", kval, vb, dec, "-");
  });

  std::printf("# %d section(s) failed\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}
