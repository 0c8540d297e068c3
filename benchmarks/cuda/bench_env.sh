# Sourced by the benchmark build scripts (codec_throughput.sh,
# step_throughput.sh), from the repository root: sets NVCC, the GENCODE
# flags for DEEPREDUCE_TF_CUDA_ARCHS (default 90, Hopper; e.g. "80,90": SASS
# for each, PTX for the last) and defines bench_objects FAMILY... (the paths of
# the kernel objects, build_deps/kernel_objects.py) and bench_stale EXE (true when EXE is
# missing or older than any .cu/.h under benchmarks/cuda or kernels).
NVCC="${CUDA_HOME:-/usr/local/cuda}/bin/nvcc"
[ -x "$NVCC" ] || NVCC="$(command -v nvcc || true)"
if [ -z "$NVCC" ]; then echo "nvcc not found; set CUDA_HOME" >&2; exit 1; fi
ARCHS="${DEEPREDUCE_TF_CUDA_ARCHS:-90}"
GENCODE=()
last=""
for a in $(echo "$ARCHS" | tr ',' ' '); do
  GENCODE+=("-gencode=arch=compute_${a},code=sm_${a}")
  last="$a"
done
GENCODE+=("-gencode=arch=compute_${last},code=compute_${last}")
bench_objects() { "${PYTHON:-python3}" build_deps/kernel_objects.py cuda --archs "$ARCHS" "$@"; }
bench_stale() {
  [ ! -x "$1" ] || [ -n "$(find benchmarks/cuda kernels -newer "$1" \( -name '*.cu' -o -name '*.h' \) | head -1)" ]
}
