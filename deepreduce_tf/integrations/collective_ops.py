"""DeepReduce under MultiWorkerMirroredStrategy: DeepReduceCollectiveOps,
install() and multi_worker_strategy() (deepreduce_tf.distribute re-exports
them).

Every worker process drives its local replicas; payloads travel between
workers through TensorFlow's collective launchers (CollectiveTransport).
With several devices per worker the exchange is hierarchical by default:
TensorFlow's all-reduce sums inside the worker, the worker's leader
compresses the local sum and exchanges one payload per worker, and a local
all-reduce hands the result to every device (_hierarchical_all_reduce).
"""
import copy

import tensorflow as tf
from tensorflow.python.distribute import collective_all_reduce_strategy as cars
from tensorflow.python.distribute import cross_device_ops as cdo_lib
from tensorflow.python.distribute import cross_device_utils
from tensorflow.python.distribute import reduce_util
from tensorflow.python.util import nest

from deepreduce_tf._variables import state_scope
from deepreduce_tf.integrations.replica_state import (_Builder, _DeepReduceState, _classify, _memory_key,
                                         _unique, local_variable_factory)
from deepreduce_tf.transport import CollectiveTransport


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
                    with state_scope():
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
