"""The step, written once (GRACE's Communicator.step).

    communicator.step(transport, exchanges, tensors_by_replica, keys)

  1. prepare   every replica clips its batch, fuses it into buckets and
               compensates each bucket with its memory; its step counter
               gives the step's seed (Exchange.prepare_batch);
  2. transfer  what travels, and how: the only part a communicator writes,
               as rounds (Communicator.rounds, exchange/rounds.py): it
               computes on each replica's device and yields what must
               travel (Gather, Sum, ...); rounds.run hands each request to
               the transport and sends the result back;
  3. commit    every replica updates its memory with exactly what the
               receivers decoded of its contribution, and records the bytes
               it sent and received (Exchange.commit);
  4. finish    the sum (divided by the number of replicas for MEAN) is
               copied to every replica: bit-identical everywhere.

A communicator is a method's rounds: it writes rounds() (and never calls
the transport: it sees the topology as a rounds.Group), declares what
travels (travels) and the state it keeps (state_vars, make_state), and
says which keys count steps and need seeds (counts) and whether prepare
checks the value codec's range (checks_range). The transport moves the
tensors (in one process, across processes, hierarchically); the rules of
the step (compensation and memory update, the non-finite policy, counters
and seeds, clipping, warm-up, byte records) are Exchange.prepare's and
commit's, never a communicator's. Allgather and Allreduce
(deepreduce_tf.exchange), PowerSGD (exchange/powersgd.py) and LGC
(deepreduce_tf.learned.lgc) differ only in their rounds; a new one is one
module and one line in deepreduce_tf.communicators.

tf.IndexedSlices (embedding gradients) travel the same way with every
communicator: compressed per replica (Exchange.compress_slices: no memory),
all-gathered (rows differ between replicas, so they cannot be summed
element-wise) and concatenated.
"""
import abc
import collections

import tensorflow as tf

from deepreduce_tf._checks import guarded
from deepreduce_tf.accounting import ring_received
from deepreduce_tf.exchange import rounds as rounds_lib

Transfer = collections.namedtuple("Transfer", ["sums", "outcomes", "sent", "received",
                                               "support"], defaults=(None,))
Transfer.__doc__ = """What a communicator's rounds() return (and transfer() passes on).

sums: one flat summed vector per bucket, on the transport's reduce device;
outcomes[r][b]: replica r's exchange.Outcome of bucket b (what its memory
keeps, its ledger records); sent[r], received[r]: lists of (key, bytes) to
record for replica r beyond the buckets' own (a batch container, the bytes
received from the others); support: (|U|, k) of a sparse all-reduce step
(0, 0 on a dense one), recorded by every replica (None: not one)."""


class Communicator(abc.ABC):
    """Decides what travels; the step around it is written here once."""

    name = None
    # What travels, declared (docs, repr, the cost model's reader): which
    # collectives a step runs and what each carries.
    travels = None
    # The collectives its rounds run, declared: "gather" (bytes, all-gather)
    # and/or "sum" (vectors, all-reduce); rounds.run refuses any other. None:
    # not declared (a communicator of earlier versions).
    collectives = None
    # True if payloads are summed element-wise by the transport.
    additive = False
    # True: prepare() also checks that the compensated values fit the value
    # codec (the all-gather payload falls back to dense when they do not).
    checks_range = False

    def check(self, exchange):
        """Raises ValueError if `exchange` (its compressor, warm-up,
        clipping) cannot use this communicator."""

    # ------------------------------------------------------------ state
    def state_vars(self):
        """The state this communicator keeps per replica beside the memory
        (_variables.StateVar): declared here, created in the module
        make_state() returns, saved with the exchange. Default: none."""
        return ()

    def make_state(self, exchange):
        """The container of this communicator's state on `exchange` (a
        tf.Module, tracked by the exchange as `communicator_state`, whose
        variables the communicator creates on the first step), or None when
        state_vars() declares none."""
        if not self.state_vars():
            return None
        return tf.Module(name=self.name)

    def counts(self, exchange):
        """(counted, seeded) of a bucket with a sparse section: whether the
        step advances the key's counter and derives a seed from it."""
        return exchange.counts()

    # ------------------------------------------------------------ the step
    def step(self, transport, exchanges, tensors_by_replica, keys, average=False, effects=()):
        """prepare -> transfer -> commit -> finish (the module docstring).

        Args:
          transport: a transport.Transport.
          exchanges: one exchange.Exchange per device of the transport (each
            with its own state), same configuration.
          tensors_by_replica: per device, the batch's tensors (same keys,
            shapes and dtypes on every replica).
          keys: one unique name per tensor (memory and accounting key).
          average: divide by the number of replicas in the group (MEAN).
          effects: ops (counters) the result must depend on, so that a TF1
            graph runs them.

        Returns, per device of the transport, the reduced tensors in batch
        order (bit-identical on every device).
        """
        plan, sums = self.reduce_flat(transport, exchanges, tensors_by_replica, keys)
        return self._finish(transport, plan, sums, average, effects)

    def reduce_flat(self, transport, exchanges, tensors_by_replica, keys):
        """prepare -> transfer -> commit. Returns (plan, sums): the fusion.Plan
        and one flat summed vector per bucket, on transport.reduce_device."""
        plan, prepared = self.prepare(transport, exchanges, tensors_by_replica, keys)
        result = self.transfer(transport, exchanges, plan, prepared, keys)
        return plan, self.commit(transport, exchanges, prepared, result)

    def prepare(self, transport, exchanges, tensors_by_replica, keys):
        """(plan, prepared): prepared[r][b] is replica r's Prepared bucket b."""
        plan, prepared = None, []
        for ex, device, tensors in zip(exchanges, transport.devices, tensors_by_replica):
            with tf.device(device):
                tensors = [tf.convert_to_tensor(t) for t in tensors]
                plan = ex.plan(keys, tensors)
                prepared.append(ex.prepare_batch(plan, tensors, self.counts(ex),
                                                 self.checks_range))
        return plan, prepared

    def transfer(self, transport, exchanges, plan, prepared, keys):
        """What travels: runs rounds() on the transport. Returns a Transfer.
        (A communicator of earlier versions that overrides transfer() or
        reduce_flat() whole keeps working.)"""
        rounds = self.rounds(rounds_lib.Group.of(transport), exchanges, plan, prepared, keys)
        return rounds_lib.run(transport, rounds, self.collectives,
                              f"communicator {self.name or type(self).__name__!r}")

    def rounds(self, group, exchanges, plan, prepared, keys):
        """A generator: encodes every replica's prepared buckets
        (prepared[r][b]), yields the collectives of exchange/rounds.py and
        returns a Transfer (the sums decoded on group.reduce_device)."""
        raise NotImplementedError(f"communicator {type(self).__name__} must write rounds() "
                                  "(or override transfer() or reduce_flat())")

    @staticmethod
    def commit(transport, exchanges, prepared, result):
        """Every replica's memory updates and byte records; returns the sums,
        made to depend on them."""
        effects = []
        for r, (ex, device) in enumerate(zip(exchanges, transport.devices)):
            with tf.device(device):
                for prep, outcome in zip(prepared[r], result.outcomes[r]):
                    effects += ex.commit(prep, outcome)
                for key, nbytes in result.sent[r]:
                    effects += ex.record_bytes(key, nbytes)
                for key, nbytes in result.received[r]:
                    effects += ex.record_received(key, nbytes)
                if result.support is not None:
                    effects += ex.record_support(*result.support)
        if not effects:
            return list(result.sums)
        with tf.device(transport.reduce_device):
            return [guarded(s, *effects) for s in result.sums]

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

    # ---------------------------------------------------------- slices
    def step_slices(self, transport, exchanges, slices_by_replica, key, average=False,
                    effects=()):
        """The reduction of one tf.IndexedSlices gradient: compressed with
        compress_slices, all-gathered, decoded once, concatenated; returns a
        copy per device."""
        payloads, ctx = self._compress_slices(transport, exchanges, slices_by_replica, key)
        received = transport.all_gather(payloads, key=f"slices/{key}")
        return self._finish_slices(transport, exchanges, key, received, payloads, ctx,
                                   average, effects)

    @staticmethod
    def _compress_slices(transport, exchanges, slices_by_replica, key):
        payloads, ctx = [], None
        for ex, device, sl in zip(exchanges, transport.devices, slices_by_replica):
            with tf.device(device):
                p, c = ex.compress_slices(sl, key)
            payloads.append(p)
            ctx = ctx or c
        return payloads, ctx

    def _finish_slices(self, transport, exchanges, key, received, payloads, ctx, average,
                       effects):
        with tf.device(transport.reduce_device):
            effects = list(effects) + self.record_received(exchanges, f"slices/{key}",
                                                           received, payloads)
            parts = [exchanges[0].decompress_slices(p, ctx) for p in received]
            total = tf.IndexedSlices(tf.concat([p.values for p in parts], 0),
                                     tf.concat([p.indices for p in parts], 0),
                                     parts[0].dense_shape)
            values = guarded(total.values, *effects, *transport.effects)
            if average:
                values = values / tf.cast(transport.num_replicas, values.dtype)
            total = tf.IndexedSlices(values, total.indices, total.dense_shape)
        return transport.replicate(total)

    def step_all(self, transport, exchanges, tensors_by_replica, keys, slices_by_replica,
                 slice_keys, average=False, effects=()):
        """A whole batch: its dense tensors (step()) and its tf.IndexedSlices
        (step_slices()). Returns (dense, slices): dense[d] as step() returns
        it (None without dense tensors), slices[j][d] the reduced slices j on
        device d. This default exchanges them one after the other; Allgather
        sends all of them in one collective."""
        dense = None
        if keys:
            dense = self.step(transport, exchanges, tensors_by_replica, keys, average=average,
                              effects=effects)
        slices = [self.step_slices(transport, exchanges, [s[j] for s in slices_by_replica],
                                   key, average=average, effects=effects)
                  for j, key in enumerate(slice_keys)]
        return dense, slices

    # ------------------------------------------------------- accounting
    @staticmethod
    def gathered(received, sent):
        """Per replica, the bytes of the gathered payloads `received` that
        came from the others (all of them but its own `sent[d]`)."""
        total = tf.add_n([tf.size(p, out_type=tf.int64) for p in received])
        return [total - tf.size(own, out_type=tf.int64) for own in sent]

    @classmethod
    def record_received(cls, exchanges, key, received, sent):
        """Records gathered() bytes for each replica; returns the ledger ops."""
        ops = []
        for ex, got in zip(exchanges, cls.gathered(received, sent)):
            ops += ex.record_received(key, got)
        return ops

    @staticmethod
    def reduced(group, vectors):
        """What an all-reduce of `vectors` (one replica's) delivers to each
        replica of `group` (a rounds.Group or a transport): a ring
        all-reduce's 2 (R - 1) / R of their bytes."""
        nbytes = tf.add_n([tf.size(v, out_type=tf.int64) * v.dtype.size for v in vectors]
                          or [tf.constant(0, tf.int64)])
        return ring_received(nbytes, group.num_replicas)

    def __repr__(self):
        return f"{type(self).__name__}()"
