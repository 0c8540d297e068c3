#!/usr/bin/env bash
# CI job for the Bazel build, from a fresh clone:
#   1. bazel build //:build_pip_pkg (the op library + its .json record),
#   2. bazel-bin/build_pip_pkg <tmp>/wheels,
#   3. a clean venv with only tensorflow-cpu (pinned in
#      build_deps/requirements.txt) and that wheel; outside the repository it
#      imports deepreduce_tf, prints build_info() and round-trips a Bloom filter,
#   4. bazel test //:op_tests_all (every tests/ops/test_*.py in one pytest
#      session with two workers, against the Bazel-built library; never a
#      cached test result),
# then shuts the Bazel server down. Exits non-zero on the first failure.
# The clean venv's TensorFlow is installed while Bazel compiles (pip mostly
# waits on the disk; the compiler on the CPU).
#
# Compiled objects are kept in Bazel's disk cache, outside the clone, which
# Bazel addresses by the digest of every input of an action (sources, headers,
# flags, toolchain): a later run, from any clone, compiles only what changed.
# Without it a CI run compiled the CPU kernels twice (setup.py for the README's
# commands, then Bazel). Test results are never taken from it.
#
#   bash build_deps/bazel_ci.sh
#
# Environment:
#   PYTHON_BIN_PATH  interpreter with TensorFlow for Bazel to build against;
#                    default .venv/bin/python, created here with
#                    build_deps/requirements.txt if it does not exist.
#   DEEPREDUCE_BAZEL_OUTPUT_ROOT  Bazel's --output_user_root (default
#                    ${TMPDIR:-/tmp}/deepreduce_tf_bazel_<uid>, outside the tree).
#   DEEPREDUCE_BAZEL_DISK_CACHE  Bazel's --disk_cache (default
#                    ~/.cache/deepreduce_tf/bazel-disk-cache; empty: none).
#   BAZEL            the bazel binary (default: bazel).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
started=$SECONDS
step() { printf '\n== [%4ss] %s\n' "$((SECONDS - started))" "$*"; }

# Each step is bounded; together they stay well under 10 minutes on 2 cores
# with a warm pip cache.
BUILD_TIMEOUT=900
TEST_TIMEOUT=900
PIP_TIMEOUT=600

output_root="${DEEPREDUCE_BAZEL_OUTPUT_ROOT:-${TMPDIR:-/tmp}/deepreduce_tf_bazel_$(id -u)}"
bazel=("${BAZEL:-bazel}" "--output_user_root=$output_root")
disk_cache="${DEEPREDUCE_BAZEL_DISK_CACHE-${HOME:-/tmp}/.cache/deepreduce_tf/bazel-disk-cache}"
cache=()
[ -n "$disk_cache" ] && cache=("--disk_cache=$disk_cache")
work="$(mktemp -d "${TMPDIR:-/tmp}/deepreduce_tf_ci.XXXXXX")"
cleanup() {
  local rc=$?
  # (an `a && b` whose b fails would end a trap under `set -e` with status 1)
  if [ -n "${venv_pid:-}" ]; then kill "$venv_pid" 2>/dev/null || true; fi
  "${bazel[@]}" shutdown >/dev/null 2>&1 || true
  rm -rf "$work"
  if [ "$rc" -eq 0 ]; then
    echo "bazel_ci.sh: OK in $((SECONDS - started)) s"
  else
    echo "bazel_ci.sh: FAILED (exit $rc) after $((SECONDS - started)) s" >&2
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

if [ -z "${PYTHON_BIN_PATH:-}" ]; then
  if [ ! -x .venv/bin/python ]; then
    step "creating .venv with build_deps/requirements.txt"
    py=python3
    command -v python3.11 >/dev/null && py=python3.11
    "$py" -m venv .venv
    timeout "$PIP_TIMEOUT" .venv/bin/python -m pip install -q -r build_deps/requirements.txt
  fi
  export PYTHON_BIN_PATH="$repo/.venv/bin/python"
fi
echo "Building against: $PYTHON_BIN_PATH"

tf_pin="$(grep -E '^tensorflow-cpu==' build_deps/requirements.txt)"
step "clean venv with $tf_pin (in the background, log: $work/venv.log)"
(
  "$PYTHON_BIN_PATH" -m venv "$work/venv" &&
    timeout "$PIP_TIMEOUT" "$work/venv/bin/python" -m pip install -q "$tf_pin"
) >"$work/venv.log" 2>&1 &
venv_pid=$!

step "bazel build //:build_pip_pkg${cache:+ (disk cache: $disk_cache)}"
timeout "$BUILD_TIMEOUT" "${bazel[@]}" build ${cache[@]+"${cache[@]}"} //:build_pip_pkg
bazel_bin="$("${bazel[@]}" info bazel-bin 2>/dev/null)"

step "building the wheel"
wheel="$("$bazel_bin/build_pip_pkg" "$work/wheels" | tail -n 1)"
echo "$wheel"

step "clean venv: tensorflow-cpu + the wheel"
venv_ok=0
wait "$venv_pid" || venv_ok=$?
venv_pid=""
if [ "$venv_ok" -ne 0 ]; then
  cat "$work/venv.log" >&2
  echo "bazel_ci.sh: creating the clean venv with $tf_pin failed" >&2
  exit 1
fi
timeout "$PIP_TIMEOUT" "$work/venv/bin/python" -m pip install -q "$wheel"

step "importing the installed wheel outside the repository"
(
  cd "$work"
  env -u PYTHONPATH -u DEEPREDUCE_TF_OPS_LIB TF_CPP_MIN_LOG_LEVEL=2 \
    "$work/venv/bin/python" -c "import deepreduce_tf, numpy as np; print(deepreduce_tf.build_info()); f=deepreduce_tf.bloom.insert(np.arange(10), 100); print(deepreduce_tf.bloom.decode(f, 100, 10))" \
    | tee "$work/import.log"
  env -u PYTHONPATH -u DEEPREDUCE_TF_OPS_LIB TF_CPP_MIN_LOG_LEVEL=2 \
    "$work/venv/bin/python" - "$work/venv" <<'PY'
import os, sys
import numpy as np
import deepreduce_tf
venv = os.path.realpath(sys.argv[1])
where = os.path.realpath(deepreduce_tf.__file__)
if not where.startswith(venv + os.sep):
    sys.exit(f"deepreduce_tf was imported from {where}, not from the clean venv {venv}")
info = deepreduce_tf.build_info()
if info["version"] != deepreduce_tf.__version__:
    sys.exit(f"library version {info['version']} != package {deepreduce_tf.__version__}")
decoded = np.asarray(deepreduce_tf.bloom.decode(
    deepreduce_tf.bloom.insert(np.arange(10), 100), 100, 10))
if not set(range(10)) <= set(decoded.tolist()):
    sys.exit(f"Bloom round trip lost indices: decoded {decoded.tolist()}")
print(f"OK: {where}, decoded {decoded.tolist()}")
PY
)

step "bazel test //:op_tests_all"
timeout "$TEST_TIMEOUT" "${bazel[@]}" test ${cache[@]+"${cache[@]}"} --nocache_test_results \
  //:op_tests_all
