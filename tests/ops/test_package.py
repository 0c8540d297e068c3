"""What the package reports about itself at run time: its version, whether
the binary holds CUDA kernels, and the TensorFlow it was built against."""
import json
import os
import re

import tensorflow as tf

import deepreduce_tf
from deepreduce_tf.ops import _loader

# tests/ops/<this file> -> the repository root
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_version_is_a_release_string():
    assert isinstance(deepreduce_tf.__version__, str)
    assert re.fullmatch(r"\d+\.\d+\.\d+([.-]?\w+)?", deepreduce_tf.__version__)


def test_version_matches_the_source_tree():
    with open(os.path.join(REPO_ROOT, "deepreduce_tf", "_version.py")) as f:
        source = re.search(r'__version__ = "([^"]+)"', f.read()).group(1)
    assert deepreduce_tf.__version__ == source, (
        "the installed package is stale: reinstall with bash build_deps/dev.sh setup")


def test_build_info_describes_the_binary():
    info = deepreduce_tf.build_info()
    assert set(info) >= {"version", "tf_version", "cuda", "cuda_archs"}
    assert info["version"] == deepreduce_tf.__version__
    assert isinstance(info["cuda"], bool)
    # A copy: callers cannot corrupt the loader's record.
    info["version"] = "changed"
    assert deepreduce_tf.build_info()["version"] == deepreduce_tf.__version__


def test_built_tf_version_matches_running_tensorflow():
    built = deepreduce_tf.built_tf_version()
    assert built == deepreduce_tf.build_info()["tf_version"]
    assert built.split(".")[:2] == tf.__version__.split(".")[:2]


def test_cuda_built():
    cuda = deepreduce_tf.cuda_built()
    assert cuda is deepreduce_tf.build_info()["cuda"]
    archs = deepreduce_tf.build_info()["cuda_archs"]
    if cuda:
        assert archs and all(a.isdigit() and int(a) >= 75 for a in archs.split(","))
    else:
        assert archs == ""


def test_binary_and_build_record_agree():
    """The sidecar json (checked before loading) says what the binary says;
    the codec table is the binary's alone (checked after loading)."""
    lib_dir = os.path.dirname(os.path.abspath(_loader.__file__))
    with open(os.path.join(lib_dir, _loader.LIB_NAME + ".json")) as f:
        sidecar = json.load(f)
    info = deepreduce_tf.build_info()
    assert set(info) - set(sidecar) == {"codecs"}
    assert sidecar == {k: info[k] for k in sidecar}


def test_public_api():
    for name in ("__version__", "bloom", "build_info", "built_tf_version", "cuda_built",
                 "OpLibraryError"):
        assert name in deepreduce_tf.__all__
        assert hasattr(deepreduce_tf, name)
    assert issubclass(deepreduce_tf.OpLibraryError, ImportError)
    for name in ("insert", "query", "select", "decode", "filter_size", "POLICIES",
                 "BloomFilter"):
        assert hasattr(deepreduce_tf.bloom, name)
    assert deepreduce_tf.bloom.POLICIES == ("p0", "leftmost", "random", "conflict_sets")
