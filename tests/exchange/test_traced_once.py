"""A user's tf.function around an exchange traces ONCE, although the exchange
creates its state (residuals, step counters, byte counters) in that first
trace (_variables.state_scope), and computes what eager execution of a fresh
exchange computes."""
import numpy as np
import pytest
import tensorflow as tf

import deepreduce_tf

README = {"compressor": "topk", "compress_ratio": 0.01, "memory": "residual",
          "deepreduce": "both", "index": "golomb", "value": "qsgd", "bits": 7}
# DGC's memory keeps two more variables per key, and one for a dense tensor
# (its velocity); the schedule a step counter.
DGC = {"compressor": "topk", "compress_ratio": 0.01, "memory": "dgc", "momentum": 0.9,
       "deepreduce": "both", "index": "bloom", "value": "fp16", "schedule": "cosine",
       "schedule_steps": 10}
PARAMS = pytest.mark.parametrize("params", [README, DGC], ids=["readme", "dgc"])
# A model's gradients: two matrices and a bias below min_size (sent dense).
SHAPES = {"dense/kernel": (100, 50), "out/kernel": (64, 32), "dense/bias": (50,)}
STEPS = 4


def gradients(seed):
    rng = np.random.default_rng(seed)
    return [{k: tf.constant(rng.standard_normal(s).astype(np.float32))
             for k, s in SHAPES.items()} for _ in range(STEPS)]


def state(ex):
    """The exchange's residuals and byte counters, as numpy."""
    residuals = {k: v.numpy() for k, v in getattr(ex.memory, "residuals", {}).items()}
    return residuals, ex.ledger.per_variable(), ex.ledger.running_totals()


def assert_same(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert np.array_equal(a, b)


@PARAMS
def test_compress_of_one_tensor_traces_once(params):
    ex, traces = deepreduce_tf.from_params(params), []

    @tf.function
    def step(g):
        traces.append(1)
        payload, ctx = ex.compress(g, name="w")
        return payload, ex.decompress(payload, ctx)

    grads = [g["dense/kernel"] for g in gradients(0)]
    got = [[t.numpy() for t in step(g)] for g in grads]
    assert len(traces) == 1 and step.experimental_get_tracing_count() == 1

    eager = deepreduce_tf.from_params(params)
    for (payload, decoded), g in zip(got, grads):
        p, ctx = eager.compress(g, name="w")
        assert_same([payload, decoded], [p.numpy(), eager.decompress(p, ctx).numpy()])
    (r_got, per_got, tot_got), (r_want, per_want, tot_want) = state(ex), state(eager)
    assert per_got == per_want and tot_got == tot_want and r_got.keys() == r_want.keys()
    assert_same(list(r_got.values()), list(r_want.values()))


@PARAMS
def test_a_step_over_several_variables_traces_once(params):
    ex, traces = deepreduce_tf.from_params(params), []

    def exchange(ex, grads):
        out = []
        for name, g in grads.items():
            payload, ctx = ex.compress(g, name=name)
            out += [payload, ex.decompress(payload, ctx)]
        return out

    @tf.function
    def step(grads):
        traces.append(1)
        return exchange(ex, grads)

    batches = gradients(1)
    got = [[t.numpy() for t in step(grads)] for grads in batches]
    assert len(traces) == 1 and step.experimental_get_tracing_count() == 1

    eager = deepreduce_tf.from_params(params)
    for out, grads in zip(got, batches):
        assert_same(out, [t.numpy() for t in exchange(eager, grads)])
    assert state(ex)[1:] == state(eager)[1:]
    assert_same(list(state(ex)[0].values()), list(state(eager)[0].values()))


def test_compress_batch_traces_once():
    ex, traces = deepreduce_tf.from_params(README), []
    names = list(SHAPES)

    @tf.function
    def step(grads):
        traces.append(1)
        payload, ctx = ex.compress_batch(grads, names=names)
        return payload, ex.decompress_batch(payload, ctx)

    batches = [list(g.values()) for g in gradients(2)]
    got = [step(grads) for grads in batches]
    assert len(traces) == 1 and step.experimental_get_tracing_count() == 1

    eager = deepreduce_tf.from_params(README)
    for (payload, decoded), grads in zip(got, batches):
        p, ctx = eager.compress_batch(grads, names=names)
        assert_same([payload.numpy()] + [t.numpy() for t in decoded],
                    [p.numpy()] + [t.numpy() for t in eager.decompress_batch(p, ctx)])
    assert state(ex)[1:] == state(eager)[1:]


def test_a_later_trace_may_still_create_state():
    # A new input signature retraces; the exchange creating the state of a
    # new shape there is no error (its variables are not the function's).
    ex, traces = deepreduce_tf.from_params(README), []

    @tf.function
    def step(g, name):
        traces.append(1)
        payload, ctx = ex.compress(g, name=name)
        return ex.decompress(payload, ctx)

    grads = gradients(3)[0]
    for name, g in grads.items():
        step(g, name)
        step(g, name)
    assert len(traces) == len(grads)
    assert sorted(ex.ledger.per_variable()) == sorted(grads)
    assert sorted(ex.memory.residuals) == ["dense/kernel", "out/kernel"]  # the bias: dense


@pytest.mark.parametrize("params", [
    {"compressor": "powersgd", "rank": 2},
    {"compressor": "topk", "compress_ratio": 0.05, "memory": "dgc",
     "communicator": "sparse_allreduce", "deepreduce": "both", "index": "golomb",
     "value": "int8"},
], ids=["powersgd", "sparse_allreduce_int8"])
def test_a_communicators_step_of_two_workers_traces_once(params):
    """PowerSGD's Q and error, the sparse all-reduce's residuals and step
    counters: created in the first trace, which stays the only one; the
    results equal a fresh pair of exchanges run eagerly."""
    from deepreduce_tf.transport import LocalTransport

    W, keys = 2, list(SHAPES)
    batches = [gradients(10 + w) for w in range(W)]  # [worker][step]{key: tensor}

    def run(exchanges, grads):
        transport = LocalTransport(["/cpu:0"] * W)
        return exchanges[0].communicator.step(transport, exchanges, grads, keys)

    exchanges, traces = [deepreduce_tf.from_params(params) for _ in range(W)], []

    @tf.function
    def step(grads):
        traces.append(1)
        return run(exchanges, grads)

    eager = [deepreduce_tf.from_params(params) for _ in range(W)]
    for t in range(STEPS):
        grads = [[batches[w][t][k] for k in keys] for w in range(W)]
        got = step(grads)
        want = run(eager, grads)
        for g, e in zip(got, want):
            assert_same([x.numpy() for x in g], [x.numpy() for x in e])
    assert len(traces) == 1 and step.experimental_get_tracing_count() == 1
