#!/usr/bin/env bash
# Builds the standalone CUDA tests (no TensorFlow): every tests/cuda/X_cuda_test.cu
# linked with the CUDA kernels of its family, kernels/X/*.cu, and the shared
# launch helpers, kernels/common/*.cu (gpu_launch.h): the very objects of the
# op library's CUDA build (build_deps/kernel_objects.py, compiled once for the
# architectures of the op library, sm_75..sm_90 + PTX, or
# DEEPREDUCE_TF_CUDA_ARCHS), into build/cuda_test/X_cuda_test.
#   bash build_deps/build_cuda_test.sh          # build; run them if a GPU is present
#   bash build_deps/build_cuda_test.sh --run    # build and always run
#   bash build_deps/build_cuda_test.sh --no-run # build only
# Each test exits 0 (all passed), 1 (a mismatch) or 77 (no CUDA device:
# skipped). When run, this script exits 1 if any test failed, 77 if all
# skipped, 0 otherwise.
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

# The kernel objects are those of the op library's CUDA build, compiled once
# (build_deps/kernel_objects.py reuses them when the kernels did not change).
objects() { "${PYTHON:-python3}" build_deps/kernel_objects.py cuda --archs "$ARCHS" "$@"; }
objects >/dev/null
OUT=build/cuda_test
mkdir -p "$OUT"
built=()
for test_src in tests/cuda/*_cuda_test.cu; do
  name="$(basename "$test_src" .cu)"
  family="${name%_cuda_test}"
  list="$(objects "$family")"
  mapfile -t kernels <<<"$list"
  set -x
  "$NVCC" -std=c++17 -O2 -I. --expt-relaxed-constexpr "${GENCODE[@]}" \
    "$test_src" "${kernels[@]}" -o "$OUT/$name"
  { set +x; } 2>/dev/null
  echo "built $OUT/$name"
  built+=("$OUT/$name")
done

run=0
if [ "$mode" = "--run" ]; then
  run=1
elif [ "$mode" = "auto" ] && command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  run=1
fi
if [ "$run" = 0 ]; then
  echo "no GPU found (nvidia-smi): not running them; on a GPU machine run: ${built[*]}"
  exit 0
fi
failed=0 skipped=0
for t in "${built[@]}"; do
  rc=0
  "$t" || rc=$?
  case "$rc" in
    0) ;;
    77) skipped=$((skipped + 1)) ;;
    *) echo "$t failed (exit $rc)" >&2; failed=$((failed + 1)) ;;
  esac
done
if [ "$failed" -gt 0 ]; then exit 1; fi
if [ "$skipped" -eq "${#built[@]}" ]; then exit 77; fi
exit 0
