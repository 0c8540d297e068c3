"""Tensor fusion (deepreduce_tf.fusion) and the bucket path of the Compressor:
plans, exact round trips, conservation of error feedback, refusal of foreign
layouts, and a step graph that does not grow with the number of variables."""
import numpy as np
import pytest
import tensorflow as tf

import deepreduce_tf as dr
from deepreduce_tf import fusion


def _shapes():
    return [(30, 40), (10,), (50, 50), (3,), (7, 7, 4, 4), (1,)]


def _tensors(rng, dtype=np.float32, shapes=None):
    return [tf.constant(rng.normal(size=s).astype(dtype)) for s in (shapes or _shapes())]


def _keys(n):
    return [f"v{i}" for i in range(n)]


# ------------------------------------------------------------------- plans
def test_plan_groups_by_dtype_and_keeps_small_tensors_dense():
    shapes = [(100,), (5,), (200,), (3,)]
    dtypes = [tf.float32, tf.float32, tf.float16, tf.float32]
    plan = fusion.make_plan(_keys(4), shapes, dtypes, min_size=50)
    assert len(plan.buckets) == 2
    b32, b16 = plan.buckets
    assert b32.dtype == tf.float32 and b16.dtype == tf.float16
    assert [m.key for m in b32.members] == ["v0", "v1", "v3"]  # sparse first, then dense
    assert b32.lengths == (100,) and b32.sparse_n == 100 and b32.dense_n == 8
    assert b16.key == "v2"  # a bucket of one tensor is keyed by it
    assert list(b32.offsets) == [0, 100]


def test_plan_respects_the_cap():
    shapes = [(1 << 18,)] * 5  # 1 MiB each in float32
    plan = fusion.make_plan(_keys(5), shapes, [tf.float32] * 5, min_size=0, bucket_cap_mb=2)
    assert [len(b.members) for b in plan.buckets] == [2, 2, 1]
    plan = fusion.make_plan(_keys(5), shapes, [tf.float32] * 5, min_size=0, bucket_cap_mb=0.5)
    assert [len(b.members) for b in plan.buckets] == [1] * 5  # bigger than the cap: alone


@pytest.mark.parametrize("bad", [0, -1, "x", float("nan"), float("inf")])
def test_plan_rejects_bad_caps(bad):
    with pytest.raises(ValueError, match="bucket_cap_mb"):
        fusion.make_plan(["a"], [(3,)], [tf.float32], 0, bucket_cap_mb=bad)


def test_plan_rejects_repeated_keys_and_dynamic_shapes():
    with pytest.raises(ValueError, match="repeated"):
        fusion.make_plan(["a", "a"], [(3,), (4,)], [tf.float32] * 2, 0)
    with pytest.raises(ValueError, match="static shapes"):
        fusion.make_plan(["a"], [tf.TensorShape([None, 3])], [tf.float32], 0)


def test_pack_unpack_round_trip(rng):
    ts = _tensors(rng)
    plan = fusion.make_plan(_keys(len(ts)), [t.shape for t in ts], [t.dtype for t in ts], 64)
    back = plan.unpack(plan.pack(ts))
    for a, b in zip(ts, back):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_layout_ids_differ_for_other_layouts():
    a = fusion.make_plan(["x", "y"], [(100,), (100,)], [tf.float32] * 2, 10)
    b = fusion.make_plan(["x", "y"], [(100,), (10, 10, 1)], [tf.float32] * 2, 10)
    c = fusion.make_plan(["x", "z"], [(100,), (100,)], [tf.float32] * 2, 10)
    assert len({a.layout_id, b.layout_id, c.layout_id}) == 3


# ----------------------------------------------------------- compressor
LOSSLESS = [{"compressor": "none"},
            {"compressor": "none", "deepreduce": "value", "value": "deflate"},
            {"compressor": "topk", "compress_ratio": 1.0, "memory": "none"},
            {"compressor": "topk", "compress_ratio": 1.0, "memory": "none",
             "deepreduce": "index", "index": "golomb"}]


@pytest.mark.parametrize("params", LOSSLESS, ids=lambda p: "-".join(map(str, p.values())))
def test_lossless_batch_round_trips_exactly(rng, run, params):
    comp = dr.from_params(dict(params, min_size=64))
    ts = _tensors(rng)

    def fn(*ts):
        p, ctx = comp.compress_batch(list(ts), _keys(len(ts)))
        return comp.decompress_batch(p, ctx)

    for a, b in zip(ts, run(fn, *ts)):
        np.testing.assert_array_equal(a.numpy(), b)


@pytest.mark.parametrize("params", [
    {"compressor": "topk", "compress_ratio": 0.05},
    {"compressor": "topk", "compress_ratio": 0.05, "topk_scope": "bucket"},
    {"compressor": "topk", "compress_ratio": 0.05, "deepreduce": "both", "index": "bloom",
     "policy": "p0", "value": "polyfit"},
    {"compressor": "topk", "compress_ratio": 0.05, "deepreduce": "both", "index": "golomb",
     "value": "qsgd", "bits": 7},
    {"compressor": "randomk", "compress_ratio": 0.05, "deepreduce": "value", "value": "fp16"},
    {"compressor": "topk", "compress_ratio": 0.05, "deepreduce": "both", "index": "golomb",
     "value": "qsgd", "bits": 7, "topk_skip_zeros": True},
], ids=["topk", "topk-bucket", "bloom-polyfit", "golomb-qsgd", "randomk-fp16",
        "golomb-qsgd-skip-zeros"])
def test_error_feedback_conserves_the_gradient(rng, params):
    """sum(decoded) + residual == sum(gradients), per bucket, over steps."""
    comp = dr.from_params(dict(params, min_size=64))
    keys = _keys(len(_shapes()))
    sent = None
    total = None
    for _ in range(3):
        ts = _tensors(rng)
        p, ctx = comp.compress_batch(ts, keys)
        out = comp.decompress_batch(p, ctx)
        sent = out if sent is None else [a + b for a, b in zip(sent, out)]
        total = ts if total is None else [a + b for a, b in zip(total, ts)]
    plan = ctx.plan
    for bucket in plan.buckets:
        residual = comp.memory.residuals[bucket.key].numpy()
        got = tf.concat([tf.reshape(sent[m.position], [-1]) for m in bucket.members], 0)
        want = tf.concat([tf.reshape(total[m.position], [-1]) for m in bucket.members], 0)
        got = got.numpy()[:bucket.sparse_n] + residual
        np.testing.assert_allclose(got, want.numpy()[:bucket.sparse_n], rtol=1e-5, atol=1e-5)
        # the dense section arrives exactly and keeps nothing back
        np.testing.assert_allclose(
            tf.concat([tf.reshape(sent[m.position], [-1]) for m in bucket.members],
                      0).numpy()[bucket.sparse_n:],
            want.numpy()[bucket.sparse_n:], rtol=1e-6)


def test_per_variable_topk_keeps_k_per_variable(rng):
    """scope 'variable' selects ceil(ratio * n_i) in every variable; scope
    'bucket' may leave a variable with nothing."""
    small = tf.constant(rng.normal(size=(2000,)).astype(np.float32) * 1e-3)
    big = tf.constant(rng.normal(size=(2000,)).astype(np.float32))
    for scope, want_small in (("variable", 20), ("bucket", 0)):
        comp = dr.from_params({"compressor": "topk", "compress_ratio": 0.01,
                               "topk_scope": scope, "memory": "none", "min_size": 64})
        p, ctx = comp.compress_batch([small, big], ["s", "b"])
        s, b = comp.decompress_batch(p, ctx)
        assert int(tf.math.count_nonzero(s)) == want_small
        assert int(tf.math.count_nonzero(s)) + int(tf.math.count_nonzero(b)) == 40


def test_foreign_layout_is_refused(rng):
    comp = dr.from_params({"compressor": "topk", "compress_ratio": 0.1, "memory": "none",
                           "min_size": 16})
    a = [tf.constant(rng.normal(size=(100,)).astype(np.float32)) for _ in range(2)]
    b = [tf.constant(rng.normal(size=(10, 10)).astype(np.float32)) for _ in range(2)]
    pa, _ = comp.compress_batch(a, ["x", "y"])
    _, cb = comp.compress_batch(b, ["x", "y"])
    with pytest.raises(tf.errors.InvalidArgumentError, match="layout"):
        comp.decompress_batch(pa, cb)


def test_nonfinite_bucket_travels_dense_and_keeps_its_residual(rng):
    comp = dr.from_params({"compressor": "topk", "compress_ratio": 0.1, "min_size": 16})
    ts = [tf.constant(rng.normal(size=(100,)).astype(np.float32)) for _ in range(2)]
    p, ctx = comp.compress_batch(ts, ["x", "y"])
    before = comp.memory.residuals[ctx.plan.buckets[0].key].numpy()
    bad = [ts[0], tf.tensor_scatter_nd_update(ts[1], [[3]], [np.inf])]
    p, ctx = comp.compress_batch(bad, ["x", "y"])
    out = comp.decompress_batch(p, ctx)
    np.testing.assert_array_equal(out[0].numpy(), ts[0].numpy() + before[:100])
    assert np.isinf(out[1].numpy()[3])
    np.testing.assert_array_equal(comp.memory.residuals[ctx.plan.buckets[0].key].numpy(),
                                  before)


def test_stateless_configuration_creates_no_variables(rng):
    comp = dr.from_params({"compressor": "none"})
    comp.reconfigure(accounting=False)
    ts = _tensors(rng)
    tf.function(lambda: comp.compress_batch(ts, _keys(len(ts)))[0]).get_concrete_function()
    assert comp.stateless and not comp.variables


# ------------------------------------------------------------ graph size
def _step_nodes(ops, nvars, total=1_000_000):
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"], cross_device_ops=ops)
    size = total // nvars

    @tf.function
    def step():
        def fn():
            ctx = tf.distribute.get_replica_context()
            scale = tf.cast(ctx.replica_id_in_sync_group + 1, tf.float32)
            vals = [tf.fill([size], scale * (i + 1)) for i in range(nvars)]
            return ctx.all_reduce(tf.distribute.ReduceOp.SUM, vals)

        return strategy.run(fn)

    graph = step.get_concrete_function().graph.as_graph_def()
    return len(graph.node), sum(len(f.node_def) for f in graph.library.function)


@pytest.mark.parametrize("params", [
    {"compressor": "none"},
    {"compressor": "topk", "compress_ratio": 0.01, "deepreduce": "both", "index": "bloom",
     "policy": "p0", "value": "polyfit"},
    {"compressor": "topk", "compress_ratio": 0.01, "deepreduce": "both", "index": "golomb",
     "value": "qsgd", "bits": 7},
], ids=["none", "bloom-polyfit", "golomb-qsgd"])
def test_step_graph_does_not_grow_with_the_number_of_variables(params):
    """20 and 200 variables of the same total size: the compress/decode graph
    (the function library) is the same size, and per extra variable the step
    gains no more nodes than with TensorFlow's own ReductionToOneDevice (the
    pack/unpack reshapes and copies every reduction has)."""
    import deepreduce_tf.distribute as drd

    tf_small, _ = _step_nodes(tf.distribute.ReductionToOneDevice(), 20)
    tf_large, _ = _step_nodes(tf.distribute.ReductionToOneDevice(), 200)
    ours_small, lib_small = _step_nodes(drd.DeepReduceCrossDeviceOps(params), 20)
    ours_large, lib_large = _step_nodes(drd.DeepReduceCrossDeviceOps(params), 200)
    assert lib_small == lib_large
    assert ours_large - ours_small <= tf_large - tf_small
    # and the whole compressed exchange stays small next to the step itself
    assert ours_small + lib_small < 2 * tf_small + 600


def test_decoder_checks_run_in_tf1_graphs():
    """In a TF1 graph an assertion nobody depends on is pruned; the decoders'
    checks must still run (deepreduce_tf._checks.guarded)."""
    with tf.Graph().as_default():
        values = dr.codecs.value.RawValue().decode(tf.constant(np.zeros(8, np.uint8)),
                                                   tf.constant(3, tf.int64), tf.float32)
        index = dr.codecs.index.RawIndex().decode(tf.constant(np.full(8, 255, np.uint8)), 100,
                                                  tf.constant(2, tf.int64), None)
        with tf.compat.v1.Session() as sess:
            with pytest.raises(tf.errors.InvalidArgumentError, match="4 bytes per value"):
                sess.run(values)
            with pytest.raises(tf.errors.InvalidArgumentError, match="negative index"):
                sess.run(index)


def test_several_buckets_travel_in_one_container(rng, run):
    """Mixed dtypes and a small cap give several buckets: one container of
    kind KIND_BATCH, each bucket decoded exactly (lossless)."""
    comp = dr.from_params({"compressor": "none", "min_size": 64, "bucket_cap_mb": 0.01})
    ts = ([tf.constant(rng.normal(size=(60, 50)).astype(np.float32)) for _ in range(3)]
          + [tf.constant(rng.normal(size=(20,)).astype(np.float16)),
             tf.constant(rng.normal(size=(30, 40)).astype(np.float64))])
    keys = _keys(len(ts))

    def fn(*ts):
        p, ctx = comp.compress_batch(list(ts), keys)
        return [p] + comp.decompress_batch(p, ctx)

    out = run(fn, *ts)
    plan = comp.plan(keys, ts)
    assert len(plan.buckets) == 5  # 3 float32 over the 10 KiB cap, float16, float64
    assert dr.payload.inspect(out[0])["kind"] == dr.payload.KIND_BATCH
    for a, b in zip(ts, out[1:]):
        assert b.dtype == a.dtype.as_numpy_dtype
        np.testing.assert_array_equal(a.numpy(), b)


def test_tf1_graph_runs_error_feedback_and_accounting():
    """In a TF1 graph run by a Session (no initializer), the residual and the
    byte counters must update: their ops are what the payload depends on."""
    values = np.arange(1, 9, dtype=np.float32)
    with tf.Graph().as_default():
        comp = dr.from_params({"compressor": "topk", "compress_ratio": 0.25, "min_size": 0})
        p, ctx = comp.compress_batch([tf.constant(values)], ["w"])
        out = comp.decompress_batch(p, ctx)[0]
        residual = comp.memory.residuals["w"]
        with tf.compat.v1.Session() as sess:
            got = [sess.run(out) for _ in range(3)]
            r = sess.run(residual.read_value())
            sent = sess.run(comp.ledger.total_sent.read_value())
    # step 1 sends 7, 8; the residual (1..6) then grows until it wins
    np.testing.assert_array_equal(got[0], [0, 0, 0, 0, 0, 0, 7, 8])
    assert not np.array_equal(got[1], got[0])
    total = sum(got) + r
    np.testing.assert_allclose(total, 3 * values)
    assert sent > 0


def test_bucket_of_empty_tensors_round_trips(rng):
    comp = dr.from_params({"compressor": "topk", "compress_ratio": 0.5})
    p, ctx = comp.compress_batch([tf.zeros([0, 3]), tf.zeros([0])], ["a", "b"])
    a, b = comp.decompress_batch(p, ctx)
    assert a.shape == (0, 3) and b.shape == (0,)


def test_hostile_counts_in_a_crc_valid_header_are_refused(rng):
    """A sender (or anyone who recomputes the CRC) claiming K = count = 2^62
    with empty sections must be refused, not decoded to zeros."""
    comp = dr.from_params({"compressor": "topk", "compress_ratio": 0.25, "memory": "none",
                           "min_size": 0})
    x = tf.constant(np.arange(1, 9, dtype=np.float32))
    p, ctx = comp.compress_batch([x], ["w"])
    info = dr.payload.inspect(p.numpy())
    meta = list(info["meta"])
    from deepreduce_tf import compressor as C

    meta[C.F_K] = meta[C.F_COUNT] = 1 << 62
    forged = dr.payload.pack([np.zeros(0, np.uint8)] * 3 + [np.zeros(0, np.uint8)], meta,
                             kind=C.KIND_BUCKET)
    with pytest.raises(tf.errors.InvalidArgumentError, match="exceeds"):
        comp.decompress_batch(forged, ctx)


# ------------------------------------------------ in-order scatter ops
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_scatter_sum_adds_in_update_order_like_numpy(rng, dtype):
    from deepreduce_tf.ops import fusion as fusion_ops

    n = 1000
    # Two "payloads" with overlapping positions, as all-gathered workers send.
    pos = np.concatenate([rng.choice(n, 300, replace=False), rng.choice(n, 300, replace=False)])
    val = rng.standard_normal(600).astype(dtype) * 100
    want = np.zeros(n, dtype)
    for p, v in zip(pos, val):  # the order matters for the last bits
        want[p] = dtype(want[p] + v)
    got = fusion_ops.scatter_sum(pos.astype(np.int64), val, n).numpy()
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    ref = tf.scatter_nd(pos[:, None].astype(np.int64), val, [n]).numpy()
    np.testing.assert_array_equal(got.view(np.uint8), ref.view(np.uint8))


@pytest.mark.parametrize("n,m", [(0, 5), (7, 0), (300_001, 1_003)])
def test_scatter_sum_with_a_tail_is_the_concatenation(rng, n, m):
    """tail: the output is [n + m], the scatter then the tail; a large n
    spreads the zero fill and the copy over the pool. Positions stay inside
    [0, n): the tail cannot be written by an update."""
    from deepreduce_tf.ops import fusion as fusion_ops

    k = min(n, 2000)
    pos = rng.choice(max(n, 1), k, replace=False).astype(np.int64)
    val = rng.standard_normal(k).astype(np.float32)
    tail = rng.standard_normal(m).astype(np.float32)
    want = np.concatenate([np.zeros(n, np.float32), tail])
    want[pos] += val
    for fn in (lambda: fusion_ops.scatter_sum(pos, val, n, tail=tail),
               tf.function(lambda: fusion_ops.scatter_sum(pos, val, n, tail=tail))):
        got = fn()
        assert got.shape == (n + m,)
        np.testing.assert_array_equal(got.numpy(), want)
    with pytest.raises(tf.errors.InvalidArgumentError, match="outside"):
        fusion_ops.scatter_sum(np.array([n], np.int64), np.ones(1, np.float32), n, tail=tail)
    with pytest.raises(ValueError, match="tail must be a vector"):
        fusion_ops.scatter_sum(pos, val, n, tail=np.zeros((1, m), np.float32))


def test_scatter_subtract_matches_numpy_and_leaves_its_input_alone(rng):
    from deepreduce_tf.ops import fusion as fusion_ops

    rest = tf.constant(rng.standard_normal(500).astype(np.float32))
    pos = rng.choice(500, 50, replace=False).astype(np.int64)
    val = rng.standard_normal(50).astype(np.float32)

    @tf.function
    def both(rest):
        return fusion_ops.scatter_subtract(rest, pos, val), rest * 1.0

    out, still = both(rest)
    want = rest.numpy().copy()
    want[pos] -= val
    np.testing.assert_array_equal(out.numpy(), want)
    np.testing.assert_array_equal(still.numpy(), rest.numpy())  # not written in place


@pytest.mark.parametrize("bad", [-1, 100])
def test_scatter_ops_refuse_positions_outside_the_vector(bad):
    from deepreduce_tf.ops import fusion as fusion_ops

    pos = np.array([3, bad], np.int64)
    val = np.ones(2, np.float32)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"positions\[1\] = .* outside"):
        fusion_ops.scatter_sum(pos, val, 100)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"positions\[1\] = .* outside"):
        fusion_ops.scatter_subtract(tf.zeros([100]), pos, val)
    with pytest.raises(tf.errors.InvalidArgumentError, match="one length"):
        fusion_ops.scatter_sum(pos, np.ones(3, np.float32), 100)
