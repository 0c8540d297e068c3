"""Index codecs: the positions of a sparse tensor <-> one uint8 section.

Each codec is a row of the codec table (deepreduce_tf/ops/codec_table.py:
name, wire id, aliases) and a class declared with codecs.base.register
(parameters, properties); INDEX_CODECS and INDEX_ALIASES are live views of
that registry.

Every codec maps a strictly increasing int64 vector of K positions out of
[0, n) to bytes and back. encode() also returns the positions the RECEIVER
will decode, so that the sender can send the values of exactly those
positions (REFERENCE 1.1, false-positive-aware values): for the lossless
codecs that is the input itself, for the Bloom filter it is the filter's
decoded set under the configured policy.

  raw     the positions as little-endian int32 (int64 when n > 2^31 - 1);
          the only codec that carries an arbitrary ORDER, so a value codec
          that reorders values (polyfit, dexp) reorders these directly.
  int32   deepreduce_tf.index 'int32' payload (4 bytes per index + header).
  bitmap  n/8 bytes.
  rle     run-length varint gaps.
  golomb  block Golomb-Rice gaps (the project's near-entropy codec).
  bloom   Bloom filter of m = K ln(1/fpr)/ln(2)^2 bits; lossy: the receiver
          decodes the filter's positives and a policy picks among them.
"""
import abc
import collections

import tensorflow as tf

from deepreduce_tf._checks import check, guarded

from deepreduce_tf.codecs.base import (SEED, AliasView, Codec, Param, REGISTRY, RegistryView,
                                       register)
from deepreduce_tf.ops import bloom as bloom_ops
from deepreduce_tf.ops import codec_table
from deepreduce_tf.ops import index as index_ops

IndexEncoding = collections.namedtuple("IndexEncoding", ["section", "positions", "aux"])
IndexEncoding.__doc__ = """What an index codec produced.

section: uint8 vector, the bytes that travel.
positions: int64 vector, strictly increasing: the positions the receiver
  will decode from `section` (the input for lossless codecs).
aux: tuple of two int64 scalars stored in the payload header (the Bloom
  filter's m and h; zeros for the other codecs)."""

INT32_LIMIT = (1 << 31) - 1


def _bytes_of(t):
    """The little-endian bytes of a numeric vector, as a uint8 vector."""
    return tf.reshape(tf.bitcast(t, tf.uint8), [-1])


def _zero_aux():
    return (tf.constant(0, tf.int64), tf.constant(0, tf.int64))


class IndexCodec(Codec):
    """Base class of index codecs; subclasses are declared with
    codecs.base.register (which sets `name`, `codec_id`, `spec`)."""

    kind = "index"
    lossless = True
    # True if encode() accepts positions in any order and decode() returns
    # them in that order (only 'raw').
    carries_order = False
    # True if the codec writes the payload's aux0/aux1 fields (else they must be 0).
    uses_aux = False

    @abc.abstractmethod
    def encode(self, indices, n):
        """indices: int64 [K] strictly increasing (any order if carries_order);
        n: Python int. Returns an IndexEncoding."""

    @abc.abstractmethod
    def decode(self, section, n, k, aux):
        """section: uint8 vector; n: Python int; k: int64 scalar (the number
        of indices the sender encoded); aux: int64 [2]. Returns int64
        positions (same order as the sender's IndexEncoding.positions)."""


@register("raw", carries_order=True,
          summary="the positions as little-endian int32 (int64 when n > 2^31 - 1); keeps "
                  "any order")
class RawIndex(IndexCodec):
    def encode(self, indices, n):
        dtype = tf.int32 if n <= INT32_LIMIT else tf.int64
        return IndexEncoding(_bytes_of(tf.cast(indices, dtype)), indices, _zero_aux())

    def decode(self, section, n, k, aux):
        width = 4 if n <= INT32_LIMIT else 8
        dtype = tf.int32 if width == 4 else tf.int64
        size = tf.size(section, out_type=tf.int64)
        section = guarded(section, check(
            tf.logical_and(tf.equal(tf.math.floormod(size, width), 0),
                           tf.equal(tf.math.floordiv(size, width), tf.cast(k, tf.int64))),
            f"raw index section: expected {width} bytes per index"))
        out = tf.cast(tf.bitcast(tf.reshape(section, [-1, width]), dtype), tf.int64)
        # A CRC-valid payload from a faulty sender must still not scatter out
        # of range or onto one position twice.
        return guarded(out,
                       check(tf.reduce_all(out < n), "raw index section: index out of range"),
                       check(tf.reduce_all(out >= 0), "raw index section: negative index"))


class _OpIndex(IndexCodec):
    """A lossless codec of deepreduce_tf.index (self-describing payloads); its
    ops are those of its registered name unless op_codec says otherwise."""

    op_codec = None

    @property
    def _op_codec(self):
        return self.op_codec or self.name

    def encode(self, indices, n):
        section = index_ops.encode(self._op_codec, indices, tf.constant(n, tf.int64),
                                   **self._encode_kwargs())
        return IndexEncoding(section, indices, _zero_aux())

    def _encode_kwargs(self):
        return {}

    def decode(self, section, n, k, aux):
        out = index_ops.decode(self._op_codec, section, out_idx=tf.int64)
        # The section names its own universe; the receiver's tensor is n long.
        return guarded(out, check(
            tf.equal(tf.size(out, out_type=tf.int64), tf.cast(k, tf.int64)),
            f"{self.name} index section: index count differs from the payload header's K"),
            check(tf.reduce_all(out < n),
                  f"{self.name} index section: index out of range of the tensor"))


class _TableIndex(_OpIndex):
    """A codec of kernels/index's convention whose row declares attributes:
    its parameters are those (each an attribute of the instance), passed to
    its encode op (declare each with base.table_param)."""

    def __init__(self, **attrs):
        for n, v in codec_table.attr_values("index", self.name, attrs).items():
            setattr(self, n, v)

    def _encode_kwargs(self):
        return {n: getattr(self, n) for n in codec_table.attrs("index", self.name)}


@register("int32", summary="deepreduce_tf.index 'int32': 4 bytes per index + header")
class Int32Index(_OpIndex):
    op_codec = "int32"


@register("bitmap", summary="one bit per element: n/8 bytes")
class BitmapIndex(_OpIndex):
    op_codec = "bitmap"


@register("rle", summary="run-length varint gaps")
class RleIndex(_OpIndex):
    op_codec = "rle"


def _check_block_size(value):
    index_ops._block_size_attr(value)


@register("golomb",
          params=(Param("block_size", int, "auto", literals=("auto", None),
                        check=_check_block_size,
                        doc_type=f"auto or a power of two in [{index_ops.MIN_BLOCK_SIZE}, "
                                 f"{index_ops.MAX_BLOCK_SIZE}]",
                        help="Golomb-Rice block size (auto: chosen per tensor)"),),
          summary="block Golomb-Rice gaps: the project's lossless near-entropy codec")
class GolombIndex(_OpIndex):
    op_codec = "golomb"

    def __init__(self, block_size="auto"):
        index_ops._block_size_attr(block_size)  # validates
        self.block_size = block_size

    def _encode_kwargs(self):
        return {"block_size": self.block_size}


@register("bloom", lossless=False,
          params=(Param("fpr", float, 0.001, low=0, high=1, low_open=True, high_open=True,
                        aliases=("bloom_fpr",), help="Bloom filter false-positive rate"),
                  Param("policy", str, "conflict_sets", choices=tuple(bloom_ops.POLICIES),
                        aliases=("bloom_policy",), flag_default="conflict_sets",
                        help="Bloom false-positive policy: which positives are decoded"),
                  SEED,
                  Param("policy_seed", int, 0, help="seed of the Bloom 'random' policy")),
          summary="Bloom filter of m = K ln(1/fpr)/ln(2)^2 bits + a false-positive policy; "
                  "lossy")
class BloomIndex(IndexCodec):
    """Bloom filter + false-positive policy (REFERENCE 1.1).

    The sender runs the receiver's decode (query every position, then the
    policy) and returns its result as `positions`; the compressor sends the
    values at exactly those positions. p0 decodes all positives (more than K
    values travel); the other policies decode exactly K positions.
    """

    uses_aux = True  # aux0, aux1: the filter's bit count m and hash count h

    def __init__(self, fpr=0.001, policy="conflict_sets", seed=0, policy_seed=0):
        fpr = float(fpr)
        if not 0.0 < fpr < 1.0:
            raise ValueError(f"bloom: fpr must lie in (0, 1), got {fpr}")
        if policy not in bloom_ops.POLICIES:
            raise ValueError(f"bloom: unknown policy {policy!r}; valid choices: "
                             f"{', '.join(bloom_ops.POLICIES)}")
        for key, v in (("seed", seed), ("policy_seed", policy_seed)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"bloom: {key} must be an int, got {v!r}")
        self.fpr, self.policy, self.seed, self.policy_seed = fpr, policy, seed, policy_seed

    def config(self):
        return {"fpr": self.fpr, "policy": self.policy, "seed": self.seed,
                "policy_seed": self.policy_seed}

    def _decode(self, bits, m, h, n, k):
        return bloom_ops.decode(bloom_ops.BloomFilter(bits, m, h), tf.constant(n, tf.int64), k,
                                policy=self.policy, seed=self.seed,
                                policy_seed=self.policy_seed, out_idx=tf.int64)

    def encode(self, indices, n):
        f = bloom_ops.insert(indices, tf.constant(n, tf.int64), fpr=self.fpr, seed=self.seed)
        k = tf.size(indices, out_type=tf.int64)
        positions = self._decode(f.bits, f.num_bits, f.num_hashes, n, k)
        return IndexEncoding(f.bits, positions, (f.num_bits, f.num_hashes))

    def decode(self, section, n, k, aux):
        return self._decode(section, aux[0], aux[1], n, k)


INDEX_CODECS = RegistryView("index")
INDEX_ALIASES = AliasView("index")


def make_index_codec(name, **kwargs):
    """An index codec by name or alias (see INDEX_CODECS, INDEX_ALIASES).

    Raises:
      ValueError: unknown name (the message lists the valid ones).
    """
    return REGISTRY.make("index", name, **kwargs)
