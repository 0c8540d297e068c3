"""Sparsifiers: top-k by magnitude, threshold and random-k selection.

Each op flattens x (any shape; float16, bfloat16, float32 or float64) and
returns (indices, values): the selected flat positions SORTED ASCENDING and
x at those positions, so that ``tf.gather(tf.reshape(x, [-1]), indices) ==
values``. Indices are int64 by default, int32 with ``out_idx=tf.int32``
(which limits x to 2^31 - 1 elements); x may hold at most 2^32 - 1 elements.

Ordering of magnitudes (top_k and threshold): |x| compared as numbers, with
-0.0 == +0.0, and NaN counted as larger than +inf (all NaNs equal). NaN is
kept, not rejected, so that a non-finite gradient still reaches the
all-reduce, where mixed-precision loss scaling detects it and skips the step.
Ties are broken by index: among equal magnitudes the lower index is selected
first. Results are deterministic and do not depend on the number of threads.

top_k is an O(n) selection on the bit pattern of |x|, not a sort: for
n >= 2^18 a sample brackets the k-th magnitude, one streaming pass over x
marks and counts, and the exact k-th key is found among the few candidates;
if the bracket misses, an exact radix select (three passes) runs instead.
Either way the answer is the same. Scratch memory: n/8 bytes (a bitmap) plus
the candidates. random_k picks the k positions whose hash
Mix64(i + Mix64(seed ^ salt)) is largest: a uniformly random k-subset that
is a pure function of (seed, n, k) -- identical on every worker and thread
count, and no global RNG state is read or changed. threshold is one pass
that marks and counts, then writes from the marks.

On GPU (CUDA builds) the same ops run an exact radix select with the same
keys and tie rule, so CPU and GPU select the same positions.
"""
import math

import numpy as np
import tensorflow as tf

from deepreduce_tf.ops import _loader

FLOAT_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)


def _invalid(message):
    return tf.errors.InvalidArgumentError(None, None, message)


def _float_tensor(x, name="x"):
    x = tf.convert_to_tensor(x)
    if x.dtype not in FLOAT_DTYPES:
        raise _invalid(f"{name} must be float16, bfloat16, float32 or float64, "
                       f"got {x.dtype.name}")
    return x


def _int64_scalar(value, name):
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return tf.constant(int(value), tf.int64)  # no cast op per call
    t = tf.convert_to_tensor(value)
    if not t.dtype.is_integer:
        raise _invalid(f"{name} must be an integer scalar, got {t.dtype.name}")
    if t.shape.rank is not None and t.shape.rank != 0:
        raise _invalid(f"{name} must be a scalar, got shape {t.shape}")
    return tf.cast(t, tf.int64)


def _check_out_idx(out_idx):
    out_idx = tf.as_dtype(out_idx)
    if out_idx not in (tf.int32, tf.int64):
        raise _invalid(f"out_idx must be int32 or int64, got {out_idx.name}")
    return out_idx


def top_k(x, k, out_idx=tf.int64, name=None):
    """The k elements of x with the largest magnitude, in index order.

    Exact: equals sorting by (-|x|, index) and keeping the first k positions,
    then sorting those positions ascending.

    Args:
      x: float16/bfloat16/float32/float64 tensor of any shape (flattened; n
        elements).
      k: integer scalar in [0, n]. A constant k gives outputs of static shape
        [k].
      out_idx: tf.int64 (default) or tf.int32, dtype of the indices.
      name: op name.

    Returns:
      (indices, values): indices, out_idx vector [k], the selected flat
      positions ascending; values, x.dtype vector [k], x at those positions
      (signed, not |x|).

    Raises:
      InvalidArgumentError: k < 0 or k > n, k not an integer scalar, x not a
        supported float dtype, n too large for out_idx.
    """
    x = _float_tensor(x)
    return _loader.load().deep_reduce_top_k(
        x, _int64_scalar(k, "k"), out_idx=_check_out_idx(out_idx), name=name)


def threshold(x, t, out_idx=tf.int64, name=None):
    """All elements of x with |x| >= t, in index order.

    The comparison is made in x's dtype: t is converted to x.dtype first (so
    for float16 it is rounded to the nearest float16). NaN elements always
    pass (NaN counts as larger than +inf).

    Args:
      x: float16/bfloat16/float32/float64 tensor of any shape (flattened).
      t: scalar threshold >= 0 (0 keeps everything; +inf keeps inf and NaN).
      out_idx: tf.int64 (default) or tf.int32.
      name: op name.

    Returns:
      (indices, values): out_idx and x.dtype vectors of the same,
      data-dependent length (static shape [None]).

    Raises:
      InvalidArgumentError: t negative or NaN, t not a scalar, x not a
        supported float dtype.
    """
    x = _float_tensor(x)
    t = tf.convert_to_tensor(t)
    if not (t.dtype.is_floating or t.dtype.is_integer):
        raise _invalid(f"threshold must be a number, got {t.dtype.name}")
    if t.shape.rank is not None and t.shape.rank != 0:
        raise _invalid(f"threshold must be a scalar, got shape {t.shape}")
    # Checked before the cast too: a tiny negative t would round to -0.0.
    static = tf.get_static_value(t)
    if static is not None and not float(static) >= 0.0:
        raise _invalid(f"threshold must be a non-negative number (not NaN), got {static}")
    if static is None and t.dtype != x.dtype:
        # The kernel checks t after the cast, where it may have become -0.0.
        check = tf.debugging.Assert(
            t >= tf.zeros([], t.dtype),
            ["threshold must be a non-negative number (not NaN), got", t])
        with tf.control_dependencies([check]):
            t = tf.identity(t)
    return _loader.load().deep_reduce_threshold_select(
        x, tf.cast(t, x.dtype), out_idx=_check_out_idx(out_idx), name=name)


def random_k(x, k, seed, out_idx=tf.int64, name=None):
    """k uniformly random distinct positions of x, in index order.

    The positions are a pure function of (seed, n, k): every worker, thread
    count and run gets the same set for the same arguments, and no random
    state is used. Pass a different seed each step (e.g. the step counter)
    for fresh positions; seed is a tensor input, so changing it does not
    retrace a tf.function.

    Args:
      x: float16/bfloat16/float32/float64 tensor of any shape (flattened; n
        elements); only its size and the values at the chosen positions are
        used.
      k: integer scalar in [0, n]. A constant k gives static shape [k].
      seed: integer scalar (any int64 value).
      out_idx: tf.int64 (default) or tf.int32.
      name: op name.

    Returns:
      (indices, values): out_idx vector [k] ascending, and x at those
      positions.

    Raises:
      InvalidArgumentError: k < 0 or k > n, k or seed not an integer scalar,
        x not a supported float dtype.
    """
    x = _float_tensor(x)
    return _loader.load().deep_reduce_random_k(
        x, _int64_scalar(k, "k"), _int64_scalar(seed, "seed"),
        out_idx=_check_out_idx(out_idx), name=name)


def k_for_ratio(n, compress_ratio):
    """k = min(n, max(1, ceil(compress_ratio * n))), GRACE's compress_ratio.

    The product is taken in float64 (so 0.01 * 25e6 gives exactly 250000).
    min(n, .) only matters for an empty tensor, which yields k = 0.

    Args:
      n: number of elements, a Python int or an integer scalar tensor.
      compress_ratio: Python float in (0, 1].

    Returns:
      A Python int when n is a Python int, else an int64 scalar tensor.

    Raises:
      ValueError: compress_ratio outside (0, 1].
    """
    ratio = float(compress_ratio)
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"compress_ratio must lie in (0, 1], got {compress_ratio}")
    if isinstance(n, int):
        return min(n, max(1, math.ceil(ratio * n)))
    n = tf.cast(n, tf.int64)
    k = tf.cast(tf.math.ceil(ratio * tf.cast(n, tf.float64)), tf.int64)
    return tf.minimum(n, tf.maximum(tf.constant(1, tf.int64), k))


def _num_elements(x):
    """n as a Python int when x's shape is static, else a tensor."""
    if x.shape.is_fully_defined():
        return x.shape.num_elements()
    return tf.size(x, out_type=tf.int64)


def top_k_ratio(x, compress_ratio, out_idx=tf.int64, name=None):
    """top_k(x, k_for_ratio(n, compress_ratio)); static shape [k] when x's is.

    Raises:
      ValueError: compress_ratio outside (0, 1].
      InvalidArgumentError: as top_k.
    """
    x = _float_tensor(x)
    return top_k(x, k_for_ratio(_num_elements(x), compress_ratio),
                 out_idx=out_idx, name=name)


def random_k_ratio(x, compress_ratio, seed, out_idx=tf.int64, name=None):
    """random_k(x, k_for_ratio(n, compress_ratio), seed).

    Raises:
      ValueError: compress_ratio outside (0, 1].
      InvalidArgumentError: as random_k.
    """
    x = _float_tensor(x)
    return random_k(x, k_for_ratio(_num_elements(x), compress_ratio), seed,
                    out_idx=out_idx, name=name)
