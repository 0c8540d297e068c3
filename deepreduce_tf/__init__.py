"""deepreduce_tf: sparse-tensor compression for distributed TensorFlow.

The compiled ops load lazily: importing the package does not touch the op
library; the first op call (or cuda_built(), build_info()) does.
"""
from deepreduce_tf._version import __version__
from deepreduce_tf.ops import bloom, index, payload, sparsify, value
from deepreduce_tf.ops._loader import OpLibraryError, build_info


def cuda_built():
    """True if the loaded op library holds CUDA kernels."""
    return bool(build_info()["cuda"])


def built_tf_version():
    """The TensorFlow version the loaded op library was compiled against."""
    return build_info()["tf_version"]


__all__ = ["__version__", "bloom", "build_info", "built_tf_version",
           "cuda_built", "index", "OpLibraryError", "payload", "sparsify", "value"]
