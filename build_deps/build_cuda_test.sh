#!/usr/bin/env bash
# Builds the standalone CUDA tests (no TensorFlow): every tests/cuda/*.cu,
# linked against every kernels/**/*.cu, compiled by nvcc for the
# architectures of the op library (sm_75..sm_90 + PTX, or
# DEEPREDUCE_TF_CUDA_ARCHS), into build/cuda_test/<name>.
#   bash build_deps/build_cuda_test.sh          # build; run it if a GPU is present
#   bash build_deps/build_cuda_test.sh --run    # build and always run
#   bash build_deps/build_cuda_test.sh --no-run # build only
# Each test exits 0 (all passed), 1 (a mismatch) or 77 (no CUDA device:
# skipped); --run exits 1 if any failed, 77 if all skipped, else 0.
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
# Every kernels/**/*.cu once, then every tests/cuda/*.cu linked against all of them.
KERNEL_OBJS=()
for cu in $(find kernels -name '*.cu' | sort); do
  obj="$OUT/$(echo "${cu%.cu}" | tr / _).o"
  ( set -x; "$NVCC" -std=c++17 -O2 -I. --expt-relaxed-constexpr "${GENCODE[@]}" -c "$cu" -o "$obj" )
  KERNEL_OBJS+=("$obj")
done
TESTS=()
for t in tests/cuda/*.cu; do
  name="$(basename "${t%.cu}")"
  ( set -x; "$NVCC" -std=c++17 -O2 -I. --expt-relaxed-constexpr "${GENCODE[@]}" \
      "$t" "${KERNEL_OBJS[@]}" -o "$OUT/$name" )
  echo "built $OUT/$name"
  TESTS+=("$OUT/$name")
done

run=0
if [ "$mode" = "--run" ]; then
  run=1
elif [ "$mode" = "auto" ] && command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  run=1
fi
if [ "$run" = 1 ]; then
  # 1 if any test failed, else 77 if every one skipped, else 0.
  status=77
  for t in "${TESTS[@]}"; do
    rc=0
    "$t" || rc=$?
    if [ "$rc" != 0 ] && [ "$rc" != 77 ]; then status=1; fi
    if [ "$rc" = 0 ] && [ "$status" = 77 ]; then status=0; fi
  done
  exit "$status"
fi
echo "no GPU found (nvidia-smi): not running them; on a GPU machine run ${TESTS[*]}"
