"""Tensor fusion ops: many tensors <-> one flat vector, one graph node each way.

    flat = deepreduce_tf.ops.fusion.flatten_concat([a, b, c])
    a2, b2, c2 = deepreduce_tf.ops.fusion.split_reshape(flat, [a.shape, b.shape, c.shape])

tf.concat of reshaped tensors and tf.split followed by reshapes do the same,
with two or three graph nodes per tensor; a step that fuses the gradients of
V variables would grow with V. These ops add one node per call whatever V.
"""
import numpy as np
import tensorflow as tf

from deepreduce_tf.ops import _loader

FLOAT_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)


def flatten_concat(values, name=None):
    """The elements of `values`, each flattened, back to back.

    Args:
      values: a non-empty list of tensors of one dtype (float16, bfloat16,
        float32 or float64), any shapes.
      name: op name.

    Returns:
      A vector of that dtype with sum(size(v)) elements (static when the
      shapes are).

    Raises:
      ValueError: values is empty; TypeError: dtypes differ or unsupported.
    """
    values = [tf.convert_to_tensor(v) for v in values]
    if not values:
        raise ValueError("flatten_concat needs at least one tensor")
    dtypes = {v.dtype for v in values}
    if len(dtypes) != 1 or values[0].dtype not in FLOAT_DTYPES:
        raise TypeError("flatten_concat needs tensors of one float dtype (float16, bfloat16, "
                        f"float32, float64), got {sorted(d.name for d in dtypes)}")
    return _loader.load().deep_reduce_flatten_concat(values, name=name)


def split_reshape(flat, shapes, name=None):
    """The inverse of flatten_concat: `flat` cut into tensors of `shapes`.

    Args:
      flat: a float vector with exactly sum(prod(shape)) elements.
      shapes: a non-empty list of fully defined shapes.
      name: op name.

    Returns:
      A list of len(shapes) tensors.

    Raises:
      ValueError: shapes empty or not fully defined.
      InvalidArgumentError: flat is not a vector of the right length (also at
        run time).
    """
    shapes = [tf.TensorShape(s) for s in shapes]
    if not shapes:
        raise ValueError("split_reshape needs at least one shape")
    for i, s in enumerate(shapes):
        if not s.is_fully_defined():
            raise ValueError(f"shapes[{i}] = {s} is not fully defined")
    flat = tf.convert_to_tensor(flat)
    if flat.dtype not in FLOAT_DTYPES:
        raise TypeError(f"split_reshape needs a float vector, got {flat.dtype.name}")
    return list(_loader.load().deep_reduce_split_reshape(
        flat, N=len(shapes), shapes=[s.as_list() for s in shapes], name=name))


def _gpu_process():
    """True if this process sees a GPU."""
    return bool(tf.config.list_logical_devices("GPU"))


def _on_gpu(*tensors):
    """True if the step's tensors live on a GPU: the ops below then use
    TensorFlow's, which have GPU kernels (the library's are CPU-only), so that
    no bucket-sized tensor is copied to the host. The first tensor whose
    device names a device type decides (eager tensors always do; in a graph,
    the device the tensor was placed on); if none does, whether this process
    sees a GPU."""
    for t in tensors:
        device = getattr(t, "device", "") or ""
        kind = tf.DeviceSpec.from_string(device).device_type if device else None
        if kind is not None:  # "/job:worker/task:0" names no device type
            return kind == "GPU"
    return _gpu_process()


def all_within(x, limit, name=None):
    """True iff every element of x is finite and |x| <= limit (a bool
    scalar): one pass without temporaries, where abs -> less_equal ->
    reduce_all makes two the size of x.

    Args:
      x: a float tensor (float16, bfloat16, float32 or float64).
      limit: a Python number >= 0; rounded down to a float32 (a limit beyond
        float32's range means: every element finite).
    """
    x = tf.convert_to_tensor(x)
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"all_within needs a float tensor, got {x.dtype.name}")
    limit = _limit32("all_within", limit)
    if _on_gpu(x):
        return _within_tf(x, limit, name)
    return _loader.load().deep_reduce_all_within(x, limit=limit, name=name)


def _limit32(op, limit):
    """limit (>= 0) rounded down to a float32; inf beyond float32's range."""
    limit = float(limit)
    if not limit >= 0:
        raise ValueError(f"{op}: limit must be >= 0, got {limit}")
    if limit > float(np.finfo(np.float32).max):
        return float(np.float32(np.inf))
    limit32 = np.float32(limit)
    if float(limit32) > limit:  # never above the limit asked for
        limit32 = np.nextafter(limit32, np.float32(0))
    return float(limit32)


def _within_tf(x, limit, name=None):
    finite = tf.reduce_all(tf.math.is_finite(x))
    return tf.logical_and(finite, tf.reduce_all(tf.abs(x) <= tf.constant(limit, x.dtype)),
                          name=name)


def add_within(x, y, limit, name=None):
    """(x + y, all_within(x + y, limit)) in one pass: error feedback's
    compensation (gradient + residual) and the range check of the step
    together. The sum has exactly TensorFlow's x + y bits; it reuses the
    buffer of x or y when nothing else holds it.

    Args:
      x, y: float tensors of one dtype and shape.
      limit: as in all_within.
    """
    x = tf.convert_to_tensor(x)
    y = tf.convert_to_tensor(y)
    if x.dtype not in FLOAT_DTYPES or y.dtype != x.dtype:
        raise TypeError(f"add_within needs two float tensors of one dtype, got "
                        f"{x.dtype.name} and {y.dtype.name}")
    if not x.shape.is_compatible_with(y.shape):
        raise ValueError(f"add_within needs tensors of one shape, got {x.shape} and {y.shape}")
    limit = _limit32("add_within", limit)
    if _on_gpu(x, y):
        total = tf.add(x, y)
        return total, _within_tf(total, limit, name)
    return tuple(_loader.load().deep_reduce_add_within(x, y, limit=limit, name=name))


def scatter_sum(positions, values, n, tail=None, name=None):
    """A vector of n zeros with values[i] added at positions[i], in order
    (followed by `tail`, if given).

    Bit for bit what scatter_nd gives on the CPU (duplicate positions sum in
    update order), at a few ns per update instead of ~80.

    Args:
      positions: int64 vector, every entry in [0, n).
      values: a float vector of the same length.
      n: the length of the scattered part (a Python int).
      tail: optional vector of values' dtype, copied after the n scattered
        elements (a bucket's dense section: one output, no concat copy).

    Raises:
      InvalidArgumentError: (run time) a position outside [0, n) or lengths
        that differ; nothing is written.
    """
    positions = tf.convert_to_tensor(positions, tf.int64)
    values = tf.convert_to_tensor(values)
    if values.dtype not in FLOAT_DTYPES:
        raise TypeError(f"scatter_sum needs float values, got {values.dtype.name}")
    if tail is not None:
        tail = tf.convert_to_tensor(tail, values.dtype)
        if tail.shape.rank != 1:
            raise ValueError(f"scatter_sum: tail must be a vector, got shape {tail.shape}")
    if _on_gpu(values, positions):
        out = tf.scatter_nd(tf.expand_dims(positions, 1), values, [int(n)])
        return tf.identity(out if tail is None else tf.concat([out, tail], 0), name=name)
    if tail is None:
        tail = tf.zeros([0], values.dtype)
    return _loader.load().deep_reduce_scatter_sum(positions, values, tail, n=int(n), name=name)


def gather(x, positions, name=None):
    """x[positions] (positions: an int32/int64 vector, every entry in
    [0, len(x))): the one place the exchange gathers by position. TensorFlow's
    gather has kernels for every device, faster than a copy of ours would
    be; a kernel of the library's would be chosen here, as scatter_sum does."""
    return tf.gather(x, positions, name=name)


def unpermute(values, perm, name=None):
    """values[i] placed at perm[i] (perm: a permutation of range(len(values)),
    its length known at run time only): the inverse of gather(x, perm), as
    TensorFlow's scatter_nd gives it on every device (a -0.0 becomes +0.0)."""
    perm = tf.convert_to_tensor(perm)
    return tf.scatter_nd(tf.expand_dims(perm, 1), values, tf.shape(perm, out_type=perm.dtype),
                         name=name)


def scatter_subtract(rest, positions, values, name=None):
    """rest with values[i] subtracted at positions[i], in order (rest's
    buffer is reused when nothing else holds it).

    Raises:
      InvalidArgumentError: (run time) a position outside rest's length or
        lengths that differ.
    """
    rest = tf.convert_to_tensor(rest)
    positions = tf.convert_to_tensor(positions, tf.int64)
    values = tf.convert_to_tensor(values, rest.dtype)
    if rest.dtype not in FLOAT_DTYPES:
        raise TypeError(f"scatter_subtract needs a float vector, got {rest.dtype.name}")
    if _on_gpu(rest):
        return tf.tensor_scatter_nd_sub(rest, tf.expand_dims(positions, 1), values, name=name)
    return _loader.load().deep_reduce_scatter_subtract(rest, positions, values, name=name)


def check(value, condition, message, name=None):
    """value, passed through once `condition` (a bool scalar) holds; at run
    time an InvalidArgumentError(message) when it does not. Stateless (see
    deepreduce_tf/_checks.py for why): what depends on the check must read
    its output."""
    value = tf.convert_to_tensor(value)
    condition = tf.convert_to_tensor(condition, tf.bool)
    if condition.shape.rank not in (None, 0):
        raise ValueError(f"check: the condition must be a bool scalar, got shape "
                         f"{condition.shape}")
    return _loader.load().deep_reduce_check(value, condition, message=str(message), name=name)
