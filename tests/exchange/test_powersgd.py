"""PowerSGD (communicator 'powersgd') against the numpy reference of the same
steps (tests/powersgd_reference.py): factors, orthogonality, error memory, the
uncompressed set, start_iter, exact ranks, zero and non-finite gradients, half
precision, the parameters, the collectives and the accounting."""
import warnings

import numpy as np
import pytest
import tensorflow as tf

import deepreduce_tf as dr
from deepreduce_tf import distribute as drd
from deepreduce_tf.exchange import powersgd

import powersgd_reference as ref

DEVICES = ["/cpu:0", "/cpu:1"]
SHAPES = [(3, 3, 4, 8), (8,), (40, 30), (30,), (64, 5)]


def _ops(**params):
    params = {"compressor": "powersgd", **params}
    warnings.simplefilter("ignore", drd.StateNotSavedWarning)
    return drd.DeepReduceCrossDeviceOps(params)


def _grads(rng, shapes=SHAPES, scale=1.0, dtype=np.float32):
    return [[(rng.normal(size=s) * scale * (r + 1)).astype(dtype) for s in shapes]
            for r in range(2)]


def _run(ops, grads):
    lists = []
    for d, g in zip(DEVICES, grads):
        with tf.device(d):
            lists.append([tf.constant(t) for t in g])
    out = ops.reduce_tensors(lists)
    return [[t.numpy() for t in o] for o in out]


def _reference(ops, shapes, rank, start_iter=0, rate=2.0, dtype="float32"):
    keys = [f"value_{i}_of_{len(shapes)}/{dtype}[{'x'.join(map(str, s))}]"
            for i, s in enumerate(shapes)]
    comm = ops.communicator
    initial = [comm._initial_q(k, ref.matrix_shape(s)[1]).numpy() if len(s) > 1 else None
               for k, s in zip(keys, shapes)]
    return ref.PowerSGDReference(shapes, 2, rank, start_iter, rate, initial)


@pytest.mark.parametrize("rank", [1, 2, 4])
def test_steps_match_the_numpy_reference(rng, rank):
    ops = _ops(rank=rank)
    want = _reference(ops, SHAPES, rank)
    for _ in range(4):
        grads = _grads(rng)
        got = _run(ops, grads)
        expect = want(grads)
        for a, b in zip(got[0], got[1]):
            np.testing.assert_array_equal(a, b)  # replicas bit-identical
        for g, e, shape in zip(got[0], expect, SHAPES):
            np.testing.assert_allclose(g, e, rtol=2e-4, atol=2e-5)
    # the error memory: per replica, the compensated gradient minus M^ (zero
    # for the uncompressed tensors), fused in bucket order
    comm = ops.communicator
    for r, ex in enumerate(ops.compressors):
        (residual,) = ex.memory.residuals.values()
        flat = np.concatenate([e.ravel() for e in want.errors[r]])
        np.testing.assert_allclose(residual.numpy(), flat, rtol=2e-4, atol=2e-5)
        state = ex.communicator_state
        assert {int(v.numpy()) for v in ex.steps.values()} == {4}  # the step's counters
        for i, s in enumerate(SHAPES):
            if want.compressed(i):
                (q,) = [v for k, v in state.q.items() if k.startswith(f"value_{i}_")]
                np.testing.assert_allclose(q.numpy(), want.q[i], rtol=2e-4, atol=2e-5)
    assert comm.rank == rank


def test_orthogonalised_p_has_orthonormal_columns(rng):
    p = tf.constant(rng.normal(size=(50, 4)).astype(np.float32))
    p_hat = powersgd.orthogonalize(p).numpy()
    np.testing.assert_allclose(p_hat.T @ p_hat, np.eye(4), atol=1e-5)
    np.testing.assert_allclose(p_hat, ref.gram_schmidt(p.numpy()), atol=1e-5)
    zero = powersgd.orthogonalize(tf.zeros([7, 2])).numpy()
    assert np.all(zero == 0)


def test_uncompressed_set_and_exact_ranks(rng):
    # rank >= min(n, m) never pays: every tensor is summed exactly, bit for bit.
    shapes = [(6, 5), (5,), (3, 2, 4)]
    assert not any(powersgd.compresses(s, 5, 2.0) for s in shapes)
    grads = _grads(rng, shapes)
    # 6x5 pays at rank 1 ((6 + 5) * 1 * 2 < 30), at no rank above 1
    assert powersgd.compresses((6, 5), 1, 2.0) and powersgd.max_rank((6, 5), 2.0) == 1
    with pytest.raises(ValueError, match="rank 9 is larger than every tensor.*rank <= 1"):
        _run(_ops(rank=9), grads)
    exact = _ops(rank=1, min_compression_rate=100.0)  # no tensor pays at any rank: exact
    got = _run(exact, grads)
    for i in range(3):
        np.testing.assert_array_equal(got[0][i], grads[0][i] + grads[1][i])


def test_start_iter_runs_uncompressed_then_compresses(rng):
    ops = _ops(rank=1, start_iter=2)
    want = _reference(ops, SHAPES, 1, start_iter=2)
    for step in range(4):
        grads = _grads(rng)
        got = _run(ops, grads)
        expect = want(grads)
        for g, e in zip(got[0], expect):
            if step < 2:
                np.testing.assert_array_equal(g, e)
            else:
                np.testing.assert_allclose(g, e, rtol=2e-4, atol=2e-5)
    assert ops.step_bytes()["sent_bytes"] < ops.step_bytes()["dense_bytes"] / 2


def test_zero_gradients_and_nonfinite_steps(rng):
    ops = _ops(rank=2)
    zeros = [[np.zeros(s, np.float32) for s in SHAPES] for _ in range(2)]
    got = _run(ops, zeros)
    for t in got[0]:
        assert np.all(t == 0)
    grads = _grads(rng)
    _run(ops, grads)
    before = [ex.memory.residuals[k].numpy() for ex in ops.compressors
              for k in ex.memory.residuals]
    qs = [v.numpy() for ex in ops.compressors for v in ex.communicator_state.q.values()]
    bad = _grads(rng)
    bad[1][2][0, 0] = np.nan
    got = _run(ops, bad)
    # sent uncompressed: the sum shows the NaN, the other tensors are exact
    assert np.isnan(got[0][2][0, 0])
    m = [bad[r][4] + before[r][-320:].reshape(64, 5) for r in range(2)]  # M_r = g_r + E_r
    np.testing.assert_array_equal(got[0][4], m[0] + m[1])
    after = [ex.memory.residuals[k].numpy() for ex in ops.compressors
             for k in ex.memory.residuals]
    for a, b in zip(before, after):  # no worker's memory changed
        np.testing.assert_array_equal(a, b)
    for a, b in zip(qs, [v.numpy() for ex in ops.compressors for v in ex.communicator_state.q.values()]):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", [np.float16, tf.bfloat16.as_numpy_dtype])
def test_half_precision_gradients(rng, dtype):
    ops = _ops(rank=2)
    grads = _grads(rng, dtype=dtype)
    got = _run(ops, grads)
    want = _reference(ops, SHAPES, 2, dtype=tf.as_dtype(dtype).name)(
        [[g.astype(np.float32) for g in gs] for gs in grads])
    for g, e in zip(got[0], want):
        assert g.dtype == dtype
        np.testing.assert_allclose(g.astype(np.float32), e, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("params, message", [
    ({"rank": 0}, "rank"),
    ({"start_iter": -1}, "start_iter"),
    ({"min_compression_rate": 0.5}, "min_compression_rate"),
    ({"deepreduce": "value", "value": "fp16"}, "leave deepreduce unset"),
    ({"communicator": "allgather"}, "communicator must be 'powersgd'"),
])
def test_parameters_that_make_no_sense_are_refused(params, message):
    with pytest.raises(ValueError, match=message):
        dr.from_params({"compressor": "powersgd", **params})
    with pytest.raises(ValueError, match="cannot follow compressor 'topk'"):
        dr.from_params({"compressor": "topk", "communicator": "powersgd"})


def test_grace_spelling_is_accepted():
    ex = dr.from_params({"compressor": "powersgd", "memory": "powersgd",
                         "communicator": "allreduce", "compress_rank": 3})
    assert isinstance(ex.communicator, powersgd.PowerSGD)
    assert ex.communicator.rank == 3 and ex.communicator.warm_start
    assert type(ex.memory).__name__ == "ResidualMemory"
    ex = dr.from_params({"compressor": "powersgd"})
    assert ex.communicator.config() == {"rank": 1, "start_iter": 0,
                                        "min_compression_rate": 2.0, "warm_start": True}


def test_three_collectives_and_the_accounting(rng):
    ops = _ops(rank=2)
    calls = []
    original = dr.transport.LocalTransport.all_reduce

    def counting(self, vectors):
        calls.append(len(vectors[0]))
        return original(self, vectors)

    dr.transport.LocalTransport.all_reduce = counting
    try:
        _run(ops, _grads(rng))
    finally:
        dr.transport.LocalTransport.all_reduce = original
    # eagerly both branches of the phase's tf.cond are not traced: the
    # uncompressed tensors + flag, P, Q
    assert len(calls) == 3
    b = ops.step_bytes()
    compressed = [s for s in SHAPES if powersgd.compresses(s, 2, 2.0)]
    plain = sum(int(np.prod(s)) for s in SHAPES if s not in compressed)
    factors = sum(sum(ref.matrix_shape(s)) * 2 for s in compressed)
    assert b["sent_bytes"] == 4 * (plain + factors) + 4
    assert b["received_bytes"] == (4 * (plain + factors) + 4) * 2 * (2 - 1) // 2


def test_without_warm_start_q_is_fresh_every_step(rng):
    ops = _ops(rank=1, warm_start=False)
    grads = _grads(rng)
    _run(ops, grads)
    assert ops.compressors[0].communicator_state is None  # no Q is kept
    assert not [v for o, v in ops.compressors[0].state_declaration() if o == "communicator"]


def test_keras_fit_under_mirrored_strategy(rng):
    import keras

    ops = _ops(rank=2, start_iter=2)
    strategy = tf.distribute.MirroredStrategy(DEVICES, cross_device_ops=ops)
    x = rng.normal(size=(512, 20)).astype(np.float32)
    y = (x[:, :10].sum(1) > 0).astype(np.int32)
    with strategy.scope():
        keras.utils.set_random_seed(1)
        model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(64, activation="relu"),
                                  keras.layers.Dense(2)])
        model.compile(keras.optimizers.SGD(0.1, momentum=0.9),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    hist = model.fit(x, y, batch_size=64, epochs=4, verbose=0)
    assert hist.history["loss"][-1] < 0.7 * hist.history["loss"][0]
    assert ops.totals()["steps"] == 4 * 8
    b = ops.step_bytes()
    assert b["sent_bytes"] * 4 < b["dense_bytes"]
