"""deepreduce_tf: sparse-tensor compression for distributed TensorFlow.

    compressor = deepreduce_tf.from_params({'compressor': 'topk',
        'compress_ratio': 0.01, 'memory': 'residual', 'deepreduce': 'both',
        'index': 'bloom', 'value': 'polyfit'})
    payload, ctx = compressor.compress(grad, name=var.name)
    grad_sum = compressor.decompress(payload, ctx)   # for each worker's payload

The compiled ops load lazily: importing the package does not touch the op
library; the first op call (or cuda_built(), build_info()) does. Importing
the package does not import TensorFlow either: the names below import their
modules on first use (so deepreduce-bench checks its flags before TensorFlow
starts).
"""
import importlib

from deepreduce_tf._version import __version__
from deepreduce_tf.ops._loader import OpLibraryError, build_info

# Public name -> (module, attribute; None: the module itself), imported on first use.
_LAZY = {
    "bloom": ("deepreduce_tf.ops.bloom", None),
    "index": ("deepreduce_tf.ops.index", None),
    "payload": ("deepreduce_tf.ops.payload", None),
    "sparsify": ("deepreduce_tf.ops.sparsify", None),
    "value": ("deepreduce_tf.ops.value", None),
    "accounting": ("deepreduce_tf.accounting", None),
    "codecs": ("deepreduce_tf.codecs", None),
    "communicators": ("deepreduce_tf.communicators", None),
    "fusion": ("deepreduce_tf.fusion", None),
    "memory": ("deepreduce_tf.memory", None),
    "sparsifiers": ("deepreduce_tf.sparsifiers", None),
    "state": ("deepreduce_tf.state", None),
    "transport": ("deepreduce_tf.transport", None),
    "compressor": ("deepreduce_tf.compressor", None),
    "compressors": ("deepreduce_tf.compressors", None),
    "exchange": ("deepreduce_tf.exchange", None),
    "params": ("deepreduce_tf.params", None),
    "ByteLedger": ("deepreduce_tf.accounting", "ByteLedger"),
    "Compressor": ("deepreduce_tf.compressor", "Compressor"),
    "make_exchange": ("deepreduce_tf.compressors", "make_exchange"),
    "Context": ("deepreduce_tf.compressor", "Context"),
    "Exchange": ("deepreduce_tf.exchange.endpoint", "Exchange"),
    "from_params": ("deepreduce_tf.params", "from_params"),
}


def __getattr__(name):
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = importlib.import_module(module)
    if attr is not None:
        value = getattr(value, attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


def cuda_built():
    """True if the loaded op library holds CUDA kernels."""
    return bool(build_info()["cuda"])


def built_tf_version():
    """The TensorFlow version the loaded op library was compiled against."""
    return build_info()["tf_version"]


__all__ = ["__version__", "accounting", "bloom", "build_info", "built_tf_version",
           "ByteLedger", "codecs", "communicators", "compressor", "Compressor", "Context",
           "cuda_built", "exchange", "Exchange",
           "fusion", "transport",
           "from_params", "index", "make_exchange", "memory", "OpLibraryError", "payload",
           "sparsifiers", "sparsify", "state", "value"]
