"""Value codecs (REFERENCE 1.3, 1.4): K float32 values <-> one uint8 payload.

  polyfit  values sorted in descending order, cut into segments, one
           least-squares polynomial (Chebyshev basis, degree 5 by default) per
           segment; lossy. Segmentation 'greedy' (knots at the point farthest
           from the chord, the paper's Lemma 1) or 'geometric' (log-spaced
           segments, short at the extremes). Both always cut at the sign change.
  dexp     values sorted in descending order; the positives' and the
           negatives' magnitudes each fitted by a e^{px} + b e^{qx}
           (Jacquelin's integral-equation method); 56 bytes in total; lossy.
  qsgd     stochastic quantization to `levels` levels per bucket, scaled by
           the bucket's max |v|, unbiased, reproducible from `seed`; lossy.
  fp16     IEEE half, round to nearest even; NaN/Inf transmitted.
  bf16     bfloat16, round to nearest even; NaN/Inf transmitted.
  deflate  zlib of the raw float32 bytes; lossless, CPU only.

Devices: every op has a CPU kernel. A CUDA build (deepreduce_tf.cuda_built())
adds GPU kernels for fp16/bf16/qsgd/polyfit encode and decode (same payload
bytes and perm as the CPU; polyfit decode: same float bits) and dexp encode
and decode (CUDA's exp() may differ from glibc's in the last bit of a double:
decoded values within 1 ulp; encoded payloads with the same perm, sign split
and exponents, amplitudes within a few float ulps). deflate runs on the CPU
wherever it is placed.

Contract: encode() returns (payload, perm). The payload is one flat,
self-describing uint8 vector (16-byte header: magic "DV", codec id, format
version, K; then the codec's parameters and sections; layouts in
kernels/value/*.h). decode() returns the K values in *decoded order*: for
polyfit and dexp that is descending value order, and perm[i] is the position
in the encoder's input of the i-th decoded value, so the sender reorders its
indices as indices[perm] and the receiver pairs them with the decoded values
by construction. For the other codecs perm is the identity.

Decoders check the header and every length against the payload and raise
InvalidArgumentError on truncated, extended, corrupted or foreign payloads.
polyfit and dexp payloads describe K without holding K numbers (a 56-byte
dexp payload may claim 2^40 values), so their decoders take the receiver's
bound, `max_values` (required: the most values the receiver expects, e.g. the
tensor's size), and refuse a payload claiming more before allocating
anything. Every other decoder is bounded by its payload's size.
The lossy codecs reject NaN/Inf input with InvalidArgumentError.
"""
import collections

import tensorflow as tf

from deepreduce_tf.ops import _loader, codec_table

# The codecs whose payload is this format and their codec id (payload byte
# 2): the codec table's rows with kernels="value"
# (deepreduce_tf/ops/codec_table.py, kernels/common/codec_table.h).
CODECS = codec_table.names("value", kernels="value")
# Codecs whose decoded order differs from the input order (perm not identity).
SORTING_CODECS = ("polyfit", "dexp")
SEGMENTATIONS = ("greedy", "geometric")
CODEC_IDS = codec_table.wire_ids("value", kernels="value")

_ENCODE_PARAMS = {
    "polyfit": {"degree": 5, "segmentation": "greedy", "segments": 0, "out_idx": tf.int64},
    "dexp": {"out_idx": tf.int64},
    "qsgd": {"bits": None, "levels": None, "bucket_size": 512, "seed": 0,
             "out_idx": tf.int64},
}
# The codecs of the family's convention (generated ops): their parameters are
# their table row's attributes (with its defaults) and, if seeded, `seed`.
for _row in codec_table.rows("value", kernels="value"):
    if _row.attrs or _row.seeded:
        _ENCODE_PARAMS[_row.name] = {**{a.name: a.default for a in _row.attrs},
                                     **({"seed": 0} if _row.seeded else {}),
                                     "out_idx": tf.int64}
del _row
_DECODE_PARAMS = {
    "polyfit": {"max_values": None},
    "dexp": {"max_values": None},
}
# A codec not listed above takes no parameters: its ops are
# deep_reduce_<name>_encode(values) and deep_reduce_<name>_decode(payload).
_PLAIN_PARAMS = {"encode": {"out_idx": tf.int64}, "decode": {}}

Encoded = collections.namedtuple("Encoded", ["payload", "perm"])
Encoded.__doc__ = """Result of encode().

payload: uint8 vector, the only thing that travels.
perm: out_idx vector [K]; perm[i] = input position of the i-th decoded value."""


def _invalid(message):
    return tf.errors.InvalidArgumentError(None, None, message)


def _check_codec(codec):
    if codec not in CODECS:
        raise ValueError(f"unknown value codec {codec!r}; valid choices: {', '.join(CODECS)}")


def _merge_params(codec, given, table, what):
    allowed = table.get(codec, _PLAIN_PARAMS[what])
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        valid = ", ".join(sorted(allowed)) or "none"
        raise ValueError(f"unknown {what} parameter(s) {', '.join(map(repr, unknown))} for "
                         f"value codec {codec!r}; valid choices: {valid}")
    merged = dict(allowed)
    merged.update(given)
    return merged


def _values_tensor(values):
    t = tf.convert_to_tensor(values)
    if t.dtype != tf.float32:
        raise _invalid(f"values must be float32, got {t.dtype.name}")
    if t.shape.rank is not None and t.shape.rank != 1:
        raise _invalid(f"values must be a vector, got shape {t.shape}")
    return t


def _payload_tensor(payload):
    t = tf.convert_to_tensor(payload)
    if t.dtype != tf.uint8:
        raise _invalid(f"payload must be uint8, got {t.dtype.name}")
    if t.shape.rank is not None and t.shape.rank != 1:
        raise _invalid(f"payload must be a vector, got shape {t.shape}")
    return t


def _int_param(codec, name, value, lo, hi):
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{codec}: {name} must be an integer in [{lo}, {hi}], got {value!r}")
    return value


def _seed_tensor(codec, seed):
    """An int (any 64 bits) or an integer scalar tensor -> an int64 scalar."""
    if isinstance(seed, int) and not isinstance(seed, bool):
        return tf.bitcast(tf.constant(seed & ((1 << 64) - 1), tf.uint64), tf.int64)
    seed = tf.convert_to_tensor(seed)
    if not seed.dtype.is_integer or (seed.shape.rank not in (None, 0)):
        raise ValueError(f"{codec}: seed must be an int or an integer scalar tensor, "
                         f"got {seed!r}")
    return tf.cast(seed, tf.int64)


def _out_idx(codec, dtype):
    dtype = tf.as_dtype(dtype)
    if dtype not in (tf.int32, tf.int64):
        raise ValueError(f"{codec}: out_idx must be tf.int32 or tf.int64, got {dtype.name}")
    return dtype


def qsgd_levels(bits=None, levels=None):
    """The QSGD level count s from `bits` (s = 2^bits - 1) or `levels`.

    Each value costs ceil(log2(s + 1)) + 1 bits (level plus sign); the default
    is s = 127 (7 bits + sign, the paper's NCF setting).
    """
    if bits is not None and levels is not None:
        raise ValueError("qsgd: give bits or levels, not both")
    if bits is not None:
        return (1 << _int_param("qsgd", "bits", bits, 1, 8)) - 1
    if levels is not None:
        return _int_param("qsgd", "levels", levels, 1, 255)
    return 127


def encode(codec, values, **params):
    """Encodes K float32 values with one value codec.

    Args:
      codec: one of CODECS.
      values: float32 vector [K].
      **params: codec parameters (unknown names raise ValueError):
        polyfit: degree (0..15, default 5), segmentation ('greedy' or
          'geometric'), segments (segment count, 0 = automatic: about
          1.3 log2(K) - 7, i.e. 10 at K = 10k and 16 at K = 250k), out_idx.
        dexp: out_idx.
        qsgd: bits (1..8) or levels (1..255; default 127), bucket_size
          (default 512), seed (int or int64 scalar tensor; the same seed gives
          the same bytes), out_idx.
        fp16, bf16: out_idx.
        deflate: level (zlib level 0..9, default 6), out_idx.
        out_idx (tf.int32 or tf.int64, default tf.int64) is the dtype of perm.

    Returns:
      Encoded(payload, perm): payload uint8 vector; perm out_idx vector [K]
      (identity except for polyfit and dexp).

    Raises:
      ValueError: unknown codec, unknown parameter or bad parameter value.
      InvalidArgumentError: values not a float32 vector; NaN/Inf given to
        polyfit, dexp or qsgd; values too large for the fitted model.
    """
    _check_codec(codec)
    p = _merge_params(codec, params, _ENCODE_PARAMS, "encode")
    out_idx = _out_idx(codec, p.pop("out_idx"))
    values = _values_tensor(values)
    ops = _loader.load()
    if codec == "polyfit":
        if p["segmentation"] not in SEGMENTATIONS:
            raise ValueError(f"polyfit: unknown segmentation {p['segmentation']!r}; valid "
                             f"choices: {', '.join(SEGMENTATIONS)}")
        payload, perm = ops.deep_reduce_polyfit_encode(
            values, degree=_int_param(codec, "degree", p["degree"], 0, 15),
            segmentation=p["segmentation"],
            segments=_int_param(codec, "segments", p["segments"], 0, 1 << 20),
            out_idx=out_idx)
        return Encoded(payload, perm)
    if codec == "dexp":
        payload, perm = ops.deep_reduce_dexp_encode(values, out_idx=out_idx)
        return Encoded(payload, perm)
    if codec == "qsgd":
        levels = qsgd_levels(p["bits"], p["levels"])
        bucket = _int_param(codec, "bucket_size", p["bucket_size"], 1, 1 << 30)
        payload = ops.deep_reduce_qsgd_encode(values, _seed_tensor(codec, p["seed"]),
                                              levels=levels, bucket_size=bucket)
    else:
        # The convention's generated op: values[, seed] and the row's attributes.
        row = codec_table.row("value", codec)
        attrs = codec_table.attr_values("value", codec, {a.name: p[a.name] for a in row.attrs})
        seed = (_seed_tensor(codec, p["seed"]),) if row.seeded else ()
        payload = getattr(ops, f"deep_reduce_{codec}_encode")(values, *seed, **attrs)
    return Encoded(payload, tf.range(tf.size(values, out_type=out_idx), dtype=out_idx))


def decode(codec, payload, **params):
    """Decodes a payload written by encode(codec, ...).

    Args:
      codec: one of CODECS; must be the payload's codec.
      payload: uint8 vector.
      **params: polyfit and dexp require max_values, the most values the
        receiver expects (e.g. the tensor's size): payloads claiming more
        are rejected before anything is allocated.

    Returns:
      float32 vector [K] in decoded order (descending value order for
      polyfit and dexp, input order otherwise).

    Raises:
      ValueError: unknown codec or parameter.
      InvalidArgumentError: the payload is not a well-formed payload of this
        codec (wrong magic, codec id or version; truncated, extended or
        corrupted; non-finite or overflowing coefficients; K > max_values).
    """
    _check_codec(codec)
    p = _merge_params(codec, params, _DECODE_PARAMS, "decode")
    payload = _payload_tensor(payload)
    ops = _loader.load()
    if codec in SORTING_CODECS:
        if p["max_values"] is None:
            raise ValueError(
                f"value codec {codec!r}: decode needs max_values, the most values you expect "
                f"(e.g. the tensor's size): a {codec} payload does not grow with the number of "
                "values it claims, so only the receiver can bound the decode")
        max_values = _int_param(codec, "max_values", p["max_values"], 0, (1 << 48))
        fn = (ops.deep_reduce_polyfit_decode if codec == "polyfit"
              else ops.deep_reduce_dexp_decode)
        return fn(payload, max_values=max_values)
    return getattr(ops, f"deep_reduce_{codec}_decode")(payload)


def codec_of(payload):
    """Name of the codec that wrote a payload (eager; reads the header only).

    Raises:
      InvalidArgumentError: too short, wrong magic or unknown codec id.
    """
    data = bytes(tf.convert_to_tensor(payload)[:16].numpy().tobytes())
    if len(data) < 16 or data[:2] != b"DV":
        raise _invalid("not a value-codec payload (no 16-byte header with magic 'DV')")
    for name, cid in CODEC_IDS.items():
        if data[2] == cid:
            return name
    raise _invalid(f"unknown value codec id {data[2]}")
