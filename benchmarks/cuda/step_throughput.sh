#!/usr/bin/env bash
# Builds benchmarks/cuda/step_throughput.cu (the whole compressed step on the
# GPU: compensate, segmented top-k, golomb + QSGD, residual, pack; the
# receiver's decode + sum) with the CUDA kernel families it calls (nvcc, no
# TensorFlow) into build/cuda_bench/step_throughput and runs it with the given
# arguments (see the .cu file). Architectures: DEEPREDUCE_TF_CUDA_ARCHS
# (default 90, Hopper; e.g. 80 for an A100). --no-run only builds (CI).
#   bash benchmarks/cuda/step_throughput.sh [--no-run] [--layout resnet50|gpt1.3b|all]
#       [--reps R] [--ratio R] [--bucket-mb MB] [--min-size N] [--plan-only]
set -euo pipefail
cd "$(dirname "$0")/../.."
run=1
if [ "${1:-}" = "--no-run" ]; then run=0; shift; fi
. benchmarks/cuda/bench_env.sh
mkdir -p build/cuda_bench
exe=build/cuda_bench/step_throughput
if bench_stale "$exe"; then
  # The kernels: the objects of the op library's CUDA build for these
  # architectures, compiled once (build_deps/kernel_objects.py).
  list="$(bench_objects fusion index sparsify value)"
  mapfile -t kernels <<<"$list"
  "$NVCC" -std=c++17 -O2 -I. --expt-relaxed-constexpr -Xcompiler -Wall "${GENCODE[@]}" \
    benchmarks/cuda/step_throughput.cu "${kernels[@]}" -o "$exe"
fi
if [ "$run" = 1 ]; then exec "$exe" "$@"; fi
echo "built $exe"
