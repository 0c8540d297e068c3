"""tf.distribute integration: DeepReduce as the strategy's gradient exchange.

One line swaps a strategy's cross-device communication:

    ops = deepreduce_tf.distribute.DeepReduceCrossDeviceOps(
        {'compressor': 'topk', 'compress_ratio': 0.01, 'deepreduce': 'both',
         'index': 'bloom', 'policy': 'p0', 'value': 'polyfit'})
    strategy = tf.distribute.MirroredStrategy(cross_device_ops=ops)

    # across worker processes (TF_CONFIG set as for any multi-worker job):
    strategy = deepreduce_tf.distribute.multi_worker_strategy(params)

What happens to a batch of gradients (one all_reduce of Keras' optimizer,
or one strategy.extended.batch_reduce_to) is a communicator's step
(deepreduce_tf.communicators), over a transport (deepreduce_tf.transport):
  1. every replica fuses its gradients into a few flat buckets
     (deepreduce_tf.fusion) and compresses each bucket once with its own
     Exchange (its own residual memory, its own byte ledger): ONE batch
     payload per replica;
  2. the payloads are exchanged: all-gather of variable-size payloads (the
     all-gather communicator) or an element-wise all-reduce of the summable
     wire vectors (the all-reduce communicator);
  3. each process decodes every payload ONCE, sums them in replica order and
     copies the sum to its replicas: the same bytes summed in the same order
     keep replicas and workers bit-identical; ReduceOp.MEAN divides by the
     number of replicas.
This module only adapts TensorFlow's CrossDeviceOps / CollectiveAllReduce
interfaces to that step: routing by value type, MEAN, placement.

What does not go through the compressor (by design, documented):
  * tf.IndexedSlices (embedding gradients) are compressed with
    Exchange.compress_slices: their own rows and values, never densified;
    no sparsifier and no residual apply to them.
  * Values that are not floating point (int64 counters, ...) and tensors
    without a static shape are summed exactly, uncompressed.
  * MirroredStrategy itself routes int32 values and reductions to the host
    (strategy.reduce(..., axis=None) of a metric to "/cpu:0") to
    tf.distribute.ReductionToOneDevice, and with one replica it skips the
    cross-device ops entirely (DeepReduceCrossDeviceOps then warns, once,
    with a SingleReplicaWarning: nothing is compressed and the byte counters
    stay at zero); under MultiWorkerMirroredStrategy reductions
    of per-host values use the strategy's own host collective. These are
    never gradients of a training step. Under XLA with all-GPU devices
    MirroredStrategy ignores cross_device_ops (TensorFlow's own rule).

Memory keys: a tensor's key is the destination variable's name when the
reduction names one (batch_reduce_to with variables as destinations), else
the value's position in the batch, its dtype and shape (Keras' optimizer
all-reduces its gradient list in a fixed order). Residuals are kept per
bucket (the key of a one-tensor bucket is the tensor's key). Per-replica
state lives in plain resource variables on the replica's device, created with
local_variable_factory(), and initializes itself in TF1-style graphs run
without an initializer. ops.state (deepreduce_tf.state.ExchangeState) holds
all of it from construction on: tf.train.Checkpoint(..., deepreduce=ops.state)
or KerasState(ops) attached to a Keras model save and restore it. A stateless
configuration (no memory, no seeded codec) with accounting=False creates no
variables at all under MirroredStrategy (under MultiWorkerMirroredStrategy:
one int32 frame capacity per replica and exchange, transport.CollectiveTransport).

Accounting: ops.step_bytes() (last exchange, per replica: dense bytes, sent
bytes, ratio), ops.totals() (cumulative), BytesCallback (Keras callback:
per-batch logs and tf.summary scalars for TensorBoard). Under
MultiWorkerMirroredStrategy, ops.collective_bytes() counts what this
process handed to the collective ops: the evidence that payloads, not dense
gradients, travel between workers.
"""
import copy
import threading
import warnings

import tensorflow as tf
from tensorflow.core.framework import summary_pb2
from tensorflow.python.distribute import collective_all_reduce_strategy as cars
from tensorflow.python.distribute import cross_device_ops as cdo_lib
from tensorflow.python.distribute import cross_device_utils
from tensorflow.python.distribute import distribute_utils
from tensorflow.python.distribute import reduce_util
from tensorflow.python.distribute import values as value_lib
from tensorflow.python.ops import resource_variable_ops
from tensorflow.python.util import nest

from deepreduce_tf._variables import ensure_initialized
from deepreduce_tf.compressor import DTYPE_CODES
from deepreduce_tf.exchange.allgather import Allgather
from deepreduce_tf.exchange.allreduce import Allreduce
from deepreduce_tf.exchange.base import Communicator
from deepreduce_tf.exchange.endpoint import Exchange
from deepreduce_tf.memory import NoMemory
from deepreduce_tf.params import from_params
from deepreduce_tf.state import ExchangeState
from deepreduce_tf.transport import CollectiveTransport, LocalTransport, ordered_sum

__all__ = ["BytesCallback", "DeepReduceCollectiveOps", "DeepReduceCrossDeviceOps",
           "ExchangeState", "KerasState", "SingleReplicaWarning", "StateNotSavedWarning", "get_ops", "install", "local_variable_factory",
           "multi_worker_strategy", "write_scalar"]


class StateNotSavedWarning(UserWarning):
    """The exchange keeps state between steps (residuals, step counters) and
    nothing saves it: a resumed run would continue without it."""


STATE_NOT_SAVED_MESSAGE = (
    "DeepReduce keeps state between steps (the residuals of error feedback, step counters) in "
    "ops.state, and nothing saves it: a run resumed from a checkpoint or by "
    "keras.callbacks.BackupAndRestore would restore the model's weights but continue without "
    "this state (residuals lost, not the uninterrupted run). Save it with the model -- Keras: "
    "model.deepreduce = deepreduce_tf.distribute.KerasState(ops) (then save_weights, "
    "BackupAndRestore and ModelCheckpoint carry it); custom loops: "
    "tf.train.Checkpoint(model=model, optimizer=optimizer, deepreduce=ops.state). A run that is "
    "never resumed can ignore this: warnings.filterwarnings('ignore', "
    "category=deepreduce_tf.distribute.StateNotSavedWarning).")


class SingleReplicaWarning(RuntimeWarning):
    """DeepReduce cross-device ops under a strategy of one replica: TensorFlow
    never calls them, so nothing is compressed and the counters stay at 0."""


SINGLE_REPLICA_MESSAGE = (
    "DeepReduceCrossDeviceOps is not used: the strategy has a single replica, and "
    "MirroredStrategy then reduces without calling its cross-device ops, so nothing is "
    "compressed and step_bytes(), totals() and BytesCallback report 0 bytes. Give the strategy "
    "two or more devices: GPUs, e.g. tf.distribute.MirroredStrategy([\"/gpu:0\", \"/gpu:1\"], "
    "cross_device_ops=ops), or, on a CPU-only machine, two logical CPUs configured before "
    "TensorFlow initialises: cpu = tf.config.list_physical_devices(\"CPU\")[0]; "
    "tf.config.set_logical_device_configuration(cpu, "
    "[tf.config.LogicalDeviceConfiguration()] * 2); then "
    "tf.distribute.MirroredStrategy([\"/cpu:0\", \"/cpu:1\"], cross_device_ops=ops).")


def local_variable_factory(device):
    """An Exchange variable_factory that puts state on `device` as a plain
    resource variable, outside any strategy's variable creator (each replica
    keeps its own residuals and counters)."""

    def make(initial_value, name):
        with tf.device(device):
            return resource_variable_ops.ResourceVariable(initial_value, trainable=False,
                                                          name=name)

    return make


class _Builder:
    """Makes one Exchange per replica from params, an Exchange built by
    from_params, or a factory(variable_factory) -> Exchange. Builds one at
    construction so that a bad configuration fails there, and chooses the
    communicator ONCE: every replica's exchange is built with that object."""

    def __init__(self, spec, accounting=True, communicator=None):
        if isinstance(spec, Exchange):
            if spec.params is None:
                raise TypeError(
                    "DeepReduce cross-device ops need one exchange per replica (each keeps its "
                    "own residuals): pass the parameter dict, an Exchange made by "
                    "deepreduce_tf.from_params, or a factory(variable_factory) -> Exchange, "
                    "not an Exchange constructed by hand")
            spec = dict(spec.params)
        if isinstance(spec, dict):
            self.params = dict(spec)
            self._factory = None
        elif callable(spec):
            self.params = None
            self._factory = spec
        else:
            raise TypeError(f"expected a parameter dict, an Exchange or a factory, got {spec!r}")
        if not isinstance(accounting, bool):
            raise TypeError(f"accounting must be True or False, got {accounting!r}")
        self.accounting = accounting
        if communicator is not None and not isinstance(communicator, Communicator):
            raise TypeError(f"communicator must be a deepreduce_tf.communicators.Communicator, "
                            f"got {communicator!r}")
        self.communicator = communicator
        probe = self.make(None)
        if communicator is None:
            communicator = probe.communicator
            # Compression off (compressor 'none', raw values, no memory, the
            # communicator left to us): the exchange is an element-wise sum,
            # so it takes the all-reduce route (TensorFlow's collective on the
            # flat buckets) rather than all-gathering a payload per replica
            # and decoding each: the same sums, half the copies.
            if (self.params is not None and "communicator" not in self.params
                    and _lossless_dense(probe)):
                communicator = Allreduce()
                communicator.check(probe)
            self.communicator = communicator
        self.description = repr(probe)
        # Multi-worker with several local devices: sum locally, compress once
        # per worker (DeepReduceCollectiveOps), for the exchanges that send
        # bytes (the summable ones already go through TensorFlow's all-reduce).
        self.hierarchical = probe.hierarchical and not self.communicator.additive

    def make(self, variable_factory):
        """A new Exchange with its own state, running self.communicator."""
        if self._factory is None:
            ex = from_params(self.params, variable_factory=variable_factory,
                             communicator=self.communicator)
        else:
            ex = self._factory(variable_factory)
            if not isinstance(ex, Exchange):
                raise TypeError(f"the exchange factory returned {ex!r}, not a "
                                "deepreduce_tf.Exchange")
        ex.reconfigure(communicator=self.communicator, accounting=self.accounting)
        return ex


def _lossless_dense(compressor):
    """True for a configuration that sends every value as it is (PowerSGD
    without memory is not: its factors are compressed)."""
    return (type(compressor.communicator) is Allgather and compressor.sparsifier.dense
            and compressor.index_codec.name == "raw"
            and compressor.value_codec.name == "raw" and isinstance(compressor.memory, NoMemory)
            and not compressor.warmup_steps and compressor.clip_norm is None)


def _compressible(value):
    return (not isinstance(value, tf.IndexedSlices) and value.dtype in DTYPE_CODES
            and value.shape.is_fully_defined())


def _slices_ok(value):
    return isinstance(value, tf.IndexedSlices) and value.values.dtype in DTYPE_CODES


def _memory_key(i, n, value, dest=None):
    if isinstance(dest, tf.Variable):  # MirroredVariable destinations name the variable
        name = dest.name
        return name[:-2] if name.endswith(":0") else name
    shape = "x".join(str(d) for d in value.shape) or "scalar"
    return f"value_{i}_of_{n}/{value.dtype.name}[{shape}]"


def _unique(keys):
    """Keys must differ within one batch (two reductions into one variable
    would share a residual): number the repeats."""
    seen, out = {}, []
    for k in keys:
        c = seen.get(k, 0)
        seen[k] = c + 1
        out.append(k if c == 0 else f"{k}#{c}")
    return out


def _classify(first_values):
    dense = [i for i, v in enumerate(first_values) if _compressible(v)]
    slices = [i for i, v in enumerate(first_values) if _slices_ok(v)]
    taken = set(dense) | set(slices)
    return dense, slices, [i for i in range(len(first_values)) if i not in taken]


class _DeepReduceState:
    """Per-replica compressors, the communicator and the accounting both ops
    classes share."""

    def _init_state(self, spec, accounting=True, communicator=None, state=None):
        if isinstance(spec, _Builder):
            if communicator is not None and communicator is not spec.communicator:
                raise ValueError("a copy of DeepReduce ops runs its original's communicator")
            self._builder = spec
        else:
            self._builder = _Builder(spec, accounting=accounting, communicator=communicator)
        # Chosen once, by the builder: every replica's exchange runs it.
        self.communicator = self._builder.communicator
        # Everything kept between steps, for checkpoints (deepreduce_tf.state):
        # it exists before the first step, its variables are made by it.
        self.state = state if state is not None else ExchangeState()
        self._state_lock = threading.RLock()
        self._implementation_calls = 0
        self._single_replica_warned = False
        self._unsaved_warned = False

    @property
    def params(self):
        """The parameter dict the compressors are built from (None for a factory)."""
        return self._builder.params

    @property
    def accounting(self):
        return self._builder.accounting

    @property
    def compressors(self):
        """This process's per-replica compressors, in replica order."""
        comps = self.state.compressors
        return [comps[r] for r in sorted(comps, key=int)]

    def _replica_compressor(self, replica, device):
        """The Exchange of local replica number `replica`, created on first
        use with its state on `device`."""
        with self._state_lock:
            comp = self.state.compressors.get(str(replica))
            if comp is None:
                factory = local_variable_factory(device)
                # Created and tracked outside any traced function: a deferred
                # checkpoint restore then assigns the saved values eagerly.
                with tf.init_scope():
                    comp = self._builder.make(factory)
                    if self.accounting:
                        self.state.exchanges[str(replica)] = factory(
                            tf.constant(0, tf.int64), "exchanges")
                        self.state.collective_bytes[str(replica)] = factory(
                            tf.constant(0, tf.int64), "collective_bytes")
                    self.state.compressors[str(replica)] = comp
            return comp

    def _restore_pending(self):
        """Values a KerasState loaded before this step created their
        variables are assigned now (before the step first runs); and, once,
        a StateNotSavedWarning when the state matters and nothing saves it."""
        if self.state.pending:
            self.state.apply_pending()
        if not self._unsaved_warned:
            self._unsaved_warned = True
            keeps = any(ex.keeps_state for ex in self.compressors)
            if keeps and not self.state.saved_by:
                warnings.warn(STATE_NOT_SAVED_MESSAGE, StateNotSavedWarning, stacklevel=2)

    def _count_exchange(self, replica, device):
        """Counts one exchange of `replica`; returns the op (None eagerly or
        without accounting), which the reduced result must depend on."""
        var = self.state.exchanges.get(str(replica))
        if var is None:
            return None
        with tf.device(device), tf.control_dependencies(ensure_initialized([var])):
            return var.assign_add(1, read_value=False)

    def _wire_counter(self, replica, device):
        return self.state.collective_bytes.get(str(replica))

    # ------------------------------------------------------------ accounting
    def step_bytes(self):
        """Bytes of the last exchange, per replica.

        Returns {"dense_bytes", "sent_bytes", "ratio", "replicas"}: dense =
        bytes one replica's uncompressed tensors would take, sent = mean over
        this process's replicas of the payload bytes each sent (batch
        container included), received = mean bytes each replica received from
        the others (all-gather: their payloads; all-reduce: a ring's
        2 (R - 1) / R of the vector; it grows with the number of workers
        under all-gather), ratio = dense / sent. All zero before the
        first exchange, and under a strategy of one replica, which never
        calls the ops (see SingleReplicaWarning).
        """
        comps = [c for c in self.compressors if c.ledger is not None]
        if not comps:
            return {"dense_bytes": 0, "sent_bytes": 0, "received_bytes": 0, "ratio": 0.0,
                    "replicas": 0}
        pairs = [c.ledger.step_totals() for c in comps]
        sent = sum(s for s, _ in pairs) / len(pairs)
        dense = sum(d for _, d in pairs) / len(pairs)
        received = sum(c.ledger.received_totals()[0] for c in comps) / len(comps)
        return {"dense_bytes": int(round(dense)), "sent_bytes": int(round(sent)),
                "received_bytes": int(round(received)),
                "ratio": dense / sent if sent else 0.0, "replicas": len(pairs)}

    def totals(self):
        """Cumulative bytes per replica (mean over this process's replicas)
        and the number of exchanges: {"dense_bytes", "sent_bytes",
        "received_bytes", "steps"}."""
        comps = [c for c in self.compressors if c.ledger is not None]
        if not comps:
            return {"dense_bytes": 0, "sent_bytes": 0, "received_bytes": 0, "steps": 0}
        pairs = [c.ledger.running_totals() for c in comps]
        steps = [int(v.numpy()) for v in self.state.exchanges.values()]
        received = sum(c.ledger.received_totals()[1] for c in comps) / len(comps)
        return {"dense_bytes": int(round(sum(d for _, d in pairs) / len(pairs))),
                "sent_bytes": int(round(sum(s for s, _ in pairs) / len(pairs))),
                "received_bytes": int(round(received)),
                "steps": max(steps) if steps else 0}

    def byte_tensors(self):
        """step_bytes() and totals() as tensors, for TF1 graphs run by a
        Session (where .numpy() does not exist): build them once the graph's
        reductions exist (before the graph is finalized) and run them after a
        step. Returns {"sent_bytes", "dense_bytes", "total_sent_bytes",
        "total_dense_bytes", "steps"}: float64 scalars, means over this
        process's replicas (steps: exchanges so far)."""
        comps = [c for c in self.compressors if c.ledger is not None]
        zero = tf.constant(0.0, tf.float64)
        if not comps:
            return dict.fromkeys(("sent_bytes", "dense_bytes", "total_sent_bytes",
                                  "total_dense_bytes", "steps"), zero)

        def total(variables):
            reads = [tf.cast(v.read_value(), tf.float64) for v in variables if v is not None]
            return tf.add_n(reads) if reads else zero

        def mean(per_comp):
            return tf.add_n(per_comp) / len(per_comp)

        steps = [tf.cast(v.read_value(), tf.float64) for v in self.state.exchanges.values()]
        return {
            "sent_bytes": mean([total(c.ledger.sent.values()) for c in comps]),
            "dense_bytes": mean([total(c.ledger.dense.values()) for c in comps]),
            "total_sent_bytes": mean([total([c.ledger.total_sent]) for c in comps]),
            "total_dense_bytes": mean([total([c.ledger.total_dense]) for c in comps]),
            "steps": tf.reduce_max(tf.stack(steps)) if steps else zero,
        }

    def collective_bytes(self):
        """Bytes this process's replicas handed to collective ops (mean per
        replica; multi-worker only, else 0)."""
        vals = [int(v.numpy()) for v in self.state.collective_bytes.values()]
        return int(round(sum(vals) / len(vals))) if vals else 0

    def __repr__(self):
        return f"{type(self).__name__}({self._builder.description})"


class DeepReduceCrossDeviceOps(_DeepReduceState, cdo_lib.CrossDeviceOps):
    """tf.distribute.CrossDeviceOps for MirroredStrategy (one process, N devices).

    Args:
      spec: the from_params() parameter dict, an Exchange made by
        from_params (its params are reused), or a factory
        f(variable_factory) -> Exchange called once per replica.
      accounting: keep byte counters (step_bytes(), totals(),
        BytesCallback); False creates none.
      communicator: a communicators.Communicator that owns the step,
        instead of the one the parameters name (e.g. a subclass of your own).

    Raises:
      ValueError / TypeError at construction: an invalid configuration
        (e.g. the 'allreduce' communicator with a codec whose payloads
        cannot be summed), with the reason.

    Warns:
      SingleReplicaWarning, once, the first time TensorFlow reduces values of
        a single replica without calling these ops (a MirroredStrategy of one
        device): nothing is compressed; the message says how to get two
        replicas on one machine.
    """

    def __init__(self, spec, accounting=True, communicator=None):
        cdo_lib.CrossDeviceOps.__init__(self)
        self._init_state(spec, accounting, communicator)

    # TensorFlow's reduce() / batch_reduce() return values of ONE replica
    # as they are, without calling the *_implementation methods: with a
    # single replica, DeepReduce never runs. Say so, once.
    def reduce(self, reduce_op, per_replica_value, destinations, options=None):
        calls = self._implementation_calls
        out = super().reduce(reduce_op, per_replica_value, destinations, options)
        self._warn_if_skipped(calls)
        return out

    def batch_reduce(self, reduce_op, value_destination_pairs, options=None):
        calls = self._implementation_calls
        out = super().batch_reduce(reduce_op, value_destination_pairs, options)
        self._warn_if_skipped(calls)
        return out

    def _warn_if_skipped(self, calls_before):
        if self._implementation_calls == calls_before and not self._single_replica_warned:
            self._single_replica_warned = True
            warnings.warn(SINGLE_REPLICA_MESSAGE, SingleReplicaWarning, stacklevel=3)

    def reduce_implementation(self, reduce_op, per_replica_value, destinations, options):
        return self.batch_reduce_implementation(
            reduce_op, [(per_replica_value, destinations)], options)[0]

    def batch_reduce_implementation(self, reduce_op, value_destination_pairs, options):
        with self._state_lock:
            self._implementation_calls += 1
            return self._batch_reduce(reduce_op, list(value_destination_pairs), options)

    def _batch_reduce(self, reduce_op, pairs, options):
        values = [v for v, _ in pairs]
        devices = tuple(values[0]._devices)  # pylint: disable=protected-access
        if any(tuple(v._devices) != devices for v in values):  # pylint: disable=protected-access
            raise ValueError("DeepReduce batch reduction needs every value on the same replicas")
        per_replica, other_ids = self._reduce_replicas(
            devices, [[v.values[r] for v in values] for r in range(len(devices))],
            [dest for _, dest in pairs], reduce_op == reduce_util.ReduceOp.MEAN)
        results = [None] * len(pairs)
        if other_ids:
            exact = cdo_lib.ReductionToOneDevice().batch_reduce_implementation(
                reduce_op, [pairs[i] for i in other_ids], options)
            for i, res in zip(other_ids, exact):
                results[i] = res
        for i in range(len(pairs)):
            if i not in other_ids:
                results[i] = self._place([per_replica[r][i] for r in range(len(devices))],
                                         devices, pairs[i][1])
        return results

    def _reduce_replicas(self, devices, by_replica, destinations, average, transport=None):
        """The communicator's step over the replicas on `devices`.

        by_replica[r][i]: value i of replica r (on devices[r]); destinations[i]:
        where value i goes (names its memory key when it is a variable), or
        None. Returns (per_replica, other_ids): per_replica[r][i] is the reduced
        value i on devices[r], for every i not in other_ids (values that are
        not compressed: the caller sums those exactly). transport: how the
        replicas exchange (default: a LocalTransport over `devices`).
        """
        n = len(by_replica[0])
        dense_ids, slice_ids, other_ids = _classify(by_replica[0])
        comps = [self._replica_compressor(r, d) for r, d in enumerate(devices)]
        transport = transport or LocalTransport(devices)
        per_replica = [[None] * n for _ in devices]
        effects = []
        if dense_ids or slice_ids:
            effects = [self._count_exchange(r, d) for r, d in enumerate(devices)]
            effects = [e for e in effects if e is not None]

        if dense_ids or slice_ids:
            keys = _unique([_memory_key(i, n, by_replica[0][i], destinations[i])
                            for i in dense_ids])
            slice_keys = [_memory_key(i, n, by_replica[0][i].values, destinations[i])
                          for i in slice_ids]
            dense, slices = self.communicator.step_all(
                transport, comps, [[vals[i] for i in dense_ids] for vals in by_replica], keys,
                [[vals[i] for i in slice_ids] for vals in by_replica], slice_keys,
                average=average, effects=effects)
            for r, out in enumerate(dense or []):
                for i, t in zip(dense_ids, out):
                    per_replica[r][i] = t
            for i, outs in zip(slice_ids, slices):
                for r, t in enumerate(outs):
                    per_replica[r][i] = t
        self._restore_pending()
        return per_replica, other_ids

    def reduce_tensors(self, tensors_by_device, average=False, collective=None):
        """Batch all-reduce of plain tensors, one list per device, without
        tf.distribute: graph code that places its replicas itself (e.g.
        tf_cnn_benchmarks' replicated mode, deepreduce_tf.tf_cnn_benchmarks).

        tensors_by_device[d][j]: tensor j of device d, created under
        tf.device(device d) (the same shapes and dtypes on every device).
        Returns the same structure: tensor j's sum (mean with average=True)
        over the devices, a copy on each device, bit-identical. Works eagerly,
        in tf.function and in TF1 graphs (state initializes itself); tensors
        that are not compressed (integers, unknown shapes) are summed exactly.

        collective: across worker processes that each build the same graph
        (one device per worker, one list in tensors_by_device): a
        transport.GraphCollectiveLauncher of this worker's device; the group
        is its group, and the result is the sum over every worker.
        """
        lists = [list(ts) for ts in tensors_by_device]
        if not lists or not lists[0]:
            raise ValueError("reduce_tensors needs at least one device with at least one tensor")
        n = len(lists[0])
        for d, ts in enumerate(lists):
            if len(ts) != n:
                raise ValueError(f"device {d} has {len(ts)} tensors, device 0 has {n}: every "
                                 "device must hold the same list")
            for j, (t, t0) in enumerate(zip(ts, lists[0])):
                if (t.dtype != t0.dtype or isinstance(t, tf.IndexedSlices)
                        != isinstance(t0, tf.IndexedSlices) or
                        (not isinstance(t, tf.IndexedSlices) and t.shape != t0.shape)):
                    raise ValueError(f"tensor {j} differs between device 0 ({t0.dtype.name} "
                                     f"{t0.shape}) and device {d} ({t.dtype.name} {t.shape})")
        devices = tuple(ts[0].device for ts in lists)
        for d, ts in enumerate(lists):
            if not devices[d] or any(t.device != devices[d] for t in ts):
                raise ValueError(
                    f"the tensors of device {d} are on {sorted({t.device for t in ts})}: create "
                    "each device's tensors under tf.device(...) of that one device")
        if len(set(devices)) != len(devices):
            raise ValueError(f"two lists are on the same device: {devices}")
        if collective is not None:
            self._replica_compressor(0, devices[0])
        if collective is None:
            transport = LocalTransport(devices)
        else:
            if len(devices) != 1:
                raise ValueError(f"a collective reduction takes this worker's one device, got "
                                 f"{len(devices)} lists")
            transport = CollectiveTransport(collective, devices[0], collective.group_size, None,
                                            self._wire_counter(0, devices[0]))
            transport.effects.append(collective.begin_exchange())
        with self._state_lock:
            self._implementation_calls += 1
            per_replica, other_ids = self._reduce_replicas(devices, lists, [None] * n, average,
                                                           transport)
            if collective is not None and other_ids:
                summed = transport.all_reduce([[lists[0][i] for i in other_ids]])
                for i, total in zip(other_ids, summed):
                    if average:
                        total = total / tf.cast(transport.num_replicas, total.dtype)
                    per_replica[0][i] = total
                other_ids = []
            for i in other_ids:
                if isinstance(lists[0][i], tf.IndexedSlices):
                    raise ValueError(f"tensor {i} is a tf.IndexedSlices of "
                                     f"{lists[0][i].dtype.name}, which DeepReduce does not "
                                     "reduce: convert it to a dense tensor first")
                if average and not lists[0][i].dtype.is_floating:
                    raise ValueError(f"tensor {i} is {lists[0][i].dtype.name}: its mean over "
                                     "devices is not defined here; reduce it with average=False")
                with tf.device(devices[0]):
                    total = ordered_sum([ts[i] for ts in lists])
                    if average:
                        total = total / tf.cast(len(devices), total.dtype)
                for r, copy_ in enumerate(transport.replicate(total)):
                    per_replica[r][i] = copy_
        return per_replica

    def _place(self, reduced, devices, destinations):
        """Mirrored result on `destinations` (normally the replicas' devices)."""
        dest_devices = cdo_lib.get_devices_from(destinations, self._canonicalize_devices)
        if tuple(dest_devices) == tuple(devices):
            return distribute_utils.regroup(tuple(reduced), wrap_class=value_lib.Mirrored)
        by_device = dict(zip(devices, reduced))
        placed = []
        for d in dest_devices:
            with tf.device(d):
                src = by_device.get(d, reduced[0])
                placed.append(tf.identity(src) if not isinstance(src, tf.IndexedSlices) else
                              tf.IndexedSlices(tf.identity(src.values), tf.identity(src.indices),
                                               src.dense_shape))
        return distribute_utils.regroup(tuple(placed), wrap_class=value_lib.Mirrored)

    def _gather_implementation(self, per_replica_value, destinations, axis, options):
        # strategy.gather (not a reduction) is uncompressed.
        return cdo_lib.ReductionToOneDevice()._gather_implementation(  # pylint: disable=protected-access
            per_replica_value, destinations, axis, options)


class DeepReduceCollectiveOps(_DeepReduceState, cdo_lib.CollectiveAllReduce):
    """The collective implementation of MultiWorkerMirroredStrategy with
    DeepReduce compression; install it with install() or build the strategy
    with multi_worker_strategy()."""

    def __init__(self, spec, devices, group_size, options, collective_keys=None,
                 canonicalize_devices=True, accounting=True, communicator=None, state=None,
                 frames=None, id_in_cluster=None):
        cdo_lib.CollectiveAllReduce.__init__(self, devices, group_size, options,
                                             collective_keys, canonicalize_devices)
        self._init_state(spec, accounting, communicator, state)
        # This worker's place in the group (MultiWorkerMirroredStrategy's
        # id_in_cluster): the global replica number of local replica r is
        # id_in_cluster * len(devices) + r. None: unknown.
        self._id_in_cluster = id_in_cluster
        # Frame capacities of the one-collective all-gather (transport.
        # CollectiveTransport), per (replica, exchange): shared by copies.
        self._frame_vars = frames if frames is not None else {}
        # The hierarchical exchange's launchers, per local replica.
        self._hier_launchers = {}

    def _frames(self, replica, device):
        def capacity(key):
            with self._state_lock:
                var = self._frame_vars.get((replica, key))
                if var is None:
                    with tf.init_scope():
                        var = local_variable_factory(device)(tf.constant(0, tf.int32),
                                                             "frame_capacity")
                    self._frame_vars[(replica, key)] = var
                return var

        return capacity

    def __deepcopy__(self, memo):
        # A copy (TensorFlow makes them) shares the compressors and their
        # state: a replica keeps ONE residual, whichever copy runs the step.
        return DeepReduceCollectiveOps(self._builder, self._devices, self._group_size,
                                       self._options, copy.deepcopy(self._collective_keys, memo),
                                       self._canonicalize_devices, communicator=self.communicator,
                                       state=self.state, frames=self._frame_vars,
                                       id_in_cluster=self._id_in_cluster)

    # Group keys of the hierarchical exchange's collectives (TensorFlow's
    # CollectiveKeys count from 1 for the groups it makes itself): the group
    # of every worker's leader (its local replica 0), the same on every
    # worker; and each worker's group of its local devices, one key per
    # worker (id_in_cluster) since a group key names one group cluster-wide.
    LEADERS_GROUP_KEY = 0x0DE00000
    LOCAL_GROUP_KEY = 0x0DE00001

    @property
    def hierarchical(self):
        """True when this worker sums its local replicas before compressing
        and exchanges one payload per worker (see _hierarchical_all_reduce)."""
        return (self._builder.hierarchical and len(self._devices) > 1
                and self._group_size > len(self._devices))

    def _hierarchy_launchers(self, replica_id):
        """(local launcher of this replica, leader launcher or None)."""
        with self._state_lock:
            found = self._hier_launchers.get(replica_id)
            if found is None:
                if self._id_in_cluster is None:
                    raise ValueError(
                        "the hierarchical exchange needs this worker's id_in_cluster (install() "
                        "reads it from MultiWorkerMirroredStrategy); pass id_in_cluster= when "
                        "you build DeepReduceCollectiveOps yourself, or set "
                        "'hierarchical': False")
                keys = self._collective_keys
                local_key = self.LOCAL_GROUP_KEY + int(self._id_in_cluster)
                groups = [(local_key, self._devices)]
                if replica_id == 0:
                    groups.append((self.LEADERS_GROUP_KEY, self._devices[:1]))
                for key, devices in groups:
                    # Instance keys count per (group, device) from the same start
                    # on every member (CollectiveKeys.get_instance_key).
                    with keys._lock:  # pylint: disable=protected-access
                        table = keys._instance_key_table.setdefault(key, {})  # pylint: disable=protected-access
                        for d in devices:
                            table.setdefault(d, cross_device_utils.INSTANCE_KEY_START_NUMBER)
                device = self._devices[replica_id]
                local = cross_device_utils.CollectiveReplicaLauncher(
                    local_key, len(self._devices), keys, device, self._options)
                leader = None
                if replica_id == 0:
                    leader = cross_device_utils.CollectiveReplicaLauncher(
                        self.LEADERS_GROUP_KEY, self._group_size // len(self._devices), keys,
                        device, self._options)
                found = self._hier_launchers[replica_id] = (local, leader)
            return found

    def _hierarchical_all_reduce(self, flat, dense_ids, replica_id, options, average):
        """The dense tensors of one local replica, reduced hierarchically:
        (1) TensorFlow's all-reduce sums them over this worker's devices;
        (2) the leader (local replica 0) compresses the local sum with its
        exchange (memory, counters, ledger: one per worker), exchanges ONE
        payload per worker with the other workers' leaders and decodes;
        (3) an all-reduce over the local devices, to which only the leader
        contributes, hands the result to every local replica (bit-identical:
        x + 0 is x for every value but -0, which every replica then sees as
        +0). Returns the reduced tensors in dense_ids order."""
        device = self._devices[replica_id]
        local_launcher, leader_launcher = self._hierarchy_launchers(replica_id)
        local = CollectiveTransport(local_launcher, device, len(self._devices), options)
        values = [flat[i] for i in dense_ids]
        with tf.device(device):
            summed = local.all_reduce([values])
        if replica_id == 0:
            comp = self._replica_compressor(0, device)
            workers = self._group_size // len(self._devices)
            transport = CollectiveTransport(leader_launcher, device, workers, options,
                                            self._wire_counter(0, device),
                                            frames=self._frames(0, device),
                                            first_rank=int(self._id_in_cluster))
            effects = [e for e in [self._count_exchange(0, device)] if e is not None]
            keys = _unique([_memory_key(i, len(flat), flat[i]) for i in dense_ids])
            dense, _ = self.communicator.step_all(transport, [comp], [summed], keys, [], [],
                                                  average=False, effects=effects)
            mine = list(dense[0])
        else:
            with tf.device(device):
                mine = [tf.zeros_like(t) for t in summed]
        with tf.device(device):
            out = local.all_reduce([mine])  # no wire counter: local bytes are not counted
            if average:
                out = [t / tf.cast(self._group_size, t.dtype) for t in out]
        return out

    def _all_reduce(self, reduce_op, value, replica_id, options):
        flat = nest.flatten(value)
        n = len(flat)
        device = self._devices[replica_id]
        dense_ids, slice_ids, other_ids = _classify(flat)
        average = reduce_op == reduce_util.ReduceOp.MEAN
        out = [None] * n
        effects = []
        if dense_ids and self.hierarchical:
            for i, t in zip(dense_ids, self._hierarchical_all_reduce(flat, dense_ids, replica_id,
                                                                     options, average)):
                out[i] = t
            dense_ids = []
        if dense_ids or slice_ids:
            comp = self._replica_compressor(replica_id, device)
            first_rank = (None if self._id_in_cluster is None
                          else self._id_in_cluster * len(self._devices) + replica_id)
            transport = CollectiveTransport(self._launchers[replica_id], device,
                                            self._group_size, options,
                                            self._wire_counter(replica_id, device),
                                            frames=self._frames(replica_id, device),
                                            first_rank=first_rank)
            effects = [e for e in [self._count_exchange(replica_id, device)] if e is not None]
        if dense_ids or slice_ids:
            keys = _unique([_memory_key(i, n, flat[i]) for i in dense_ids])
            dense, slices = self.communicator.step_all(
                transport, [comp], [[flat[i] for i in dense_ids]], keys,
                [[flat[i] for i in slice_ids]], [_memory_key(i, n, flat[i].values)
                                                 for i in slice_ids],
                average=average, effects=effects)
            for i, t in zip(dense_ids, dense[0] if dense else []):
                out[i] = t
            for i, (t,) in zip(slice_ids, slices):
                out[i] = t
        self._restore_pending()
        if other_ids:
            exact = cdo_lib.CollectiveAllReduce._all_reduce(  # pylint: disable=protected-access
                self, reduce_op, [flat[i] for i in other_ids], replica_id, options)
            for i, res in zip(other_ids, exact):
                out[i] = res
        return nest.pack_sequence_as(value, out)


def install(strategy, spec, accounting=True, communicator=None):
    """Replaces the gradient collective of a MultiWorkerMirroredStrategy by
    DeepReduce's; returns the installed ops. Call it right after creating
    the strategy, before the first step."""
    ext = getattr(strategy, "extended", None)
    old = getattr(ext, "_cross_device_ops", None)
    if isinstance(old, DeepReduceCollectiveOps):
        raise ValueError("this strategy already uses DeepReduce collective ops")
    if (not isinstance(ext, cars.CollectiveAllReduceExtended)
            or not isinstance(old, cdo_lib.CollectiveAllReduce)):
        raise TypeError(
            f"install() works on tf.distribute.MultiWorkerMirroredStrategy, got {strategy!r}; "
            "for MirroredStrategy pass cross_device_ops=DeepReduceCrossDeviceOps(params)")
    ops = DeepReduceCollectiveOps(spec, old._devices, old._group_size, old._options,  # pylint: disable=protected-access
                                  old._collective_keys, old._canonicalize_devices,  # pylint: disable=protected-access
                                  accounting=accounting, communicator=communicator,
                                  id_in_cluster=getattr(ext, "_id_in_cluster", None))
    ext._cross_device_ops = ops  # pylint: disable=protected-access
    return ops


def multi_worker_strategy(spec, cluster_resolver=None, communication_options=None,
                          accounting=True, communicator=None):
    """A tf.distribute.MultiWorkerMirroredStrategy (TF_CONFIG as usual) whose
    gradient all-reduce is DeepReduce's. get_ops(strategy) returns the ops."""
    builder = _Builder(spec, accounting=accounting)  # validate before connecting
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        cluster_resolver=cluster_resolver, communication_options=communication_options)
    install(strategy, builder, communicator=communicator)
    return strategy


def get_ops(strategy):
    """The DeepReduce ops of a strategy built with DeepReduceCrossDeviceOps,
    install() or multi_worker_strategy()."""
    ops = getattr(getattr(strategy, "extended", None), "_cross_device_ops", None)
    if not isinstance(ops, _DeepReduceState):
        raise ValueError(f"{strategy!r} does not use DeepReduce: pass cross_device_ops="
                         "DeepReduceCrossDeviceOps(params) to MirroredStrategy, or use "
                         "multi_worker_strategy(params)")
    return ops


def KerasState(ops):  # pylint: disable=invalid-name
    """A Keras layer that saves `ops`' state (DeepReduceCrossDeviceOps,
    DeepReduceCollectiveOps or a strategy using them) with the model's
    weights. Attach it as an attribute of the model:

        model.deepreduce = deepreduce_tf.distribute.KerasState(ops)

    It holds no Keras weights and takes no part in the model's computation;
    save_weights / load_weights (hence BackupAndRestore and ModelCheckpoint)
    call its save_own_variables / load_own_variables.
    """
    if isinstance(ops, tf.distribute.Strategy):
        ops = get_ops(ops)
    if not isinstance(getattr(ops, "state", None), ExchangeState):
        raise TypeError(f"KerasState needs DeepReduce ops or a strategy using them, got {ops!r}")
    state = ops.state
    state.mark_saved("keras")

    class _KerasState(tf.keras.layers.Layer):
        def __init__(self):
            super().__init__(name="deepreduce_state", trainable=False)
            self.exchange_state = state  # tracked: tf.train.Checkpoint(model=...) holds it
            self.built = True

        def call(self, inputs):  # never part of the model's graph
            raise TypeError("KerasState is not a computation layer: attach it as an attribute "
                            "of the model (model.deepreduce = KerasState(ops))")

        def save_own_variables(self, store):
            for name, value in sorted(state.values().items()):
                store[name] = value

        def load_own_variables(self, store):
            state.load_values({name: store[name] for name in store.keys()})

    return _KerasState()


def write_scalar(name, value, step):
    """tf.summary.scalar without the tensorboard package (which
    tensorflow-cpu does not bring): a scalar summary TensorBoard shows."""
    meta = summary_pb2.SummaryMetadata()
    meta.plugin_data.plugin_name = "scalars"
    return tf.summary.write(name, tf.cast(value, tf.float32), step=step, metadata=meta)


def BytesCallback(ops, log_dir=None, prefix="deepreduce"):  # pylint: disable=invalid-name
    """A Keras callback (Keras 3, or tf_keras under TF_USE_LEGACY_KERAS=1)
    that adds, after every training batch, `sent_bytes`, `dense_bytes` (per
    replica, this batch's exchanges) and `reduction` (dense / sent) to the
    batch logs, keeps them in callback.history, and, with log_dir, writes
    them as TensorBoard scalars `{prefix}/sent_bytes`, ... per step.

    ops: DeepReduceCrossDeviceOps / DeepReduceCollectiveOps, or a strategy.
    """
    if isinstance(ops, tf.distribute.Strategy):
        ops = get_ops(ops)
    if not isinstance(ops, _DeepReduceState):
        raise TypeError(f"BytesCallback needs DeepReduce ops or a strategy using them, got {ops!r}")
    base = tf.keras.callbacks.Callback

    class _BytesCallback(base):
        def __init__(self):
            super().__init__()
            self.ops = ops
            self.history = []
            self._last = None
            self._writer = tf.summary.create_file_writer(log_dir) if log_dir else None
            self._step = 0

        def on_train_begin(self, logs=None):
            self._last = self.ops.totals()

        def on_train_batch_end(self, batch, logs=None):
            now = self.ops.totals()
            last = self._last or {"dense_bytes": 0, "sent_bytes": 0}
            sent = now["sent_bytes"] - last["sent_bytes"]
            dense = now["dense_bytes"] - last["dense_bytes"]
            self._last = now
            row = {"sent_bytes": sent, "dense_bytes": dense,
                   "reduction": dense / sent if sent else 0.0}
            self.history.append(row)
            if logs is not None:
                logs.update(row)
            if self._writer is not None:
                with self._writer.as_default():
                    for key, val in row.items():
                        write_scalar(f"{prefix}/{key}", val, self._step)
            self._step += 1

        def on_train_end(self, logs=None):
            if self._writer is not None:
                self._writer.flush()

    return _BytesCallback()

