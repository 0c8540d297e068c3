"""Typed wrappers around the compiled op library, one module per op family.

The families import on first use (deepreduce_tf.ops.fusion after `import
deepreduce_tf`), as the package's names do: importing it imports no TensorFlow.
"""
import importlib

_FAMILIES = ("bloom", "fusion", "index", "payload", "sparsify", "value")


def __getattr__(name):
    if name not in _FAMILIES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return importlib.import_module(f"{__name__}.{name}")
