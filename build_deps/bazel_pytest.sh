#!/usr/bin/env bash
# sh_test runner of //:op_tests and //:op_tests_all (see build_deps/pytest.bzl):
# runs pytest on the test files it is given (paths in the workspace; any other
# argument goes to pytest as it is) against the Bazel-built op library.
#
# The tests expect deepreduce_tf to be *installed*, also in the fresh
# interpreters they start without PYTHONPATH (tests/ops/test_loader.py), and never
# imported from a source tree. So the runner makes a throwaway venv in
# $TEST_TMPDIR layered on the interpreter of @local_config_tf (whose
# site-packages it adds through a .pth file, for TensorFlow and pytest) and
# copies the package from the runfiles into the throwaway venv's own
# site-packages: the Python sources with the Bazel-built _deepreduce_ops.so and
# .json beside them. The package's own site-packages comes first on sys.path,
# so this copy wins over any deepreduce_tf installed in the base interpreter,
# and the loader's default path is the Bazel-built library.
set -euo pipefail

runfiles="${TEST_SRCDIR:-$0.runfiles}"
workspace="$runfiles/${TEST_WORKSPACE:-deepreduce_tf}"
base_python="${PYTHON_BIN_PATH:-$(cat "$runfiles/local_config_tf/python_bin")}"
args=()
for a in "$@"; do
  if [ -f "$workspace/$a" ]; then args+=("$workspace/$a"); else args+=("$a"); fi
done
built_lib="$workspace/deepreduce_tf/ops/_deepreduce_ops.so"

tmp="${TEST_TMPDIR:-$(mktemp -d)}"
export TMPDIR="$tmp"
export PYTHONDONTWRITEBYTECODE=1
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-1}"
unset PYTHONPATH DEEPREDUCE_TF_OPS_LIB PYTHONHOME

venv="$tmp/venv"
rm -rf "$venv"
"$base_python" -m venv --without-pip "$venv"
python="$venv/bin/python"
site="$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
"$base_python" - "$site/_deepreduce_base.pth" <<'PY'
import site, sys
# An "import" line in a .pth file runs at startup: addsitedir also honours the
# base interpreter's own .pth files.
with open(sys.argv[1], "w") as f:
    dirs = site.getsitepackages()
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    f.write("import site; " + "; ".join(
        f"site.addsitedir({d!r})" for d in dirs) + "\n")
PY
cp -RL "$workspace/deepreduce_tf" "$site/"
chmod -R u+w "$site/deepreduce_tf"

cd "$tmp"
"$python" - "$site" "$built_lib" <<'PY'
import filecmp, os, sys
import deepreduce_tf
site, built = sys.argv[1:]
where = os.path.dirname(os.path.abspath(deepreduce_tf.__file__))
if where != os.path.join(site, "deepreduce_tf"):
    sys.exit(f"bazel_pytest.sh: deepreduce_tf was imported from {where}, not "
             f"from the copy in {site}")
lib = os.path.join(where, "ops", "_deepreduce_ops.so")
if not filecmp.cmp(lib, built, shallow=False):
    sys.exit(f"bazel_pytest.sh: {lib} is not the Bazel-built {built}")
PY

junit=()
if [ -n "${XML_OUTPUT_FILE:-}" ]; then
  junit=("--junitxml=$XML_OUTPUT_FILE")
fi
exec "$python" -m pytest -p no:cacheprovider -q --rootdir="$workspace" \
  ${junit[@]+"${junit[@]}"} "${args[@]}"
