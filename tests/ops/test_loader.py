"""The op-library loader: lazy, loud and version-aware.

Every case runs in a fresh interpreter (sys.executable) so that the loader's
once-per-process state starts empty. An installation, good or broken, is
simulated by copying the deepreduce_tf package this process imported into a
temporary directory, with or without the library this process loaded (the
package's own, or the one DEEPREDUCE_TF_OPS_LIB names in a source-tree run,
see conftest), and putting that directory first on PYTHONPATH; the
subprocess runs in that directory so that the source tree is never imported
by accident.
"""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import tensorflow as tf

import deepreduce_tf
from deepreduce_tf.ops import _loader

LIB = _loader.LIB_NAME + ".so"
SIDECAR = _loader.LIB_NAME + ".json"
INSTALLED_PKG = os.path.dirname(os.path.abspath(deepreduce_tf.__file__))
# The library this process uses: the package's own, else (a source-tree run)
# the one DEEPREDUCE_TF_OPS_LIB names.
GOOD_LIB = (os.path.join(INSTALLED_PKG, "ops", LIB)
            if os.path.exists(os.path.join(INSTALLED_PKG, "ops", LIB))
            else os.path.abspath(os.environ[_loader.ENV_PATH]))
GOOD_SIDECAR = os.path.splitext(GOOD_LIB)[0] + ".json"
RUNNING_MINOR = ".".join(tf.__version__.split(".")[:2])

# Prepended to every subprocess script: records calls of tf.load_op_library.
PRELUDE = """
import json, sys
import tensorflow as tf
LOADS = []
_orig_load = tf.load_op_library
def _recording_load(path):
    LOADS.append(path)
    return _orig_load(path)
tf.load_op_library = _recording_load

def report(**kw):
    print("RESULT " + json.dumps(kw))
"""


def run_python(code, cwd, pythonpath=None, lib_env=None, timeout=120):
    """Runs PRELUDE + code in a fresh interpreter that imports the package
    copy under `pythonpath`, by default the deepreduce_tf this process
    imported; DEEPREDUCE_TF_OPS_LIB is `lib_env` (unset for None)."""
    env = dict(os.environ)
    env.pop(_loader.ENV_PATH, None)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["PYTHONPATH"] = pythonpath or os.path.dirname(INSTALLED_PKG)
    if lib_env is not None:
        env[_loader.ENV_PATH] = lib_env
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
                          cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    results = [json.loads(line[len("RESULT "):]) for line in proc.stdout.splitlines()
               if line.startswith("RESULT ")]
    assert proc.returncode == 0 and len(results) == 1, (
        f"subprocess failed (rc={proc.returncode})\nstdout:\n{proc.stdout}\n"
        f"stderr:\n{proc.stderr[-4000:]}")
    return results[0]


def copy_package(tmp_path, with_lib=True, with_sidecar=True):
    """A copy of this process's package under tmp_path/site, holding GOOD_LIB
    and its build record as its own library (each if asked); returns
    (site, ops dir)."""
    site = tmp_path / "site"
    dest = site / "deepreduce_tf"
    shutil.copytree(INSTALLED_PKG, dest,
                    ignore=lambda d, names: [n for n in names
                                             if n in ("__pycache__", LIB, SIDECAR)])
    if with_lib:
        shutil.copy(GOOD_LIB, dest / "ops" / LIB)
    if with_sidecar:
        shutil.copy(GOOD_SIDECAR, dest / "ops" / SIDECAR)
    return str(site), dest / "ops"


# Tries build_info(), then an op; reports the error (if any) and the loads.
TRY_LOAD = """
import deepreduce_tf
from deepreduce_tf.ops import _loader
errors = []
for attempt in range(2):  # a failure is not cached as success, nor swallowed
    try:
        info = deepreduce_tf.build_info()
        errors.append(None)
    except deepreduce_tf.OpLibraryError as e:
        info = None
        errors.append(str(e))
try:
    deepreduce_tf.bloom.insert([1, 2], 10)
    op_error = None
except ImportError as e:
    op_error = type(e).__name__ + ": " + str(e)
report(file=deepreduce_tf.__file__, info=info, errors=errors, op_error=op_error,
       loads=LOADS, candidates=_loader._candidates(),
       is_import_error=issubclass(deepreduce_tf.OpLibraryError, ImportError))
"""


def check_error_message(msg, paths):
    assert msg.startswith("deepreduce_tf could not load its op library.")
    for path in paths:
        assert path in msg, f"path tried {path} not named:\n{msg}"
    assert f"Running TensorFlow: {tf.__version__}" in msg
    assert f"Running TensorFlow: {RUNNING_MINOR}" in msg
    assert "pip install --no-build-isolation" in msg
    assert _loader.ENV_PATH in msg


def check_override_named(msg, path):
    """The message says the variable is set, to which path, and what to do."""
    assert f"{_loader.ENV_PATH} is set to {path}" in msg
    assert f"unset {_loader.ENV_PATH}" in msg and "fix the path" in msg


def test_env_path_missing_is_an_error(tmp_path):
    """A variable naming no file is a mistake to report, not a reason to
    load the package's own library instead (which exists here)."""
    site, ops_dir = copy_package(tmp_path)
    missing = str(tmp_path / "nowhere" / LIB)
    r = run_python(TRY_LOAD, cwd=str(tmp_path), pythonpath=site, lib_env=missing)
    assert r["file"].startswith(site)
    assert r["candidates"] == [missing]
    msg = r["errors"][0]
    assert msg is not None and r["errors"][1] == msg
    check_error_message(msg, [missing])
    check_override_named(msg, missing)
    assert f"{missing}: no such file" in msg
    assert str(ops_dir / LIB) not in msg
    assert r["loads"] == [], "the package's library was loaded despite the variable"
    assert r["op_error"].startswith("OpLibraryError: deepreduce_tf could not load")


def test_env_path_relative_is_resolved(tmp_path):
    """A relative path is taken from the working directory and named in full."""
    site, _ = copy_package(tmp_path)
    r = run_python(TRY_LOAD, cwd=str(tmp_path), pythonpath=site,
                   lib_env=os.path.join("rel", LIB))
    full = str(tmp_path / "rel" / LIB)
    assert r["candidates"] == [full] and r["loads"] == []
    check_override_named(r["errors"][0], full)


def test_env_path_broken_library_is_an_error(tmp_path):
    """A variable naming a library that fails to load: that failure is
    reported, and the (good) package library is not loaded in its place."""
    site, _ = copy_package(tmp_path)
    lib_dir = tmp_path / "elsewhere"
    lib_dir.mkdir()
    (lib_dir / LIB).write_bytes(b"\x7fELF this is not a shared library")
    shutil.copy(GOOD_SIDECAR, lib_dir / SIDECAR)
    r = run_python(TRY_LOAD, cwd=str(tmp_path), pythonpath=site, lib_env=str(lib_dir / LIB))
    msg = r["errors"][0]
    check_error_message(msg, [str(lib_dir / LIB)])
    check_override_named(msg, str(lib_dir / LIB))
    assert "load failed" in msg
    assert r["loads"] == [str(lib_dir / LIB)] * 3


def test_env_path_is_used(tmp_path):
    """With the package's library missing, the env path alone suffices."""
    site, ops_dir = copy_package(tmp_path, with_lib=False, with_sidecar=False)
    lib_dir = tmp_path / "elsewhere"
    lib_dir.mkdir()
    shutil.copy(GOOD_LIB, lib_dir / LIB)
    shutil.copy(GOOD_SIDECAR, lib_dir / SIDECAR)
    r = run_python(TRY_LOAD, cwd=str(tmp_path), pythonpath=site,
                   lib_env=str(lib_dir / LIB))
    assert r["file"].startswith(site)
    assert r["errors"] == [None, None] and r["op_error"] is None
    assert r["loads"] == [str(lib_dir / LIB)]


def test_empty_env_path_means_unset(tmp_path):
    site, ops_dir = copy_package(tmp_path)
    r = run_python(TRY_LOAD, cwd=str(tmp_path), pythonpath=site, lib_env="")
    assert r["errors"] == [None, None]
    assert r["loads"] == [str(ops_dir / LIB)]


def test_missing_library(tmp_path):
    site, ops_dir = copy_package(tmp_path, with_lib=False, with_sidecar=False)
    r = run_python(TRY_LOAD, cwd=str(tmp_path), pythonpath=site)
    assert r["file"].startswith(site), "the copy was not the package imported"
    assert r["is_import_error"]
    pkg_lib = str(ops_dir / LIB)
    msg = r["errors"][0]
    assert msg is not None and r["errors"][1] == msg
    check_error_message(msg, [pkg_lib])
    assert f"{pkg_lib}: no such file" in msg
    assert f"set {_loader.ENV_PATH} to load a library from another path" in msg
    assert "built for TensorFlow: unknown" in msg
    assert r["loads"] == []
    assert r["op_error"].startswith("OpLibraryError: deepreduce_tf could not load")


def test_missing_build_record(tmp_path):
    site, ops_dir = copy_package(tmp_path, with_lib=True, with_sidecar=False)
    r = run_python(TRY_LOAD, cwd=str(tmp_path), pythonpath=site)
    msg = r["errors"][0]
    check_error_message(msg, [str(ops_dir / LIB)])
    assert "no readable build record" in msg and SIDECAR in msg
    assert r["loads"] == [], "a library without a build record must not be loaded"


def test_version_mismatch_is_caught_before_loading(tmp_path):
    site, ops_dir = copy_package(tmp_path)
    sidecar = ops_dir / SIDECAR
    info = json.loads(sidecar.read_text())
    info["tf_version"] = "2.20.0"
    sidecar.write_text(json.dumps(info))
    r = run_python(TRY_LOAD, cwd=str(tmp_path), pythonpath=site)
    msg = r["errors"][0]
    check_error_message(msg, [str(ops_dir / LIB)])
    assert "built for TensorFlow 2.20.0" in msg
    assert f"library built for TensorFlow: 2.20.0" in msg
    assert tf.__version__ in msg
    assert "load failed" not in msg
    assert r["loads"] == [], "tf.load_op_library was called on a mismatched library"


def test_unloadable_library(tmp_path):
    """A corrupt binary with a matching build record: the load error is reported."""
    site, ops_dir = copy_package(tmp_path)
    (ops_dir / LIB).write_bytes(b"\x7fELF this is not a shared library")
    r = run_python(TRY_LOAD, cwd=str(tmp_path), pythonpath=site)
    msg = r["errors"][0]
    check_error_message(msg, [str(ops_dir / LIB)])
    assert "load failed" in msg
    # Tried again on every call (build_info twice, then the op): not cached.
    assert r["loads"] == [str(ops_dir / LIB)] * 3


LAZY = """
import deepreduce_tf
from deepreduce_tf.ops import _loader, bloom
import deepreduce_tf.ops
after_import = dict(loads=list(LOADS), module=_loader._module is not None)
try:
    deepreduce_tf.cuda_built()
    error = None
except deepreduce_tf.OpLibraryError as e:
    error = str(e)
report(after_import=after_import, error=error, loads=LOADS,
       version=deepreduce_tf.__version__)
"""


def test_import_is_lazy_with_a_broken_library(tmp_path):
    site, _ = copy_package(tmp_path, with_lib=False, with_sidecar=False)
    r = run_python(LAZY, cwd=str(tmp_path), pythonpath=site,
                   lib_env=str(tmp_path / "broken" / LIB))
    assert r["after_import"] == {"loads": [], "module": False}
    assert r["version"] == deepreduce_tf.__version__
    assert r["error"] is not None and "Paths tried" in r["error"]


def test_import_is_lazy_with_a_good_library(tmp_path):
    site, ops_dir = copy_package(tmp_path)
    r = run_python(LAZY, cwd=str(tmp_path), pythonpath=site)
    assert r["after_import"] == {"loads": [], "module": False}
    assert r["error"] is None
    assert r["loads"] == [str(ops_dir / LIB)]


FIRST_USE_IN_GRAPH = """
import numpy as np
import deepreduce_tf

@tf.function
def encode(idx):
    return deepreduce_tf.index.encode("golomb", idx, 100)

out = deepreduce_tf.index.decode("golomb", encode(tf.constant([3, 7, 99], tf.int64)))
report(out=out.numpy().tolist(), tf_version=deepreduce_tf.built_tf_version())
"""


def test_first_op_call_inside_tf_function(tmp_path):
    # The loader's version check must not run in the graph being traced.
    site, _ = copy_package(tmp_path)
    r = run_python(FIRST_USE_IN_GRAPH, cwd=str(tmp_path), pythonpath=site)
    assert r["out"] == [3, 7, 99]
    assert r["tf_version"] == tf.__version__


@pytest.mark.parametrize("built,running,ok", [
    ("2.21.0", "2.21.0", True), ("2.21.0", "2.21.3", True), ("2.21.0rc1", "2.21.0", True),
    ("2.20.0", "2.21.0", False), ("2.2.0", "2.21.0", False), ("3.21.0", "2.21.0", False),
])
def test_minor_version_comparison(built, running, ok):
    assert (_loader._minor(built) == _loader._minor(running)) is ok


# ------------------------------------------------- first use in TF1-style graphs
def this_package():
    """run_python arguments under which the subprocess imports the same
    deepreduce_tf as this process: the installed package, or the source tree
    with the library DEEPREDUCE_TF_OPS_LIB names (see conftest)."""
    return dict(pythonpath=os.path.dirname(INSTALLED_PKG),
                lib_env=os.environ.get(_loader.ENV_PATH))


# Each script makes its first deepreduce_tf op call in a graph context, then
# runs the result; `first` names the context. Reported: the decoded indices,
# the Bloom query, the op types the caller's graph holds and build_info().
GRAPH_FIRST_USE = {
    # Eager execution disabled, ops built inside a tf.compat.v1.Session.
    "disabled_in_session": """
tf.compat.v1.disable_eager_execution()
import deepreduce_tf
with tf.compat.v1.Session() as sess:
    idx = tf.compat.v1.placeholder(tf.int64, [None])
    decoded = deepreduce_tf.index.decode("golomb", deepreduce_tf.index.encode("golomb", idx, 100))
    f = deepreduce_tf.bloom.insert(idx, 100, fpr=0.01)
    positives = deepreduce_tf.bloom.query(f, 100)
    out, pos = sess.run([decoded, positives], {idx: [3, 7, 99]})
    graph = sess.graph
""",
    # Eager execution disabled, first call while a tf.function is traced.
    "disabled_in_tf_function": """
tf.compat.v1.disable_eager_execution()
import deepreduce_tf

@tf.function
def roundtrip(idx):
    payload = deepreduce_tf.index.encode("golomb", idx, 100)
    f = deepreduce_tf.bloom.insert(idx, 100, fpr=0.01)
    return deepreduce_tf.index.decode("golomb", payload), deepreduce_tf.bloom.query(f, 100)

graph = tf.compat.v1.get_default_graph()
decoded, positives = roundtrip(tf.constant([3, 7, 99], tf.int64))
with tf.compat.v1.Session() as sess:
    out, pos = sess.run([decoded, positives])
""",
    # Eager execution enabled, first call inside a tf.Graph().as_default().
    "graph_as_default": """
import deepreduce_tf
graph = tf.Graph()
with graph.as_default():
    idx = tf.constant([3, 7, 99], tf.int64)
    decoded = deepreduce_tf.index.decode("golomb", deepreduce_tf.index.encode("golomb", idx, 100))
    positives = deepreduce_tf.bloom.query(deepreduce_tf.bloom.insert(idx, 100, fpr=0.01), 100)
    with tf.compat.v1.Session() as sess:
        out, pos = sess.run([decoded, positives])
# ... and eager calls work afterwards.
eager = deepreduce_tf.index.decode(
    "golomb", deepreduce_tf.index.encode("golomb", tf.constant([5], tf.int64), 10)).numpy()
assert eager.tolist() == [5], eager
""",
}

GRAPH_FIRST_USE_REPORT = """
report(out=out.tolist(), positives=pos.tolist(), eager=tf.executing_eagerly(),
       graph_ops=sorted({op.type for op in graph.get_operations()}),
       info=deepreduce_tf.build_info(), loads=LOADS)
"""


@pytest.mark.parametrize("first", sorted(GRAPH_FIRST_USE))
def test_first_op_call_in_a_tf1_graph(tmp_path, first):
    r = run_python(GRAPH_FIRST_USE[first] + GRAPH_FIRST_USE_REPORT, cwd=str(tmp_path),
                   **this_package())
    assert r["out"] == [3, 7, 99]
    # A Bloom filter's positives hold every inserted index (and few others).
    assert {3, 7, 99} <= set(r["positives"]) and len(r["positives"]) < 20
    assert r["eager"] is first.startswith("graph")
    assert r["info"]["tf_version"] == tf.__version__
    assert len(r["loads"]) == 1
    # The version check ran in a graph of its own, not in the caller's.
    assert not [t for t in r["graph_ops"] if "BuildInfo" in t], r["graph_ops"]
    if first != "disabled_in_tf_function":  # else they are in the function's graph
        assert [t for t in r["graph_ops"] if t.startswith("DeepReduce>")], r["graph_ops"]
