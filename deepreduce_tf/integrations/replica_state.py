"""What DeepReduce's cross-device ops share (deepreduce_tf.distribute): one
Exchange per local replica, built once from the parameter dict, its state
(ExchangeState: residuals, counters, the communicator's), and the byte
accounting read from it (step_bytes, totals, byte_tensors).

DeepReduceCrossDeviceOps (MirroredStrategy, distribute.py) and
DeepReduceCollectiveOps (MultiWorkerMirroredStrategy, collective_ops.py)
derive from _DeepReduceState; the helpers below route a batch's values
(dense floats, IndexedSlices, the rest) and name them for the memory.
"""
import threading
import warnings

import tensorflow as tf
from tensorflow.python.ops import resource_variable_ops

from deepreduce_tf._variables import ensure_initialized, state_scope
from deepreduce_tf.compressor import DTYPE_CODES
from deepreduce_tf.exchange.allgather import Allgather
from deepreduce_tf.exchange.allreduce import Allreduce
from deepreduce_tf.exchange.base import Communicator
from deepreduce_tf.exchange.endpoint import Exchange
from deepreduce_tf.memory import NoMemory
from deepreduce_tf.params import from_params
from deepreduce_tf.state import ExchangeState


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
                with state_scope():
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
        out = {"dense_bytes": int(round(dense)), "sent_bytes": int(round(sent)),
               "received_bytes": int(round(received)),
               "ratio": dense / sent if sent else 0.0, "replicas": len(pairs)}
        support = comps[0].ledger.support_totals()
        if support is not None:  # the same U on every replica
            out["support"] = support["last"]
        return out

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
        out = {"dense_bytes": int(round(sum(d for _, d in pairs) / len(pairs))),
               "sent_bytes": int(round(sum(s for s, _ in pairs) / len(pairs))),
               "received_bytes": int(round(received)),
               "steps": max(steps) if steps else 0}
        support = comps[0].ledger.support_totals()
        if support is not None:  # a sparse all-reduce: |U| and k since creation, min |U|/k
            out.update(support_union=support["union"], support_picks=support["picks"],
                       support_min=support["min"])
        return out

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


def get_ops(strategy):
    """The DeepReduce ops of a strategy built with DeepReduceCrossDeviceOps,
    install() or multi_worker_strategy()."""
    ops = getattr(getattr(strategy, "extended", None), "_cross_device_ops", None)
    if not isinstance(ops, _DeepReduceState):
        raise ValueError(f"{strategy!r} does not use DeepReduce: pass cross_device_ops="
                         "DeepReduceCrossDeviceOps(params) to MirroredStrategy, or use "
                         "multi_worker_strategy(params)")
    return ops
