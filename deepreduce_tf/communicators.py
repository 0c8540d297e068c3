"""Communicators (GRACE's Communicator): how payloads are combined.

  allgather  every worker receives every worker's payload (variable sizes)
             and sums the decoded tensors. Works with every compressor.
  allreduce  the payloads are summed element by element by the collective and
             decoded once. Only compressors whose payloads are summable
             qualify: positions every worker agrees on (compressor 'none', or
             'randomk', whose positions are a function of the shared per-step
             seed) and values that add (value raw, fp16 or bf16, no index
             codec). Anything else is refused at construction.

The transport itself (collectives across replicas and workers) is
deepreduce_tf.distribute's; exchange_locally() runs the same protocol among
compressors in one process, for tests and for trying a configuration.
"""
import abc
import collections

import tensorflow as tf


class Communicator(abc.ABC):
    name = None
    additive = False

    def check(self, compressor):
        """Raises ValueError if `compressor` cannot use this communicator."""

    @abc.abstractmethod
    def aggregate(self, compressor, received, ctx):
        """The SUM over workers of the decoded tensor.

        received: allgather: the list of every worker's payload;
                  allreduce: the element-wise sum of the payloads.
        """

    def __repr__(self):
        return f"{type(self).__name__}()"


class Allgather(Communicator):
    name = "allgather"

    def aggregate(self, compressor, received, ctx):
        received = list(received)
        if not received:
            raise ValueError("allgather: no payloads received")
        return tf.add_n([compressor.decompress(p, ctx) for p in received])


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
        if problems:
            raise ValueError("communicator 'allreduce' sums payloads element by element, but "
                             + "; ".join(problems) + ". Use communicator='allgather', which "
                             "works with every combination.")

    def aggregate(self, compressor, received, ctx):
        return compressor.decompress(received, ctx)


COMMUNICATORS = collections.OrderedDict((c.name, c) for c in (Allgather, Allreduce))


def make_communicator(name):
    if name not in COMMUNICATORS:
        raise ValueError(f"unknown communicator {name!r}; valid choices: "
                         f"{', '.join(COMMUNICATORS)}")
    return COMMUNICATORS[name]()


def exchange_locally(compressors, tensors, name=None, average=False):
    """One reduction among len(compressors) simulated workers in one process.

    Worker i compresses tensors[i] with compressors[i] (its own memory), the
    payloads are exchanged as the communicator prescribes, and every worker
    decodes and sums. Returns (results, payloads): each worker's reduced
    tensor (they are bit-identical by construction; tests check it) and the
    payloads that travelled.
    """
    compressors, tensors = list(compressors), list(tensors)
    if len(compressors) != len(tensors) or not compressors:
        raise ValueError("exchange_locally needs one tensor per compressor (at least one)")
    sent = [c.compress(t, name) for c, t in zip(compressors, tensors)]
    payloads = [p for p, _ in sent]
    results = []
    for comp, (_, ctx) in zip(compressors, sent):
        if comp.communicator.additive:
            total = comp.communicator.aggregate(comp, tf.add_n(payloads), ctx)
        else:
            total = comp.communicator.aggregate(comp, payloads, ctx)
        if average:
            total = total / tf.cast(len(compressors), total.dtype)
        results.append(total)
    return results, payloads
