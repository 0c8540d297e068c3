"""A communicator's transfer as rounds (deepreduce_tf.exchange.rounds): the
method computes and yields what travels, rounds.run hands each request to
the transport. The built-in methods never touch a transport."""
import inspect
import pathlib
import re

import numpy as np
import pytest
import tensorflow as tf

import deepreduce_tf as dr
from deepreduce_tf import communicators, transport
from deepreduce_tf import distribute as drd
from deepreduce_tf._checks import guarded
from deepreduce_tf.exchange import rounds

DEVICES = ["/cpu:0", "/cpu:1"]
LIMIT = 100.0  # above it a value is not sent in float16 (ExactWhenLarge)


class ExactWhenLarge(communicators.Communicator):
    """Written as rounds against the public pieces only. Round 1 gathers
    every replica's largest magnitude (4 bytes each); if any exceeds LIMIT,
    round 2 sums the buckets in float32 (exact), else in float16 (the
    residual keeps what float16 lost). Round 2 is a Branch on what round 1
    returned, as PowerSGD's and LGC's phases are."""

    name = "exact_when_large"
    additive = True
    collectives = ("gather", "sum")
    travels = "gathered bytes (each replica's largest magnitude), then summed vectors"

    def rounds(self, group, exchanges, plan, prepared, keys):
        largest, xs = [], []
        for device, preps in zip(group.devices, prepared):
            with tf.device(device):
                x = [p.x if b.sparse_n else tf.zeros([0], b.dtype)
                     for b, p in zip(plan.buckets, preps)]
                top = tf.reduce_max(tf.abs(tf.concat(x + [tf.zeros([1])], 0)))
                largest.append(tf.reshape(tf.bitcast(top, tf.uint8), [-1]))
                xs.append(x)
        got = yield rounds.Gather(largest, "largest/" + "|".join(keys))
        with tf.device(group.reduce_device):
            tops = [tf.bitcast(tf.reshape(g, [4]), tf.float32) for g in got]
            exact = tf.reduce_max(tf.stack(tops)) > LIMIT

        def send(dtype):
            def branch():
                wires = [[tf.cast(v, dtype) for v in x] for x in xs]
                summed = yield rounds.Sum(wires)
                kept = [[v - tf.cast(w, v.dtype) for v, w in zip(x, ws)]
                        for x, ws in zip(xs, wires)]
                return [tf.cast(s, tf.float32) for s in summed], kept
            return branch

        sparse, kept = yield rounds.Branch(exact, send(tf.float32), send(tf.float16))
        rests = yield rounds.Sum([[p.rest for p in preps] for preps in prepared])
        sums = [tf.concat([s, r], 0) for s, r in zip(sparse, rests)]
        outcomes = []
        for r, preps in enumerate(prepared):
            outs = []
            for b, (bucket, prep) in enumerate(zip(plan.buckets, preps)):
                sent = None
                if bucket.sparse_n:
                    sent = dr.memory.Sent(kept[r][b], tf.zeros([0], tf.int64),
                                          tf.zeros([0], bucket.dtype))
                nbytes = tf.constant(4 * bucket.n, tf.int64)
                outs.append(dr.exchange.endpoint.Outcome(
                    sent, None, dr.compressor.bucket_record(bucket, nbytes)))
            outcomes.append(outs)
        return communicators.Transfer(sums, outcomes, [[] for _ in exchanges],
                                      [[] for _ in exchanges])


def _lists(values):
    out = []
    for d, vals in zip(DEVICES, values):
        with tf.device(d):
            out.append([tf.constant(v) for v in vals])
    return out


def test_a_method_written_as_rounds_runs_in_the_step(rng):
    params = {"compressor": "none", "memory": "residual", "min_size": 64}
    ops = drd.DeepReduceCrossDeviceOps(params, communicator=ExactWhenLarge())
    shapes = [(20, 10), (30,), (8, 16)]
    small = [[rng.normal(size=s).astype(np.float32) for s in shapes] for _ in range(2)]
    large = [[v.copy() for v in r] for r in small]
    large[1][0][3, 4] = 1000.0  # one replica holds a value above LIMIT
    residual = [np.zeros(20 * 10 + 8 * 16, np.float32) for _ in range(2)]
    for grads in (small, large):
        out = ops.reduce_tensors(_lists(grads))
        exact = max(np.abs(v).max() for r in grads for v in r if v.size >= 64) > LIMIT
        for i, shape in enumerate(shapes):
            g = [grads[r][i] for r in range(2)]
            if g[0].size < 64:  # the dense section: float32 every step
                want = g[0] + g[1]
            else:
                off = 0 if i == 0 else 200
                x = [g[r].ravel() + residual[r][off:off + g[r].size] for r in range(2)]
                wire = [v if exact else v.astype(np.float16) for v in x]
                want = (wire[0] + wire[1]).astype(np.float32).reshape(shape)
            for r in range(2):
                np.testing.assert_array_equal(out[r][i].numpy(), want)
        # The memory keeps what the wire lost (nothing on an exact step).
        for r in range(2):
            x = np.concatenate([grads[r][0].ravel(), grads[r][2].ravel()]) + residual[r]
            lost = x - (x if exact else x.astype(np.float16).astype(np.float32))
            (kept,) = ops.compressors[r].memory.residuals.values()
            np.testing.assert_array_equal(kept.numpy(), lost)
            residual[r] = lost


class _CountingTransport(transport.LocalTransport):
    """Counts its all-gathers in a variable and, as CollectiveTransport
    does with its instance counters, leaves the update in `effects`."""

    def __init__(self, devices):
        super().__init__(devices)
        self.count = tf.Variable(0, dtype=tf.int64)
        self.keys = []

    def all_gather(self, payloads, key=None):
        self.keys.append(key)
        self.effects.append(self.count.assign_add(1))
        return super().all_gather(payloads, key)


def _method(flag):
    got = yield rounds.Gather([tf.constant([1], tf.uint8), tf.constant([2, 3], tf.uint8)],
                              "outer")
    (total,) = yield rounds.Sum([[tf.constant([1.0, 2.0])], [tf.constant([3.0, 4.0])]])
    copies = yield rounds.Replicate(total)
    parts = yield rounds.GatherParts([[tf.constant([5], tf.uint8), tf.constant([], tf.uint8)],
                                      [tf.constant([6, 7], tf.uint8),
                                       tf.constant([8], tf.uint8)]], "parts")

    def taken():
        more = yield rounds.Gather([tf.constant([9], tf.uint8)] * 2, "inner")
        return tf.cast(tf.size(more[0]) + tf.size(more[1]), tf.float32)

    extra = yield rounds.Branch(flag, taken, lambda: tf.constant(0.0))
    sizes = tf.stack([tf.size(g) for g in got] + [tf.size(p) for part in parts for p in part])
    return sizes, total, tf.stack(copies), extra


@pytest.mark.parametrize("taken", [True, False])
def test_run_answers_every_request_and_keeps_branch_effects_inside(taken):
    t = _CountingTransport(["/cpu:0", "/cpu:0"])

    @tf.function
    def step(flag):
        del t.effects[:]
        out = rounds.run(t, _method(flag))
        # The step guards its result with the transport's effects: one made
        # inside the branch would belong to another graph and fail here.
        return tf.nest.map_structure(lambda v: guarded(v, *t.effects), out)

    sizes, total, copies, extra = step(tf.constant(taken))
    np.testing.assert_array_equal(sizes.numpy(), [1, 2, 1, 2, 0, 1])
    np.testing.assert_array_equal(total.numpy(), [4.0, 6.0])
    np.testing.assert_array_equal(copies.numpy(), [[4.0, 6.0], [4.0, 6.0]])
    assert extra.numpy() == (2.0 if taken else 0.0)
    assert t.keys[:2] == ["outer", "parts"] and "inner" in t.keys  # both branches traced
    # The outer gathers ran once each; the inner one only when its branch was taken.
    assert t.count.numpy() == 2 + int(taken)


def test_run_refuses_what_is_not_a_request():
    def method():
        yield tf.constant(1.0)

    with pytest.raises(TypeError, match="Gather, GatherParts, Sum, Replicate or Branch"):
        rounds.run(transport.LocalTransport(["/cpu:0"]), method())


def test_a_method_runs_only_the_collectives_it_declares(rng):
    class Undeclared(ExactWhenLarge):
        name = "undeclared"
        collectives = ("sum",)  # but its first round gathers

    ops = drd.DeepReduceCrossDeviceOps({"compressor": "none", "min_size": 64},
                                       communicator=Undeclared())
    grads = [[rng.normal(size=(20, 10)).astype(np.float32)] for _ in range(2)]
    with pytest.raises(ValueError, match=r"'undeclared' yielded Gather .*collectives=\('sum',\)"):
        ops.reduce_tensors(_lists(grads))


def test_run_passes_a_plain_value_through():
    assert rounds.run(transport.LocalTransport(["/cpu:0"]), 42) == 42


@pytest.mark.parametrize("cls", list(communicators.COMMUNICATORS.values()),
                         ids=list(communicators.COMMUNICATORS))
def test_every_builtin_method_is_rounds_and_never_calls_the_transport(cls):
    assert inspect.isgeneratorfunction(cls.rounds)
    assert cls.collectives and set(cls.collectives) <= {"gather", "sum"}
    for klass in cls.__mro__:
        if klass is communicators.Communicator:
            break
        assert "transfer" not in vars(klass) and "reduce_flat" not in vars(klass), klass
    # The methods see a rounds.Group, never the transport: no collective,
    # no effect list is reached from their rounds.
    source = inspect.getsource(cls.rounds)
    module = pathlib.Path(inspect.getsourcefile(cls))
    if module.name != "allgather.py":  # Allgather.step_all is the step's (slices ride along)
        source = module.read_text()
    assert not re.search(r"\btransport_?\.(all_gather|all_reduce|replicate|effects|devices)",
                         source), cls.name
