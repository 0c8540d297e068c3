"""The compressor's wire format: a payload's header fields, modes and kinds,
the fingerprints that bind a payload to its variable and configuration, and
the contexts a sender keeps locally (what the byte ledger records). The
container itself (sections, CRC) is deepreduce_tf.ops.payload's; the
compressor (deepreduce_tf.compressor) writes and reads these fields.
"""
import collections
import zlib

import tensorflow as tf

from deepreduce_tf._checks import check
from deepreduce_tf.ops import codec_table

DTYPE_CODES = {tf.float16: 1, tf.bfloat16: 2, tf.float32: 3, tf.float64: 4}
META_FIELDS = ("mode", "index_codec", "value_codec", "dtype", "n", "config", "k", "count",
               "aux0", "aux1")
F_MODE, F_INDEX, F_VALUE, F_DTYPE, F_N, F_CONFIG, F_K, F_COUNT, F_AUX0, F_AUX1 = range(10)
# A bucket payload's header: META_FIELDS (n = the sparse section's length)
# plus the dense section's length and the bucket layout's fingerprint.
BUCKET_FIELDS = META_FIELDS + ("dense_n", "layout")
F_DENSE_N, F_LAYOUT = 10, 11
MODE_DENSE, MODE_SPARSE, MODE_SLICES = 0, 1, 2
NUM_SECTIONS = 3
BUCKET_SECTIONS = 4
KIND_BUCKET = 3
WARMUP_CHOICES = ("dense", "exponential")
NONFINITE_CHOICES = ("dense", "raise")
DEFAULT_MIN_SIZE = 1024
BATCH_FIELDS = ("count", "config", "layout")

Context = collections.namedtuple(
    "Context", ["name", "shape", "dtype", "n", "dense", "dense_bytes", "payload_bytes",
                "positions"])
SlicesContext = collections.namedtuple(
    "SlicesContext", ["name", "dense_shape", "dtype", "row_width", "dense_bytes",
                      "payload_bytes"])
BucketContext = collections.namedtuple(
    "BucketContext", ["name", "bucket", "dtype", "n", "dense_bytes", "payload_bytes"])
BatchContext = collections.namedtuple("BatchContext", ["plan", "contexts"])
SlicesContext.__doc__ = """What compress_slices() keeps locally.

dense_shape: the static shape of the dense gradient (vocabulary, ...);
row_width: elements per row; dense_bytes: bytes of the IndexedSlices as
given (values + int64 indices), the traffic it replaces; payload_bytes:
int64 scalar tensor."""

Context.__doc__ = """What compress() keeps locally.

name: the memory key; shape, dtype, n: the tensor's; dense: True if the
tensor is below min_size and always travels dense; dense_bytes: bytes of the
uncompressed tensor (Python int); payload_bytes: int64 scalar tensor, bytes
of this payload; positions: the agreed positions of a summable wire vector
(communicators.Allreduce), else None."""

BucketContext.__doc__ = """What compress_bucket() keeps locally: the bucket
(fusion.Bucket: layout, key), its dtype and length, dense bytes (Python int)
and payload bytes (int64 scalar tensor)."""

BatchContext.__doc__ = """What compress_batch() keeps locally: the fusion
plan and one BucketContext per bucket."""


# value codec -> the dtype its summable values travel in (None: the
# gradient's own): the codec table's wire_dtype column, floats.
SUMMABLE_WIRE_DTYPES = {name: None if dtype == "gradient" else tf.as_dtype(dtype)
                        for name, dtype in codec_table.wire_dtypes().items()
                        if dtype != "shared_int8"}
# Value codecs summed as integers on a scale the workers share (int8): only
# the sparse all-reduce, which agrees the scale, sums them.
SHARED_SCALE_CODECS = tuple(name for name, dtype in codec_table.wire_dtypes().items()
                            if dtype == "shared_int8")


def bucket_record(bucket, payload_bytes):
    """The byte ledger's record of one fused bucket's exchange (every
    communicator's, the receivers' contexts too): the BucketContext of
    `bucket` (fusion.Bucket) that sent `payload_bytes` (int64 scalar tensor,
    or None for a receiver). The one place such a record is made."""
    return BucketContext(bucket.key, bucket, bucket.dtype, bucket.n, bucket.nbytes,
                         payload_bytes)

_Encoded = collections.namedtuple(
    "_Encoded", ["mode", "index", "value", "perm", "k", "count", "aux0", "aux1", "rest",
                 "positions", "values"])  # the last three: a memory.Sent


def _graph_safe(method):
    """Marks a method as graph-ready: it builds its graph with explicit
    tf.cond and never branches in Python on a tensor, so AutoGraph must not
    convert it (or the op wrappers it calls) inside the user's tf.function."""
    return tf.autograph.experimental.do_not_convert(method)


def _fingerprint(parts):
    text = repr(sorted(parts.items()))
    return zlib.crc32(text.encode()) & 0xFFFFFFFF


def _identity(config_id, key, shape):
    """The config field of a per-variable payload: the configuration's
    fingerprint, the variable's key and its static shape, CRC-32."""
    return _fingerprint({"config": config_id, "key": key,
                         "shape": tuple(int(d) for d in shape)})


IDENTITY_MISMATCH = (
    "payload field 'config' does not match {what}: the payload belongs to another variable "
    "(another name or shape) or was written by a compressor of another configuration; "
    "decode each payload with the ctx that compress{suffix}() returned for the same variable")


def _dense_mode_checks(meta, sections, n):
    """A dense-mode payload declares k = count = n, aux 0, and carries no
    index and no permutation bytes."""
    return [
        check(tf.logical_and(tf.equal(meta[F_K], n), tf.equal(meta[F_COUNT], n)),
              "dense payload: fields k and count must equal the tensor's size"),
        check(tf.logical_and(tf.equal(meta[F_AUX0], 0), tf.equal(meta[F_AUX1], 0)),
              "dense payload: fields aux0/aux1 must be 0"),
        check(tf.logical_and(tf.equal(tf.size(sections[0]), 0), tf.equal(tf.size(sections[2]), 0)),
              "dense payload: index and permutation sections must be empty"),
    ]


def _key_seed(key, seed):
    return (zlib.crc32(key.encode()) ^ (seed * 0x9E3779B1)) & 0x7FFFFFFF


def _i64(value):
    return tf.constant(value, tf.int64) if isinstance(value, int) else tf.cast(value, tf.int64)
