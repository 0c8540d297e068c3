#!/usr/bin/env bash
# Developer shortcut: compile the op library of this tree (CPU kernels) into
# OUTDIR without installing anything, for use with
#   DEEPREDUCE_TF_OPS_LIB=OUTDIR/_deepreduce_ops.so PYTHONPATH=<tree> python ...
# Usage: build_deps/dev_build_lib.sh OUTDIR [PYTHON]   (PYTHON must have TensorFlow)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:?usage: dev_build_lib.sh OUTDIR [PYTHON]}"
py="${2:-$root/.venv/bin/python}"
[ -x "$py" ] || py=/work/main/.venv/bin/python
mkdir -p "$out/obj"
read -r -a cflags < <("$py" -c "import tensorflow as tf; print(' '.join(tf.sysconfig.get_compile_flags()))" 2>/dev/null)
read -r -a lflags < <("$py" -c "import tensorflow as tf; print(' '.join(tf.sysconfig.get_link_flags()))" 2>/dev/null)
tfv=$("$py" -c "import tensorflow as tf; print(tf.__version__)" 2>/dev/null)
ver=$(sed -n 's/__version__ = "\(.*\)"/\1/p' "$root/deepreduce_tf/_version.py")
objs=()
pids=()
while IFS= read -r src; do
  obj="$out/obj/$(echo "${src#$root/}" | tr / _).o"
  objs+=("$obj")
  g++ -c "$src" -o "$obj" "${cflags[@]}" -I"$root" -fPIC -O3 -Wall \
      -Wno-deprecated-declarations -Wno-interference-size -Wno-sign-compare -Wno-unknown-pragmas \
      -DDEEPREDUCE_TF_VERSION="\"$ver\"" -DDEEPREDUCE_BUILT_TF_VERSION="\"$tfv\"" &
  pids+=($!)
  if [ "${#pids[@]}" -ge 2 ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done < <(find "$root/kernels" -name '*.cc' ! -name '*_gpu.cc' | sort)
for p in "${pids[@]}"; do wait "$p"; done
g++ -shared -o "$out/_deepreduce_ops.so" "${objs[@]}" "${lflags[@]}" -Wl,--no-undefined
printf '{"version": "%s", "tf_version": "%s", "cuda": false, "cuda_archs": ""}\n' "$ver" "$tfv" \
  > "$out/_deepreduce_ops.json"
echo "built $out/_deepreduce_ops.so"
