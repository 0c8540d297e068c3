"""The compressor: sparsifier + index codec + value codec, a stateless pipeline.

    compressor = Compressor(sparsifiers.TopK(0.01), codecs.index.GolombIndex())
    enc = compressor.encode(x, key, seed)            # x: the compensated gradient
    payload = compressor.tensor_payload(enc, x.dtype, n, identity)
    ...payload travels...
    total = sum(compressor.decompress(p, ctx) for p in gathered)

The compressor holds configuration only: no variables, no memory, no step
counters, no byte ledger. What a step keeps between steps (residual memory,
per-key step counters and seeds, warm-up, clipping, the byte ledger) is held
beside it, per replica, by deepreduce_tf.exchange.Exchange, and the sequence
compensate -> select -> encode -> exchange -> decode -> update memory ->
record bytes is written once, in deepreduce_tf.exchange.base.Communicator.
Every worker uses the same configuration, so a worker decodes the other
workers' payloads of the same variable with its own ctx.

Payload (all-gather communicator): one flat uint8 vector, the container of
deepreduce_tf.ops.payload (magic "DRPK", format version, CRC32C) holding
META_FIELDS and three sections: index, value, permutation.

  mode        0 = dense (the gradient's own bytes), 1 = sparse
  index_codec / value_codec   codec ids (codecs.index / codecs.value)
  dtype       1 float16, 2 bfloat16, 3 float32, 4 float64
  n           element count of the tensor
  config      the variable's identity: CRC-32 of the decode-relevant
              configuration, the variable's key (its name) and static shape
  k           number of positions the sparsifier chose
  count       number of values sent (> k with Bloom p0)
  aux0, aux1  index codec parameters (Bloom m and h)

decompress() checks index_codec, value_codec, dtype, n and config against its
own configuration and ctx: a payload of another variable (even one of the
same size and dtype), another compressor configuration or another program is
refused with a message naming the field, or, for config, saying that the
payload belongs to another variable or configuration. Every worker names a
variable alike (deepreduce_tf.distribute derives the key from the variable or
from its place in the batch), so the workers' payloads of one variable agree.
Without a name (name=None, no residual memory) the identity is the
configuration and the shape only. Bucket and batch payloads (their
containers: deepreduce_tf/fused.py; the wire format: deepreduce_tf/wire.py)
carry the configuration in config and their layout (keys, shapes) in layout
instead.
A corrupted, truncated or extended payload fails the container's checks; a
payload written by a newer format version is refused with an upgrade hint.

How `both` stays aligned (REFERENCE 1.1, 1.3): the index codec returns the
positions the receiver will decode (for Bloom filters: the policy's choice
among the filter's positives); the sender takes the values of the memory-
compensated gradient at exactly those positions; a reordering value codec
(polyfit, dexp) returns a permutation that travels bit-packed (ceil(log2 K)
bits per value) unless the index codec is 'raw', whose positions are then
simply sent in the codec's order. The decoded tensor is the value codec's
reconstruction scattered to the decoded positions: its error is exactly the
value codec's error plus what the index codec did not select.

All-reduce communicator: the payload is the codec's values themselves (raw,
float16 or bfloat16) at positions every worker agrees on (sparsifier 'none'
or 'randomk' with the shared per-step seed), so that a sum of payloads is the
payload of the sum; bytes are not summable, so this wire format has no header.

Small tensors (n < min_size) travel dense in their own dtype and leave no
residual. Non-finite gradients: by default (nonfinite='dense') a tensor that
holds NaN or Inf is sent dense, bit for bit, so that mixed-precision loss
scaling sees the overflow and skips the step; its residual is left unchanged.
nonfinite='raise' raises InvalidArgumentError naming the variable instead.
The compressor carries the policy; the step applies it
(Exchange.nonfinite_rule, for every communicator): encode() itself sends a
non-finite x dense and checks nothing.
"""

import tensorflow as tf

from deepreduce_tf import fusion
from deepreduce_tf._checks import check, guarded
from deepreduce_tf.codecs import index as index_codecs
from deepreduce_tf.codecs import value as value_codecs
from deepreduce_tf.memory import Sent
from deepreduce_tf.ops import fusion as fusion_ops
from deepreduce_tf.ops import payload as payload_ops
from deepreduce_tf.fused import FusedCoding
from deepreduce_tf.slices import SlicesCoding
from deepreduce_tf.sparsifiers import Sparsifier
from deepreduce_tf.wire import (  # noqa: F401 (the format, named here as before)
    BATCH_FIELDS, BUCKET_FIELDS, BUCKET_SECTIONS, BatchContext, BucketContext, Context,
    DEFAULT_MIN_SIZE, DTYPE_CODES, F_AUX0, F_AUX1, F_CONFIG, F_COUNT, F_DENSE_N, F_DTYPE, F_INDEX,
    F_K, F_LAYOUT, F_MODE, F_N, F_VALUE, IDENTITY_MISMATCH, KIND_BUCKET, META_FIELDS, MODE_DENSE,
    MODE_SLICES, MODE_SPARSE, NONFINITE_CHOICES, NUM_SECTIONS, SHARED_SCALE_CODECS,
    SUMMABLE_WIRE_DTYPES,
    SlicesContext, WARMUP_CHOICES, _Encoded, _dense_mode_checks, _fingerprint, _graph_safe, _i64,
    _identity, _key_seed, bucket_record)


class Compressor(FusedCoding, SlicesCoding):
    """sparsifier + index codec + value codec: encode and decode, nothing kept.

    The compressor turns a compensated gradient (one tensor, or a fused
    bucket's flat vector) into a payload and back. It holds no variables:
    the seed of a step, the warm-up ratio and whether the values fit the
    value codec are arguments; what the receivers will decode comes back
    with the encoding (a memory.Sent), for the caller's error feedback.
    Who receives which payload is a communicator's business
    (deepreduce_tf.exchange), and the state of a step is held beside the
    compressor by deepreduce_tf.exchange.Exchange.

    Args:
      sparsifier: a sparsifiers.Sparsifier.
      index_codec: a codecs.index.IndexCodec (default raw int32 positions).
      value_codec: a codecs.value.ValueCodec (default raw values).
      min_size: tensors with fewer elements travel dense (default 1024).
      nonfinite: 'dense' (default) or 'raise', see the module docstring (the
        policy the exchange's step applies).
      seed: base seed of randomk positions and QSGD rounding; the per-step
        seed is derived from it, the key and a per-key step counter held by
        the exchange, identical on every worker.
      bucket_cap_mb: fusion bucket size of a batch (MiB).

    Raises:
      ValueError: an incompatible combination (the message says why).
    """

    def __init__(self, sparsifier, index_codec=None, value_codec=None,
                 min_size=DEFAULT_MIN_SIZE, nonfinite="dense", seed=0,
                 bucket_cap_mb=fusion.DEFAULT_BUCKET_CAP_MB):
        if not isinstance(sparsifier, Sparsifier):
            raise TypeError(f"sparsifier must be a deepreduce_tf.sparsifiers.Sparsifier, "
                            f"got {sparsifier!r}")
        self.sparsifier = sparsifier
        self.index_codec = index_codec if index_codec is not None else index_codecs.RawIndex()
        self.value_codec = value_codec if value_codec is not None else value_codecs.RawValue()
        if not isinstance(self.index_codec, index_codecs.IndexCodec):
            raise TypeError(f"index_codec must be a codecs.index.IndexCodec, got {index_codec!r}")
        if not isinstance(self.value_codec, value_codecs.ValueCodec):
            raise TypeError(f"value_codec must be a codecs.value.ValueCodec, got {value_codec!r}")
        if isinstance(min_size, bool) or not isinstance(min_size, int) or min_size < 0:
            raise ValueError(f"min_size must be an integer >= 0, got {min_size!r}")
        self.min_size = min_size
        if nonfinite not in NONFINITE_CHOICES:
            raise ValueError(f"nonfinite must be one of {', '.join(NONFINITE_CHOICES)}, "
                             f"got {nonfinite!r}")
        self.nonfinite = nonfinite
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an int, got {seed!r}")
        self.seed = seed
        self.bucket_cap_mb = fusion.check_bucket_cap_mb(bucket_cap_mb)
        if self.sparsifier.dense and self.index_codec.name != "raw":
            raise ValueError(f"index codec {self.index_codec.name!r} needs a sparsifier: with "
                             "compressor 'none' every position is sent and no index travels; "
                             "choose compressor topk, randomk or threshold, or deepreduce "
                             "None/'value'")
        self._plans = {}
        self.config_id = _fingerprint({
            "index": self.index_codec.name, "index_config": repr(self.index_codec.config()),
            "value": self.value_codec.name, "value_config": repr(self.value_codec.config()),
            "dense_sparsifier": self.sparsifier.dense,
        })

    # ----------------------------------------------------------------- helpers
    def __repr__(self):
        return (f"Compressor({self.sparsifier!r}, index={self.index_codec!r}, "
                f"value={self.value_codec!r}, min_size={self.min_size})")

    @property
    def codecs(self):
        """(index codec, value codec)."""
        return self.index_codec, self.value_codec

    def check_tensor(self, tensor, name):
        """tensor as a Tensor, or TypeError / ValueError for a dtype or a
        shape the compressor cannot take."""
        tensor = tf.convert_to_tensor(tensor)
        if tensor.dtype not in DTYPE_CODES:
            raise TypeError(f"cannot compress {name or 'tensor'} of dtype {tensor.dtype.name}: "
                            "deepreduce_tf compresses float16, bfloat16, float32 and float64 "
                            "gradients; reduce other dtypes without a compressor")
        if not tensor.shape.is_fully_defined():
            raise ValueError(f"cannot compress {name or 'tensor'} of shape {tensor.shape}: "
                             "compression needs a static shape (gradients of variables have one)")
        return tensor

    _check_tensor = check_tensor

    @staticmethod
    def check_key(name):
        """A key (a variable's name): a non-empty string."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        return name

    def needs_seed(self, dense):
        """True if encoding a (not dense) tensor needs the per-step seed."""
        return not dense and (self.sparsifier.data_independent and not self.sparsifier.dense
                              or self.value_codec.seeded)

    _needs_seed = needs_seed

    def key_seed(self, key):
        """The per-key part of the per-step seed (a Python int)."""
        return _key_seed(key, self.seed)

    @property
    def stateless(self):
        """True if no codec keeps variables (the compressor itself never does)."""
        return not any(getattr(c, "stateful", False) for c in self.codecs)

    def receiver_context(self, name, shape, dtype):
        """The Context with which a worker that did not compress the tensor
        `name` of this shape and dtype decodes another worker's payload of it
        (what compress() would have returned there, less the payload size)."""
        shape = tf.TensorShape(shape)
        dtype = tf.as_dtype(dtype)
        n = shape.num_elements()
        return Context(self._key(name), shape, dtype, n, n < self.min_size, n * dtype.size,
                       None, None)

    def _key(self, name):
        return "tensor" if name is None else self.check_key(name)

    def _batch_keys(self, tensors, names):
        if names is None:
            names = [f"tensor_{i}" for i in range(len(tensors))]
        names = list(names)
        if len(names) != len(tensors):
            raise ValueError(f"{len(tensors)} tensors but {len(names)} names")
        return [self._key(nm) for nm in names]

    def receiver_batch_context(self, specs, names=None):
        """The BatchContext with which a worker that did not compress a batch
        of tensors (tf.TensorSpec-like: .shape, .dtype) decodes another
        worker's compress_batch() payload of them."""
        keys = self._batch_keys(specs, names)
        plan = self.plan(keys, specs)
        return BatchContext(plan, tuple(bucket_record(b, None)
                                        for b in plan.buckets))

    def identity(self, key, shape):
        """The config field of key's payloads (see the module docstring):
        equal on every worker with this configuration, different for
        another key or shape."""
        return _identity(self.config_id, key, shape)

    def _check_identity(self, meta, identity, what, suffix=""):
        """The assertion that meta's config field is `identity` (None eagerly:
        an InvalidArgumentError then raises at once)."""
        return check(tf.equal(meta[F_CONFIG], tf.constant(identity, tf.int64)),
                     IDENTITY_MISMATCH.format(what=what, suffix=suffix))

    def _meta(self, mode, dtype, n, k, count, aux, extra=(), config=None):
        config = self.config_id if config is None else config
        return tf.stack([
            _i64(mode), tf.constant(self.index_codec.codec_id, tf.int64),
            tf.constant(self.value_codec.codec_id, tf.int64),
            tf.constant(DTYPE_CODES[dtype], tf.int64), tf.constant(n, tf.int64),
            tf.constant(config, tf.int64), _i64(k), _i64(count), _i64(aux[0]),
            _i64(aux[1])] + [_i64(e) for e in extra])

    @staticmethod
    def _raw_bytes(x):
        return value_codecs.RawValue().encode(x, None).section

    def _dense_payload(self, x, identity):
        n = x.shape.num_elements()
        empty = tf.zeros([0], tf.uint8)
        meta = self._meta(MODE_DENSE, x.dtype, n, n, n, (0, 0), config=identity)
        return payload_ops.pack([empty, self._raw_bytes(x), empty], meta)

    # ---------------------------------------------------------------- encoding
    def _encode_sparse(self, x, seed, lengths=None, ratio=None):
        """x: flat compensated gradient (one tensor, or a bucket's sparse
        section with segment `lengths`). Returns (_Encoded, ok): ok is a bool
        tensor, False if the value codec decoded a finite value to NaN/Inf in
        x's dtype (a rounding overflow), or None for the raw value codec."""
        n = x.shape.num_elements()
        dtype = x.dtype
        empty = tf.zeros([0], tf.uint8)
        zeros = (tf.constant(0, tf.int64), tf.constant(0, tf.int64))
        ienc = None
        if self.sparsifier.dense:  # every position, in order: no index is built or sent
            k = count = tf.constant(n, tf.int64)
            ienc = index_codecs.IndexEncoding(empty, None, zeros)
            positions = None
            values = x
        else:
            # The selection kernels give the values too: no gather (K random
            # reads of x) unless the index codec changes the positions.
            if lengths is None:
                select = lambda: self.sparsifier.select_values(x, seed)  # noqa: E731
            else:
                select = lambda: self.sparsifier.select_segments_values(  # noqa: E731
                    x, lengths, seed)

            def selected(pair):
                return tf.cast(pair[0], tf.int64), tf.convert_to_tensor(pair[1], dtype)

            if ratio is None:
                idx, values = selected(select())
            else:  # the exponential warm-up: this step's ratio until it ends
                in_warmup, value = ratio
                idx, values = tf.cond(
                    in_warmup,
                    lambda: selected(self.sparsifier.select_ratio_values(x, lengths or [n], value)),
                    lambda: selected(select()))
            k = tf.size(idx, out_type=tf.int64)
            if not self.index_codec.carries_order:
                ienc = self.index_codec.encode(idx, n)
            positions = idx if ienc is None else ienc.positions
            count = tf.size(positions, out_type=tf.int64)
            if positions is not idx:  # a Bloom filter's positions: more than idx
                values = fusion_ops.gather(x, positions)
        vc = self.value_codec
        ok = None
        if vc.name == "raw":
            venc = vc.encode(values, seed)
            decoded = values
        else:
            venc = vc.encode(tf.cast(values, tf.float32), seed)
            decoded = tf.cast(vc.decode(venc.section, count, dtype, n), dtype)
            ok = tf.reduce_all(tf.math.is_finite(decoded))
        order = positions
        perm_section = empty
        if venc.perm is not None:
            order = venc.perm if positions is None else fusion_ops.gather(positions, venc.perm)
            if ienc is not None:  # a raw index sends the positions in the codec's order
                perm_section = payload_ops.perm_encode(venc.perm)
        if ienc is None:
            ienc = self.index_codec.encode(order, n)
        if self.sparsifier.dense and venc.perm is None:
            sent = (x - decoded, tf.zeros([0], tf.int64), tf.zeros([0], dtype))
        else:
            sent = (x, tf.cast(order, tf.int64), decoded)
        return _Encoded(tf.constant(MODE_SPARSE, tf.int64), ienc.section, venc.section,
                        perm_section, k, count, tf.cast(ienc.aux[0], tf.int64),
                        tf.cast(ienc.aux[1], tf.int64), *sent), ok

    def _encode_dense(self, x):
        n = x.shape.num_elements()
        empty = tf.zeros([0], tf.uint8)
        nn = tf.constant(n, tf.int64)
        zero = tf.constant(0, tf.int64)
        # Everything sent as it is: nothing is left for the residual.
        return _Encoded(tf.constant(MODE_DENSE, tf.int64), empty, self._raw_bytes(x), empty,
                        nn, nn, zero, zero, tf.zeros_like(x), tf.zeros([0], tf.int64),
                        tf.zeros([0], x.dtype))

    def value_limit(self, dtype):
        """The largest |x| the value codec carries for a gradient of `dtype`
        (values beyond it, and NaN/Inf, make the step send x dense)."""
        limit = float(tf.as_dtype(dtype).max)
        if self.value_codec.name != "raw":  # the codecs work in float32
            limit = min(limit, float(tf.float32.max))
        if self.value_codec.max_abs is not None:
            limit = min(limit, float(self.value_codec.max_abs))
        return limit

    def encode(self, x, key, seed, lengths=None, warmup=None, fits=None):
        """A compensated flat gradient -> _Encoded.

        The step is sent dense, in x's own dtype, when x holds a value the
        value codec cannot carry: NaN/Inf (the step's non-finite policy,
        Exchange.nonfinite_rule, has already failed it under 'raise' and
        keeps the residual under 'dense'), a finite value beyond the codec's
        range (fp16 above 65504, ...), or one the codec rounds to Inf in x's
        dtype. The encoding's last three fields are the memory.Sent of what
        receivers decode.

        Args:
          x: the compensated flat gradient (a tensor, or a bucket's sparse
            section with segment `lengths`).
          key: its name (for messages).
          seed: int64 scalar, this step's seed (0 when none is needed).
          warmup: (in_warmup, ratio) of the step (Exchange.warmup_plan), or
            None: a dense warm-up step sends x as it is; an exponential one
            selects with this step's top-k ratio.
          fits: all_within(x, value_limit) when the caller has it already
            (Memory.compensate_within computes it in the compensation's pass).
        """
        if fits is None:  # one pass, nothing allocated: NaN and Inf do not fit either
            fits = fusion_ops.all_within(x, self.value_limit(x.dtype))
        in_warmup, ratio = warmup if warmup is not None else (None, None)
        if in_warmup is not None and ratio is None:  # dense warm-up: sent as it is
            fits = tf.logical_and(fits, tf.logical_not(in_warmup))
        ratio = (in_warmup, ratio) if ratio is not None else None

        def sparse():
            enc, ok = self._encode_sparse(x, seed, lengths, ratio)
            if ok is None:
                return enc
            return tf.cond(ok, lambda: enc, lambda: self._encode_dense(x))

        return _Encoded(*tf.cond(fits, sparse, lambda: self._encode_dense(x)))

    @staticmethod
    def sent(enc):
        """What receivers decode of an encoding, as error feedback needs it."""
        return Sent(enc.rest, enc.positions, enc.values)

    # ------------------------------------------------- the summable encoding
    def summable_problems(self):
        """Why this compressor's payloads cannot be summed element by element
        by an all-reduce ([] if they can): positions every worker agrees on
        (sparsifier 'none', or 'randomk', whose positions follow the shared
        per-step seed), no index codec, values that add in a wire dtype."""
        problems = []
        if not self.sparsifier.data_independent:
            problems.append(f"compressor {self.sparsifier.name!r} picks different positions "
                            "on every worker (use 'none' or 'randomk')")
        if self.index_codec.name != "raw":
            problems.append(f"index codec {self.index_codec.name!r} writes bytes, which cannot "
                            "be summed (use deepreduce None or 'value')")
        if self.value_codec.name in SHARED_SCALE_CODECS:
            problems.append(f"value codec {self.value_codec.name!r} is summed as integers on a "
                            "scale the workers share, which only communicator "
                            "'sparse_allreduce' agrees (use raw, fp16 or bf16 here)")
        elif not self.value_codec.additive:
            problems.append(f"value codec {self.value_codec.name!r} is not additive (use raw, "
                            "fp16 or bf16)")
        elif self.value_codec.name not in SUMMABLE_WIRE_DTYPES:
            problems.append(f"value codec {self.value_codec.name!r} is summable but has no wire "
                            f"dtype here (use {', '.join(SUMMABLE_WIRE_DTYPES)})")
        return problems

    def wire_dtype(self, dtype):
        """The dtype summable values of a `dtype` gradient travel in."""
        return SUMMABLE_WIRE_DTYPES[self.value_codec.name] or dtype

    def encode_summable(self, x, seed, lengths):
        """A compensated flat vector -> (wire, positions, Sent): its values at
        the positions every worker shares (all of them for sparsifier 'none':
        positions None), in the wire dtype, to be summed element by element;
        the memory.Sent of what the receivers decode of it."""
        dtype = x.dtype
        wire_dtype = self.wire_dtype(dtype)
        none = (tf.zeros([0], tf.int64), tf.zeros([0], dtype))
        if self.sparsifier.dense:
            wire = tf.cast(x, wire_dtype)
            return wire, None, Sent(x - tf.cast(wire, dtype), *none)
        positions = tf.cast(self.sparsifier.select_segments(x, lengths, seed), tf.int64)
        wire = tf.cast(fusion_ops.gather(x, positions), wire_dtype)
        return wire, positions, Sent(x, positions, tf.cast(wire, dtype))

    @staticmethod
    def decode_summable(wire_sum, positions, n, dtype):
        """The sum of the workers' encode_summable() wires -> the flat [n]
        vector in `dtype` (scattered at the shared positions)."""
        if positions is None:
            return tf.cast(wire_sum, dtype)
        return fusion_ops.scatter_sum(positions, tf.cast(wire_sum, dtype), n)

    def _decode_sparse(self, meta, sections, n, dtype):
        if self.sparsifier.dense:
            return self._decode_all_positions(meta, sections, n, dtype)
        positions, values = self._decode_sparse_parts(meta, sections, n, dtype)
        return fusion_ops.scatter_sum(positions, values, n)

    def _sparse_count(self, meta, sections, n):
        # A CRC-valid header is still not trusted: 0 <= K <= count <= n
        # (count > K only for Bloom p0's false positives).
        k, count = meta[F_K], meta[F_COUNT]
        count = guarded(count,
                        check(count <= n, "payload header: value count exceeds the tensor's size"),
                        check(k <= count, "payload header: K exceeds the value count"),
                        *self._unused_checks(meta, sections))
        return k, count

    def _decode_all_positions(self, meta, sections, n, dtype):
        """A sparse-mode payload of a dense sparsifier: n values, in order."""
        value_section, perm_section = sections[1], sections[2]
        _, count = self._sparse_count(meta, sections, n)
        vc = self.value_codec
        count = guarded(count, check(tf.equal(count, n),
                                     "dense-sparsifier payload must carry n values"))
        values = vc.decode(value_section, count, dtype, n)
        if vc.sorting:
            perm = payload_ops.perm_decode(perm_section, count)
            return fusion_ops.scatter_sum(tf.cast(perm, tf.int64), tf.cast(values, dtype), n)
        return tf.reshape(tf.cast(values, dtype), [n])

    def _decode_sparse_parts(self, meta, sections, n, dtype):
        """A sparse-mode payload (sparsifier not dense) -> (positions, int64
        [count], unique; values [count] in dtype)."""
        index_section, value_section, perm_section = sections[:3]
        k, count = self._sparse_count(meta, sections, n)
        vc = self.value_codec
        if self.index_codec.carries_order:
            positions = self.index_codec.decode(index_section, n, count, None)
        else:
            positions = self.index_codec.decode(index_section, n, k, (meta[F_AUX0],
                                                                        meta[F_AUX1]))
        positions = guarded(positions, check(
            tf.equal(tf.size(positions, out_type=tf.int64), count),
            "decoded positions differ in number from the payload header's value count"))
        values = vc.decode(value_section, count, dtype, n)
        if vc.sorting and not self.index_codec.carries_order:
            perm = payload_ops.perm_decode(perm_section, count)
            positions = fusion_ops.gather(positions, perm)
        return tf.cast(positions, tf.int64), tf.cast(values, dtype)

    # -------------------------------------------------------------- public API
    def dense_payload(self, x, identity):
        """A tensor below min_size (or sent dense): its own bytes."""
        return self._dense_payload(x, identity)

    def tensor_payload(self, enc, dtype, n, identity):
        """One tensor's payload from its encoding (identity: the config
        field, self.identity(key, shape))."""
        meta = self._meta(enc.mode, dtype, n, enc.k, enc.count, (enc.aux0, enc.aux1),
                          config=identity)
        return payload_ops.pack([enc.index, enc.value, enc.perm], meta)

    @staticmethod
    def context(key, tensor, dense, payload, positions=None):
        """The Context of one tensor's payload."""
        n = tensor.shape.num_elements()
        nbytes = tf.size(payload, out_type=tf.int64) * payload.dtype.size
        return Context(key, tensor.shape, tensor.dtype, n, dense, n * tensor.dtype.size, nbytes,
                       positions)

    @_graph_safe
    def decompress(self, payload, ctx):
        """Decodes one payload of the variable described by ctx.

        Args:
          payload: what compress() returned on any worker for this variable.
          ctx: the Context from this worker's compress() of the variable.

        Returns:
          The decoded tensor, shape ctx.shape and dtype ctx.dtype.

        Raises:
          InvalidArgumentError: (run time) a corrupted, truncated, extended,
            foreign or newer-format payload, or the payload of another
            variable (another name or shape, even of the same size); the
            message says which.
        """
        if not isinstance(ctx, Context):
            raise TypeError(f"ctx must be the Context returned by compress(), got {ctx!r}")
        n, dtype = ctx.n, ctx.dtype
        expected = {F_INDEX: self.index_codec.codec_id, F_VALUE: self.value_codec.codec_id,
                    F_DTYPE: DTYPE_CODES[dtype], F_N: n}
        if ctx.dense:
            expected[F_MODE] = MODE_DENSE
        meta, sections = payload_ops.unpack(payload, NUM_SECTIONS, len(META_FIELDS),
                                            expected=expected, field_names=list(META_FIELDS))
        same = self._check_identity(meta, self.identity(ctx.name, ctx.shape),
                                    f"variable {ctx.name!r} of shape {ctx.shape.as_list()}")
        # The decoding reads the checked header and sections.
        meta = guarded(meta, same)
        sections = [guarded(s, same) for s in sections]
        if ctx.dense:
            flat = self._decode_dense(meta, sections, n, dtype)
        else:
            flat = self._decode_modes(meta, sections, n, dtype)
        return tf.reshape(flat, ctx.shape)

    def _decode_modes(self, meta, sections, n, dtype):
        mode = meta[F_MODE]
        mode = guarded(mode, check(mode <= MODE_SPARSE, "payload field 'mode' is not 0 or 1"))
        return tf.cond(
            tf.equal(mode, MODE_SPARSE),
            lambda: self._decode_sparse(meta, sections, n, dtype),
            lambda: self._decode_dense(meta, sections, n, dtype))

    def _decode_dense(self, meta, sections, n, dtype):
        """A dense-mode payload: n raw values; every other field zero or n,
        the index and permutation sections empty."""
        section = guarded(sections[1], *_dense_mode_checks(meta, sections, n))
        return value_codecs.RawValue().decode(section, tf.constant(n, tf.int64), dtype)

    def _unused_checks(self, meta, sections):
        """Checks that a sparse-mode payload leaves unused fields zero and
        unused sections empty (a CRC-valid payload is not trusted)."""
        checks = []
        if not self.index_codec.uses_aux:
            checks.append(check(tf.logical_and(tf.equal(meta[F_AUX0], 0),
                                               tf.equal(meta[F_AUX1], 0)),
                                f"payload fields aux0/aux1 must be 0 with index codec "
                                f"{self.index_codec.name!r}"))
        vc = self.value_codec
        if not (vc.sorting and (self.sparsifier.dense or not self.index_codec.carries_order)):
            checks.append(check(tf.equal(tf.size(sections[2]), 0),
                                "payload permutation section must be empty for this "
                                "configuration"))
        if self.sparsifier.dense:
            checks.append(check(tf.equal(tf.size(sections[0]), 0),
                                "payload index section must be empty without a sparsifier"))
        return checks

    def plan(self, keys, tensors):
        """The fusion plan of a batch (cached per keys, shapes and dtypes)."""
        signature = tuple((k, tuple(t.shape.as_list()), t.dtype) for k, t in zip(keys, tensors))
        plan = self._plans.get(signature)
        if plan is None:
            plan = fusion.make_plan(keys, [t.shape for t in tensors], [t.dtype for t in tensors],
                                    self.min_size, self.bucket_cap_mb)
            self._plans[signature] = plan
        return plan
