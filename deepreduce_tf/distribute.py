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
import warnings

import tensorflow as tf
from tensorflow.python.distribute import cross_device_ops as cdo_lib
from tensorflow.python.distribute import distribute_utils
from tensorflow.python.distribute import reduce_util
from tensorflow.python.distribute import values as value_lib

# The multi-worker ops, the Keras hooks and the shared base live in their own
# modules (collective_ops.py, keras_hooks.py, replica_state.py); every name
# still imports from here.
from deepreduce_tf.integrations.collective_ops import (  # noqa: F401 (named here as before)
    DeepReduceCollectiveOps, install, multi_worker_strategy)
from deepreduce_tf.integrations.keras_hooks import BytesCallback, KerasState, write_scalar  # noqa: F401
from deepreduce_tf.integrations.replica_state import (  # noqa: F401 (named here as before)
    STATE_NOT_SAVED_MESSAGE, SINGLE_REPLICA_MESSAGE, SingleReplicaWarning, StateNotSavedWarning,
    _Builder, _DeepReduceState, _classify, _compressible, _lossless_dense, _memory_key,
    _slices_ok, _unique, get_ops, local_variable_factory)
from deepreduce_tf.state import ExchangeState
from deepreduce_tf.transport import CollectiveTransport, LocalTransport, ordered_sum

__all__ = ["BytesCallback", "DeepReduceCollectiveOps", "DeepReduceCrossDeviceOps",
           "ExchangeState", "KerasState", "SingleReplicaWarning", "StateNotSavedWarning",
           "get_ops", "install", "local_variable_factory", "multi_worker_strategy",
           "write_scalar"]


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
        tf_cnn_benchmarks' replicated mode, deepreduce_tf.integrations.tf_cnn_benchmarks).

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
