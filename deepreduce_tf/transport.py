"""Transports: how bytes and vectors move between the replicas of one reduction.

Every TensorFlow-internal call of the exchange lives here (collective
launchers, device copies), so that communicators (deepreduce_tf.communicators)
are written once against this small interface:

  all_gather(payloads)        uint8 payloads of this call's replicas ->
                              every replica's payload, in global replica order
  all_gather_parts(parts)     several payloads per replica in one all_gather
  all_reduce(vectors)         lists of same-shaped vectors of this call's
                              replicas -> their element-wise sums
  replicate(tensor)           one tensor -> a copy on every device of this call

Results of all_gather / all_reduce are placed on `reduce_device`, where the
process decodes once; replicate() copies the reduced result to the replicas.

  LocalTransport       all replicas in this process (MirroredStrategy): one
                       call handles every replica; gathering is a device copy
                       and all-reduce an ordered sum (bit-identical results).
  CollectiveTransport  one replica of a MultiWorkerMirroredStrategy worker:
                       TensorFlow's collective launchers; variable-size
                       payloads travel in fixed-capacity frames (one
                       collective; a second for overflow), or as their
                       lengths, then the payloads padded to the longest.
"""
import abc

import tensorflow as tf
from tensorflow.python.ops import collective_ops, resource_variable_ops

from deepreduce_tf._checks import check, guarded
from deepreduce_tf._variables import ensure_initialized, state_scope
from deepreduce_tf.fusion import ordered_sum  # noqa: F401 (named here as before)


class Transport(abc.ABC):
    """Moves payloads among `num_replicas` replicas; this call drives the
    replicas on `devices`."""

    def __init__(self, devices, num_replicas, first_rank=None):
        self.devices = tuple(devices)
        self.num_replicas = int(num_replicas)
        # The global replica number of devices[0] (the others follow it),
        # when known; None otherwise.
        self.first_rank = first_rank
        # Counter updates the reduced result must depend on (TF1 graphs).
        self.effects = []
        if not self.devices:
            raise ValueError("a transport needs at least one device")

    @property
    def reduce_device(self):
        """Where gathered payloads land and decoding happens."""
        return self.devices[0]

    @abc.abstractmethod
    def all_gather(self, payloads, key=None):
        """payloads: one uint8 vector per device of this call. Returns the
        num_replicas payloads of the group, in replica order, on
        reduce_device. key: a name of this exchange, the same every step
        (a transport may keep state per exchange)."""

    def all_gather_parts(self, parts_by_device, key=None):
        """Several payloads per replica in ONE all_gather.

        parts_by_device[d]: this call's device d's uint8 payloads (the same
        number m on every replica). Each replica sends [m int32 lengths | its
        parts]; returns received[j][r]: part j of replica r (replica order),
        on reduce_device. A frame whose lengths do not add up to its size
        raises InvalidArgumentError."""
        counts = {len(parts) for parts in parts_by_device}
        if len(counts) != 1 or not counts.pop():
            raise ValueError("every device needs the same, non-zero number of parts")
        m = len(parts_by_device[0])
        framed = []
        for device, parts in zip(self.devices, parts_by_device):
            with tf.device(device):
                lengths = tf.stack([tf.size(p, out_type=tf.int32) for p in parts])
                header = tf.reshape(tf.bitcast(lengths, tf.uint8), [-1])
                framed.append(tf.concat([header] + list(parts), 0))
        received = self.all_gather(framed, key=key)
        out = [[] for _ in range(m)]
        with tf.device(self.reduce_device):
            for frame in received:
                # Checks that order nothing but what reads them (_checks).
                short = check(tf.size(frame) >= 4 * m,
                              f"a gathered frame is shorter than its {m} part lengths")
                head = guarded(frame[:4 * m], short)
                lengths = tf.reshape(tf.bitcast(tf.reshape(head, [m, 4]), tf.int32), [m])
                adds_up = check(
                    tf.equal(tf.reduce_sum(tf.cast(lengths, tf.int64)) + 4 * m,
                             tf.size(frame, out_type=tf.int64)),
                    "a gathered frame's part lengths do not add up to its size")
                signed = check(tf.reduce_all(lengths >= 0),
                               "a gathered frame has a negative part length")
                lengths = guarded(lengths, adds_up, signed)
                ends = 4 * m + tf.cumsum(lengths)
                starts = ends - lengths
                for j in range(m):
                    out[j].append(frame[starts[j]:ends[j]])
        return out

    @abc.abstractmethod
    def all_reduce(self, vectors):
        """vectors: per device of this call, a list of vectors (the same
        shapes and dtypes on every replica). Returns the list of element-wise
        sums over the group, on reduce_device."""

    def replicate(self, tensor):
        """Copies of `tensor` (a tensor or tf.IndexedSlices) on every device
        of this call."""
        out = []
        for d in self.devices:
            with tf.device(d):
                if isinstance(tensor, tf.IndexedSlices):
                    out.append(tf.IndexedSlices(tf.identity(tensor.values),
                                                tf.identity(tensor.indices),
                                                tensor.dense_shape))
                else:
                    out.append(tf.identity(tensor))
        return out


class LocalTransport(Transport):
    """Every replica of the group is on a device of this process."""

    def __init__(self, devices):
        super().__init__(devices, len(devices))

    @property
    def first_rank(self):
        """0: every replica of the group is here (None if a subclass drives
        only some of them)."""
        return 0 if len(self.devices) == self.num_replicas else None

    @first_rank.setter
    def first_rank(self, value):
        if value is not None:
            raise AttributeError("a LocalTransport's replicas are numbered from 0")

    def all_gather(self, payloads, key=None):
        payloads = list(payloads)
        if len(payloads) != len(self.devices):
            raise ValueError(f"{len(self.devices)} devices but {len(payloads)} payloads")
        with tf.device(self.reduce_device):
            return [tf.identity(p) for p in payloads]

    def all_reduce(self, vectors):
        vectors = [list(v) for v in vectors]
        with tf.device(self.reduce_device):
            return [ordered_sum(parts) for parts in zip(*vectors)]


class CollectiveTransport(Transport):
    """One replica of a multi-worker group, through the strategy's collective
    launcher (tensorflow.python.distribute.cross_device_utils).

    Variable-size payloads: without `frames`, two collectives per all_gather
    (every payload's length, then the payloads padded to the longest). With
    `frames` (a callable key -> int32 variable of this replica, the frame
    capacity in 4-byte words, the same on every worker), ONE collective in
    the steady state: each worker sends a fixed-size frame [length | its
    payload, padded or cut to the capacity]; only when a payload outgrew the
    capacity does a second collective carry the overflow of every worker
    (all workers see the lengths and take the same branch). The capacity
    then becomes the longest payload plus a small margin (FRAME_MARGIN).
    """

    def __init__(self, launcher, device, group_size, options, wire_counter=None, frames=None,
                 first_rank=None):
        super().__init__([device], group_size, first_rank=first_rank)
        self._launcher = launcher
        self._options = options
        self._wire = wire_counter
        self._frames = frames

    # capacity = longest payload (words) + 1/256 of it + 8 words: payload
    # sizes vary by a few bytes between steps (a wider margin is padding on
    # the wire every step; an overflow costs one more collective once)
    FRAME_MARGIN = (256, 8)

    def _count(self, nbytes):
        if self._wire is not None:
            with tf.control_dependencies(ensure_initialized([self._wire])):
                op = self._wire.assign_add(tf.cast(nbytes, tf.int64), read_value=False)
            if op is not None:
                self.effects.append(op)

    def _gather(self, tensor):
        return self._launcher._all_gather(tensor, self._options)  # pylint: disable=protected-access

    def all_gather(self, payloads, key=None):
        """key: names the exchange (its frame capacity) when frames are used."""
        (payload,) = payloads
        with tf.device(self.reduce_device):
            length = tf.size(payload, out_type=tf.int32)
            words = (length + 3) // 4
            padded = tf.pad(payload, [[0, words * 4 - length]])
            as_words = tf.reshape(tf.bitcast(tf.reshape(padded, [-1, 4]), tf.int32), [-1])
            if self._frames is None:
                chunks, lengths = self._two_rounds(length, words, as_words)
            else:
                chunks, lengths = self._framed(self._frames(key), length, words, as_words)
            as_bytes = tf.reshape(tf.bitcast(chunks, tf.uint8), [self.num_replicas, -1])
            return [as_bytes[j, :lengths[j]] for j in range(self.num_replicas)]

    def _two_rounds(self, length, words, as_words):
        lengths = self._gather(tf.reshape(length, [1]))
        max_words = (tf.reduce_max(lengths) + 3) // 4
        gathered = self._gather(tf.pad(as_words, [[0, max_words - words]]))
        self._count(4 + 4 * max_words)
        return tf.reshape(gathered, [self.num_replicas, -1]), lengths

    def _framed(self, capacity, length, words, as_words):
        n = self.num_replicas
        with tf.control_dependencies(ensure_initialized([capacity])):
            cap = capacity.read_value()
        head = as_words[:cap]
        frame = tf.concat([tf.reshape(length, [1]), tf.pad(head, [[0, cap - tf.size(head)]])], 0)
        first = tf.reshape(self._gather(frame), [n, -1])  # [n, 1 + cap]
        lengths = first[:, 0]
        need = (tf.reduce_max(lengths) + 3) // 4
        extra = tf.maximum(need - cap, 0)

        def overflow():
            tail = as_words[cap:]
            tail = tf.pad(tail, [[0, extra - tf.size(tail)]])
            return tf.reshape(self._gather(tail), [n, -1])

        def fits():
            return tf.zeros([n, 0], tf.int32)

        rest = tf.cond(extra > 0, overflow, fits)
        chunks = tf.concat([first[:, 1:], rest], 1)[:, :need]
        div, add = self.FRAME_MARGIN
        with tf.control_dependencies([chunks]):
            update = capacity.assign(need + need // div + add, read_value=False)
        if update is not None:
            self.effects.append(update)
        self._count(4 * (1 + cap) + 4 * extra)
        return chunks, lengths

    def all_reduce(self, vectors):
        (mine,) = vectors
        mine = list(mine)
        if not mine:
            return []
        # One pack per dtype: the launcher concatenates each pack into one
        # collective.
        order = {}
        for i, v in enumerate(mine):
            order.setdefault(v.dtype, []).append(i)
        packs = [[mine[i] for i in ids] for ids in order.values()]
        flat = self._launcher.batch_all_reduce(packs, self._options)
        summed = [None] * len(mine)
        for i, out in zip([i for ids in order.values() for i in ids], flat):
            summed[i] = out
        with tf.device(self.reduce_device):
            self._count(tf.add_n([tf.size(v, out_type=tf.int64) * v.dtype.size for v in mine]))
        return summed


class GraphCollectiveLauncher:
    """TensorFlow's collective ops for graphs that every worker builds the
    same way without tf.distribute (tf_cnn_benchmarks' collective mode, TF1
    sessions): the launcher interface CollectiveTransport uses. One device of
    this worker takes part in a group of `group_size` devices; group_key and
    new_instance_key() (a callable returning the next key, the same sequence
    on every worker) come from the graph's owner, so that its own collectives
    and these never share a key.

    A TF1 session may run a collective under the same step id and instance
    key in every run, and the runtime then checks each run's shape against the
    first one's: payloads change size every step. So each collective's
    instance key also carries a step counter (a variable of this launcher,
    advanced once per exchange, in lockstep on every worker): every run uses
    keys of its own, KEY_STRIDE apart, the static key below the stride.
    """
    KEY_STRIDE = 4096
    STEP_PERIOD = (2 ** 31 - 1) // 4096 - 1

    def __init__(self, device, group_size, group_key, new_instance_key):
        self._device = device
        self.group_size = self._group_size = int(group_size)
        self._group_key = int(group_key)
        self._new_instance_key = new_instance_key
        self._step = None
        self._counter = None

    def begin_exchange(self):
        """Advances the step counter; the collectives built until the next
        call take keys of this step. Returns the counter's update (the
        exchange's result must depend on it)."""
        with tf.device(self._device):
            if self._counter is None:
                with state_scope():
                    self._counter = resource_variable_ops.ResourceVariable(
                        0, dtype=tf.int32, trainable=False, name="deepreduce_collective_step")
            with tf.control_dependencies(ensure_initialized([self._counter])):
                self._step = self._counter.assign_add(1)
        return self._step

    def _key(self):
        key = int(self._new_instance_key())
        if not 0 < key < self.KEY_STRIDE:
            raise ValueError(f"instance key {key} is outside (0, {self.KEY_STRIDE}): too many "
                             "collectives in one graph for GraphCollectiveLauncher")
        if self._step is None:
            self.begin_exchange()
        return key + (self._step % self.STEP_PERIOD) * self.KEY_STRIDE

    def _all_gather(self, tensor, options=None):  # pylint: disable=unused-argument
        with tf.device(self._device):
            return collective_ops.all_gather_v2(tensor, self._group_size, self._group_key,
                                                self._key())

    def batch_all_reduce(self, packs, options=None):  # pylint: disable=unused-argument
        """A flat list of the sums of every tensor of every pack (one
        collective per pack)."""
        out = []
        with tf.device(self._device):
            for pack in packs:
                flat = tf.concat([tf.reshape(t, [-1]) for t in pack], 0)
                summed = collective_ops.all_reduce_v2(flat, self._group_size, self._group_key,
                                                      self._key())
                sizes = [tf.size(t) for t in pack]
                for t, part in zip(pack, tf.split(summed, sizes)):
                    out.append(tf.reshape(part, tf.shape(t)))
        return out
