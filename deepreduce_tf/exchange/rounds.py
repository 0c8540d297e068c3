"""A method's transfer as rounds: the method computes, the transport moves.

Every communicator (Allgather, Allreduce, PowerSGD, LGC) writes the middle
of the step, transfer, as a generator, Communicator.rounds(): it computes
on each replica's device and, whenever something must travel, yields a
request and receives the result of the collective:

    received = yield Gather(payloads, key)   # one uint8 payload per device
                                             # -> the group's, replica order
    parts = yield GatherParts(parts, key)    # several payloads per device,
                                             # one collective
    sums = yield Sum(vectors)                # per device a list of vectors
                                             # -> their element-wise sums
    copies = yield Replicate(tensor)         # one copy per device of the call
    out = yield Branch(pred, if_true, if_false)
                                             # tf.cond of two sub-rounds (zero-
                                             # argument callables returning a
                                             # generator, or a value)

run() answers the requests with the transport's collectives: it is the only
code of the step that calls them (flat, hierarchical or across processes,
the method does not know). A method sees the topology through a Group
(devices, reduce_device, num_replicas, first_rank), never the transport, so
a new method (a sparse all-reduce, a learned codec) is one generator, and
its collectives are the transport's: their byte counting, their ordering in
TF1 graphs and their effects inside tf.cond branches are written once, here.

Why a generator: the methods' rounds depend on what the previous round
returned (PowerSGD's Q needs the summed P; LGC's values need the leader's
positions), so the method must resume after each collective; a generator
is that, in plain Python, traced once into the graph like any other code.
"""
import collections
import inspect

import tensorflow as tf

from deepreduce_tf._checks import guarded


class Gather(collections.namedtuple("Gather", ["payloads", "key"])):
    """All-gather: payloads[d] is device d's uint8 vector. Returns the
    group's payloads in replica order, on the reduce device. key: a name of
    this exchange, the same every step."""


class GatherParts(collections.namedtuple("GatherParts", ["parts", "key"])):
    """Several payloads per replica in one all-gather: parts[d] is device
    d's list (the same length everywhere). Returns received[j][r], part j
    of replica r, on the reduce device."""


class Sum(collections.namedtuple("Sum", ["vectors"])):
    """All-reduce: vectors[d] is device d's list of vectors (the same shapes
    and dtypes on every replica). Returns their element-wise sums over the
    group, on the reduce device."""


class Replicate(collections.namedtuple("Replicate", ["tensor"])):
    """A copy of `tensor` (on the reduce device) on every device of the
    call. Returns the list of copies, in device order."""


class Branch(collections.namedtuple("Branch", ["pred", "if_true", "if_false"])):
    """tf.cond(pred, ...) of two sub-rounds: if_true and if_false take no
    argument and return rounds (a generator) or a value; both must return
    the same structure. Collectives run inside the branch taken, and the
    branch's outputs depend on what they leave to run (TF1 counters)."""


class Group(collections.namedtuple("Group", ["devices", "reduce_device", "num_replicas",
                                             "first_rank"])):
    """What a method knows of the transport: the devices this call drives
    (one replica each), where gathered payloads and sums land, the size of
    the group and the global number of devices[0] (None if unknown)."""

    @classmethod
    def of(cls, transport):
        return cls(tuple(transport.devices), transport.reduce_device,
                   int(transport.num_replicas), transport.first_rank)


# The collective each request runs, by the name a communicator declares in
# Communicator.collectives (Replicate copies inside this process, Branch
# only chooses: neither is declared).
COLLECTIVE = {"Gather": "gather", "GatherParts": "gather", "Sum": "sum"}


def run(transport, rounds, declared=None, who="a communicator"):
    """Drives `rounds` (a generator of requests; anything else is returned as
    it is) on `transport`; returns what the generator returns.

    declared: the collectives `who` says its rounds run ("gather", "sum");
    a request for another raises ValueError (None: not checked)."""
    if not inspect.isgenerator(rounds):
        return rounds
    result = None
    while True:
        try:
            request = rounds.send(result)
        except StopIteration as done:
            return done.value
        result = _answer(transport, request, declared, who)


def _answer(transport, request, declared, who):
    kind = COLLECTIVE.get(type(request).__name__)
    if declared is not None and kind is not None and kind not in declared:
        raise ValueError(f"{who} yielded {type(request).__name__} (an all-{kind}), but it "
                         f"declares collectives={tuple(declared)!r}: declare what travels")
    if isinstance(request, Gather):
        return transport.all_gather(list(request.payloads), key=request.key)
    if isinstance(request, GatherParts):
        return transport.all_gather_parts([list(p) for p in request.parts], key=request.key)
    if isinstance(request, Sum):
        return transport.all_reduce([list(v) for v in request.vectors])
    if isinstance(request, Replicate):
        return transport.replicate(request.tensor)
    if isinstance(request, Branch):
        return tf.cond(request.pred, lambda: _branch(transport, request.if_true, declared, who),
                       lambda: _branch(transport, request.if_false, declared, who))
    raise TypeError(f"a communicator's rounds yielded {type(request).__name__!r}; they may "
                    "yield Gather, GatherParts, Sum, Replicate or Branch "
                    "(deepreduce_tf.exchange.rounds)")


def _branch(transport, fn, declared, who):
    """fn's rounds inside a tf.cond branch: the transport's effects made
    there stay inside (the branch's outputs depend on them)."""
    mark = len(transport.effects)
    out = run(transport, fn(), declared, who)
    new = transport.effects[mark:]
    del transport.effects[mark:]
    if not new:
        return out
    return tf.nest.map_structure(lambda t: guarded(t, *new), out)
