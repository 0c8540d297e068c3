# Sourced by the benchmark build scripts (codec_throughput.sh,
# step_throughput.sh), from the repository root: sets NVCC, the GENCODE
# flags for DEEPREDUCE_TF_CUDA_ARCHS (default 90, Hopper; e.g. "80,90": SASS
# for each, PTX for the last) and defines bench_stale EXE (true when EXE is
# missing or older than any .cu/.h under benchmarks/cuda or kernels).
NVCC="${CUDA_HOME:-/usr/local/cuda}/bin/nvcc"
[ -x "$NVCC" ] || NVCC="$(command -v nvcc || true)"
if [ -z "$NVCC" ]; then echo "nvcc not found; set CUDA_HOME" >&2; exit 1; fi
GENCODE=()
last=""
for a in $(echo "${DEEPREDUCE_TF_CUDA_ARCHS:-90}" | tr ',' ' '); do
  GENCODE+=("-gencode=arch=compute_${a},code=sm_${a}")
  last="$a"
done
GENCODE+=("-gencode=arch=compute_${last},code=compute_${last}")
bench_stale() {
  [ ! -x "$1" ] || [ -n "$(find benchmarks/cuda kernels -newer "$1" \( -name '*.cu' -o -name '*.h' \) | head -1)" ]
}
