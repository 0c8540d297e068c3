#!/usr/bin/env bash
# One entry point for a fresh machine: creates .venv (Python 3.11), installs the
# pinned dependencies and deepreduce_tf with its compiled ops, then runs a job.
#   bash build_deps/dev.sh test   [pytest args]   # the test suite
#   bash build_deps/dev.sh bench  [bench args]    # the main benchmark: deepreduce-bench
#     (default: ResNet-20, synthetic data, 2 replicas, top-k 1 % + Bloom conflict_sets + polyfit)
#   bash build_deps/dev.sh setup                  # install only
# DEEPREDUCE_TF_CUDA=1 builds the CUDA kernels too. Safe to run repeatedly.
set -euo pipefail
cd "$(dirname "$0")/.."
job="${1:-test}"; shift || true
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if command -v python3.11 >/dev/null; then PY=python3.11; else PY=python3; fi
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q -r build_deps/requirements.txt
# tf_keras (Keras 2, for model.fit under MultiWorkerMirroredStrategy) would pull
# the full `tensorflow` package next to tensorflow-cpu: install it alone.
.venv/bin/python -m pip install -q --no-deps -r build_deps/requirements-nodeps.txt
.venv/bin/python -m pip install -q --no-build-isolation --no-deps --force-reinstall .
case "$job" in
  test)  exec .venv/bin/pytest -p no:cacheprovider tests "$@" ;;
  bench) exec .venv/bin/deepreduce-bench "$@" ;;
  setup) ;;
  *) echo "usage: bash build_deps/dev.sh {test|bench|setup} [args]" >&2; exit 2 ;;
esac
