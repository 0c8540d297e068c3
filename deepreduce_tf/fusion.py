"""Tensor fusion: the gradients of one reduction -> a few flat buckets.

Horovod fuses small tensors into buffers and PyTorch DDP packs gradients
into ~25 MB buckets, so that the work per step does not grow with the
number of variables. deepreduce_tf does the same before compressing: the
tensors of one batch are grouped by dtype, in batch order, into buckets of at
most `bucket_cap_mb` MiB (a tensor larger than the cap gets a bucket of its
own), and every bucket is ONE flat vector

    [ sparse section: tensors with >= min_size elements, back to back |
      dense section:  the smaller ones (biases, norms, scalars)         ]

Sparsification, coding and decoding then run once per bucket. The sparse
section keeps the variables' boundaries (`Bucket.offsets`) so that the
sparsifier can still select per variable (GRACE/DeepReduce semantics) with
one segmented kernel; the dense section travels as raw bytes and keeps no
residual.

A Plan is a pure function of the batch's (key, shape, dtype) list and the two
sizes: every worker builds the same plan for the same model, and a payload
names its bucket's layout (`Bucket.layout_id`) so that a receiver refuses a
payload of another layout.
"""
import collections
import functools
import zlib

import numpy as np
import tensorflow as tf

from deepreduce_tf.ops import fusion as fusion_ops

DEFAULT_BUCKET_CAP_MB = 25.0

Member = collections.namedtuple("Member", ["position", "key", "shape", "n", "dense"])
Member.__doc__ = """One tensor of a bucket: its position in the batch, its key
(the memory/accounting name), static shape, element count, and whether it
travels in the dense section."""


def _crc(text):
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def check_bucket_cap_mb(value):
    """Validates a bucket size in MiB; returns it as a float."""
    try:
        cap = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"bucket_cap_mb must be a number > 0 (MiB), got {value!r}")
    if not cap > 0 or cap != cap or cap == float("inf"):
        raise ValueError(f"bucket_cap_mb must be a finite number > 0 (MiB), got {value!r}")
    return cap


class Bucket:
    """One flat vector of same-dtype tensors (see the module docstring).

    Attributes:
      index: the bucket's number in its plan.
      dtype: the members' dtype.
      members: Members in bucket order (sparse section first, then dense).
      sparse_n / dense_n / n: element counts of the sections and in total.
      lengths: element counts of the sparse members (the segments).
      offsets: numpy int64 [len(lengths) + 1], segment boundaries.
      key: the residual / ledger key: the member's own key for a bucket of
        one tensor, else "bucket<i>/<dtype>/<layout>".
      layout_id: a 31-bit fingerprint of the layout (keys, shapes, sections).
    """

    def __init__(self, index, dtype, members):
        self.index = index
        self.dtype = tf.as_dtype(dtype)
        sparse = [m for m in members if not m.dense]
        dense = [m for m in members if m.dense]
        self.members = tuple(sparse + dense)
        self.lengths = tuple(m.n for m in sparse)
        self.offsets = np.cumsum([0] + list(self.lengths), dtype=np.int64)
        self.sparse_n = int(sum(self.lengths))
        self.dense_n = int(sum(m.n for m in dense))
        self.n = self.sparse_n + self.dense_n
        self.layout_id = _crc(repr((self.dtype.name, [(m.key, tuple(m.shape), m.dense)
                                                      for m in self.members])))
        if len(self.members) == 1:
            self.key = self.members[0].key
        else:
            self.key = f"bucket{index}/{self.dtype.name}/{self.layout_id:08x}"

    @property
    def nbytes(self):
        return self.n * self.dtype.size

    def pack(self, tensors):
        """tensors: the members' tensors, aligned with self.members. Returns
        the flat bucket vector [n] (one graph node, however many members)."""
        tensors = list(tensors)
        if len(tensors) == 1:
            return tf.reshape(tensors[0], [-1])
        return fusion_ops.flatten_concat(tensors)

    def unpack(self, flat):
        """The inverse of pack(): the members' tensors, aligned with
        self.members, in their shapes (one graph node)."""
        if len(self.members) == 1:
            return [tf.reshape(flat, self.members[0].shape)]
        return fusion_ops.split_reshape(flat, [m.shape for m in self.members])

    def __repr__(self):
        return (f"Bucket({self.index}, {self.dtype.name}, {len(self.members)} tensors, "
                f"sparse={self.sparse_n}, dense={self.dense_n})")


class Plan:
    """The buckets of one batch, and the way back to the batch's order."""

    def __init__(self, buckets, num_tensors):
        self.buckets = tuple(buckets)
        self.num_tensors = num_tensors
        self.layout_id = _crc(repr([b.layout_id for b in self.buckets]))

    def pack(self, tensors):
        """tensors: the batch, in batch order. Returns one flat vector per
        bucket."""
        tensors = list(tensors)
        if len(tensors) != self.num_tensors:
            raise ValueError(f"this plan fuses {self.num_tensors} tensors, got {len(tensors)}")
        return [b.pack([tensors[m.position] for m in b.members]) for b in self.buckets]

    def unpack(self, flats):
        """One flat vector per bucket -> the batch's tensors in batch order."""
        out = [None] * self.num_tensors
        for b, flat in zip(self.buckets, flats):
            for m, t in zip(b.members, b.unpack(flat)):
                out[m.position] = t
        return out

    def __repr__(self):
        return f"Plan({len(self.buckets)} buckets, {self.num_tensors} tensors)"


def make_plan(keys, shapes, dtypes, min_size, bucket_cap_mb=DEFAULT_BUCKET_CAP_MB):
    """Groups a batch of tensors into buckets.

    Args:
      keys: one unique name per tensor (residual and accounting key).
      shapes: static shapes (tf.TensorShape or tuples), fully defined.
      dtypes: the tensors' dtypes.
      min_size: tensors with fewer elements go to the dense section.
      bucket_cap_mb: bucket size limit in MiB.

    Returns:
      A Plan. Buckets hold one dtype each, in order of first appearance;
      within a dtype the tensors keep their batch order.
    """
    keys, shapes, dtypes = list(keys), list(shapes), [tf.as_dtype(d) for d in dtypes]
    if not len(keys) == len(shapes) == len(dtypes):
        raise ValueError("make_plan needs as many keys as shapes and dtypes")
    if len(set(keys)) != len(keys):
        dup = sorted({k for k in keys if keys.count(k) > 1})
        raise ValueError(f"every tensor of a batch needs its own key; repeated: {dup}")
    cap = int(check_bucket_cap_mb(bucket_cap_mb) * (1 << 20))
    by_dtype = collections.OrderedDict()
    for pos, (key, shape, dtype) in enumerate(zip(keys, shapes, dtypes)):
        shape = tf.TensorShape(shape)
        if not shape.is_fully_defined():
            raise ValueError(f"tensor {key!r} has shape {shape}: fusion needs static shapes")
        n = int(shape.num_elements())
        # Plain ints (under TF1 behaviour a TensorShape holds Dimensions, whose
        # repr would change the layout fingerprint).
        shape = tuple(int(d) for d in shape.as_list())
        by_dtype.setdefault(dtype, []).append(Member(pos, key, shape, n, n < min_size))
    buckets = []
    for dtype, members in by_dtype.items():
        current, size = [], 0
        for m in members:
            nbytes = m.n * dtype.size
            if current and size + nbytes > cap:
                buckets.append(Bucket(len(buckets), dtype, current))
                current, size = [], 0
            current.append(m)
            size += nbytes
        if current:
            buckets.append(Bucket(len(buckets), dtype, current))
    return Plan(buckets, len(keys))


def ordered_sum(tensors):
    """Sum in list order: the same values summed in the same order give the
    same bits on every replica and worker (a bucket's decoded payloads, a
    transport's all-reduce)."""
    return functools.reduce(lambda a, b: a + b, list(tensors))
