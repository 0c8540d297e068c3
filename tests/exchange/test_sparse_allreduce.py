"""The sparse all-reduce (communicator 'sparse_allreduce') against a numpy
reference of the same steps: every worker's top-(k/W) per variable, their
union, the values summed there, the residuals; its bytes against the bound
that does not grow with W, on adversarial layouts; lossless at
compress_ratio 1; dense steps; peers of another configuration refused."""
import numpy as np
import pytest
import tensorflow as tf

import deepreduce_tf as dr
from deepreduce_tf import communicators
from deepreduce_tf.transport import LocalTransport

import sparsify_reference as sref

BASE = {"compressor": "topk", "compress_ratio": 0.05, "communicator": "sparse_allreduce",
        "min_size": 1}


def _step(exchanges, grads, keys, fn=False):
    """One step of len(exchanges) workers in one process; grads[w][j]."""
    transport = LocalTransport(["/cpu:0"] * len(exchanges))

    def run():
        return exchanges[0].communicator.step(
            transport, exchanges, [[tf.constant(g) for g in gs] for gs in grads], keys)

    out = tf.function(run)() if fn else run()
    return [[t.numpy() for t in o] for o in out]


def _share(n, ratio, W):
    return int(np.ceil(np.float64(ratio) / W * n)) if ratio < 1 else n


def _reference_step(grads, residuals, ratio, W, wire=np.float32):
    """grads[w][j], residuals[w][j] (flat) -> (sums[j], new residuals, supports)."""
    sums, supports = [], []
    new = [[None] * len(grads[0]) for _ in grads]
    for j in range(len(grads[0])):
        xs = [(np.ravel(g[j]) + r[j]).astype(np.float32) for g, r in zip(grads, residuals)]
        n = xs[0].size
        picks = np.concatenate([sref.top_k(x, _share(n, ratio, W))[0] for x in xs])
        support = np.unique(picks)
        total = np.zeros(n, np.float32)
        summed = np.zeros(support.size, wire)  # the all-reduce adds in the wire dtype
        for w, x in enumerate(xs):
            sent = x[support].astype(wire)
            summed = summed + sent
            res = x.copy()
            res[support] = x[support] - sent.astype(np.float32)
            new[w][j] = res
        total[support] = summed.astype(np.float32)
        sums.append(total)
        supports.append(support)
    return sums, new, supports


@pytest.mark.parametrize("value,wire,fused", [("raw", np.float32, False),
                                              ("fp16", np.float16, False),
                                              ("fp16", np.float16, True)])
def test_three_steps_match_the_numpy_reference(rng, value, wire, fused):
    """Sums and residuals; fused into one bucket (the default), the
    residuals are the bucket's: the later steps' sums check them."""
    W, shapes = 3, [(40, 30), (500,), (7, 9)]
    params = dict(BASE, deepreduce="both", index="golomb", value=value)
    if not fused:
        params["bucket_cap_mb"] = 1e-6  # one bucket (and residual) per variable
    exchanges = [dr.from_params(params) for _ in range(W)]
    keys = [f"v{j}" for j in range(len(shapes))]
    residuals = [[np.zeros(int(np.prod(s)), np.float32) for s in shapes] for _ in range(W)]
    for step in range(3):
        grads = [[rng.normal(size=s).astype(np.float32) * (w + 1) for s in shapes]
                 for w in range(W)]
        out = _step(exchanges, grads, keys)
        sums, residuals, _ = _reference_step(grads, residuals, 0.05, W, wire)
        check_step(out, sums, residuals, exchanges, keys, shapes, fused, step)


def check_step(out, sums, residuals, exchanges, keys, shapes, fused, step, sum_atol=1e-6,
               residual_rtol=1e-6):
    """One step against its reference: every replica's result bit-identical,
    the sums, and (one bucket per variable) every worker's residuals."""
    for o in out:
        for a, b in zip(o, out[0]):
            np.testing.assert_array_equal(a, b)
    for j, s in enumerate(shapes):
        np.testing.assert_allclose(out[0][j], sums[j].reshape(s), rtol=1e-6, atol=sum_atol,
                                   err_msg=f"step {step}, variable {j}")
    for w, ex in enumerate(exchanges if not fused else []):
        for j, key in enumerate(keys):
            np.testing.assert_allclose(ex.memory.residuals[key].numpy().ravel(),
                                       residuals[w][j], rtol=residual_rtol, atol=1e-6,
                                       err_msg=f"step {step}, worker {w}, {key}")


def test_graph_equals_eager(rng):
    shapes = [(64, 20), (300,)]
    grads = [[rng.normal(size=s).astype(np.float32) for s in shapes] for _ in range(2)]
    params = dict(BASE, deepreduce="index", index="golomb")
    eager = _step([dr.from_params(params) for _ in range(2)], grads, ["a", "b"])
    graph = _step([dr.from_params(params) for _ in range(2)], grads, ["a", "b"], fn=True)
    for a, b in zip(eager[0], graph[0]):
        np.testing.assert_array_equal(a, b)


def test_threshold_sums_at_the_union_of_every_workers_picks(rng):
    grads = [[rng.normal(size=(3000,)).astype(np.float32)] for _ in range(2)]
    params = {"compressor": "threshold", "threshold": 2.0, "communicator": "sparse_allreduce",
              "min_size": 1, "memory": "none"}
    out = _step([dr.from_params(params) for _ in range(2)], grads, ["t"])
    support = np.unique(np.concatenate([sref.threshold(g[0], 2.0)[0] for g in grads]))
    want = np.zeros(3000, np.float32)
    want[support] = grads[0][0][support] + grads[1][0][support]
    np.testing.assert_array_equal(out[0][0], want)


@pytest.mark.parametrize("W", [2, 3])
def test_compress_ratio_1_is_the_exact_sum(rng, W):
    shapes = [(50, 40), (9,)]
    grads = [[rng.normal(size=s).astype(np.float32) for s in shapes] for _ in range(W)]
    params = dict(BASE, compress_ratio=1.0)
    exchanges = [dr.from_params(params) for _ in range(W)]
    for _ in range(2):
        out = _step(exchanges, grads, ["a", "b"])
        for j in range(len(shapes)):
            want = grads[0][j].copy()
            for w in range(1, W):
                want = want + grads[w][j]
            np.testing.assert_array_equal(out[0][j], want)
    for ex in exchanges:
        for r in ex.memory.residuals.values():
            np.testing.assert_array_equal(r.numpy(), 0)


def _received_per_worker(exchanges):
    return [ex.ledger.received_totals()[0] for ex in exchanges]


def _layout(kind, W, n, rng):
    """Per worker a gradient whose top entries lie where `kind` says."""
    base = rng.normal(size=n).astype(np.float32) * 0.01
    grads = []
    for w in range(W):
        g = base + rng.normal(size=n).astype(np.float32) * 0.001
        if kind == "one_region":  # every worker's largest entries in the same 1 %
            g[: n // 100] += 10.0 + rng.random(n // 100).astype(np.float32)
        elif kind == "disjoint":  # worker w's largest entries in its own block
            block = n // W
            g[w * block:(w + 1) * block:7] += 10.0 + w
        grads.append([g])
    return grads


@pytest.mark.parametrize("kind", ["one_region", "disjoint", "random"])
def test_bytes_per_worker_are_bounded_in_the_number_of_workers(rng, kind):
    """Received per worker at W = 8 is at most twice W = 2 (the all-gather's
    grows 7x), the support holds at most k + (W - 1) positions per variable,
    and a worker receives at least 20x fewer bytes than a ring all-reduce
    of the dense gradient, whatever the layout of the workers' top-k."""
    n, ratio = 200_000, 0.01
    k = int(np.ceil(ratio * n))
    params = dict(BASE, compress_ratio=ratio, memory="none", deepreduce="both",
                  index="golomb", value="fp16")
    received = {}
    for W in (2, 4, 8):
        grads = _layout(kind, W, n, rng)
        exchanges = [dr.from_params(params) for _ in range(W)]
        out = _step(exchanges, grads, ["g"])
        support = np.flatnonzero(out[0][0])
        assert support.size <= k + W - 1
        got = _received_per_worker(exchanges)
        # The exact figure: the others' positions payloads, and a ring's
        # 2 (W - 1) / W of the summed fp16 values (|U| of them).
        values = 2 * np.unique(np.concatenate(
            [sref.top_k(g[0], _share(n, ratio, W))[0] for g in grads])).size
        payloads = [ex.ledger.per_variable()["g"][0] - values for ex in exchanges]
        for w in range(W):
            assert got[w] == sum(payloads) - payloads[w] + 2 * (W - 1) * values // W
        received[W] = max(got)
        dense_ring = 2 * (W - 1) / W * 4 * n
        sent = max(ex.ledger.per_variable()["g"][0] for ex in exchanges)
        assert (received[W] + sent) * 20 <= dense_ring * 2, (W, received[W], sent)
    assert received[8] <= 2 * received[2], received


def test_a_peer_with_another_density_is_refused(rng):
    grads = [[rng.normal(size=(4000,)).astype(np.float32)] for _ in range(2)]
    exchanges = [dr.from_params(BASE), dr.from_params(dict(BASE, compress_ratio=0.1))]
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="replica 1's positions .* another layout, density"):
        _step(exchanges, grads, ["g"])


def test_a_peer_that_counts_another_number_of_workers_is_refused(rng, monkeypatch):
    """The number of workers is part of every positions payload's
    fingerprint: a worker that believes W = 3 in a group of 2 is named."""
    from deepreduce_tf.exchange.sparse_allreduce import SparseAllreduce

    grads = [[rng.normal(size=(4000,)).astype(np.float32)] for _ in range(2)]
    exchanges = [dr.from_params(BASE) for _ in range(2)]
    real = SparseAllreduce._config  # pylint: disable=protected-access

    def config(self, comp, bucket, R):
        return real(self, comp, bucket, R + 1 if comp is exchanges[1].compressor else R)

    monkeypatch.setattr(SparseAllreduce, "_config", config)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="replica 1's positions .* number of workers"):
        _step(exchanges, grads, ["g"])


def test_a_peer_at_another_step_is_refused(rng):
    grads = [[rng.normal(size=(4000,)).astype(np.float32)] for _ in range(2)]
    exchanges = [dr.from_params(BASE) for _ in range(2)]
    _step(exchanges, grads, ["g"])
    exchanges[1] = dr.from_params(BASE)  # a worker restarted without the checkpoint
    with pytest.raises(tf.errors.InvalidArgumentError, match="replica 1 is at another step"):
        _step(exchanges, grads, ["g"])


@pytest.mark.parametrize("params,match", [
    ({"deepreduce": "value", "value": "qsgd"}, "value codec 'qsgd' is not additive"),
    ({"compressor": "randomk"}, "use communicator='allreduce'"),
    ({"compressor": "none"}, "use communicator='allreduce'"),
])
def test_what_cannot_be_summed_is_refused_at_construction(params, match):
    with pytest.raises(ValueError, match=match):
        dr.from_params(dict(BASE, **params))


def test_dense_warmup_steps_are_exact_sums_then_sparse(rng):
    params = dict(BASE, warmup_steps=1, warmup="dense", memory="none")
    grads = [[rng.normal(size=(2000,)).astype(np.float32)] for _ in range(2)]
    exchanges = [dr.from_params(params) for _ in range(2)]
    first = _step(exchanges, grads, ["g"])[0][0]
    np.testing.assert_array_equal(first, grads[0][0] + grads[1][0])
    second = _step(exchanges, grads, ["g"])[0][0]
    assert np.count_nonzero(second) <= 2 * _share(2000, 0.05, 2)


def test_exponential_warmup_divides_its_ratio_among_the_workers(rng):
    params = dict(BASE, warmup_steps=4, warmup="exponential", memory="none",
                  compress_ratio=0.01)
    n = 20_000
    grads = _layout("disjoint", 2, n, rng)
    exchanges = [dr.from_params(params) for _ in range(2)]
    first = _step(exchanges, grads, ["g"])[0][0]
    # Step 1 of the exponential warm-up runs at ratio 0.25: 0.125 per worker.
    support = np.unique(np.concatenate([sref.top_k(g[0], _share(n, 0.25, 2))[0]
                                        for g in grads]))
    assert support.size > n // 8
    np.testing.assert_array_equal(np.flatnonzero(first), support)


def test_exchange_locally_runs_it(rng):
    xs = [rng.normal(size=(3000,)).astype(np.float32) for _ in range(4)]
    exchanges = [dr.from_params(dict(BASE, memory="none")) for _ in range(4)]
    out, handed = communicators.exchange_locally(exchanges, xs, name="x")
    support = np.unique(np.concatenate([sref.top_k(x, _share(3000, 0.05, 4))[0] for x in xs]))
    want = np.zeros(3000, np.float32)
    for x in xs:
        want[support] = want[support] + x[support]
    np.testing.assert_array_equal(out[0].numpy(), want)
    assert [h[1].shape[0] for h in handed] == [support.size] * 4  # the summed values


@pytest.mark.parametrize("W", [2, 4])
def test_the_support_is_accounted_against_the_numpy_union(rng, W):
    """|U| / k: the ledger's union and picks equal the reference's union of
    the workers' top-(k/W) and the sum of their shares, step by step; the
    minimum is the smallest step's ratio; a dense warm-up step counts none.
    No memory, so that a step's x is its gradient."""
    shapes = [(40, 30), (500,)]
    exchanges = [dr.from_params(dict(BASE, memory="none", warmup_steps=1)) for _ in range(W)]
    keys = [f"v{j}" for j in range(len(shapes))]
    zeros = [[np.zeros(int(np.prod(s)), np.float32) for s in shapes] for _ in range(W)]
    ratios, unions, picks = [], 0, 0
    for step in range(4):
        if step == 2:  # every worker the same gradient: the union shrinks to k / W
            same = [rng.normal(size=s).astype(np.float32) for s in shapes]
            grads = [same for _ in range(W)]
        else:
            grads = [[rng.normal(size=s).astype(np.float32) for s in shapes] for _ in range(W)]
        _step(exchanges, grads, keys)
        if step == 0:  # the dense warm-up step: U is everything, no support counted
            assert exchanges[0].ledger.support_totals() is None
            continue
        _, _, supports = _reference_step(grads, zeros, 0.05, W)
        u = sum(s.size for s in supports)
        k = sum(W * _share(int(np.prod(s)), 0.05, W) for s in shapes)
        unions, picks = unions + u, picks + k
        ratios.append(u / k)
        for ex in exchanges:
            got = ex.ledger.support_totals()
            assert (got["union"], got["picks"]) == (unions, picks)
            assert got["last"] == pytest.approx(u / k)
            assert got["min"] == pytest.approx(min(ratios))
    assert ratios[1] == pytest.approx(1 / W, rel=0.02)  # identical gradients: U = k / W
    assert min(ratios[0], ratios[2]) > 0.9  # independent gradients: nearly disjoint picks


@pytest.mark.parametrize("W", [2, 3])
def test_sparse_max_layout_one_topk_over_the_bucket_with_the_small_tensors(rng, W):
    """sparse_max's selection: topk_scope 'bucket' and min_size 1 put every
    variable, biases included, in one bucket and one top-(k/W) per worker over
    all of it; the sum is the numpy sum at the union of the workers' picks."""
    shapes = [(40, 30), (30,), (300,), (7,)]
    params = dict(BASE, compress_ratio=0.02, topk_scope="bucket", memory="none")
    exchanges = [dr.from_params(params) for _ in range(W)]
    keys = [f"v{j}" for j in range(len(shapes))]
    sizes = [int(np.prod(s)) for s in shapes]
    grads = [[rng.normal(size=s).astype(np.float32) for s in shapes] for _ in range(W)]
    out = _step(exchanges, grads, keys)
    flat = [np.concatenate([np.ravel(g) for g in gs]) for gs in grads]
    n = flat[0].size
    support = np.unique(np.concatenate([sref.top_k(x, _share(n, 0.02, W))[0] for x in flat]))
    total = np.zeros(n, np.float32)
    total[support] = np.sum([x[support] for x in flat], axis=0)
    expected = np.split(total, np.cumsum(sizes)[:-1])
    for o in out:
        for got, want in zip(o, expected):
            np.testing.assert_allclose(np.ravel(got), want, rtol=1e-6, atol=1e-6)
    got = exchanges[0].ledger.support_totals()
    assert (got["union"], got["picks"]) == (support.size, W * _share(n, 0.02, W))
