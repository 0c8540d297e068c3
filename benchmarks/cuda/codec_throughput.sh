#!/usr/bin/env bash
# Builds benchmarks/cuda/codec_throughput.cu with every CUDA kernel family of
# the op library (nvcc, no TensorFlow) into build/cuda_bench/codec_throughput
# and runs it with the given arguments (see the .cu file). Architectures:
# DEEPREDUCE_TF_CUDA_ARCHS (default 90, Hopper; e.g. 80 for an A100).
#   bash benchmarks/cuda/codec_throughput.sh [--no-run] [--n N] [--ratio R] [--reps R]
set -euo pipefail
cd "$(dirname "$0")/../.."
run=1
if [ "${1:-}" = "--no-run" ]; then run=0; shift; fi
. benchmarks/cuda/bench_env.sh
mkdir -p build/cuda_bench
exe=build/cuda_bench/codec_throughput
if bench_stale "$exe"; then
  # The kernels: the objects of the op library's CUDA build for these
  # architectures, compiled once (build_deps/kernel_objects.py).
  list="$(bench_objects bloom index sparsify value)"
  mapfile -t kernels <<<"$list"
  "$NVCC" -std=c++17 -O2 -I. --expt-relaxed-constexpr "${GENCODE[@]}" \
    benchmarks/cuda/codec_throughput.cu "${kernels[@]}" -o "$exe"
fi
if [ "$run" = 1 ]; then exec "$exe" "$@"; fi
echo "built $exe"
