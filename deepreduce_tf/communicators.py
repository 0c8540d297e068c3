"""The communicators, by name: what travels in the step (deepreduce_tf.exchange).

  allgather  every replica sends ONE payload of its whole batch; each process
             decodes every payload once and sums in replica order. Works with
             every compressor.
  allreduce  summable payloads (agreed positions, additive values) summed
             element by element by the collective, decoded once.
  lgc_ps     Learned Gradient Compression, parameter-server variant, and
  lgc_rar    its ring-all-reduce variant (deepreduce_tf.learned.lgc).
  powersgd   low-rank factors P and Q, all-reduced (deepreduce_tf.exchange.powersgd;
             from_params: {'compressor': 'powersgd', 'rank': r, ...}).
  sparse_allreduce
             every replica's top-(k/W) positions all-gathered, the values at
             their union summed by an all-reduce: bytes per worker bounded
             in the number of workers (deepreduce_tf.exchange.sparse_allreduce).

The table below is the registry: a new communicator is one module (a
subclass of deepreduce_tf.exchange.base.Communicator that writes its
rounds(): a generator that yields Gather, GatherParts, Sum, Replicate and
Branch requests, deepreduce_tf.exchange.rounds) and one entry here, or
register() from the user's own code. exchange_locally() runs one
reduction among exchanges in one process, for tests and for trying a
configuration.
"""
import collections

import tensorflow as tf

from deepreduce_tf.exchange.allgather import Allgather
from deepreduce_tf.exchange.allreduce import Allreduce
from deepreduce_tf.exchange.base import Communicator, Transfer
from deepreduce_tf.exchange.powersgd import PowerSGD
from deepreduce_tf.exchange.sparse_allreduce import SparseAllreduce
from deepreduce_tf.exchange.rounds import Branch, Gather, GatherParts, Group, Replicate, Sum
from deepreduce_tf.learned.lgc import LgcPS, LgcRAR
from deepreduce_tf.transport import LocalTransport

COMMUNICATORS = collections.OrderedDict(
    (c.name, c) for c in (Allgather, Allreduce, LgcPS, LgcRAR, PowerSGD, SparseAllreduce))


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


class _RecordingTransport(LocalTransport):
    """A LocalTransport that keeps what each replica handed it, in call order."""

    def __init__(self, devices):
        super().__init__(devices)
        self.handed = [[] for _ in devices]

    def all_gather(self, payloads, key=None):
        payloads = list(payloads)
        for mine, p in zip(self.handed, payloads):
            mine.append(p)
        return super().all_gather(payloads, key)

    def all_reduce(self, vectors):
        vectors = [list(v) for v in vectors]
        for mine, v in zip(self.handed, vectors):
            mine.extend(v)
        return super().all_reduce(vectors)


def exchange_locally(exchanges, tensors, name=None, average=False):
    """One reduction of one tensor among len(exchanges) simulated workers in
    one process (on the tensors' device), through the real step
    (Communicator.step: prepare, transfer, commit, finish) of
    exchanges[0].communicator, every communicator included.

    Worker i contributes tensors[i] with exchanges[i] (its own memory and
    state). Returns (results, payloads): each worker's reduced tensor
    (bit-identical by construction) and, per worker, the list of tensors it
    handed the transport, in order (all-gather: its batch payload, decoded
    by decompress_batch with receiver_batch_context; all-reduce: its
    summable vectors). In eager mode only what the step ran is listed (a
    branch not taken hands nothing); inside a tf.function, tensors handed
    inside a branch (PowerSGD's low-rank rounds, LGC's phases) cannot leave
    it: return the results only.
    """
    exchanges, tensors = list(exchanges), list(tensors)
    if len(exchanges) != len(tensors) or not exchanges:
        raise ValueError("exchange_locally needs one tensor per exchange (at least one)")
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    key = exchanges[0]._key(name)  # pylint: disable=protected-access
    device = tensors[0].device
    transport = _RecordingTransport([device] * len(exchanges))
    out = exchanges[0].communicator.step(transport, exchanges, [[t] for t in tensors], [key],
                                         average=average)
    return [o[0] for o in out], transport.handed


__all__ = ["COMMUNICATORS", "Allgather", "Allreduce", "Branch", "Communicator", "Gather",
           "GatherParts", "Group", "LgcPS", "LgcRAR", "PowerSGD", "Replicate", "Sum",
           "SparseAllreduce", "Transfer", "exchange_locally", "make_communicator", "param_keys",
           "register"]
