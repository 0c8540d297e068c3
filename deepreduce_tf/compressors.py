"""The compressor: sparsifier + index codec + value codec + memory, composed.

    payload, ctx = compressor.compress(grad, name="dense/kernel")
    ...payload travels (all-gather)...
    total = sum(compressor.decompress(p, ctx) for p in gathered)

Only the payload crosses the wire; ctx stays with the caller (shape, dtype,
byte counts). Every worker uses the same configuration, so a worker decodes
the other workers' payloads of the same variable with its own ctx.

Payload (all-gather communicator): one flat uint8 vector, the container of
deepreduce_tf.ops.payload (magic "DRPK", format version, CRC32C) holding
META_FIELDS and three sections: index, value, permutation.

  mode        0 = dense (the gradient's own bytes), 1 = sparse
  index_codec / value_codec   codec ids (codecs.index / codecs.value)
  dtype       1 float16, 2 bfloat16, 3 float32, 4 float64
  n           element count of the tensor
  config      CRC-32 of the decode-relevant configuration
  k           number of positions the sparsifier chose
  count       number of values sent (> k with Bloom p0)
  aux0, aux1  index codec parameters (Bloom m and h)

decompress() checks index_codec, value_codec, dtype, n and config against its
own configuration: a payload of another variable, another compressor
configuration or another program is refused with a message naming the field.
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
"""
import collections
import zlib

import tensorflow as tf

from deepreduce_tf.codecs import index as index_codecs
from deepreduce_tf.codecs import value as value_codecs
from deepreduce_tf.memory import Memory, NoMemory
from deepreduce_tf.ops import payload as payload_ops
from deepreduce_tf.sparsifiers import Sparsifier

DTYPE_CODES = {tf.float16: 1, tf.bfloat16: 2, tf.float32: 3, tf.float64: 4}
META_FIELDS = ("mode", "index_codec", "value_codec", "dtype", "n", "config", "k", "count",
               "aux0", "aux1")
F_MODE, F_INDEX, F_VALUE, F_DTYPE, F_N, F_CONFIG, F_K, F_COUNT, F_AUX0, F_AUX1 = range(10)
MODE_DENSE, MODE_SPARSE, MODE_SLICES = 0, 1, 2
NUM_SECTIONS = 3
NONFINITE_CHOICES = ("dense", "raise")
DEFAULT_MIN_SIZE = 1024
BATCH_FIELDS = ("count", "config")

Context = collections.namedtuple(
    "Context", ["name", "shape", "dtype", "n", "dense", "dense_bytes", "payload_bytes",
                "positions"])
SlicesContext = collections.namedtuple(
    "SlicesContext", ["name", "dense_shape", "dtype", "row_width", "dense_bytes",
                      "payload_bytes"])
SlicesContext.__doc__ = """What compress_slices() keeps locally.

dense_shape: the static shape of the dense gradient (vocabulary, ...);
row_width: elements per row; dense_bytes: bytes of the IndexedSlices as
given (values + int64 indices), the traffic it replaces; payload_bytes:
int64 scalar tensor."""

Context.__doc__ = """What compress() keeps locally.

name: the memory key; shape, dtype, n: the tensor's; dense: True if the
tensor is below min_size and always travels dense; dense_bytes: bytes of the
uncompressed tensor (Python int); payload_bytes: int64 scalar tensor, bytes
of this payload; positions: the agreed positions (all-reduce wire format
only, else None)."""


def _graph_safe(method):
    """Marks a method as graph-ready: it builds its graph with explicit
    tf.cond and never branches in Python on a tensor, so AutoGraph must not
    convert it (or the op wrappers it calls) inside the user's tf.function."""
    return tf.autograph.experimental.do_not_convert(method)


def _fingerprint(parts):
    text = repr(sorted(parts.items()))
    return zlib.crc32(text.encode()) & 0xFFFFFFFF


def _key_seed(key, seed):
    return (zlib.crc32(key.encode()) ^ (seed * 0x9E3779B1)) & 0x7FFFFFFF


class Compressor(tf.Module):
    """sparsifier + index codec + value codec + memory (+ a communicator).

    Args:
      sparsifier: a sparsifiers.Sparsifier.
      index_codec: a codecs.index.IndexCodec (default raw int32 positions).
      value_codec: a codecs.value.ValueCodec (default raw values).
      memory: a memory.Memory (default none).
      communicator: a communicators.Communicator (default all-gather); its
        compatibility with the rest is checked here.
      min_size: tensors with fewer elements travel dense (default 1024).
      nonfinite: 'dense' (default) or 'raise', see the module docstring.
      seed: base seed of randomk positions and QSGD rounding; the per-step
        seed is derived from it, the variable's key and a per-variable step
        counter, identical on every worker.
      ledger: an accounting.ByteLedger to record every compress into, or
        None; by default a new one (compressor.ledger).
      variable_factory: callable(initial_value, name) -> tf.Variable used
        for every state variable this compressor creates (residuals, step
        counters, byte counters) unless the memory/ledger brought their own;
        tf.distribute integrations use it to create per-replica variables.

    Raises:
      ValueError: an incompatible combination (the message says why).
    """

    def __init__(self, sparsifier, index_codec=None, value_codec=None, memory=None,
                 communicator=None, min_size=DEFAULT_MIN_SIZE, nonfinite="dense", seed=0,
                 ledger="default", variable_factory=None, name=None):
        super().__init__(name=name)
        from deepreduce_tf import accounting, communicators

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
        from deepreduce_tf.memory import default_variable_factory

        self.variable_factory = variable_factory or default_variable_factory
        self.memory = memory if memory is not None else NoMemory()
        if not isinstance(self.memory, Memory):
            raise TypeError(f"memory must be a deepreduce_tf.memory.Memory, got {memory!r}")
        self.communicator = (communicator if communicator is not None
                             else communicators.Allgather())
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
        if self.sparsifier.dense and self.index_codec.name != "raw":
            raise ValueError(f"index codec {self.index_codec.name!r} needs a sparsifier: with "
                             "compressor 'none' every position is sent and no index travels; "
                             "choose compressor topk, randomk or threshold, or deepreduce "
                             "None/'value'")
        self.communicator.check(self)
        if variable_factory is not None and getattr(self.memory, "_factory_given", True) is False:
            self.memory._factory = variable_factory
        self.ledger = (accounting.ByteLedger(variable_factory=self.variable_factory)
                       if ledger == "default" else ledger)
        self.steps = {}
        self.config_id = _fingerprint({
            "index": self.index_codec.name, "index_config": repr(self.index_codec.config()),
            "value": self.value_codec.name, "value_config": repr(self.value_codec.config()),
            "dense_sparsifier": self.sparsifier.dense,
        })

    # ----------------------------------------------------------------- helpers
    @property
    def additive(self):
        """True if this compressor emits the all-reduce (summable) wire format."""
        return self.communicator.additive

    def __repr__(self):
        return (f"Compressor({self.sparsifier!r}, index={self.index_codec!r}, "
                f"value={self.value_codec!r}, memory={type(self.memory).__name__}, "
                f"communicator={type(self.communicator).__name__}, min_size={self.min_size})")

    def _check_tensor(self, tensor, name):
        tensor = tf.convert_to_tensor(tensor)
        if tensor.dtype not in DTYPE_CODES:
            raise TypeError(f"cannot compress {name or 'tensor'} of dtype {tensor.dtype.name}: "
                            "deepreduce_tf compresses float16, bfloat16, float32 and float64 "
                            "gradients; reduce other dtypes without a compressor")
        if not tensor.shape.is_fully_defined():
            raise ValueError(f"cannot compress {name or 'tensor'} of shape {tensor.shape}: "
                             "compression needs a static shape (gradients of variables have one)")
        return tensor

    def _key(self, name):
        if name is None:
            if not isinstance(self.memory, NoMemory):
                raise ValueError("residual memory keeps one residual per variable: pass "
                                 "compress(tensor, name=...) with the variable's name")
            return "tensor"
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        return name

    def _needs_seed(self, dense):
        return not dense and (self.sparsifier.data_independent and not self.sparsifier.dense
                              or self.value_codec.seeded)

    def _step_seed(self, key):
        """A per-variable, per-step seed, equal on every worker."""
        counter = self.steps.get(key)
        if counter is None:
            with tf.init_scope():
                counter = self.variable_factory(tf.constant(0, tf.int64), "step")
            self.steps[key] = counter
        step = counter.assign_add(1)
        return step + tf.constant(_key_seed(key, self.seed) << 20, tf.int64)

    def _context(self, key, tensor, dense, payload, positions=None):
        n = tensor.shape.num_elements()
        nbytes = tf.size(payload, out_type=tf.int64) * payload.dtype.size
        ctx = Context(key, tensor.shape, tensor.dtype, n, dense, n * tensor.dtype.size,
                      nbytes, positions)
        if self.ledger is not None:
            self.ledger.record(ctx)
        return ctx

    def _meta(self, mode, dtype, n, k, count, aux):
        return tf.stack([
            tf.constant(mode, tf.int64), tf.constant(self.index_codec.codec_id, tf.int64),
            tf.constant(self.value_codec.codec_id, tf.int64),
            tf.constant(DTYPE_CODES[dtype], tf.int64), tf.constant(n, tf.int64),
            tf.constant(self.config_id, tf.int64), tf.cast(k, tf.int64),
            tf.cast(count, tf.int64), tf.cast(aux[0], tf.int64), tf.cast(aux[1], tf.int64)])

    def _dense_payload(self, x):
        n = x.shape.num_elements()
        empty = tf.zeros([0], tf.uint8)
        raw = value_codecs.RawValue().encode(x, None).section
        meta = self._meta(MODE_DENSE, x.dtype, n, n, n, (0, 0))
        return payload_ops.pack([empty, raw, empty], meta)

    # ---------------------------------------------------------------- encoding
    def _encode_sparse(self, x, seed):
        """x: flat compensated gradient. Returns (payload, decoded flat)."""
        n = x.shape.num_elements()
        dtype = x.dtype
        empty = tf.zeros([0], tf.uint8)
        zeros = (tf.constant(0, tf.int64), tf.constant(0, tf.int64))
        idx = self.sparsifier.select(x, seed)
        k = tf.size(idx, out_type=tf.int64)
        ienc = None
        if self.sparsifier.dense:
            ienc = index_codecs.IndexEncoding(empty, idx, zeros)
        elif not self.index_codec.carries_order:
            ienc = self.index_codec.encode(idx, n)
        positions = idx if ienc is None else ienc.positions
        count = tf.size(positions, out_type=tf.int64)
        values = tf.gather(x, positions)
        vc = self.value_codec
        if vc.name == "raw":
            venc = vc.encode(values, seed)
            decoded = values
        else:
            venc = vc.encode(tf.cast(values, tf.float32), seed)
            decoded = tf.cast(vc.decode(venc.section, count, dtype), dtype)
        order = positions
        perm_section = empty
        if venc.perm is not None:
            order = tf.gather(positions, venc.perm)
            if ienc is None:
                pass  # raw index: the positions travel in the codec's order
            else:
                perm_section = payload_ops.perm_encode(venc.perm)
        if ienc is None:
            ienc = self.index_codec.encode(order, n)
        meta = self._meta(MODE_SPARSE, dtype, n, k, count, ienc.aux)
        payload = payload_ops.pack([ienc.section, venc.section, perm_section], meta)
        local = tf.scatter_nd(tf.expand_dims(order, 1), decoded, [n])
        return payload, local

    def _decode_sparse(self, meta, sections, n, dtype):
        index_section, value_section, perm_section = sections
        k, count = meta[F_K], meta[F_COUNT]
        vc = self.value_codec
        if self.sparsifier.dense:
            tf.debugging.assert_equal(count, tf.constant(n, tf.int64),
                                      message="dense-sparsifier payload must carry n values")
            positions = tf.range(n, dtype=tf.int64)
        elif self.index_codec.carries_order:
            positions = self.index_codec.decode(index_section, n, count, None)
        else:
            positions = self.index_codec.decode(index_section, n, k, (meta[F_AUX0],
                                                                        meta[F_AUX1]))
            tf.debugging.assert_equal(tf.size(positions, out_type=tf.int64), count,
                                      message="decoded positions differ in number from the "
                                              "payload header's value count")
        values = vc.decode(value_section, count, dtype)
        if vc.sorting and not (self.index_codec.carries_order and not self.sparsifier.dense):
            perm = payload_ops.perm_decode(perm_section, count)
            positions = tf.gather(positions, perm)
        return tf.scatter_nd(tf.expand_dims(positions, 1), tf.cast(values, dtype), [n])

    # -------------------------------------------------------------- public API
    @_graph_safe
    def compress(self, tensor, name=None):
        """Compresses one gradient (memory compensation and update included).

        Args:
          tensor: float16/bfloat16/float32/float64 tensor of static shape.
          name: the variable's name (the memory key); required with residual
            memory.

        Returns:
          (payload, ctx): payload is a uint8 vector (all-gather) or the
          summable value vector (all-reduce); ctx a Context, kept locally.

        Raises:
          TypeError / ValueError: unsupported dtype, dynamic shape, missing
            name.
          InvalidArgumentError: (run time) NaN/Inf with nonfinite='raise'.
        """
        key = self._key(name)
        tensor = self._check_tensor(tensor, key)
        n = tensor.shape.num_elements()
        dense = n < self.min_size
        x = tf.reshape(tensor, [-1])
        x = self.memory.compensate(x, key)
        if self.additive:
            return self._compress_additive(x, key, tensor, dense)
        if dense:
            payload = self._dense_payload(x)
            self.memory.update(key, x, x)
            return payload, self._context(key, tensor, True, payload)
        if self.nonfinite == "raise":
            x = tf.debugging.assert_all_finite(
                x, message=f"gradient {key!r} holds NaN or Inf (nonfinite='raise')")
        seed = self._step_seed(key) if self._needs_seed(False) else tf.constant(0, tf.int64)
        if self.nonfinite == "dense":
            finite = tf.reduce_all(tf.math.is_finite(x))
            payload, local = tf.cond(finite, lambda: self._encode_sparse(x, seed),
                                     lambda: (self._dense_payload(x), x))
            self.memory.update(key, x, local, keep=tf.logical_not(finite))
        else:
            payload, local = self._encode_sparse(x, seed)
            self.memory.update(key, x, local)
        return payload, self._context(key, tensor, False, payload)

    def _compress_additive(self, x, key, tensor, dense):
        n = x.shape.num_elements()
        if dense or self.sparsifier.dense:
            positions = None
            wire = self._additive_cast(x)
            local = tf.cast(wire, x.dtype)
        else:
            positions = self.sparsifier.select(x, self._step_seed(key))
            wire = self._additive_cast(tf.gather(x, positions))
            local = tf.scatter_nd(tf.expand_dims(positions, 1), tf.cast(wire, x.dtype), [n])
        self.memory.update(key, x, local)
        return wire, self._context(key, tensor, dense, wire, positions)

    def _additive_cast(self, values):
        target = {"raw": values.dtype, "fp16": tf.float16, "bf16": tf.bfloat16}[
            self.value_codec.name]
        return tf.cast(values, target)

    @_graph_safe
    def decompress(self, payload, ctx):
        """Decodes one payload of the variable described by ctx.

        Args:
          payload: what compress() returned on any worker for this variable
            (or, all-reduce, the sum of those).
          ctx: the Context from this worker's compress() of the variable.

        Returns:
          The decoded tensor, shape ctx.shape and dtype ctx.dtype.

        Raises:
          InvalidArgumentError: (run time) a corrupted, truncated, extended,
            foreign or newer-format payload; the message says which.
        """
        if not isinstance(ctx, Context):
            raise TypeError(f"ctx must be the Context returned by compress(), got {ctx!r}")
        n, dtype = ctx.n, ctx.dtype
        if self.additive:
            wire = tf.cast(tf.convert_to_tensor(payload), dtype)
            if ctx.positions is None:
                return tf.reshape(wire, ctx.shape)
            return tf.reshape(tf.scatter_nd(tf.expand_dims(ctx.positions, 1), wire, [n]),
                              ctx.shape)
        expected = {F_INDEX: self.index_codec.codec_id, F_VALUE: self.value_codec.codec_id,
                    F_DTYPE: DTYPE_CODES[dtype], F_N: n, F_CONFIG: self.config_id}
        if ctx.dense:
            expected[F_MODE] = MODE_DENSE
        meta, sections = payload_ops.unpack(payload, NUM_SECTIONS, len(META_FIELDS),
                                            expected=expected, field_names=list(META_FIELDS))

        def dense():
            return value_codecs.RawValue().decode(sections[1], tf.constant(n, tf.int64), dtype)

        if ctx.dense:
            flat = dense()
        else:
            mode = meta[F_MODE]
            tf.debugging.assert_less_equal(mode, tf.constant(MODE_SPARSE, tf.int64),
                                           message="payload field 'mode' is not 0 or 1")
            flat = tf.cond(tf.equal(mode, MODE_SPARSE),
                           lambda: self._decode_sparse(meta, sections, n, dtype), dense)
        return tf.reshape(flat, ctx.shape)

    # ----------------------------------------------------------- IndexedSlices
    def _slices_row_codec(self):
        """The index codec for embedding rows: the configured one when it is
        lossless, else golomb (a Bloom filter would drop rows, and row
        gradients keep no residual)."""
        if self.index_codec.lossless:
            return self.index_codec
        return index_codecs.GolombIndex()

    @_graph_safe
    def compress_slices(self, slices, name=None, dense_shape=None):
        """Compresses a tf.IndexedSlices gradient without densifying it.

        Duplicate rows are summed, rows are sorted and coded losslessly by the
        index codec (golomb when the configured one is a Bloom filter; raw
        int32 with deepreduce None/'value'), the row values by the value
        codec. No sparsifier and no memory apply: the slices are already
        sparse, and a lossy value codec's error on them is not fed back.

        Args:
          slices: tf.IndexedSlices with values [m, ...] and indices [m].
          name: the variable's name (for accounting).
          dense_shape: the dense gradient's static shape, if
            slices.dense_shape is not statically known.

        Returns:
          (payload, SlicesContext).
        """
        if not isinstance(slices, tf.IndexedSlices):
            raise TypeError(f"compress_slices needs a tf.IndexedSlices, got {type(slices)}")
        if self.additive:
            raise ValueError("IndexedSlices cannot be all-reduced element-wise (their rows "
                             "differ between workers); use communicator='allgather'")
        key = name or "slices"
        values = tf.convert_to_tensor(slices.values)
        if values.dtype not in DTYPE_CODES:
            raise TypeError(f"cannot compress IndexedSlices {key!r} of dtype "
                            f"{values.dtype.name}; supported: float16, bfloat16, float32, "
                            "float64")
        if dense_shape is None and slices.dense_shape is not None:
            dense_shape = tf.get_static_value(slices.dense_shape)
        if dense_shape is None:
            raise ValueError(f"IndexedSlices {key!r}: dense_shape is not static; pass "
                             "compress_slices(..., dense_shape=variable.shape)")
        dense_shape = tf.TensorShape([int(d) for d in dense_shape])
        if not values.shape[1:].is_compatible_with(dense_shape[1:]):
            raise ValueError(f"IndexedSlices {key!r}: values shape {values.shape} does not "
                             f"match dense shape {dense_shape}")
        vocab = int(dense_shape[0])
        width = int(dense_shape[1:].num_elements())
        dtype = values.dtype
        indices = tf.cast(slices.indices, tf.int64)
        rows, where = tf.unique(indices)
        merged = tf.math.unsorted_segment_sum(tf.reshape(values, [-1, width]), where,
                                              tf.size(rows))
        order = tf.argsort(rows)
        rows = tf.gather(rows, order)
        merged = tf.gather(merged, order)
        flat = tf.reshape(merged, [-1])
        u = tf.size(rows, out_type=tf.int64)
        count = u * width
        codec = self._slices_row_codec()
        ienc = codec.encode(rows, vocab)
        vc = self.value_codec
        empty = tf.zeros([0], tf.uint8)
        perm_section = empty
        if vc.name == "raw":
            vsec = vc.encode(flat, None).section
        else:
            venc = vc.encode(tf.cast(flat, tf.float32), tf.constant(0, tf.int64))
            vsec = venc.section
            if venc.perm is not None:
                perm_section = payload_ops.perm_encode(venc.perm)
        meta = tf.stack([
            tf.constant(MODE_SLICES, tf.int64), tf.constant(codec.codec_id, tf.int64),
            tf.constant(vc.codec_id, tf.int64), tf.constant(DTYPE_CODES[dtype], tf.int64),
            tf.constant(dense_shape.num_elements(), tf.int64),
            tf.constant(self.config_id, tf.int64), u, count,
            tf.constant(vocab, tf.int64), tf.constant(width, tf.int64)])
        payload = payload_ops.pack([ienc.section, vsec, perm_section], meta)
        nbytes = tf.size(payload, out_type=tf.int64)
        given = values.shape.num_elements()
        dense_bytes = ((given * dtype.size + 8 * int(values.shape[0]))
                       if given is not None else
                       tf.size(values, out_type=tf.int64) * dtype.size
                       + 8 * tf.size(indices, out_type=tf.int64))
        ctx = SlicesContext(key, dense_shape, dtype, width, dense_bytes, nbytes)
        if self.ledger is not None:
            self.ledger.record(ctx)
        return payload, ctx

    @_graph_safe
    def decompress_slices(self, payload, ctx):
        """Decodes a compress_slices() payload of any worker: tf.IndexedSlices
        with sorted unique int64 row indices."""
        if not isinstance(ctx, SlicesContext):
            raise TypeError(f"ctx must be the SlicesContext of compress_slices(), got {ctx!r}")
        codec = self._slices_row_codec()
        vocab = int(ctx.dense_shape[0])
        expected = {F_MODE: MODE_SLICES, F_INDEX: codec.codec_id,
                    F_VALUE: self.value_codec.codec_id, F_DTYPE: DTYPE_CODES[ctx.dtype],
                    F_N: ctx.dense_shape.num_elements(), F_CONFIG: self.config_id,
                    F_AUX0: vocab, F_AUX1: ctx.row_width}
        meta, (isec, vsec, psec) = payload_ops.unpack(
            payload, NUM_SECTIONS, len(META_FIELDS), expected=expected,
            field_names=list(META_FIELDS))
        u, count = meta[F_K], meta[F_COUNT]
        rows = codec.decode(isec, vocab, u, None)
        vc = self.value_codec
        values = tf.cast(vc.decode(vsec, count, ctx.dtype), ctx.dtype)
        if vc.sorting:
            perm = payload_ops.perm_decode(psec, count)
            values = tf.scatter_nd(tf.expand_dims(perm, 1), values, [count])
        values = tf.reshape(values, [-1] + ctx.dense_shape[1:].as_list())
        return tf.IndexedSlices(values, rows,
                                tf.constant(ctx.dense_shape.as_list(), tf.int64))

    # ----------------------------------------------------------------- batches
    @_graph_safe
    def compress_batch(self, tensors, names=None):
        """Compresses several gradients into ONE payload (fewer exchanges).

        Returns (payload, ctxs): the batch payload (all-gather: a container
        of kind KIND_BATCH whose sections are the per-tensor payloads;
        all-reduce: the concatenation of the value vectors in a common dtype)
        and the list of per-tensor contexts.
        """
        tensors = list(tensors)
        if names is None:
            names = [None] * len(tensors)
        names = list(names)
        if len(names) != len(tensors):
            raise ValueError(f"{len(tensors)} tensors but {len(names)} names")
        parts, ctxs = [], []
        for t, nm in zip(tensors, names):
            p, c = self.compress(t, nm)
            parts.append(p)
            ctxs.append(c)
        if self.additive:
            wire_dtype = self._batch_wire_dtype([c.dtype for c in ctxs])
            return tf.concat([tf.cast(p, wire_dtype) for p in parts], 0), ctxs
        meta = tf.constant([len(parts), self.config_id], tf.int64)
        return payload_ops.pack(parts, meta, kind=payload_ops.KIND_BATCH), ctxs

    def _batch_wire_dtype(self, dtypes):
        if self.value_codec.name != "raw":
            return {"fp16": tf.float16, "bf16": tf.bfloat16}[self.value_codec.name]
        widest = max(dtypes, key=lambda d: (d.size, d == tf.float16))
        return widest

    @_graph_safe
    def decompress_batch(self, payload, ctxs):
        """Inverse of compress_batch: the list of decoded tensors."""
        ctxs = list(ctxs)
        if self.additive:
            out, start = [], 0
            for c in ctxs:
                length = c.n if c.positions is None else c.positions.shape[0]
                if length is None:
                    raise ValueError("all-reduce batches need static position counts")
                out.append(self.decompress(payload[start:start + length], c))
                start += length
            return out
        _, parts = payload_ops.unpack(payload, len(ctxs), len(BATCH_FIELDS),
                                      kind=payload_ops.KIND_BATCH,
                                      expected={0: len(ctxs), 1: self.config_id},
                                      field_names=list(BATCH_FIELDS))
        return [self.decompress(p, c) for p, c in zip(parts, ctxs)]
