"""Shared fixtures. Run with the venv's `pytest` (not `python -m pytest`): the
tests must import the *installed* deepreduce_tf, which holds the compiled op
library, not the source tree, which does not.

tests/ mirrors the package's layers, one folder each:
  ops/           the op wrappers, loader and kernels (CPU, CUDA, fuzz corpus)
  codecs/        the codec table and registry (deepreduce_tf/codecs, ops/codec_table.py)
  compressor/    the stateless Compressor and its parts: sparsifiers, fusion,
                 the dense fallback for what a value codec cannot carry
  exchange/      the step around it: communicators (allgather, allreduce, lgc),
                 transport frames, from_params, memory and DGC's recipe, state
                 and checkpoints (+ state_worker.py)
  integrations/  adapters to other systems: distribute (+ distribute_worker.py,
                 processes.py: the Flower tests' process helpers),
                 the cross-device ops, federated (+ federated_app/),
                 tf_cnn_benchmarks (+ tf1_collective_worker.py)
  bench/         the deepreduce_bench harness, its data sets and benchmarks/
Here: this conftest, the numpy references (*_reference.py, shared by several
layers; pytest puts this folder on sys.path for this conftest, so every test
imports them by name), the project-level checks (test_readme.py: the README's
commands; test_setup_state.py: build_deps/dev.sh), and the standalone C++ and
CUDA tests (cpp/, cuda/), data/ and fuzz_corpus/. Test file names are unique
across folders (no __init__.py: pytest imports each file by its basename)."""
import os

import numpy as np
import pytest
import tensorflow as tf

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Two logical CPU devices, for MirroredStrategy tests (tests/integrations/test_distribute.py).
# Must happen before the TensorFlow runtime starts; other tests use CPU:0.
_cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(
    _cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)


def pytest_configure(config):
    import deepreduce_tf

    pkg_dir = os.path.dirname(os.path.abspath(deepreduce_tf.__file__))
    # The source tree holds no compiled library, unless the developer points
    # the loader at one (build_deps/dev_build_lib.sh OUTDIR, then
    # DEEPREDUCE_TF_OPS_LIB=OUTDIR/_deepreduce_ops.so PYTHONPATH=. .venv/bin/pytest).
    dev_lib = os.environ.get("DEEPREDUCE_TF_OPS_LIB")
    if pkg_dir == os.path.join(REPO_ROOT, "deepreduce_tf") and not (
            dev_lib and os.path.exists(dev_lib)):
        raise pytest.UsageError(
            "the tests imported deepreduce_tf from the source tree "
            f"({pkg_dir}), which holds no compiled op library; install it "
            "(bash build_deps/dev.sh setup) and run .venv/bin/pytest, not "
            "python -m pytest, from the repository root")


def pytest_collection_modifyitems(config, items):
    """The `slow` tests first, in their order, then the rest: with parallel
    workers (build_deps/dev.sh test runs pytest-xdist) the long trainings and
    worker processes start at once rather than end the run alone."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def to_numpy(x):
    return tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, x)


@pytest.fixture(params=["eager", "graph"])
def run(request):
    """run(fn, *args, **kwargs): calls fn eagerly, or as a tf.function, and
    returns numpy values. In graph mode tensor arguments become graph inputs
    of unknown value, so the kernels see them at run time, not as constants."""

    def call(fn, *args, **kwargs):
        if request.param == "eager":
            return to_numpy(fn(*args, **kwargs))
        return to_numpy(tf.function(lambda *a: fn(*a, **kwargs))(*args))

    call.mode = request.param
    return call


@pytest.fixture(params=[tf.int32, tf.int64], ids=["int32", "int64"])
def index_dtype(request):
    return request.param


@pytest.fixture(params=["CPU", "GPU"])
def device(request):
    """Runs the test body under tf.device; GPU cases skip without a GPU."""
    if request.param == "GPU":
        if not tf.config.list_physical_devices("GPU"):
            pytest.skip("no GPU visible to TensorFlow")
        import deepreduce_tf

        if not deepreduce_tf.cuda_built():
            pytest.skip("op library built without CUDA kernels")
    with tf.device(f"/{request.param}:0"):
        yield request.param


@pytest.fixture
def rng():
    return np.random.default_rng(20240601)
