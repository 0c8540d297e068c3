#!/usr/bin/env bash
# One entry point for a fresh machine: creates .venv (Python 3.11), installs the
# pinned dependencies and deepreduce_tf with its compiled ops, then runs a job.
#   bash build_deps/dev.sh test   [pytest args]   # the quick suite: every test but
#                                                 # the `slow` ones (or the test
#                                                 # files/folders the args name, all
#                                                 # of their tests)
#   bash build_deps/dev.sh test --full [args]     # the whole suite, as CI runs it
#   bash build_deps/dev.sh bench  [bench args]    # the main benchmark: deepreduce-bench
#     (default: uncompressed vs compressed training of ResNet-20 on Fashion-MNIST)
#   bash build_deps/dev.sh setup                  # install only
# The setup also gets Fashion-MNIST (the main job's data, and the real-data
# tests'): the Debian package dataset-fashion-mnist where apt-get and root are
# available, else Keras's download into ~/.keras/datasets; one [setup] line
# says which (build_deps/get_fashion_mnist.py).
# DEEPREDUCE_TF_CUDA=1 builds the CUDA kernels too. Safe to run repeatedly: a
# stage whose inputs did not change since it last succeeded is skipped
# (digests in .venv/.deepreduce-*, computed by build_deps/setup_state.py).
set -euo pipefail
cd "$(dirname "$0")/.."
job="${1:-test}"; shift || true
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if command -v python3.11 >/dev/null; then PY=python3.11; else PY=python3; fi
fi
say() { printf '[setup] %s\n' "$*" >&2; }
log=.venv/setup.log
# A stage that fails prints the end of its log instead of pip's full output.
quiet() {
  if ! "$@" >>"$log" 2>&1; then
    say "FAILED: $*"; tail -n 40 "$log" >&2; say "full log: $log"; exit 1
  fi
}
stamp_ok() { [ -f ".venv/.deepreduce-$1" ] && [ "$(cat ".venv/.deepreduce-$1")" = "$2" ]; }
t0=$SECONDS
if [ -x .venv/bin/python ]; then
  say "Python environment: reusing .venv ($(.venv/bin/python --version 2>&1))"
else
  say "Python environment: creating .venv with $("$PY" --version 2>&1)"
  "$PY" -m venv .venv
fi
: >"$log"
req=$(.venv/bin/python build_deps/setup_state.py requirements)
if stamp_ok requirements "$req"; then
  say "pinned dependencies (build_deps/requirements*.txt): up to date"
else
  say "pinned dependencies: installing TensorFlow 2.21 (CPU), numpy, absl-py, matplotlib, pytest," \
      "tf_keras (a few minutes the first time; log: $log)"
  quiet .venv/bin/python -m pip install --disable-pip-version-check -r build_deps/requirements.txt
  # tf_keras (Keras 2, for model.fit under MultiWorkerMirroredStrategy) would pull
  # the full `tensorflow` package next to tensorflow-cpu: install it alone.
  quiet .venv/bin/python -m pip install --disable-pip-version-check --no-deps \
    -r build_deps/requirements-nodeps.txt
  echo "$req" >.venv/.deepreduce-requirements
fi
pkg=$(.venv/bin/python build_deps/setup_state.py package)
installed_lib=$(ls .venv/lib/python*/site-packages/deepreduce_tf/ops/_deepreduce_ops.so 2>/dev/null || true)
if stamp_ok package "$pkg" && [ -n "$installed_lib" ]; then
  say "deepreduce_tf and its op library: up to date (sources unchanged since the last build)"
else
  what="CPU kernels"; [ "${DEEPREDUCE_TF_CUDA:-0}" = 1 ] && what="CPU + CUDA kernels"
  say "deepreduce_tf: compiling the op library ($what; several minutes on 2 cores the first" \
      "time, seconds when only Python changed) and installing the package"
  rm -f .venv/.deepreduce-package
  quiet .venv/bin/python -m pip install --disable-pip-version-check --no-build-isolation \
    --no-deps --force-reinstall .
  echo "$pkg" >.venv/.deepreduce-package
fi
say "$(.venv/bin/python build_deps/get_fashion_mnist.py --log "$log" 2>>"$log")"
say "ready in $((SECONDS - t0)) s"
case "$job" in
  test)
    # The quick suite leaves out the tests marked `slow` (trainings, worker
    # processes, Flower runs: pytest.ini); --full, a -m of the caller's or
    # arguments naming test files or folders run what they say.
    full=0 args=()
    for a in "$@"; do
      if [ "$a" = --full ]; then full=1; else args+=("$a"); fi
    done
    set -- ${args[@]+"${args[@]}"}
    for a in "$@"; do
      case "$a" in -m|-m*) full=1 ;; esac
      if [ "${a#-}" = "$a" ] && [ -e "${a%%::*}" ]; then full=1; fi
    done
    quick=()
    if [ "$full" = 0 ]; then
      quick=(-m "not slow")
      echo "[test] the quick suite: the tests marked slow (trainings, worker processes," \
        "Flower) are left out; bash build_deps/dev.sh test --full runs every test, as CI does" >&2
    fi
    # Parallel worker processes (pytest-xdist), one per core up to 8, each
    # taking the next few tests in order as it frees up (the slow ones come
    # first: tests/conftest.py); `-n 0` runs them in this process.
    par=(-n "$(n=$(nproc 2>/dev/null || echo 2); echo $((n > 8 ? 8 : n)))" --dist load
         --maxschedchunk 4)
    for a in "$@"; do
      case "$a" in -n|-n*|--numprocesses*|-p|--dist*|--maxschedchunk*|--pdb|--collect-only|--co)
        par=() ;;
      esac
    done
    # The whole suite, unless the arguments name test files or folders
    # (e.g. tests/ops, or tests/ops/test_bloom.py::test_round_trip).
    for a in "$@"; do
      if [ "${a#-}" = "$a" ] && [ -e "${a%%::*}" ]; then
        exec .venv/bin/pytest -p no:cacheprovider "${par[@]}" "$@"
      fi
    done
    exec .venv/bin/pytest -p no:cacheprovider tests "${par[@]}" ${quick[@]+"${quick[@]}"} "$@" ;;
  bench) exec .venv/bin/deepreduce-bench "$@" ;;
  setup) ;;
  *) echo "usage: bash build_deps/dev.sh {test|bench|setup} [args]" >&2; exit 2 ;;
esac
