"""Value codecs: the K values of a sparse tensor <-> one uint8 section.

  raw      the values' own bytes in the gradient's dtype; lossless.
  fp16     IEEE half (round to nearest even); lossy, NaN/Inf kept.
  bf16     bfloat16; lossy.
  qsgd     stochastic quantization (levels per bucket, max-scaled); lossy,
           unbiased; the seed changes every step (see Compressor).
  polyfit  piecewise polynomial fit of the values sorted descending; lossy;
           REORDERS the values (`sorting`): encode() returns perm, with
           perm[i] = input position of the i-th decoded value.
  dexp     double-exponential fit of the sorted values; lossy; reorders.
  deflate  zlib of the float32 bytes; lossless for float32 (float16 and
           bfloat16 widen exactly; float64 is rounded to float32 first).

All codecs but raw work on float32; the compressor casts.
"""
import abc
import collections

import tensorflow as tf

from deepreduce_tf.ops import value as value_ops

ValueEncoding = collections.namedtuple("ValueEncoding", ["section", "perm"])
ValueEncoding.__doc__ = """section: uint8 vector; perm: int64 [K] for sorting
codecs (perm[i] = input position of decoded value i), None otherwise."""


class ValueCodec(abc.ABC):
    """Base class. Subclasses set `name`, `codec_id`, `lossless`, `sorting`."""

    name = None
    codec_id = None
    lossless = False
    sorting = False
    # True if the codec's *values* (not its bytes) can be summed across
    # workers: the all-reduce communicator sends codec.cast(values) as is.
    additive = False
    # True if encode() consumes a per-step seed.
    seeded = False

    def config(self):
        """Parameters the decoder must share with the encoder (fingerprinted)."""
        return {}

    @abc.abstractmethod
    def encode(self, values, seed):
        """values: [K] float vector (float32 unless raw); seed: int64 scalar.
        Returns a ValueEncoding."""

    @abc.abstractmethod
    def decode(self, section, count, dtype):
        """section: uint8 vector; count: int64 scalar, the number of values
        the sender encoded; dtype: the gradient's dtype. Returns [count]
        values in decoded order (float32, or dtype for raw)."""

    def __repr__(self):
        cfg = ", ".join(f"{k}={v!r}" for k, v in sorted(self.config().items()))
        return f"{type(self).__name__}({cfg})"


def _check_count(values, count, name):
    tf.debugging.assert_equal(tf.size(values, out_type=tf.int64), count,
                              message=f"{name} value section: value count differs from the "
                                      "payload header's count")
    return values


class RawValue(ValueCodec):
    name = "raw"
    codec_id = 0
    lossless = True
    additive = True

    def encode(self, values, seed):
        return ValueEncoding(tf.reshape(tf.bitcast(values, tf.uint8), [-1]), None)

    def decode(self, section, count, dtype):
        width = tf.as_dtype(dtype).size
        tf.debugging.assert_equal(tf.size(section, out_type=tf.int64), count * width,
                                  message=f"raw value section: expected {width} bytes per value")
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

    def decode(self, section, count, dtype):
        kwargs = {}
        if self.sorting:
            kwargs["max_values"] = value_ops.DEFAULT_MAX_VALUES
        return _check_count(value_ops.decode(self.name, section, **kwargs), count, self.name)


class Fp16Value(_OpValue):
    name = "fp16"
    codec_id = 4
    additive = True


class Bf16Value(_OpValue):
    name = "bf16"
    codec_id = 5
    additive = True


class DeflateValue(_OpValue):
    name = "deflate"
    codec_id = 6
    lossless = True

    def __init__(self, level=6):
        value_ops._int_param("deflate", "level", level, 0, 9)
        self.level = level

    def _params(self):
        return {"level": self.level}


class PolyfitValue(_OpValue):
    name = "polyfit"
    codec_id = 1
    sorting = True

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


class DexpValue(_OpValue):
    name = "dexp"
    codec_id = 2
    sorting = True


class QsgdValue(_OpValue):
    name = "qsgd"
    codec_id = 3
    seeded = True

    def __init__(self, bits=None, levels=None, bucket_size=512):
        self.levels = value_ops.qsgd_levels(bits, levels)
        self.bucket_size = value_ops._int_param("qsgd", "bucket_size", bucket_size, 1, 1 << 30)

    def config(self):
        return {"levels": self.levels, "bucket_size": self.bucket_size}

    def encode(self, values, seed):
        enc = value_ops.encode("qsgd", values, levels=self.levels,
                               bucket_size=self.bucket_size, seed=seed)
        return ValueEncoding(enc.payload, None)


VALUE_CODECS = collections.OrderedDict(
    (c.name, c) for c in (RawValue, PolyfitValue, DexpValue, QsgdValue, Fp16Value, Bf16Value,
                          DeflateValue))
VALUE_ALIASES = {"none": "raw", "float16": "fp16", "half": "fp16", "bfloat16": "bf16",
                 "zlib": "deflate", "gzip": "deflate"}


def make_value_codec(name, **kwargs):
    """A value codec by name (VALUE_CODECS or VALUE_ALIASES)."""
    key = VALUE_ALIASES.get(name, name)
    if key not in VALUE_CODECS:
        raise ValueError(f"unknown value codec {name!r}; valid choices: "
                         f"{', '.join(VALUE_CODECS)} (aliases: "
                         f"{', '.join(f'{a}={b}' for a, b in VALUE_ALIASES.items())})")
    return VALUE_CODECS[key](**kwargs)
