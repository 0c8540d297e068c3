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

The table below is the registry: a new communicator is one module (a
subclass of deepreduce_tf.exchange.base.Communicator) and one entry here,
or register() from the user's own code. exchange_locally() runs one
reduction among exchanges in one process, for tests and for trying a
configuration.
"""
import collections

import tensorflow as tf

from deepreduce_tf import fusion
from deepreduce_tf._checks import guarded
from deepreduce_tf.exchange.allgather import Allgather
from deepreduce_tf.exchange.allreduce import Allreduce
from deepreduce_tf.exchange.base import Communicator, Transfer
from deepreduce_tf.exchange.powersgd import PowerSGD
from deepreduce_tf.learned.lgc import LgcPS, LgcRAR
from deepreduce_tf.transport import ordered_sum

COMMUNICATORS = collections.OrderedDict(
    (c.name, c) for c in (Allgather, Allreduce, LgcPS, LgcRAR, PowerSGD))


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


def exchange_locally(exchanges, tensors, name=None, average=False):
    """One reduction of one tensor among len(exchanges) simulated workers in
    one process (the current device).

    Worker i compresses tensors[i] with exchanges[i] (its own memory), the
    payloads are exchanged as exchanges[0].communicator prescribes, and the
    sum is decoded. Returns (results, payloads): each worker's reduced tensor
    (bit-identical by construction) and the payloads that travelled:
    all-gather: each worker's Exchange.compress() payload (decode it with
    decompress); all-reduce: each worker's summable value vector.
    """
    exchanges, tensors = list(exchanges), list(tensors)
    if len(exchanges) != len(tensors) or not exchanges:
        raise ValueError("exchange_locally needs one tensor per compressor (at least one)")
    communicator = exchanges[0].communicator
    count = tf.cast(len(exchanges), tf.as_dtype(tf.convert_to_tensor(tensors[0]).dtype))
    if not communicator.additive:
        sent = [c.compress(t, name) for c, t in zip(exchanges, tensors)]
        ctx = sent[0][1]
        total = ordered_sum([exchanges[0].decompress(p, ctx) for p, _ in sent])
        payloads = [p for p, _ in sent]
    else:
        key = exchanges[0]._key(name)  # pylint: disable=protected-access
        tensors = [tf.convert_to_tensor(t) for t in tensors]
        plan = fusion.make_plan([key], [tensors[0].shape], [tensors[0].dtype],
                                exchanges[0].min_size)
        (bucket,) = plan.buckets
        sent = []
        for ex, t in zip(exchanges, tensors):
            (flat,) = ex.clip([tf.reshape(t, [-1])])
            prep = ex.prepare_bucket(bucket, flat, communicator.counts(ex),
                                     communicator.checks_range)
            vectors, positions, outcome = communicator.encode_bucket(ex, bucket, prep)
            vectors[0] = guarded(vectors[0], *ex.commit(prep, outcome))
            sent.append((vectors, positions))
        summed = [ordered_sum(parts) for parts in zip(*[v for v, _ in sent])]
        flat = communicator.decode_bucket(bucket, summed, sent[0][1])
        total = tf.reshape(flat, tensors[0].shape)
        payloads = [v[0] if bucket.sparse_n else v[1] for v, _ in sent]
    if average:
        total = total / count
    return [tf.identity(total) for _ in exchanges], payloads


__all__ = ["COMMUNICATORS", "Allgather", "Allreduce", "Communicator", "LgcPS", "LgcRAR",
           "PowerSGD",
           "Transfer", "exchange_locally", "make_communicator", "param_keys", "register"]
