"""ModelCodec: a whole model's update <-> one self-checking payload (no Flower).

    codec = ModelCodec({'compressor': 'topk', 'compress_ratio': 0.1,
                        'deepreduce': 'both', 'index': 'golomb', 'value': 'qsgd'},
                       names, shapes, dtypes)
    payload, decoded, residual = codec.encode(update, residual)   # sender
    update_hat = codec.decode(payload)                            # any receiver

The update (a list of numpy arrays, one per model tensor) is compressed by a
from_params Exchange into ONE payload (Exchange.compress_batch: fused
buckets, per-tensor top-k, the configured index and value codecs; small
tensors travel dense in the bucket's dense section). Top-k skips zeros here
unless params say topk_skip_zeros=False: a client's update is exactly zero
where it did not train. Error feedback is done
here, not by the Exchange's memory variables, because a federated client
lives for one round: x = update + residual, payload = C(x), residual' =
x - D(C(x)), where D is exactly what every receiver decodes. The caller keeps
the residual (Flower's per-node state, deepreduce_tf.federated.flower).

decode() is for payloads of untrusted senders: a payload larger than
max_payload_bytes, corrupted, truncated, made for another model (names,
shapes, dtypes: the fusion layout's fingerprint) or another configuration, or
decoding to NaN/Inf raises PayloadError with the reason, before anything
is allocated from its claims (the C++ decoders are bounded, docs/ops.md).
"""
import json
import re
import zlib

import numpy as np
import tensorflow as tf

from deepreduce_tf.params import from_params

# The configuration keys the codec decides itself: error feedback is its own
# (memory 'residual' or 'none' says whether to keep a residual), and there is
# no collective to choose.
_OWN_KEYS = ("memory", "communicator")
FEEDBACK = ("residual", "none")


def _reason(error):
    """An op error's message without TensorFlow's function-node prefix and
    op suffix."""
    text = (error.message or str(error)).strip()
    text = re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", text)
    return re.sub(r"\s*\[Op:[^\]]*\].*$", "", text, flags=re.S)


class PayloadError(ValueError):
    """A payload that cannot be accepted; str() says why."""


def model_crc(arrays):
    """CRC-32 of a model's arrays (their raw bytes, in order): the check that
    two parties hold the same model bit for bit (not authentication)."""
    crc = 0
    for a in arrays:
        crc = zlib.crc32(np.ascontiguousarray(a).view(np.uint8).reshape(-1), crc)
    return crc


def canonical_params(params):
    """params as a JSON string with sorted keys (what travels in a Flower
    ConfigRecord, and the cache key of codecs)."""
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict (from_params keys), got {type(params).__name__}")
    try:
        return json.dumps(dict(params), sort_keys=True)
    except TypeError as e:
        raise ValueError(f"federated compression parameters must be JSON values "
                         f"(str, int, float, bool, None): {e}") from None


class ModelCodec:
    """Compresses updates of one model (fixed names, shapes and dtypes).

    Args:
      params: a from_params dict. 'memory': 'residual' (default) or 'none'
        turns this codec's error feedback on or off; 'communicator' is not
        allowed (there is no collective).
      names, shapes, dtypes: the model's tensors, in order.
      max_payload_bytes: decode() refuses larger payloads [dense bytes of the
        model x 2 + 64 KiB].
    """

    def __init__(self, params, names, shapes, dtypes, max_payload_bytes=None):
        params, feedback = self._split(params)
        self.params = dict(params, memory=feedback)
        self.feedback = feedback == "residual"
        self.names = [str(n) for n in names]
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"tensor names must be unique, got {self.names}")
        self.shapes = [tuple(int(d) for d in s) for s in shapes]
        self.dtypes = [tf.as_dtype(d) for d in dtypes]
        if not (len(self.names) == len(self.shapes) == len(self.dtypes)):
            raise ValueError("names, shapes and dtypes differ in length")
        for name, dtype in zip(self.names, self.dtypes):
            if not dtype.is_floating:
                raise TypeError(f"tensor {name!r} is {dtype.name}: only float tensors are "
                                "compressed (keep integer state out of the model's arrays)")
        self.dense_bytes = sum(int(np.prod(s, dtype=np.int64)) * d.size
                               for s, d in zip(self.shapes, self.dtypes))
        self.max_payload_bytes = (int(max_payload_bytes) if max_payload_bytes is not None
                                  else 2 * self.dense_bytes + 65536)
        with tf.init_scope():
            self.compressor = from_params(dict(params, memory="none"))
            if (getattr(self.compressor.sparsifier, "skip_zeros", None) is False
                    and "topk_skip_zeros" not in params):
                # A client's update is exactly zero where it did not train
                # (embedding rows of other users and unseen items): top-k
                # does not spend its K on those zeros unless told to.
                params["topk_skip_zeros"] = True
                self.params["topk_skip_zeros"] = True
                self.compressor = from_params(dict(params, memory="none"))
        specs = [tf.TensorSpec(s, d) for s, d in zip(self.shapes, self.dtypes)]
        self._ctx = self.compressor.receiver_batch_context(specs, self.names)

    @staticmethod
    def _split(params):
        if not isinstance(params, dict):
            raise TypeError(f"params must be a dict (from_params keys), got "
                            f"{type(params).__name__}")
        params = dict(params)
        if "communicator" in params:
            raise ValueError("federated compression has no collective: leave out "
                             f"'communicator' (got {params['communicator']!r})")
        feedback = params.pop("memory", "residual")
        if feedback not in FEEDBACK:
            raise ValueError(f"'memory' must be one of {FEEDBACK} in federated mode (the "
                             f"codec keeps the residual itself), got {feedback!r}")
        return params, feedback

    @classmethod
    def check_params(cls, params):
        """Raises ValueError/TypeError, saying what is wrong, unless params
        configure a federated codec."""
        params, _ = cls._split(params)
        with tf.init_scope():
            from_params(dict(params, memory="none"))

    @classmethod
    def for_arrays(cls, params, names, arrays, **kwargs):
        """The codec of a model given as numpy arrays."""
        arrays = [np.asarray(a) for a in arrays]
        return cls(params, names, [a.shape for a in arrays], [a.dtype for a in arrays], **kwargs)

    def check_arrays(self, arrays, what="the model"):
        """Raises ValueError unless arrays match this model's shapes/dtypes."""
        if len(arrays) != len(self.shapes):
            raise ValueError(f"{what} has {len(arrays)} tensors; this model has "
                             f"{len(self.shapes)} ({', '.join(self.names)})")
        for name, a, s, d in zip(self.names, arrays, self.shapes, self.dtypes):
            if tuple(a.shape) != s or a.dtype != d.as_numpy_dtype:
                raise ValueError(f"{what}: tensor {name!r} is {a.dtype} {tuple(a.shape)}, "
                                 f"expected {d.name} {s}")

    def step_counters(self):
        """{key: step} of the encoder's per-key step counters: the seeds of
        QSGD's rounding and random-k's positions advance with them, so a
        restarted sender restores them to encode as it would have."""
        return {str(k): int(v.numpy()) for k, v in self.compressor.steps.items()}

    def set_step_counters(self, counters):
        """Restores step_counters() (keys of this model's configuration)."""
        for key, step in counters.items():
            self.compressor.step_counter(key).assign(int(step))

    def zeros(self):
        return [np.zeros(s, d.as_numpy_dtype) for s, d in zip(self.shapes, self.dtypes)]

    def encode(self, update, residual=None, step=None):
        """Compresses update (+ residual with error feedback).

        step: this encoding's step number (an int >= 1), which seeds QSGD's
        rounding and random-k's positions with the seed parameter; None:
        the codec's own counter (1, 2, ... per encoding). Senders that each
        start from a new codec (a Flower client runs each message in a fresh
        process) pass a number unique to the message, or every one of them
        would round with the same noise.

        Returns:
          (payload bytes, decoded arrays: what every receiver decodes,
           new residual arrays: x - decoded, or None without feedback).

        Raises:
          ValueError: wrong tensors, or NaN/Inf in update + residual (nothing
            is sent; the caller's residual stays as it was).
        """
        update = [np.asarray(u) for u in update]
        self.check_arrays(update, "the update")
        if self.feedback and residual is not None:
            self.check_arrays(residual, "the residual")
            x = [u + r for u, r in zip(update, residual)]
        else:
            x = update
        for name, a in zip(self.names, x):
            if not np.all(np.isfinite(a)):
                raise ValueError(f"the update has NaN/Inf in tensor {name!r}: not sent (the "
                                 "residual is kept); check the local training (learning rate, "
                                 "loss scaling)")
        if step is not None:
            if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 1:
                raise ValueError(f"step must be an int >= 1, got {step!r}")
            self.set_step_counters({b.key: int(step) - 1 for b in self._ctx.plan.buckets})
        payload, _ = self.compressor.compress_batch([tf.constant(a) for a in x], self.names)
        payload = payload.numpy().tobytes()
        decoded = self._decode(payload)
        new_residual = [a - d for a, d in zip(x, decoded)] if self.feedback else None
        return payload, decoded, new_residual

    def _decode(self, payload):
        data = tf.constant(np.frombuffer(payload, np.uint8))
        return [t.numpy() for t in self.compressor.decompress_batch(data, self._ctx)]

    def decode(self, payload):
        """A payload of any sender -> the decoded update (numpy arrays).

        Raises:
          PayloadError: oversized, empty, malformed, foreign or non-finite.
        """
        if not isinstance(payload, (bytes, bytearray, memoryview)):
            raise PayloadError(f"a payload is bytes, got {type(payload).__name__}")
        if len(payload) > self.max_payload_bytes:
            raise PayloadError(f"payload of {len(payload):,} bytes exceeds the limit of "
                               f"{self.max_payload_bytes:,} for this model")
        if not payload:
            raise PayloadError("empty payload")
        try:
            arrays = self._decode(bytes(payload))
        except tf.errors.OpError as e:
            raise PayloadError(_reason(e)) from None
        for name, a in zip(self.names, arrays):
            if not np.all(np.isfinite(a)):
                raise PayloadError(f"payload decodes to NaN/Inf in tensor {name!r}")
        return arrays
