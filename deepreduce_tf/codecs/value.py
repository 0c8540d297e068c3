"""Value codecs: the K values of a sparse tensor <-> one uint8 section.

  raw      the values' own bytes in the gradient's dtype; lossless.
  fp16     IEEE half (round to nearest even); lossy, NaN/Inf kept.
  bf16     bfloat16; lossy.
  qsgd     quantization to levels per bucket, max-scaled; lossy; stochastic
           rounding (unbiased, the seed changes every step: see Compressor)
           or rounding to nearest (deterministic).
  polyfit  piecewise polynomial fit of the values sorted descending; lossy;
           REORDERS the values (`sorting`): encode() returns perm, with
           perm[i] = input position of the i-th decoded value.
  dexp     double-exponential fit of the sorted values; lossy; reorders.
  deflate  zlib of the float32 bytes; lossless for float32 (float16 and
           bfloat16 widen exactly; float64 is rounded to float32 first).
  ternary  sparse ternary (STC): a sign bit per value and the mean magnitude
           of each bucket; lossy, biased (error feedback carries the rest).
  int8     8-bit integers on the values' max |v|, rounded to nearest; lossy.
           Summable on a scale the workers share: the sparse all-reduce
           sums the integers (each worker's within +-floor(127 / W)).

All codecs but raw work on float32; the compressor casts. Each codec is a
row of the codec table (deepreduce_tf/ops/codec_table.py: name, wire id,
aliases, summable and the dtype it is summed in) and a class declared with
codecs.base.register (parameters, properties); VALUE_CODECS and VALUE_ALIASES
are live views of that registry.
"""
import abc
import collections

import tensorflow as tf

from deepreduce_tf._checks import check, guarded

from deepreduce_tf.codecs.base import (AliasView, Codec, Param, REGISTRY, RegistryView, register,
                                       table_param)
from deepreduce_tf.ops import codec_table, value as value_ops

ValueEncoding = collections.namedtuple("ValueEncoding", ["section", "perm"])
ValueEncoding.__doc__ = """section: uint8 vector; perm: int64 [K] for sorting
codecs (perm[i] = input position of decoded value i), None otherwise."""


# Fits and scales in float32 stay finite below this magnitude; gradients with
# larger values are sent dense rather than failing the step at encode.
FIT_MAX_ABS = 1e30


class ValueCodec(Codec):
    """Base class of value codecs; subclasses are declared with
    codecs.base.register (which sets `name`, `codec_id`, `spec`, and
    `summable`/`additive`, `lossless`, `sorting`, `seeded`)."""

    kind = "value"
    lossless = False
    # True if encode() reorders the values (and returns perm).
    sorting = False
    # True if encode() consumes a per-step seed.
    seeded = False
    # The largest |value| the codec carries (None: the float32 range); the
    # compressor sends a tensor holding a larger value dense.
    max_abs = None

    @abc.abstractmethod
    def encode(self, values, seed):
        """values: [K] float vector (float32 unless raw); seed: int64 scalar.
        Returns a ValueEncoding."""

    @abc.abstractmethod
    def decode(self, section, count, dtype, limit):
        """section: uint8 vector; count: int64 scalar, the number of values
        the sender encoded; dtype: the gradient's dtype; limit: Python int,
        the most values the receiver accepts (its tensor's size): a decoder
        never allocates for more. Returns [count] values in decoded order
        (float32, or dtype for raw)."""


def _check_count(values, count, name):
    return guarded(values, check(
        tf.equal(tf.size(values, out_type=tf.int64), tf.cast(count, tf.int64)),
        f"{name} value section: value count differs from the payload header's count"))


@register("raw", lossless=True,
          summary="the values' own bytes in the gradient's dtype")
class RawValue(ValueCodec):
    def encode(self, values, seed):
        return ValueEncoding(tf.reshape(tf.bitcast(values, tf.uint8), [-1]), None)

    def decode(self, section, count, dtype, limit=None):
        width = tf.as_dtype(dtype).size
        # size == count * width, written without a product that a hostile
        # count could overflow.
        size = tf.size(section, out_type=tf.int64)
        section = guarded(section, check(
            tf.logical_and(tf.equal(tf.math.floormod(size, width), 0),
                           tf.equal(tf.math.floordiv(size, width), tf.cast(count, tf.int64))),
            f"raw value section: expected {width} bytes per value"))
        if width == 1:
            return tf.bitcast(section, dtype)
        return tf.bitcast(tf.reshape(section, [-1, width]), dtype)


class _OpValue(ValueCodec):
    def _params(self):
        return {}

    def encode(self, values, seed):
        enc = value_ops.encode(self.name, values, **self._params())
        perm = enc.perm if self.sorting else None
        return ValueEncoding(enc.payload, perm)

    def decode(self, section, count, dtype, limit):
        kwargs = {}
        if self.sorting:
            kwargs["max_values"] = int(limit)
        return _check_count(value_ops.decode(self.name, section, **kwargs), count, self.name)


class _TableValue(_OpValue):
    """A codec of kernels/value's convention: its parameters are its table
    row's attributes (each an attribute of the instance); a seeded row's
    encoder gets the step's seed."""

    def __init__(self, **attrs):
        for n, v in codec_table.attr_values("value", self.name, attrs).items():
            setattr(self, n, v)

    def _params(self):
        return {n: getattr(self, n) for n in codec_table.attrs("value", self.name)}

    def encode(self, values, seed):
        params = self._params()
        if codec_table.row("value", self.name).seeded:
            params["seed"] = seed
        enc = value_ops.encode(self.name, values, **params)
        return ValueEncoding(enc.payload, enc.perm if self.sorting else None)


@register("fp16", summary="IEEE half (round to nearest even); NaN/Inf kept")
class Fp16Value(_OpValue):
    max_abs = 65504.0  # the largest finite half: larger values would round to Inf


@register("bf16", summary="bfloat16")
class Bf16Value(_OpValue):
    max_abs = 3.3895313892515355e38  # the largest finite bfloat16


@register("deflate", lossless=True,
          params=(table_param("value", "deflate", "level", "deflate_level",
                              help="zlib compression level"),),
          summary="zlib of the float32 bytes (lossless for float32, float16, bfloat16)")
class DeflateValue(_TableValue):
    pass


@register("polyfit", sorting=True,
          params=(Param("poly_degree", int, 5, arg="degree", low=0, high=15,
                        aliases=("degree",), help="polyfit polynomial degree"),
                  Param("segmentation", str, "greedy", choices=tuple(value_ops.SEGMENTATIONS),
                        help="polyfit segmentation of the sorted values"),
                  Param("segments", int, 0, low=0, high=1 << 20,
                        help="polyfit segment count (0: automatic)")),
          summary="piecewise polynomial fit of the values sorted descending; reorders")
class PolyfitValue(_OpValue):
    max_abs = FIT_MAX_ABS

    def __init__(self, degree=5, segmentation="greedy", segments=0):
        value_ops._int_param("polyfit", "degree", degree, 0, 15)
        if segmentation not in value_ops.SEGMENTATIONS:
            raise ValueError(f"polyfit: unknown segmentation {segmentation!r}; valid choices: "
                             f"{', '.join(value_ops.SEGMENTATIONS)}")
        value_ops._int_param("polyfit", "segments", segments, 0, 1 << 20)
        self.degree, self.segmentation, self.segments = degree, segmentation, segments

    def config(self):
        return {"degree": self.degree, "segmentation": self.segmentation,
                "segments": self.segments}

    def _params(self):
        return dict(self.config())


@register("dexp", sorting=True,
          summary="double-exponential fit of the sorted values; reorders")
class DexpValue(_OpValue):
    max_abs = FIT_MAX_ABS


QSGD_ROUNDINGS = ("stochastic", "nearest")

# Values sharing one scale: qsgd's and ternary's buckets.
BUCKET_SIZE = Param("bucket_size", int, 512, low=1, high=1 << 30, aliases=("buckets_num",),
                    help="values sharing one scale (qsgd: the maximum; ternary: the mean "
                         "magnitude)")


@register("qsgd", seeded=True,
          params=(Param("bits", int, None, low=1, high=8,
                        help="QSGD bits per value, s = 2^bits - 1 levels; bits or "
                             "quantum_num, not both (neither: 127 levels)"),
                  Param("quantum_num", int, None, arg="levels", low=1, high=255,
                        aliases=("levels",),
                        help="QSGD levels s; bits or quantum_num, not both (neither: 127)"),
                  BUCKET_SIZE,
                  Param("qsgd_rounding", str, "stochastic", arg="rounding",
                        choices=QSGD_ROUNDINGS,
                        help="QSGD levels: stochastic (unbiased, seeded) or nearest "
                             "(deterministic, biased; error feedback keeps the rest)")),
          summary="quantization, max-scaled per bucket; stochastic (unbiased, per-step seed) "
                  "or nearest rounding")
class QsgdValue(_OpValue):
    """QSGD (kernels/value/qsgd.h): s levels per bucket, scaled by the
    bucket's max |v|. rounding='nearest' rounds r = |v| / M * s to the
    nearest level (half up) instead of at random: no variance, a bias of at
    most M / (2 s) per value that error feedback carries to the next step.
    Its payload is a QSGD payload, decoded by the same op; the encoder is
    TensorFlow ops (any device)."""

    max_abs = FIT_MAX_ABS

    def __init__(self, bits=None, levels=None, bucket_size=512, rounding="stochastic"):
        self.levels = value_ops.qsgd_levels(bits, levels)
        self.bucket_size = value_ops._int_param("qsgd", "bucket_size", bucket_size, 1, 1 << 30)
        if rounding not in QSGD_ROUNDINGS:
            raise ValueError(f"qsgd: rounding must be one of {', '.join(QSGD_ROUNDINGS)}, got "
                             f"{rounding!r}")
        self.rounding = rounding

    def config(self):
        out = {"levels": self.levels, "bucket_size": self.bucket_size}
        if self.rounding != "stochastic":
            out["rounding"] = self.rounding
        return out

    def encode(self, values, seed):
        if self.rounding == "nearest":
            return ValueEncoding(self._encode_nearest(values), None)
        enc = value_ops.encode("qsgd", values, levels=self.levels,
                               bucket_size=self.bucket_size, seed=seed)
        return ValueEncoding(enc.payload, None)

    def _encode_nearest(self, values):
        """The QSGD payload (16-byte header, s, bucket size, the scales,
        the packed codes) with each level rounded to nearest."""
        values = tf.reshape(tf.cast(values, tf.float32), [-1])
        k = tf.size(values, out_type=tf.int64)
        s, b = self.levels, self.bucket_size
        width = s.bit_length() + 1  # the level's bits and a sign bit
        buckets = (k + b - 1) // b
        padded = tf.pad(values, [[0, buckets * b - k]])
        scales = tf.reduce_max(tf.reshape(tf.abs(padded), [-1, b]), axis=1)
        scale = tf.cast(tf.repeat(scales, b)[:k], tf.float64)
        # r as the kernel computes it (double), then the nearest level.
        r = tf.math.divide_no_nan(tf.abs(tf.cast(values, tf.float64)), scale) * float(s)
        level = tf.cast(tf.minimum(tf.floor(r + 0.5), float(s)), tf.int64)
        sign = tf.cast(tf.logical_and(level > 0, values < 0), tf.int64)
        code = tf.bitwise.bitwise_or(level, tf.bitwise.left_shift(sign, width - 1))
        bits = tf.bitwise.bitwise_and(
            tf.bitwise.right_shift(code[:, None], tf.range(width, dtype=tf.int64)), 1)
        bits = tf.cast(tf.reshape(bits, [-1]), tf.uint8)
        bits = tf.pad(bits, [[0, (8 - (k * width) % 8) % 8]])
        weights = tf.constant([1 << i for i in range(8)], tf.uint8)
        packed = tf.reduce_sum(tf.reshape(bits, [-1, 8]) * weights, axis=1)
        head = tf.constant([ord("D"), ord("V"), codec_table.row("value", "qsgd").wire_id, 1,
                            0, 0, 0, 0], tf.uint8)
        fixed = tf.bitcast(tf.constant([s, b], tf.uint32), tf.uint8)
        return tf.concat([head, tf.reshape(tf.bitcast(tf.cast(k, tf.uint64), tf.uint8), [-1]),
                          tf.reshape(fixed, [-1]), tf.reshape(tf.bitcast(scales, tf.uint8), [-1]),
                          packed], 0)


@register("ternary", params=(BUCKET_SIZE,),
          summary="sparse ternary (STC): a sign bit per value, one mean magnitude per bucket")
class TernaryValue(ValueCodec):
    """Sparse ternary compression (Sattler et al., STC, 2019): each value
    travels as its sign, and every bucket of bucket_size consecutive values
    as the mean of its magnitudes, so a value decodes to +-mean. One bit per
    value plus 32 bits per bucket; deterministic and biased: what it leaves
    out goes to the residual (error feedback), which is what makes STC
    converge. The section: the K values' buckets' means (ceil(K / bucket)
    little-endian float32), then the sign bits (ceil(K / 8) bytes, value i
    in bit i % 8 of byte i // 8, 1 = negative)."""

    max_abs = FIT_MAX_ABS

    def __init__(self, bucket_size=512):
        self.bucket_size = value_ops._int_param("ternary", "bucket_size", bucket_size, 1,
                                                1 << 30)

    def config(self):
        return {"bucket_size": self.bucket_size}

    def encode(self, values, seed):
        values = tf.reshape(tf.cast(values, tf.float32), [-1])
        k = tf.size(values, out_type=tf.int64)
        b = self.bucket_size
        buckets = (k + b - 1) // b
        padded = tf.pad(values, [[0, buckets * b - k]])
        # The means in float64, rounded once: what any summation order gives.
        sums = tf.reduce_sum(tf.reshape(tf.cast(tf.abs(padded), tf.float64), [-1, b]), axis=1)
        counts = tf.minimum(tf.constant(b, tf.int64), k - tf.range(buckets) * b)
        means = tf.cast(sums / tf.cast(counts, tf.float64), tf.float32)
        signs = tf.cast(values < 0, tf.uint8)
        signs = tf.pad(signs, [[0, (8 - k % 8) % 8]])
        weights = tf.constant([1 << i for i in range(8)], tf.uint8)
        bits = tf.reduce_sum(tf.reshape(signs, [-1, 8]) * weights, axis=1)
        section = tf.concat([tf.reshape(tf.bitcast(means, tf.uint8), [-1]), bits], 0)
        return ValueEncoding(section, None)

    def decode(self, section, count, dtype, limit):
        count = tf.cast(count, tf.int64)
        size = tf.size(section, out_type=tf.int64)
        b = self.bucket_size
        # count <= limit first: every size below is then a small number.
        count = guarded(count, check(
            tf.logical_and(count >= 0, count <= int(limit)),
            f"ternary value section: value count outside [0, {int(limit)}]"))
        buckets = (count + b - 1) // b
        section = guarded(section, check(
            tf.equal(size, 4 * buckets + (count + 7) // 8),
            f"ternary value section: expected 4 bytes per bucket of {b} values and a "
            "sign bit per value"))
        means = tf.bitcast(tf.reshape(section[:4 * buckets], [-1, 4]), tf.float32)
        means = guarded(means, check(
            tf.reduce_all(tf.logical_and(tf.math.is_finite(means), means >= 0)),
            "ternary value section: a bucket's mean magnitude is negative or not finite"))
        bits = section[4 * buckets:]
        signs = tf.bitwise.bitwise_and(
            tf.bitwise.right_shift(bits[:, None], tf.constant(list(range(8)), tf.uint8)),
            tf.constant(1, tf.uint8))
        signs = tf.reshape(signs, [-1])[:count]
        scale = tf.repeat(means, b)[:count]
        return tf.where(signs > 0, -scale, scale)


# ------------------------------------------------ int8 on a shared scale
INT8_MAX = 127
LANE_WEIGHTS = (1, 1 << 8, 1 << 16, 1 << 24)  # four 8-bit lanes of an int32 word


def int8_levels(workers):
    """The +-levels each of `workers` workers' codes may take so that their
    sum fits in 8 bits: floor(127 / workers).

    Raises:
      ValueError: more than 127 workers (not one level is left each).
    """
    if not 1 <= workers <= INT8_MAX:
        raise ValueError(f"int8 values are summed as 8-bit integers, each of W workers within "
                         f"+-floor(127 / W): at most {INT8_MAX} workers, got {workers} (use "
                         "value 'fp16' or 'bf16')")
    return INT8_MAX // workers


def int8_quantize(values, scale, levels):
    """Codes round(v / scale * levels), int32 in [-levels, levels], of float
    values with |v| <= scale (a scale >= max |v|); 0 everywhere when scale is
    0. Rounding to nearest (half to even): deterministic; what it leaves out
    goes to the residual."""
    r = tf.math.divide_no_nan(tf.cast(values, tf.float32), tf.cast(scale, tf.float32))
    r = tf.round(r * float(levels))
    return tf.cast(tf.clip_by_value(r, -float(levels), float(levels)), tf.int32)


def int8_step(scale, levels):
    """The value of one code: scale times the float32 reciprocal of levels.
    Not scale / levels: a graph's constant folding turns a division by a
    constant into that product, so that a tf.function and eager execution
    would differ in the last bit; the product is the same in both."""
    return tf.cast(scale, tf.float32) * tf.constant(1.0 / levels, tf.float32)


def int8_pack(codes):
    """int32 codes in [-128, 127] -> int32 words of four codes (code j of a
    word weighted 256^j, two's complement lanes). The sum of packed words is
    the packed lane-wise sum as long as every lane's sum stays in
    [-128, 127], which int8_levels guarantees: int32 never overflows
    (|word| < 128 * 2^24 * 256 / 255 < 2^31)."""
    # Padded as float32 (exact for codes; int64 Pad has no GPU kernel).
    codes = tf.reshape(tf.cast(codes, tf.float32), [-1])
    pad = tf.math.floormod(-tf.size(codes), 4)
    lanes = tf.cast(tf.reshape(tf.pad(codes, [[0, pad]]), [-1, 4]), tf.int64)
    return tf.cast(tf.reduce_sum(lanes * tf.constant(LANE_WEIGHTS, tf.int64), axis=1), tf.int32)


def int8_unpack(words, count):
    """The first `count` lane values (int32) of int32 words, each lane read
    as a signed 8-bit number from the lowest: the inverse of int8_pack, and
    of a sum of packed words whose lane sums fit in 8 bits. Any word unpacks
    (lanes in [-128, 127], the top one in [-128, 127] as well)."""
    rest = tf.cast(tf.reshape(words, [-1]), tf.int64)
    lanes = []
    for _ in range(3):
        low = tf.math.floormod(rest + 128, 256) - 128
        lanes.append(low)
        rest = (rest - low) // 256
    lanes.append(rest)
    return tf.cast(tf.reshape(tf.stack(lanes, axis=1), [-1])[:count], tf.int32)


@register("int8", summary="8-bit integers on the values' max |v| (rounded to nearest); summed "
                          "as integers on a scale the workers share by the sparse all-reduce")
class Int8Value(ValueCodec):
    """8-bit symmetric quantization: code round(v / M * 127), M = max |v|.
    The section: M (little-endian float32), then one signed byte per value;
    a value decodes to code * M / 127. Error at most M / 254 per value,
    deterministic (error feedback carries it).

    Under communicator 'sparse_allreduce' the workers share the scale (the
    largest max |x| of any worker, which travels with the positions) and
    each sends its codes within +-floor(127 / W), four to an int32 word; the
    all-reduce sums the words, so the codes are summed exactly, as integers,
    and one byte per value travels at any W up to 127 (THC, NSDI 2024, sums
    integers on a shared scale the same way)."""

    max_abs = FIT_MAX_ABS

    def encode(self, values, seed):
        values = tf.reshape(tf.cast(values, tf.float32), [-1])
        scale = tf.reduce_max(tf.concat([tf.abs(values), tf.zeros([1], tf.float32)], 0))
        codes = tf.cast(int8_quantize(values, scale, INT8_MAX), tf.int8)
        section = tf.concat([tf.bitcast(scale, tf.uint8), tf.bitcast(codes, tf.uint8)], 0)
        return ValueEncoding(section, None)

    def decode(self, section, count, dtype, limit):
        count = tf.cast(count, tf.int64)
        size = tf.size(section, out_type=tf.int64)
        section = guarded(section, check(
            tf.logical_and(size >= 4, tf.equal(size - 4, count)),
            "int8 value section: expected a 4-byte scale and one byte per value"))
        scale = tf.bitcast(section[:4], tf.float32)
        scale = guarded(scale, check(
            tf.logical_and(tf.math.is_finite(scale), scale >= 0),
            "int8 value section: the scale is negative or not finite"))
        codes = tf.cast(tf.bitcast(section[4:], tf.int8), tf.float32)
        return codes * int8_step(scale, INT8_MAX)


VALUE_CODECS = RegistryView("value")
VALUE_ALIASES = AliasView("value")


def make_value_codec(name, **kwargs):
    """A value codec by name or alias (see VALUE_CODECS, VALUE_ALIASES).

    Raises:
      ValueError: unknown name (the message lists the valid ones).
    """
    return REGISTRY.make("value", name, **kwargs)
