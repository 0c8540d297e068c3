"""The compressor framework: every index x value combination against numpy,
conservation of error feedback, payload integrity, dtypes, NaN/Inf, graphs."""
import struct

import numpy as np
import pytest
import tensorflow as tf

import compressor_reference as cref
import deepreduce_tf as dr
import payload_reference
from deepreduce_tf import compressor
from deepreduce_tf.codecs import value as value_codecs
from deepreduce_tf.ops import codec_table
from deepreduce_tf.ops import value as value_ops

N_SHAPE = (125, 160)  # n = 20,000
RATIO = 0.01          # K = 200
# Every codec of the codec table (a codec added per docs/codecs.md included);
# bloom with each of its policies.
INDEXES = [name for name in codec_table.names("index") if name != "bloom"] + [
    "bloom:p0", "bloom:leftmost", "bloom:random", "bloom:conflict_sets"]
VALUES = list(codec_table.names("value"))
FPR = 0.01


def make(index, value, memory="none", **extra):
    params = {"compressor": "topk", "compress_ratio": RATIO, "memory": memory,
              "min_size": 64, "fpr": FPR}
    iname, _, policy = index.partition(":")
    mode = {(False, False): None, (True, False): "index", (False, True): "value",
            (True, True): "both"}[(iname != "raw", value != "raw")]
    params["deepreduce"] = mode
    if iname != "raw":
        params["index"] = iname
    if value != "raw":
        params["value"] = value
    if policy:
        params["policy"] = policy
    params.update(extra)
    with pytest.warns(UserWarning) if iname != "bloom" else _nowarn():
        return dr.from_params(params)


class _nowarn:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def gradient(rng, shape=N_SHAPE, dtype=np.float32):
    return (rng.laplace(size=shape) * 0.01).astype(dtype)


def step_seed(key, step, seed=0):
    return step + (compressor._key_seed(key, seed) << 20)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("index", INDEXES)
def test_every_combination_matches_numpy(rng, index, value):
    """The decoded tensor equals the reference built from independent
    position and value references; errors are exactly those of the parts."""
    comp = make(index, value)
    g = gradient(rng)
    payload, ctx = comp.compress(tf.constant(g), name="w")
    out = comp.decompress(payload, ctx).numpy().ravel()
    x = g.ravel()
    k = int(np.ceil(RATIO * x.size))
    iname, _, policy = index.partition(":")
    pos = cref.positions(x, k, iname, fpr=FPR, policy=policy or "conflict_sets")
    if policy == "p0":
        assert pos.size > k  # the false positives carry values too
    else:
        assert pos.size == k
    # Exact: the value op applied to the reference positions' true values,
    # placed by its own permutation. Misaligned values would fail this.
    seed = step_seed("w", 1) if value == "qsgd" else 0
    if value == "raw":
        perm, dec = np.arange(pos.size), x[pos]
    elif value not in value_ops.CODECS:  # a codec written in Python alone: its own class
        codec = value_codecs.make_value_codec(value)
        section = codec.encode(tf.constant(x[pos]), seed).section
        perm, dec = np.arange(pos.size), codec.decode(section, pos.size, tf.float32,
                                                      pos.size).numpy()
    else:
        params = {"seed": seed} if value == "qsgd" else {}
        enc = value_ops.encode(value, tf.constant(x[pos]), **params)
        bound = {"max_values": pos.size} if value in value_ops.SORTING_CODECS else {}
        perm, dec = enc.perm.numpy(), value_ops.decode(value, enc.payload, **bound).numpy()
    np.testing.assert_array_equal(out, cref.decoded_tensor(x, pos, perm, dec))
    # Against the numpy value references (bit-exact except polyfit's lstsq).
    ref = cref.value_roundtrip(x[pos], value, seed=seed)
    if ref is not None:
        expect = cref.decoded_tensor(x, pos, *ref)
        if value == "polyfit":
            np.testing.assert_allclose(out, expect, atol=1e-5 * np.abs(x[pos]).max())
        else:
            np.testing.assert_array_equal(out, expect)
    # Nothing outside the decoded positions.
    assert np.all(out[np.setdiff1d(np.arange(x.size), pos)] == 0)


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("index", INDEXES)
def test_conservation_law(rng, index, value):
    """sum_t decoded_t + r_T == sum_t g_t for every combination, lossy ones
    included (the residual holds exactly what was not delivered)."""
    comp = make(index, value, memory="residual")
    steps = 4
    total_g = np.zeros(np.prod(N_SHAPE), np.float64)
    total_d = np.zeros_like(total_g)
    for _ in range(steps):
        g = gradient(rng)
        payload, ctx = comp.compress(tf.constant(g), name="layer/kernel:0")
        total_d += comp.decompress(payload, ctx).numpy().ravel()
        total_g += g.ravel()
    r = comp.memory.residual("layer/kernel:0").numpy().ravel()
    scale = np.abs(total_g).max()
    np.testing.assert_allclose(total_d + r, total_g, atol=4e-6 * steps * scale)
    # ...and the residual is not trivially everything: something was delivered.
    assert np.abs(total_d).sum() > 0


def test_conservation_in_tf_function(rng):
    comp = make("bloom:p0", "polyfit", memory="residual")

    @tf.function
    def step(g):
        payload, ctx = comp.compress(g, name="v")
        return comp.decompress(payload, ctx)

    total_g = np.zeros(np.prod(N_SHAPE))
    total_d = np.zeros_like(total_g)
    traces = []
    for _ in range(3):
        g = gradient(rng)
        total_d += step(tf.constant(g)).numpy().ravel()
        total_g += g.ravel()
        traces.append(step.experimental_get_tracing_count())
    r = comp.memory.residual("v").numpy()
    np.testing.assert_allclose(total_d + r, total_g, atol=1e-5 * np.abs(total_g).max())
    # Variables are created on the first call only; later calls reuse the graph.
    assert traces[1] == traces[2] == traces[0]


@pytest.mark.parametrize("index,value", [("golomb", "qsgd"), ("bloom:conflict_sets", "polyfit"),
                                         ("rle", "fp16"), ("raw", "dexp")])
def test_graph_equals_eager(rng, index, value):
    g = tf.constant(gradient(rng))
    a, b = make(index, value, memory="residual"), make(index, value, memory="residual")

    def run(comp):
        p, c = comp.compress(g, name="v")
        return p, comp.decompress(p, c)

    pe, de = run(a)
    pg, dg = tf.function(lambda: run(b))()
    np.testing.assert_array_equal(pe.numpy(), pg.numpy())
    np.testing.assert_array_equal(de.numpy(), dg.numpy())
    np.testing.assert_array_equal(a.memory.residual("v").numpy(), b.memory.residual("v").numpy())


def test_static_shapes_in_graph():
    comp = make("golomb", "polyfit", memory="residual")

    @tf.function(input_signature=[tf.TensorSpec(N_SHAPE, tf.float32)])
    def f(g):
        p, c = comp.compress(g, name="v")
        assert p.shape.rank == 1 and p.dtype == tf.uint8
        out = comp.decompress(p, c)
        assert out.shape == N_SHAPE
        return out

    f.get_concrete_function()


# ------------------------------------------------------------------ payloads
def small_payload(rng):
    comp = make("golomb", "qsgd")
    g = gradient(rng, (40, 25))
    p, ctx = comp.compress(tf.constant(g), name="w")
    return comp, p.numpy(), ctx


def test_payload_is_the_container_format(rng):
    comp, p, ctx = small_payload(rng)
    info = dr.payload.inspect(p)
    assert info["version"] == 1 and info["kind"] == 1 and info["crc_ok"]
    meta = dict(zip(compressor.META_FIELDS, info["meta"]))
    assert meta["mode"] == 1 and meta["n"] == 1000 and meta["k"] == 10
    assert meta["index_codec"] == 4 and meta["value_codec"] == 3 and meta["dtype"] == 3
    assert payload_reference.crc32c(p[:-4].tobytes()) == struct.unpack("<I", p[-4:].tobytes())[0]


def test_every_bit_flip_is_detected(rng):
    comp, p, ctx = small_payload(rng)
    for byte in range(p.size):
        for bit in range(8):
            bad = p.copy()
            bad[byte] ^= 1 << bit
            with pytest.raises(tf.errors.InvalidArgumentError):
                comp.decompress(tf.constant(bad), ctx)


def test_truncated_and_extended(rng):
    comp, p, ctx = small_payload(rng)
    for cut in range(p.size):
        with pytest.raises(tf.errors.InvalidArgumentError):
            comp.decompress(tf.constant(p[:cut]), ctx)
    with pytest.raises(tf.errors.InvalidArgumentError, match="trailing"):
        comp.decompress(tf.constant(np.concatenate([p, np.zeros(3, np.uint8)])), ctx)


def test_foreign_payloads_are_named(rng):
    comp, p, ctx = small_payload(rng)
    other_value = make("golomb", "fp16")
    with pytest.raises(tf.errors.InvalidArgumentError, match="value_codec"):
        other_value.decompress(tf.constant(p), ctx)
    other_cfg = make("golomb", "qsgd", quantum_num=3)
    with pytest.raises(tf.errors.InvalidArgumentError, match="config"):
        other_cfg.decompress(tf.constant(p), ctx)
    _, ctx_big = comp.compress(tf.constant(gradient(rng, (50, 25))), name="w2")
    with pytest.raises(tf.errors.InvalidArgumentError, match="'n'"):
        comp.decompress(tf.constant(p), ctx_big)
    with pytest.raises(tf.errors.InvalidArgumentError, match="not a deepreduce_tf payload"):
        comp.decompress(tf.constant(np.frombuffer(b"hello world, not a payload", np.uint8)), ctx)


def test_newer_format_is_refused_clearly(rng):
    comp, p, ctx = small_payload(rng)
    body = bytearray(p[:-4].tobytes())
    body[4] = 2  # format version
    newer = np.frombuffer(bytes(payload_reference.with_crc(bytes(body))), np.uint8)
    with pytest.raises(tf.errors.InvalidArgumentError, match="newer"):
        comp.decompress(tf.constant(newer), ctx)


# ------------------------------------------------- a payload names its variable
IDENTITY_CONFIGS = {
    "none": {"compressor": "none", "min_size": 64},
    "topk_golomb": {"compressor": "topk", "compress_ratio": 0.05, "deepreduce": "index",
                    "index": "golomb", "min_size": 64},
}


@pytest.mark.parametrize("config", sorted(IDENTITY_CONFIGS))
@pytest.mark.parametrize("shape", [(20, 50), (7, 8)], ids=["sparse", "dense"])
def test_payload_of_another_variable_is_refused(rng, run, config, shape):
    """Two variables of one size and dtype: each payload decodes with its
    own ctx only (small tensors, sent dense, too)."""
    comp = dr.from_params(IDENTITY_CONFIGS[config])
    ga, gb = gradient(rng, shape), gradient(rng, shape)
    pa, ctx_a = comp.compress(tf.constant(ga), name="layer/a")
    pb, ctx_b = comp.compress(tf.constant(gb), name="layer/b")
    assert ctx_a.dense == (shape == (7, 8))
    if config == "none":  # lossless: the own payload gives the tensor back exactly
        np.testing.assert_array_equal(run(comp.decompress, pa, ctx=ctx_a), ga)
        np.testing.assert_array_equal(run(comp.decompress, pb, ctx=ctx_b), gb)
    for payload, ctx in ((pb, ctx_a), (pa, ctx_b)):
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match="payload belongs to another variable"):
            run(comp.decompress, payload, ctx=ctx)
    # Same name and size, another shape: another variable, refused too.
    _, ctx_t = comp.compress(tf.constant(gradient(rng, shape[::-1])), name="layer/a")
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"of shape \[%d, %d\]" % shape[::-1]):
        run(comp.decompress, pa, ctx=ctx_t)


def test_workers_payloads_of_one_variable_agree(rng):
    """Another worker's compressor (same configuration, same variable name)
    writes payloads this worker's ctx accepts: the identity holds no state."""
    here = dr.from_params(IDENTITY_CONFIGS["none"])
    there = dr.from_params(IDENTITY_CONFIGS["none"])
    g_here, g_there = gradient(rng, (20, 50)), gradient(rng, (20, 50))
    _, ctx = here.compress(tf.constant(g_here), name="dense/kernel")
    p_there, _ = there.compress(tf.constant(g_there), name="dense/kernel")
    np.testing.assert_array_equal(here.decompress(p_there, ctx).numpy(), g_there)


def test_unnamed_payload_identity_is_the_shape():
    comp = dr.from_params(IDENTITY_CONFIGS["none"])
    x = np.arange(120, dtype=np.float32).reshape(10, 12)
    p, _ = comp.compress(tf.constant(x))
    _, ctx_same_shape = comp.compress(tf.constant(-x))
    np.testing.assert_array_equal(comp.decompress(p, ctx_same_shape).numpy(), x)
    _, ctx_other_shape = comp.compress(tf.constant(x.reshape(12, 10)))
    with pytest.raises(tf.errors.InvalidArgumentError, match="another variable"):
        comp.decompress(p, ctx_other_shape)


def _slices(rng, rows, vocab=50, width=4):
    values = rng.normal(size=(len(rows), width)).astype(np.float32)
    return tf.IndexedSlices(tf.constant(values), tf.constant(rows, tf.int64),
                            tf.constant([vocab, width], tf.int64))


def test_slices_payload_of_another_variable_is_refused(rng, run):
    comp = dr.from_params(IDENTITY_CONFIGS["none"])
    sa, sb = _slices(rng, [3, 9, 3]), _slices(rng, [1, 2, 40])
    pa, ctx_a = comp.compress_slices(sa, "emb_a")
    pb, ctx_b = comp.compress_slices(sb, "emb_b")
    dense = np.zeros((50, 4), np.float32)
    np.add.at(dense, sa.indices.numpy(), sa.values.numpy())
    out = run(lambda p: tf.convert_to_tensor(comp.decompress_slices(p, ctx_a)), pa)
    np.testing.assert_array_equal(out, dense)
    for payload, ctx in ((pb, ctx_a), (pa, ctx_b)):
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match="payload belongs to another variable"):
            run(lambda p: comp.decompress_slices(p, ctx).values, payload)


def test_bucket_payload_of_another_layout_is_refused(rng):
    """Buckets carry their layout (keys, shapes): same sizes, other names or
    another order are refused."""
    comp = dr.from_params(IDENTITY_CONFIGS["none"])
    ts = [tf.constant(gradient(rng, (20, 50))) for _ in range(2)]
    p_one, ctx_one = comp.compress_batch(ts[:1], ["x"])
    np.testing.assert_array_equal(comp.decompress_batch(p_one, ctx_one)[0].numpy(),
                                  ts[0].numpy())
    _, ctx_other = comp.compress_batch(ts[:1], ["z"])
    with pytest.raises(tf.errors.InvalidArgumentError, match="'layout'"):
        comp.decompress_batch(p_one, ctx_other)
    p_xy, _ = comp.compress_batch(ts, ["x", "y"])
    _, ctx_yx = comp.compress_batch(ts, ["y", "x"])
    with pytest.raises(tf.errors.InvalidArgumentError, match="'layout'"):
        comp.decompress_batch(p_xy, ctx_yx)


# --------------------------------------------------------- dtypes, NaN, small
@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32, tf.float64])
@pytest.mark.parametrize("index,value", [("raw", "raw"), ("golomb", "raw"), ("bloom:p0", "qsgd"),
                                         ("rle", "polyfit")])
def test_float_dtypes(rng, dtype, index, value):
    comp = make(index, value, memory="residual")
    g = tf.cast(tf.constant(gradient(rng).astype(np.float64)), dtype)
    p, ctx = comp.compress(g, name="v")
    out = comp.decompress(p, ctx)
    assert out.dtype == dtype and out.shape == g.shape
    r = comp.memory.residual("v")
    assert r.dtype == dtype
    # Conservation, to the rounding of one subtraction and one addition in
    # the gradient's own dtype.
    eps = {tf.float16: 2.0 ** -10, tf.bfloat16: 2.0 ** -7, tf.float32: 2.0 ** -23,
           tf.float64: 2.0 ** -52}[dtype]
    g64 = tf.cast(tf.reshape(g, [-1]), tf.float64).numpy()
    sum64 = (tf.cast(tf.reshape(out, [-1]), tf.float64) + tf.cast(r, tf.float64)).numpy()
    np.testing.assert_allclose(sum64, g64, rtol=0, atol=2 * eps * np.abs(g64).max())
    if value == "raw":
        # Lossless values: the sent positions hold the gradient bit for bit.
        nz = tf.reshape(out, [-1]).numpy() != 0
        np.testing.assert_array_equal(
            tf.cast(tf.reshape(out, [-1]), tf.float64).numpy()[nz],
            tf.cast(tf.reshape(g, [-1]), tf.float64).numpy()[nz])
        assert nz.sum() >= 200


@pytest.mark.parametrize("dtype", [tf.int32, tf.int64, tf.complex64, tf.bool])
def test_other_dtypes_refused(dtype):
    comp = make("golomb", "raw")
    with pytest.raises(TypeError, match="float16, bfloat16, float32 and float64"):
        comp.compress(tf.zeros([100], dtype), name="v")


def test_dynamic_shape_refused():
    comp = make("golomb", "raw")

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def f(g):
        return comp.compress(g, name="v")[0]

    with pytest.raises(ValueError, match="static shape"):
        f.get_concrete_function()


def test_small_tensors_travel_dense(rng):
    comp = make("bloom:conflict_sets", "polyfit", memory="residual")
    g = gradient(rng, (7, 9))  # 63 < min_size 64
    p, ctx = comp.compress(tf.constant(g), name="bias")
    assert ctx.dense
    meta = dict(zip(compressor.META_FIELDS, dr.payload.inspect(p.numpy())["meta"]))
    assert meta["mode"] == compressor.MODE_DENSE
    np.testing.assert_array_equal(comp.decompress(p, ctx).numpy(), g)
    # Nothing of it is kept back, so it has no residual variable at all.
    assert "bias" not in comp.memory.residuals


@pytest.mark.parametrize("index,value", [("bloom:p0", "polyfit"), ("golomb", "qsgd"),
                                         ("raw", "raw")])
def test_nonfinite_sent_dense_and_residual_kept(rng, index, value):
    comp = make(index, value, memory="residual")
    g0 = gradient(rng)
    comp.compress(tf.constant(g0), name="v")
    r0 = comp.memory.residual("v").numpy().copy()
    g = gradient(rng)
    g[3, 4], g[10, 0], g[0, 0] = np.nan, np.inf, -np.inf
    p, ctx = comp.compress(tf.constant(g), name="v")
    out = comp.decompress(p, ctx).numpy()
    # Transmitted faithfully: bit for bit (NaN payload bits included) after
    # the residual was added, so the optimizer's loss scaling sees the NaN.
    expect = (g.ravel() + r0).reshape(g.shape)
    np.testing.assert_array_equal(out.view(np.uint32), expect.view(np.uint32))
    np.testing.assert_array_equal(comp.memory.residual("v").numpy(), r0)


def test_nonfinite_raise(rng):
    comp = make("golomb", "raw", nonfinite="raise")
    g = gradient(rng)
    g[1, 1] = np.nan
    with pytest.raises(tf.errors.InvalidArgumentError, match="layer_x.*NaN or Inf"):
        comp.compress(tf.constant(g), name="layer_x")


def test_missing_name_with_memory():
    comp = make("golomb", "raw", memory="residual")
    with pytest.raises(ValueError, match="name="):
        comp.compress(tf.zeros([100]))


def test_reusing_a_key_with_another_shape():
    comp = make("golomb", "raw", memory="residual")
    comp.compress(tf.ones([100]), name="v")
    with pytest.raises(ValueError, match="one key per variable"):
        comp.compress(tf.ones([200]), name="v")


# -------------------------------------------------------------- accounting
def test_byte_accounting(rng):
    comp = make("golomb", "qsgd", memory="residual")
    shapes = {"a": N_SHAPE, "b": (40, 40), "c": (5,)}
    sent = {}
    for name, shape in shapes.items():
        p, ctx = comp.compress(tf.constant(gradient(rng, shape)), name=name)
        assert int(ctx.payload_bytes) == p.shape[0]
        assert ctx.dense_bytes == 4 * int(np.prod(shape))
        sent[name] = p.shape[0]
    per = comp.ledger.per_variable()
    assert per == {k: (sent[k], 4 * int(np.prod(s))) for k, s in shapes.items()}
    assert comp.ledger.step_totals() == (sum(sent.values()),
                                         sum(4 * int(np.prod(s)) for s in shapes.values()))
    comp.compress(tf.constant(gradient(rng, (5,))), name="c")
    assert comp.ledger.running_totals()[1] == comp.ledger.step_totals()[1] + 20
    assert "TOTAL" in comp.ledger.summary()
    # Compressed sizes are what the codecs promise: far below dense here.
    assert sent["a"] < 0.05 * 4 * 20000


# --------------------------------------------------------------- exchanges
@pytest.mark.parametrize("index,value", [("bloom:conflict_sets", "polyfit"), ("golomb", "qsgd"),
                                         ("raw", "raw")])
def test_exchange_locally_replicas_identical(rng, index, value):
    workers = [make(index, value, memory="residual") for _ in range(3)]
    for _ in range(2):
        grads = [gradient(rng) for _ in workers]
        results, payloads = dr.communicators.exchange_locally(workers, grads, name="v")
        for r in results[1:]:
            np.testing.assert_array_equal(r.numpy(), results[0].numpy())
        # The sum of what a receiver decodes from each payload, separately.
        receiver = make(index, value)
        ctx = receiver.receiver_batch_context([tf.TensorSpec(N_SHAPE, tf.float32)], ["v"])
        assert all(len(p) == 1 for p in payloads)  # one batch payload per worker
        decoded = [receiver.decompress_batch(p, ctx)[0].numpy() for (p,) in payloads]
        np.testing.assert_array_equal(results[0].numpy(),
                                      tf.add_n([tf.constant(d) for d in decoded]).numpy())


def test_allreduce_randomk_fp16(rng):
    params = {"compressor": "randomk", "compress_ratio": 0.05, "communicator": "allreduce",
              "deepreduce": "value", "value": "fp16", "memory": "residual", "min_size": 64}
    workers = [dr.from_params(params) for _ in range(2)]
    grads = [gradient(rng, (100, 50)) for _ in workers]
    results, payloads = dr.communicators.exchange_locally(workers, grads, name="v")
    import sparsify_reference

    pos, _ = sparsify_reference.random_k(grads[0], 250, step_seed("v", 1))
    wire, rest = payloads[0]  # the summable values at the agreed positions, the dense section
    assert wire.dtype == tf.float16 and wire.shape == (250,) and rest.shape == (0,)
    expect = np.zeros(5000, np.float32)
    expect[pos] = (grads[0].ravel()[pos].astype(np.float16)
                   + grads[1].ravel()[pos].astype(np.float16)).astype(np.float32)
    for r in results:
        np.testing.assert_array_equal(r.numpy().ravel(), expect)


@pytest.mark.parametrize("params,why", [
    ({"compressor": "topk", "communicator": "allreduce"}, "different positions"),
    ({"compressor": "randomk", "communicator": "allreduce", "deepreduce": "index",
      "index": "golomb"}, "cannot be summed"),
    ({"compressor": "none", "communicator": "allreduce", "deepreduce": "value",
      "value": "qsgd"}, "not additive"),
])
def test_allreduce_incompatible(params, why):
    with pytest.raises(ValueError, match=why):
        dr.from_params(params)


# ----------------------------------------------------------------- batches
def test_batch_roundtrip_and_errors(rng):
    """A batch is fused into one bucket: the small tensor travels exactly in
    the dense section, the others are decoded with error feedback (decoded +
    residual == gradient), and foreign or corrupted batches are refused."""
    comp = make("bloom:p0", "qsgd", memory="residual")
    shapes = [N_SHAPE, (7,), (64, 32)]
    grads = [tf.constant(gradient(rng, s)) for s in shapes]
    names = ["a", "b", "c"]
    payload, ctx = comp.compress_batch(grads, names)
    outs = comp.decompress_batch(payload, ctx)
    assert [o.shape for o in outs] == [g.shape for g in grads]
    np.testing.assert_array_equal(outs[1].numpy(), grads[1].numpy())
    (bucket,) = ctx.plan.buckets
    residual = comp.memory.residuals[bucket.key].numpy()
    sent = np.concatenate([outs[0].numpy().ravel(), outs[2].numpy().ravel()])
    want = np.concatenate([grads[0].numpy().ravel(), grads[2].numpy().ravel()])
    np.testing.assert_allclose(sent + residual, want, rtol=1e-6, atol=1e-6)
    # one bucket: the bucket payload is the batch payload
    assert dr.payload.inspect(payload.numpy())["kind"] == compressor.KIND_BUCKET
    _, other = comp.compress_batch(grads[:2], names[:2])
    with pytest.raises(tf.errors.InvalidArgumentError):
        comp.decompress_batch(payload, other)
    bad = payload.numpy().copy()
    bad[len(bad) // 2] ^= 4
    with pytest.raises(tf.errors.InvalidArgumentError, match="CRC32C"):
        comp.decompress_batch(tf.constant(bad), ctx)


# ------------------------------------------------------------ IndexedSlices
def embedding_grad(rng, vocab=1000, dim=8, ids=(5, 3, 5, 999, 0, 3)):
    emb = tf.Variable(rng.standard_normal((vocab, dim)).astype(np.float32))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.nn.embedding_lookup(emb, tf.constant(ids)) ** 2)
    return tape.gradient(loss, emb)


@pytest.mark.parametrize("index,value", [("raw", "raw"), ("golomb", "raw"), ("bloom:p0", "raw"),
                                         ("rle", "fp16"), ("golomb", "polyfit")])
def test_indexed_slices_stay_sparse(rng, index, value):
    g = embedding_grad(rng)
    assert isinstance(g, tf.IndexedSlices)
    comp = make(index, value)
    p, ctx = comp.compress_slices(g, "emb")
    out = comp.decompress_slices(p, ctx)
    assert isinstance(out, tf.IndexedSlices)
    np.testing.assert_array_equal(out.indices.numpy(), [0, 3, 5, 999])
    dense_ref = tf.convert_to_tensor(g).numpy()
    dense_out = tf.convert_to_tensor(out).numpy()
    rows = dense_ref[[0, 3, 5, 999]].ravel()
    if value == "raw":
        np.testing.assert_array_equal(dense_out, dense_ref)
    else:
        # Exactly the value codec's own round trip of the merged rows.
        enc = value_ops.encode(value, tf.constant(rows))
        expect = np.zeros_like(rows)
        bound = {"max_values": rows.size} if value in value_ops.SORTING_CODECS else {}
        expect[enc.perm.numpy()] = value_ops.decode(value, enc.payload, **bound).numpy()
        np.testing.assert_array_equal(out.values.numpy().ravel(), expect)
    # The payload is of the order of the slices, not of the 1000 x 8 table.
    assert p.shape[0] < 4 * 8 * 4 + 100


# ---------------------------------------------------------- checkpointing
def test_memory_checkpoint_roundtrip_and_deferred_restore(rng, tmp_path):
    comp = make("golomb", "qsgd", memory="residual")
    for _ in range(2):
        comp.compress(tf.constant(gradient(rng)), name="dense/kernel:0")
    saved_r = comp.memory.residual("dense/kernel:0").numpy().copy()
    path = tf.train.Checkpoint(compressor=comp).save(str(tmp_path / "ckpt"))
    assert np.abs(saved_r).sum() > 0

    # Restore into a fresh compressor BEFORE its variables exist (deferred),
    # then continue: the next step must equal the original's next step.
    fresh = make("golomb", "qsgd", memory="residual")
    tf.train.Checkpoint(compressor=fresh).restore(path)
    g = tf.constant(gradient(rng))
    p1, c1 = comp.compress(g, name="dense/kernel:0")
    p2, c2 = fresh.compress(g, name="dense/kernel:0")
    np.testing.assert_array_equal(p1.numpy(), p2.numpy())  # same residual, same step seed
    np.testing.assert_array_equal(comp.memory.residual("dense/kernel:0").numpy(),
                                  fresh.memory.residual("dense/kernel:0").numpy())


def test_unpermute_inverts_a_gather_as_scatter_nd_does():
    from deepreduce_tf.ops import fusion as fusion_ops

    perm = tf.constant([2, 0, 3, 1], tf.int64)
    values = tf.constant([-0.0, 1.5, -2.0, 4.0])
    out = fusion_ops.unpermute(values, perm).numpy()
    np.testing.assert_array_equal(out, [1.5, 4.0, 0.0, -2.0])
    assert not np.signbit(out[2])  # scatter_nd adds onto zeros: -0.0 arrives as +0.0
    np.testing.assert_array_equal(fusion_ops.gather(out, perm).numpy()[1:], values.numpy()[1:])
