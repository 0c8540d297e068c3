"""Lossless index codecs (REFERENCE 1.2): a sorted index set <-> one uint8 payload.

A set of K distinct indices out of [0, n), given as a strictly increasing
int32/int64 vector, is encoded into ONE flat uint8 tensor that describes
itself: a header (magic 0xDE, codec id, format version, n and K as varints,
then the codec's own parameters and section lengths) and a body. decode()
needs nothing but the payload and returns the same indices, exactly.

Codecs (CODECS), sizes for K indices out of n:

  int32   4 bytes per index, little-endian; refuses n > 2^31. Baseline.
  bitmap  ceil(n / 8) bytes, bit i = index i. Baseline; best above ~25 %.
  rle     run-length coding of the gaps (zeros before each index), one
          byte-aligned prefix varint per gap: 1 byte up to 240, 2 up to 2287,
          3 up to 67823, at most 9. About 8.7 bits/index at 1 % density, 15 at
          0.1 %. Lossless for every run length. Decoding is sequential.
  golomb  Golomb-Rice coding of the gaps in blocks, each block with its
          own Rice parameter (chosen from the block's exact cost, so it
          adapts to clustered sets) and a table entry (first index, byte
          offset, parameter) so blocks encode and decode in parallel. By
          default the encoder sizes every block size 16, 32, ..., 4096
          exactly and keeps the smallest payload (ties: the larger block);
          the chosen size is in the header. Small blocks win on clustered
          sets such as real top-k gradients; on uniform random sets it stays
          within ~1-2 % of the information bound log2 C(n, K) at 0.1-1 %
          density, header included. Aliases: "gr", "rice", "lossless".

The formats are specified in kernels/index/{index_format,rle,golomb}.h.
Every decoder checks the header and every length against the payload it
holds, and raises InvalidArgumentError on truncated, extended or corrupted
payloads; any payload it accepts decodes to a strictly increasing set of K
indices in [0, n).
"""
import numpy as np
import tensorflow as tf

from deepreduce_tf.ops import _loader, codec_table

# The codecs whose payload is this format, their aliases and their codec id
# (payload byte 1): the codec table's rows with kernels="index"
# (deepreduce_tf/ops/codec_table.py, kernels/common/codec_table.h).
CODECS = codec_table.names("index", kernels="index")
ALIASES = codec_table.aliases("index", kernels="index")
CODEC_IDS = codec_table.wire_ids("index", kernels="index")
MAGIC = 0xDE
FORMAT_VERSION = 1
DEFAULT_BLOCK_SIZE = "auto"
# golomb block_size: "auto"/None/0 (the encoder chooses among these) or a
# power of two in [MIN_BLOCK_SIZE, MAX_BLOCK_SIZE].
AUTO_BLOCK_SIZES = tuple(1 << b for b in range(4, 13))
MIN_BLOCK_SIZE = 16
MAX_BLOCK_SIZE = 65536


def _invalid(message):
    return tf.errors.InvalidArgumentError(None, None, message)


def canonical_codec(codec):
    """The canonical name of a codec name or alias; ValueError if unknown."""
    name = ALIASES.get(codec, codec)
    if name not in CODECS:
        raise ValueError(f"unknown index codec {codec!r}; valid choices: "
                         f"{', '.join(CODECS + tuple(ALIASES))}")
    return name


def _block_size_attr(block_size):
    """The op's block_size attribute: 0 for auto, else the power of two."""
    if block_size is None or (isinstance(block_size, str) and block_size == "auto"):
        return 0
    if isinstance(block_size, (bool, str)) or not isinstance(block_size, (int, np.integer)):
        raise ValueError(f'block_size must be "auto", None or a power of two in '
                         f"[{MIN_BLOCK_SIZE}, {MAX_BLOCK_SIZE}], got {block_size!r}")
    block_size = int(block_size)
    if block_size != 0 and not (MIN_BLOCK_SIZE <= block_size <= MAX_BLOCK_SIZE and
                                block_size & (block_size - 1) == 0):
        raise ValueError(f'block_size must be "auto", None, 0 or a power of two in '
                         f"[{MIN_BLOCK_SIZE}, {MAX_BLOCK_SIZE}], got {block_size}")
    return block_size


def encode(codec, indices, universe_size, block_size=DEFAULT_BLOCK_SIZE, name=None, **attrs):
    """Encodes a sorted index set into one self-describing uint8 payload.

    Args:
      codec: one of CODECS (or an alias in ALIASES).
      indices: int32/int64 vector of K strictly increasing indices in
        [0, universe_size).
      universe_size: n, the number of positions (integer scalar).
      block_size: golomb only: indices per independently decodable block.
        "auto" (default), None or 0: the encoder computes the exact payload
        size for every block size in AUTO_BLOCK_SIZES (16..4096) and keeps
        the smallest (ties: the larger block); the choice is recorded in the
        payload header. Otherwise a power of two in [16, 65536].
      name: optional op name.
      **attrs: the attributes of a codec whose codec-table row declares
        some (integers within the row's bounds; the row's defaults).

    Returns:
      uint8 vector: the payload. Its length is static in graph mode for int32
      and bitmap when K is static and universe_size is a constant.

    Raises:
      ValueError: unknown codec, or a block_size that is not "auto"/None/0
        or a power of two in [16, 65536].
      InvalidArgumentError: an index out of range, indices not strictly
        increasing, K > n, n > 2^31 for int32, wrong dtype or rank.
    """
    codec = canonical_codec(codec)
    block_size = _block_size_attr(block_size)
    attrs = codec_table.attr_values("index", codec, attrs)
    indices = tf.convert_to_tensor(indices)
    if indices.dtype not in (tf.int32, tf.int64):
        raise _invalid(f"indices must be int32 or int64, got {indices.dtype.name}")
    if indices.shape.rank is not None and indices.shape.rank != 1:
        raise _invalid(f"indices must be a vector, got shape {indices.shape}")
    n = tf.convert_to_tensor(universe_size)
    if not n.dtype.is_integer:
        raise _invalid(f"universe_size must be an integer scalar, got {n.dtype.name}")
    if n.shape.rank is not None and n.shape.rank != 0:
        raise _invalid(f"universe_size must be a scalar, got shape {n.shape}")
    n = tf.cast(n, tf.int64)
    ops = _loader.load()
    if codec == "golomb":
        return ops.deep_reduce_index_encode_golomb(indices, n, block_size=block_size,
                                                   name=name)
    return getattr(ops, f"deep_reduce_index_encode_{codec}")(indices, n, name=name, **attrs)


def decode(codec, payload, out_idx=tf.int64, name=None):
    """Decodes a payload written by encode() with the same codec.

    Args:
      codec: one of CODECS (or an alias); must match the payload's codec id.
      payload: uint8 vector.
      out_idx: tf.int32 or tf.int64, the dtype of the result; int32 refuses
        payloads with n > 2^31.
      name: optional op name.

    Returns:
      out_idx vector of the K indices, strictly increasing (shape [None] in
      graph mode).

    Raises:
      ValueError: unknown codec or out_idx.
      InvalidArgumentError: the payload is not a valid payload of this codec
        (wrong magic/codec/version, truncated, extended, corrupt), or n is
        too large for out_idx.
    """
    codec = canonical_codec(codec)
    out_idx = tf.as_dtype(out_idx)
    if out_idx not in (tf.int32, tf.int64):
        raise ValueError(f"out_idx must be tf.int32 or tf.int64, got {out_idx.name}")
    payload = tf.convert_to_tensor(payload)
    if payload.dtype != tf.uint8:
        raise _invalid(f"payload must be uint8, got {payload.dtype.name}")
    op = getattr(_loader.load(), f"deep_reduce_index_decode_{codec}")
    return op(payload, out_idx=out_idx, name=name)


def _varint(data, pos):
    value, shift = 0, 0
    for i in range(9):
        if pos >= len(data):
            raise ValueError("payload header is truncated")
        b = int(data[pos])
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos
    raise ValueError("payload header has an overlong varint")


def peek_header(payload):
    """(codec, version, n, K) of a payload, read on the host (numpy/eager).

    A convenience for logging and routing; decode() checks far more.
    Raises ValueError if the common header is malformed.
    """
    data = np.asarray(payload.numpy() if hasattr(payload, "numpy") else payload,
                      dtype=np.uint8)
    if len(data) < 5 or data[0] != MAGIC:
        raise ValueError("not an index-codec payload (bad magic or too short)")
    names = {v: k for k, v in CODEC_IDS.items()}
    if int(data[1]) not in names:
        raise ValueError(f"unknown codec id {int(data[1])}")
    n, pos = _varint(data, 3)
    k, _ = _varint(data, pos)
    return names[int(data[1])], int(data[2]), n, k
