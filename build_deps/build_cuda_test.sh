#!/usr/bin/env bash
# Builds the standalone CUDA test of the Bloom-filter kernels (no TensorFlow):
# tests/cuda/bloom_cuda_test.cu + kernels/bloom/bloom_kernels.cu, compiled by
# nvcc for the architectures of the op library (sm_75..sm_90 + PTX, or
# DEEPREDUCE_TF_CUDA_ARCHS), into build/cuda_test/bloom_cuda_test.
#   bash build_deps/build_cuda_test.sh          # build; run it if a GPU is present
#   bash build_deps/build_cuda_test.sh --run    # build and always run
#   bash build_deps/build_cuda_test.sh --no-run # build only
# The test exits 0 (all passed), 1 (a mismatch) or 77 (no CUDA device: skipped).
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-auto}"
case "$mode" in auto|--run|--no-run) ;; *)
  echo "usage: bash build_deps/build_cuda_test.sh [--run|--no-run]" >&2; exit 2 ;;
esac

CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
NVCC="$CUDA_HOME/bin/nvcc"
if [ ! -x "$NVCC" ]; then
  NVCC="$(command -v nvcc || true)"
fi
if [ -z "$NVCC" ]; then
  echo "nvcc not found in $CUDA_HOME/bin or on PATH; set CUDA_HOME" >&2
  exit 1
fi
ARCHS="${DEEPREDUCE_TF_CUDA_ARCHS:-75,80,86,89,90}"
GENCODE=()
last=""
for a in ${ARCHS//,/ }; do
  GENCODE+=("-gencode=arch=compute_${a},code=sm_${a}")
  last="$a"
done
GENCODE+=("-gencode=arch=compute_${last},code=compute_${last}")

OUT=build/cuda_test
mkdir -p "$OUT"
set -x
"$NVCC" -std=c++17 -O2 -I. --expt-relaxed-constexpr "${GENCODE[@]}" \
  tests/cuda/bloom_cuda_test.cu kernels/bloom/bloom_kernels.cu \
  -o "$OUT/bloom_cuda_test"
{ set +x; } 2>/dev/null
echo "built $OUT/bloom_cuda_test"

run=0
if [ "$mode" = "--run" ]; then
  run=1
elif [ "$mode" = "auto" ] && command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  run=1
fi
if [ "$run" = 1 ]; then
  exec "$OUT/bloom_cuda_test"
fi
echo "no GPU found (nvidia-smi): not running it; on a GPU machine run $OUT/bloom_cuda_test"
