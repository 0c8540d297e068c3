"""Communicators (GRACE's Communicator): a communicator owns the step.

    communicator.step(transport, compressors, tensors_by_replica, keys)
        compensate -> compress -> exchange -> decode -> sum -> replicate

  allgather  every replica compresses its whole batch into ONE payload
             (fused buckets, Compressor.compress_batch); the payloads are
             all-gathered; the process decodes each payload ONCE and sums
             them in replica order; the sum is copied to every replica.
             Works with every compressor.
  allreduce  the payloads are summed element by element by the collective and
             decoded once. Only compressors whose payloads are summable
             qualify: positions every worker agrees on (compressor 'none', or
             'randomk', whose positions are a function of the shared per-step
             seed) and values that add (value raw, fp16 or bf16, no index
             codec). Anything else is refused at construction. The dense
             section of a bucket is summed in its own dtype.

Both route tf.IndexedSlices (embedding gradients) the same way: each
replica's slices are compressed with Compressor.compress_slices and
all-gathered (rows differ between replicas, so they cannot be summed
element-wise), then concatenated. step_all() reduces a whole batch, dense
tensors and slices; Allgather sends its batch payload and all its slices
payloads in ONE collective (Transport.all_gather_parts).

The transport (deepreduce_tf.transport) moves the bytes: between devices of
one process, or through TensorFlow's collectives across workers. Adding a
communicator is one subclass of Communicator implementing reduce_flat().
exchange_locally() runs the protocol among compressors in one process, for
tests and for trying a configuration.
"""
import abc
import collections

import tensorflow as tf

from deepreduce_tf import fusion
from deepreduce_tf._checks import guarded
from deepreduce_tf.accounting import ring_received
from deepreduce_tf.memory import Sent
from deepreduce_tf.ops import codec_table
from deepreduce_tf.transport import LocalTransport, ordered_sum


class Communicator(abc.ABC):
    name = None
    # True if payloads are summed element-wise by the transport.
    additive = False

    def check(self, compressor):
        """Raises ValueError if `compressor` cannot use this communicator."""

    @abc.abstractmethod
    def reduce_flat(self, transport, compressors, tensors_by_replica, keys):
        """The SUM over the group of a batch, as flat bucket vectors.

        Args:
          transport: a transport.Transport.
          compressors: one Compressor per device of the transport (each with
            its own memory), same configuration.
          tensors_by_replica: per device, the batch's tensors (same keys,
            shapes and dtypes on every replica).
          keys: one unique name per tensor (memory and accounting key).

        Returns:
          (plan, sums): the fusion.Plan and one flat summed vector per
          bucket, on transport.reduce_device.
        """

    def step(self, transport, compressors, tensors_by_replica, keys, average=False,
             effects=()):
        """compensate -> compress -> exchange -> decode -> sum -> replicate.

        Returns, per device of the transport, the reduced tensors in batch
        order (bit-identical on every device). average: divide by the number
        of replicas in the group (ReduceOp.MEAN). effects: ops (counters) the
        result must depend on, so that a TF1 graph runs them.
        """
        plan, sums = self.reduce_flat(transport, compressors, tensors_by_replica, keys)
        return self._finish(transport, plan, sums, average, effects)

    @staticmethod
    def _finish(transport, plan, sums, average, effects):
        """The summed buckets -> the reduced tensors on every device."""
        effects = list(effects) + list(transport.effects)
        if effects:
            sums = [guarded(s_, *effects) for s_ in sums]
        if average:
            with tf.device(transport.reduce_device):
                sums = [s / tf.cast(transport.num_replicas, s.dtype) for s in sums]
        copies = [transport.replicate(s) for s in sums]  # [bucket][device]
        out = []
        for d, device in enumerate(transport.devices):
            with tf.device(device):
                out.append(plan.unpack([c[d] for c in copies]))
        return out

    def step_slices(self, transport, compressors, slices_by_replica, key, average=False,
                    effects=()):
        """The reduction of one tf.IndexedSlices gradient: compressed with
        compress_slices, all-gathered, decoded once, concatenated; returns a
        copy per device."""
        payloads, ctx = self._compress_slices(transport, compressors, slices_by_replica, key)
        received = transport.all_gather(payloads, key=f"slices/{key}")
        return self._finish_slices(transport, compressors, key, received, payloads, ctx,
                                   average, effects)

    @staticmethod
    def _compress_slices(transport, compressors, slices_by_replica, key):
        payloads, ctx = [], None
        for comp, device, sl in zip(compressors, transport.devices, slices_by_replica):
            with tf.device(device):
                p, c = comp.compress_slices(sl, key)
            payloads.append(p)
            ctx = ctx or c
        return payloads, ctx

    def _finish_slices(self, transport, compressors, key, received, payloads, ctx, average,
                       effects):
        with tf.device(transport.reduce_device):
            effects = list(effects) + self.record_received(compressors, f"slices/{key}",
                                                           received, payloads)
            parts = [compressors[0].decompress_slices(p, ctx) for p in received]
            total = tf.IndexedSlices(tf.concat([p.values for p in parts], 0),
                                     tf.concat([p.indices for p in parts], 0),
                                     parts[0].dense_shape)
            values = guarded(total.values, *effects, *transport.effects)
            if average:
                values = values / tf.cast(transport.num_replicas, values.dtype)
            total = tf.IndexedSlices(values, total.indices, total.dense_shape)
        return transport.replicate(total)

    def step_all(self, transport, compressors, tensors_by_replica, keys, slices_by_replica,
                 slice_keys, average=False, effects=()):
        """A whole batch: its dense tensors (step()) and its tf.IndexedSlices
        (step_slices()). Returns (dense, slices): dense[d] as step() returns
        it (None without dense tensors), slices[j][d] the reduced slices j on
        device d. This default exchanges them one after the other; Allgather
        sends all of them in one collective."""
        dense = None
        if keys:
            dense = self.step(transport, compressors, tensors_by_replica, keys, average=average,
                              effects=effects)
        slices = [self.step_slices(transport, compressors, [s[j] for s in slices_by_replica],
                                   key, average=average, effects=effects)
                  for j, key in enumerate(slice_keys)]
        return dense, slices

    @staticmethod
    def record_received(compressors, key, received, sent):
        """Records, for each replica of this call, the bytes of the gathered
        payloads `received` that came from the others (all of them but its
        own `sent[d]`). Returns the ledger ops."""
        total = tf.add_n([tf.size(p, out_type=tf.int64) for p in received])
        ops = []
        for comp, own in zip(compressors, sent):
            if comp.ledger is not None:
                ops += comp.ledger.record_received(key, total - tf.size(own, out_type=tf.int64))
        return [op for op in ops if op is not None]

    @staticmethod
    def record_reduced(transport, compressors, key, vectors):
        """Records what an all-reduce of `vectors` (one replica's) delivers
        to each replica: a ring all-reduce's 2 (R - 1) / R of their bytes."""
        r = transport.num_replicas
        nbytes = tf.add_n([tf.size(v, out_type=tf.int64) * v.dtype.size for v in vectors]
                          or [tf.constant(0, tf.int64)])
        ops = []
        for comp in compressors:
            if comp.ledger is not None:
                ops += comp.ledger.record_received(key, ring_received(nbytes, r))
        return [op for op in ops if op is not None]

    def __repr__(self):
        return f"{type(self).__name__}()"


class Allgather(Communicator):
    name = "allgather"

    @staticmethod
    def _compress_batch(transport, compressors, tensors_by_replica, keys):
        payloads, ctx = [], None
        for comp, device, tensors in zip(compressors, transport.devices, tensors_by_replica):
            with tf.device(device):
                p, c = comp.compress_batch(tensors, keys)
            payloads.append(p)
            ctx = ctx or c
        return payloads, ctx

    def _sum_batch(self, transport, compressors, key, received, payloads, ctx):
        decoder = compressors[0]  # decoding needs the configuration only, no state
        with tf.device(transport.reduce_device):
            ops = self.record_received(compressors, key, received, payloads)
            sums = decoder.decompress_batch_sum(received, ctx)
            sums = [guarded(s_, *ops) for s_ in sums]
        return ctx.plan, sums

    def reduce_flat(self, transport, compressors, tensors_by_replica, keys):
        payloads, ctx = self._compress_batch(transport, compressors, tensors_by_replica, keys)
        key = "batch/" + "|".join(keys)
        received = transport.all_gather(payloads, key=key)
        return self._sum_batch(transport, compressors, key, received, payloads, ctx)

    def step_all(self, transport, compressors, tensors_by_replica, keys, slices_by_replica,
                 slice_keys, average=False, effects=()):
        """The batch payload and every slices payload of each replica travel
        in ONE all-gather (Transport.all_gather_parts), then decode as in
        step() and step_slices()."""
        if not slice_keys or (not keys and len(slice_keys) == 1):
            return super().step_all(transport, compressors, tensors_by_replica, keys,
                                    slices_by_replica, slice_keys, average, effects)
        parts = [[] for _ in transport.devices]
        batch = None
        if keys:
            batch = self._compress_batch(transport, compressors, tensors_by_replica, keys)
            for d, p in enumerate(batch[0]):
                parts[d].append(p)
        sliced = []
        for j, key in enumerate(slice_keys):
            payloads, ctx = self._compress_slices(
                transport, compressors, [s[j] for s in slices_by_replica], key)
            sliced.append((payloads, ctx))
            for d, p in enumerate(payloads):
                parts[d].append(p)
        received = transport.all_gather_parts(
            parts, key="step/" + "|".join(list(keys) + [f"slices/{k}" for k in slice_keys]))
        dense = None
        if keys:
            plan, sums = self._sum_batch(transport, compressors, "batch/" + "|".join(keys),
                                         received[0], *batch)
            dense = self._finish(transport, plan, sums, average, effects)
            received = received[1:]
        slices = [self._finish_slices(transport, compressors, key, got, payloads, ctx, average,
                                      effects)
                  for key, got, (payloads, ctx) in zip(slice_keys, received, sliced)]
        return dense, slices


class Allreduce(Communicator):
    name = "allreduce"
    additive = True

    def check(self, compressor):
        problems = []
        if not compressor.sparsifier.data_independent:
            problems.append(f"compressor {compressor.sparsifier.name!r} picks different "
                            "positions on every worker (use 'none' or 'randomk')")
        if compressor.index_codec.name != "raw":
            problems.append(f"index codec {compressor.index_codec.name!r} writes bytes, "
                            "which cannot be summed (use deepreduce None or 'value')")
        if not compressor.value_codec.additive:
            problems.append(f"value codec {compressor.value_codec.name!r} is not additive "
                            "(use raw, fp16 or bf16)")
        elif compressor.value_codec.name not in self.WIRE_DTYPES:
            problems.append(f"value codec {compressor.value_codec.name!r} is summable but has no "
                            f"wire dtype here (use {', '.join(self.WIRE_DTYPES)})")
        if getattr(compressor, "warmup_steps", 0) or getattr(compressor, "clip_norm", None):
            problems.append("warm-up and local clipping are implemented by the all-gather "
                            "exchange only")
        if problems:
            raise ValueError("communicator 'allreduce' sums payloads element by element, but "
                             + "; ".join(problems) + ". Use communicator='allgather', which "
                             "works with every combination.")

    # value codec -> the dtype its summable values travel in (None: the
    # gradient's own): the codec table's wire_dtype column.
    WIRE_DTYPES = {name: None if dtype == "gradient" else tf.as_dtype(dtype)
                   for name, dtype in codec_table.wire_dtypes().items()}

    @classmethod
    def wire_dtype(cls, compressor, dtype):
        """The dtype the summable values travel in."""
        return cls.WIRE_DTYPES[compressor.value_codec.name] or dtype

    def encode_bucket(self, compressor, bucket, flat):
        """One replica's summable vectors of a bucket: [values at the agreed
        positions in the wire dtype, the dense section]. Updates the memory
        with what the receivers will decode. Returns (vectors, positions)."""
        from deepreduce_tf.compressors import BucketContext

        comp = compressor
        key, sparse_n = bucket.key, bucket.sparse_n
        x, rest = flat[:sparse_n], flat[sparse_n:]
        seeded = sparse_n > 0 and not comp.sparsifier.dense
        deps = comp.state_dependencies(key, x if sparse_n else None, seeded)
        positions, update = None, None
        with tf.control_dependencies(deps):
            if sparse_n:
                x = comp.memory.compensate(x, key)
                if comp.nonfinite == "raise":
                    x = tf.debugging.assert_all_finite(
                        x, message=f"gradient {key!r} holds NaN or Inf (nonfinite='raise')")
                wire_dtype = self.wire_dtype(comp, bucket.dtype)
                none = (tf.zeros([0], tf.int64), tf.zeros([0], bucket.dtype))
                if comp.sparsifier.dense:
                    wire = tf.cast(x, wire_dtype)
                    sent = Sent(x - tf.cast(wire, bucket.dtype), *none)
                else:
                    positions = comp.sparsifier.select_segments(x, bucket.lengths,
                                                                comp.step_seed(key))
                    wire = tf.cast(tf.gather(x, positions), wire_dtype)
                    sent = Sent(x, tf.cast(positions, tf.int64), tf.cast(wire, bucket.dtype))
                # A step holding NaN/Inf still travels (the sum shows the
                # overflow to loss scaling) but leaves the residual as it was:
                # one bad step must not poison every later one.
                keep = tf.logical_not(tf.reduce_all(tf.math.is_finite(x)))
                update = comp.memory.update_sent(key, x, sent, keep=keep)
            else:
                wire = tf.zeros([0], bucket.dtype)
            nbytes = tf.add_n([tf.size(v, out_type=tf.int64) * v.dtype.size
                               for v in (wire, rest)])
            effects = [update] + comp.record(BucketContext(key, bucket, bucket.dtype, bucket.n,
                                                           bucket.nbytes, nbytes))
            vectors = [guarded(wire, *effects), rest]
        return vectors, positions

    @staticmethod
    def decode_bucket(bucket, summed, positions):
        wire, rest = summed
        if positions is None:
            sparse = tf.cast(wire, bucket.dtype)
        else:
            sparse = tf.scatter_nd(tf.expand_dims(positions, 1), tf.cast(wire, bucket.dtype),
                                   [bucket.sparse_n])
        return tf.concat([sparse, rest], 0) if bucket.dense_n else sparse

    def reduce_flat(self, transport, compressors, tensors_by_replica, keys):
        vectors, plan, positions = [], None, None
        for comp, device, tensors in zip(compressors, transport.devices, tensors_by_replica):
            with tf.device(device):
                tensors = [tf.convert_to_tensor(t) for t in tensors]
                plan = comp.plan(keys, tensors)
                mine, where = [], []
                for bucket, flat in zip(plan.buckets, plan.pack(tensors)):
                    vecs, pos = self.encode_bucket(comp, bucket, flat)
                    mine.extend(vecs)
                    where.append(pos)
            vectors.append(mine)
            positions = positions or where  # the same on every replica
        summed = transport.all_reduce(vectors)
        with tf.device(transport.reduce_device):
            ops = self.record_reduced(transport, compressors, "allreduce/" + "|".join(keys),
                                      vectors[0])
            sums = [guarded(self.decode_bucket(b, summed[2 * i:2 * i + 2], positions[i]), *ops)
                    for i, b in enumerate(plan.buckets)]
        return plan, sums


COMMUNICATORS = collections.OrderedDict((c.name, c) for c in (Allgather, Allreduce))


def register(cls):
    """Adds a Communicator subclass (its `name`; its from_params keys, if
    any, in cls.PARAMS: codecs.base.Param, passed to the constructor)."""
    if not (isinstance(cls, type) and issubclass(cls, Communicator)) or not cls.name:
        raise TypeError(f"expected a named Communicator subclass, got {cls!r}")
    if cls.name in COMMUNICATORS and COMMUNICATORS[cls.name] is not cls:
        raise ValueError(f"communicator {cls.name!r} is already registered")
    COMMUNICATORS[cls.name] = cls
    return cls


def param_keys():
    """The from_params keys of every registered communicator."""
    return tuple(p.key for c in COMMUNICATORS.values() for p in getattr(c, "PARAMS", ()))


def make_communicator(name, **kwargs):
    """A communicator by name; kwargs: its PARAMS (and 'seed' if it takes one)."""
    if name not in COMMUNICATORS:
        raise ValueError(f"unknown communicator {name!r}; valid choices: "
                         f"{', '.join(COMMUNICATORS)}")
    return COMMUNICATORS[name](**kwargs)


def exchange_locally(compressors, tensors, name=None, average=False):
    """One reduction of one tensor among len(compressors) simulated workers in
    one process (the current device).

    Worker i compresses tensors[i] with compressors[i] (its own memory), the
    payloads are exchanged as compressors[0].communicator prescribes, and the
    sum is decoded. Returns (results, payloads): each worker's reduced tensor
    (bit-identical by construction) and the payloads that travelled:
    all-gather: each worker's Compressor.compress() payload (decode it with
    Compressor.decompress); all-reduce: each worker's summable value vector.
    """
    compressors, tensors = list(compressors), list(tensors)
    if len(compressors) != len(tensors) or not compressors:
        raise ValueError("exchange_locally needs one tensor per compressor (at least one)")
    communicator = compressors[0].communicator
    count = tf.cast(len(compressors), tf.as_dtype(tf.convert_to_tensor(tensors[0]).dtype))
    if not communicator.additive:
        sent = [c.compress(t, name) for c, t in zip(compressors, tensors)]
        ctx = sent[0][1]
        total = ordered_sum([compressors[0].decompress(p, ctx) for p, _ in sent])
        payloads = [p for p, _ in sent]
    else:
        key = compressors[0]._key(name)  # pylint: disable=protected-access
        tensors = [tf.convert_to_tensor(t) for t in tensors]
        plan = fusion.make_plan([key], [tensors[0].shape], [tensors[0].dtype],
                                compressors[0].min_size)
        (bucket,) = plan.buckets
        sent = [communicator.encode_bucket(c, bucket, tf.reshape(t, [-1]))
                for c, t in zip(compressors, tensors)]
        summed = [ordered_sum(parts) for parts in zip(*[v for v, _ in sent])]
        flat = communicator.decode_bucket(bucket, summed, sent[0][1])
        total = tf.reshape(flat, tensors[0].shape)
        payloads = [v[0] if bucket.sparse_n else v[1] for v, _ in sent]
    if average:
        total = total / count
    return [tf.identity(total) for _ in compressors], payloads
