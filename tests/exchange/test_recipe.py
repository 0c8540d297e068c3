"""What the field uses to keep accuracy under sparsification (DGC, Lin et
al., ICLR 2018), each option against a numpy reference of its update rule:
momentum correction with factor masking (memory='dgc'), warm-up (dense, or
DGC's exponentially shrinking density) and local gradient clipping."""
import math

import numpy as np
import pytest
import tensorflow as tf

import deepreduce_tf as dr

N = 4000


def make(**params):
    base = {"compressor": "topk", "compress_ratio": 0.01, "min_size": 16}
    base.update(params)
    if base["compressor"] in ("none", "threshold"):
        del base["compress_ratio"]
    return dr.from_params(base)


def topk_ref(v, k):
    """numpy top-k by magnitude, ties to the lower index (as the kernels)."""
    order = np.lexsort((np.arange(v.size), -np.abs(v)))
    return np.sort(order[:k])


def dgc_reference(u, v, g, momentum, k, masking=True):
    """One step of DGC's momentum correction (Lin et al. 2018) in float32
    numpy: u <- m u + g, v <- v + u; the k entries of v largest in magnitude
    (topk_ref) are sent and zeroed in v, and in u too with factor masking.
    Returns (sent, positions, u, v); the inputs are left as they were."""
    u = np.float32(momentum) * u + g
    v = v + u
    sel = topk_ref(v, k)
    sent = np.zeros(v.size, np.float32)
    sent[sel] = v[sel]
    v[sel] = 0.0
    if masking:
        u[sel] = 0.0  # factor masking
    return sent, sel, u, v


def step(comp, g, name="w"):
    payload, ctx = comp.compress(tf.constant(g), name=name)
    return comp.decompress(payload, ctx).numpy()


@pytest.mark.parametrize("masking", [True, False])
def test_momentum_correction_with_factor_masking_matches_numpy(rng, masking):
    m, k = 0.9, math.ceil(0.01 * N)
    comp = make(memory="dgc", momentum=m, **({} if masking else {"momentum_masking": False}))
    u = np.zeros(N, np.float32)
    v = np.zeros(N, np.float32)
    for _ in range(6):
        g = rng.standard_normal(N).astype(np.float32)
        got = step(comp, g)
        want, sel, u, v = dgc_reference(u, v, g, m, k, masking)
        np.testing.assert_array_equal(np.flatnonzero(got), sel)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(comp.memory.residual("w").numpy(), v, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(comp.memory.velocity("w", tf.constant(g)).numpy(), u,
                               rtol=1e-5, atol=1e-6)


def test_momentum_correction_gives_the_small_tensors_momentum_sgd(rng):
    """The tensors below min_size travel dense in the bucket's dense section;
    with memory='dgc' (the optimizer then has no momentum) they send their
    velocity u <- m u + g: momentum SGD, as numpy's. A step holding NaN
    leaves it as it was; the single-tensor path does the same."""
    m = 0.9
    comp = make(memory="dgc", momentum=m)  # min_size 16
    u_small, u_solo = np.zeros(10, np.float32), np.zeros(7, np.float32)
    for t in range(5):
        big = rng.standard_normal(N).astype(np.float32)
        small = rng.standard_normal(10).astype(np.float32)
        solo = rng.standard_normal(7).astype(np.float32)
        if t == 3:
            small[4] = np.nan
        payload, ctx = comp.compress_batch([tf.constant(big), tf.constant(small)],
                                           names=["big", "small"])
        got = comp.decompress_batch(payload, ctx)[1].numpy()
        want = np.float32(m) * u_small + small
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=f"step {t}")
        if t != 3:  # the NaN step sends its sum and keeps the velocity
            u_small = want
        got_solo = step(comp, solo, name="solo")
        u_solo = np.float32(m) * u_solo + solo
        np.testing.assert_allclose(got_solo, u_solo, rtol=1e-6, atol=1e-6)
    (key,) = [k for k in comp.memory.dense_velocities if "solo" not in k]
    np.testing.assert_allclose(comp.memory.dense_velocities[key].numpy(), u_small, rtol=1e-6)
    # Residual memory leaves the dense section as it is (no momentum of its own).
    plain = make(memory="residual")
    payload, ctx = plain.compress_batch([tf.constant(big), tf.constant(small)],
                                        names=["big", "small"])
    np.testing.assert_array_equal(plain.decompress_batch(payload, ctx)[1].numpy(), small)


@pytest.mark.parametrize("memory", ["residual", "dgc"])
def test_schedule_scales_each_step_before_error_feedback(rng, memory):
    """schedule='cosine': step t's gradients, the small tensors' too, are
    scaled by (1 + cos(pi min(t-1, T) / T)) / 2 before error feedback (the
    residual holds learning-rate-scaled steps), against numpy; the factor
    stays 0 past T."""
    m, T, k = 0.9, 4, math.ceil(0.01 * N)
    comp = make(memory=memory, momentum=m, schedule="cosine", schedule_steps=T) \
        if memory == "dgc" else make(memory=memory, schedule="cosine", schedule_steps=T)
    v, u = np.zeros(N, np.float32), np.zeros(N, np.float32)
    u_small = np.zeros(10, np.float32)
    for t in range(1, T + 3):
        scale = np.float32(0.5 * (1.0 + math.cos(math.pi * min(t - 1, T) / T)))
        big = rng.standard_normal(N).astype(np.float32)
        small = rng.standard_normal(10).astype(np.float32)
        solo = rng.standard_normal(7).astype(np.float32)
        payload, ctx = comp.compress_batch([tf.constant(big), tf.constant(small)],
                                           names=["big", "small"])
        got_big, got_small = [x.numpy() for x in comp.decompress_batch(payload, ctx)]
        if memory == "dgc":
            want, _, u, v = dgc_reference(u, v, scale * big, m, k)
            u_small = np.float32(m) * u_small + scale * small
            want_small = u_small
        else:  # error feedback alone: DGC's step without momentum
            want, _, _, v = dgc_reference(u, v, scale * big, 0.0, k)
            want_small = scale * small
        np.testing.assert_allclose(got_big, want, rtol=1e-5, atol=1e-6, err_msg=f"step {t}")
        np.testing.assert_allclose(got_small, want_small, rtol=1e-5, atol=1e-6)
        got_solo = step(comp, solo, name="solo")  # one small tensor: its own counter
        if memory == "residual":
            np.testing.assert_allclose(got_solo, scale * solo, rtol=1e-6, atol=1e-7)
        if t > T and memory == "residual":  # the schedule ended at 0: the residual drains
            assert not got_small.any() and not got_solo.any() and got_big.any()
    np.testing.assert_allclose(comp.memory.residual("big").numpy()
                               if "big" in comp.memory.residuals else
                               next(iter(comp.memory.residuals.values())).numpy(), v,
                               rtol=1e-5, atol=1e-5)


def test_dense_warmup_steps_are_momentum_sgd_then_topk(rng):
    m, warm = 0.9, 3
    comp = make(memory="dgc", momentum=m, warmup_steps=warm)
    u = np.zeros(N, np.float32)
    for t in range(1, warm + 3):
        g = rng.standard_normal(N).astype(np.float32)
        got = step(comp, g)
        u = np.float32(m) * u + g
        if t <= warm:  # everything sent, nothing masked: one momentum-SGD step
            np.testing.assert_allclose(got, u, rtol=1e-6, atol=1e-6)
            assert not np.abs(comp.memory.residual("w").numpy()).any()
        else:
            assert np.count_nonzero(got) == math.ceil(0.01 * N)


@pytest.mark.parametrize("ratio,warm", [(0.01, 5), (0.001, 4)])
def test_exponential_warmup_shrinks_the_density_like_dgc(rng, ratio, warm):
    comp = make(compress_ratio=ratio, warmup_steps=warm, warmup="exponential")
    for t in range(1, warm + 3):
        got = step(comp, rng.standard_normal(N).astype(np.float32))
        frac = min(t - 1, warm) / warm
        want_ratio = 0.25 * (ratio / 0.25) ** frac if t <= warm else ratio
        assert np.count_nonzero(got) == min(N, max(1, math.ceil(want_ratio * N))), t
    assert comp.memory.residual("w").numpy().any()


def test_exponential_warmup_runs_per_variable_in_a_fused_bucket(rng):
    comp = make(warmup_steps=2, warmup="exponential")
    a = rng.standard_normal(3000).astype(np.float32)
    b = rng.standard_normal(1000).astype(np.float32)
    payload, ctx = comp.compress_batch([tf.constant(a), tf.constant(b)], names=["a", "b"])
    da, db = [t.numpy() for t in comp.decompress_batch(payload, ctx)]
    assert (np.count_nonzero(da), np.count_nonzero(db)) == (750, 250)  # 25 % of each
    np.testing.assert_array_equal(np.flatnonzero(da), topk_ref(a, 750))


def test_local_clipping_scales_the_batch_to_the_global_norm(rng):
    comp = make(compressor="none", clip_norm=2.0)
    a = rng.standard_normal(300).astype(np.float32)
    b = rng.standard_normal(40).astype(np.float32)
    payload, ctx = comp.compress_batch([tf.constant(a), tf.constant(b)], names=["a", "b"])
    got = [t.numpy() for t in comp.decompress_batch(payload, ctx)]
    scale = 2.0 / np.sqrt((a.astype(np.float64) ** 2).sum() + (b.astype(np.float64) ** 2).sum())
    np.testing.assert_allclose(got[0], a * scale, rtol=1e-5)
    np.testing.assert_allclose(got[1], b * scale, rtol=1e-5)
    small = [a * 1e-3, b * 1e-3]  # inside the norm: untouched
    payload, ctx = comp.compress_batch([tf.constant(x) for x in small], names=["a", "b"])
    for x, y in zip(small, comp.decompress_batch(payload, ctx)):
        np.testing.assert_array_equal(y.numpy(), x)


@pytest.mark.parametrize("params,match", [
    ({"warmup_steps": -1}, "warmup_steps must be an integer >= 0"),
    ({"warmup_steps": 3, "warmup": "linear"}, "warmup must be one of dense, exponential"),
    ({"compressor": "threshold", "warmup_steps": 3, "warmup": "exponential"},
     "has none"),
    ({"compressor": "none", "warmup_steps": 3}, "needs a sparsifier"),
    ({"clip_norm": 0}, "clip_norm must be a finite number > 0"),
    ({"clip_norm": "big"}, "clip_norm must be a finite number > 0"),
    ({"memory": "dgc", "momentum": 1.0}, r"momentum must lie in \[0, 1\)"),
    ({"memory": "dgc", "momentum_masking": "no"}, "momentum_masking"),
    ({"schedule": "cosine"}, "needs schedule_steps"),
    ({"schedule": "cosine", "schedule_steps": 0}, "needs schedule_steps"),
    ({"schedule_steps": 10}, "without a schedule"),
    ({"schedule": "linear", "schedule_steps": 10}, "schedule must be one of none, cosine"),
    ({"schedule": "cosine", "schedule_steps": 10, "memory": "none"},
     "keep the schedule in the optimizer"),
    ({"compressor": "randomk", "communicator": "allreduce", "warmup_steps": 2},
     "warm-up is implemented by the all-gather exchange only"),
])
def test_bad_recipe_options_are_refused(params, match):
    with pytest.raises(ValueError, match=match):
        make(**params)


# ------------------------------------------------ deepreduce-bench flags
def _resolve(args):
    from absl import flags as absl_flags

    from deepreduce_bench import flags as bench_flags

    fv = absl_flags.FlagValues()
    bench_flags.define_flags(fv)
    fv(["deepreduce-bench"] + list(args))
    return bench_flags.resolve(fv)


def test_bench_flags_move_the_momentum_into_the_compressor():
    from deepreduce_bench import runner

    config = _resolve(["--memory=dgc", "--momentum=0.8", "--warmup_steps=50",
                       "--warmup=exponential", "--clip_norm=5", "--data_name=synthetic"])
    assert {k: config.params[k] for k in ("memory", "momentum", "warmup_steps", "warmup",
                                          "clip_norm")} == {
        "memory": "dgc", "momentum": 0.8, "warmup_steps": 50, "warmup": "exponential",
        "clip_norm": 5.0}
    opt = runner.make_optimizer(config, 100)
    assert float(opt.momentum) == 0.0  # not applied twice
    plain = runner.make_optimizer(_resolve(["--data_name=synthetic"]), 100)
    assert float(plain.momentum) == 0.9


def test_bench_flag_momentum_masking_reaches_the_memory():
    config = _resolve(["--memory=dgc", "--momentum_masking=false", "--data_name=synthetic"])
    assert config.params["momentum_masking"] is False
    mem = dr.from_params(dict(config.params, compressor="topk")).memory
    assert mem.masking is False and mem.config() == {"momentum": 0.9, "momentum_masking": False}
    default = _resolve(["--memory=dgc", "--data_name=synthetic"])
    assert "momentum_masking" not in default.params
    assert dr.from_params(dict(default.params, compressor="topk")).memory.masking is True


def test_bench_flag_schedule_moves_the_learning_rate_schedule_into_the_exchange():
    import keras

    from deepreduce_bench import runner

    config = _resolve(["--memory=dgc", "--schedule=cosine", "--num_batches=50",
                       "--lr_schedule=cosine", "--data_name=synthetic"])
    assert config.params["schedule"] == "cosine"
    assert config.params["schedule_steps"] == 52  # the run's steps, its 2 warm-up batches too
    opt = runner.make_optimizer(config, 52)
    assert float(opt.learning_rate) == pytest.approx(config.init_learning_rate)  # not twice
    assert not isinstance(opt._learning_rate, keras.optimizers.schedules.LearningRateSchedule)
    compare = _resolve(["--compare=flags", "--memory=dgc", "--schedule=cosine",
                        "--data_name=synthetic"])
    assert compare.params["schedule_steps"] == 602
    given = _resolve(["--memory=dgc", "--schedule=cosine", "--schedule_steps=7",
                      "--data_name=synthetic"])
    assert given.params["schedule_steps"] == 7
    # --num_epochs: the steps of the epochs (10,000 synthetic images at 2 x 32: 157 + 2)
    epochs = _resolve(["--memory=dgc", "--schedule=cosine", "--num_epochs=1",
                       "--data_name=synthetic"])
    assert epochs.params["schedule_steps"] == 2 + 157
    from deepreduce_bench import flags as bench_flags
    with pytest.raises(bench_flags.ConfigError, match="--num_epochs=1: the run's steps depend"):
        _resolve(["--memory=dgc", "--schedule=cosine", "--num_epochs=1",
                  "--data_name=fashion_mnist", "--data_dir=/nonexistent"])


def test_bench_flags_refuse_dgc_with_adam():
    from deepreduce_bench import flags as bench_flags

    with pytest.raises(bench_flags.ConfigError, match="--memory=dgc .* --optimizer=adam"):
        _resolve(["--memory=dgc", "--optimizer=adam", "--data_name=synthetic"])


@pytest.mark.parametrize("name,kwargs", [
    ("none", {}), ("residual", {}), ("residual", {"beta": 0.5, "gamma": 2.0}),
    ("dgc", {"momentum": 0.9})])
def test_compensate_within_is_compensate_and_the_range_check(rng, name, kwargs):
    """Every memory's one-pass compensate_within gives compensate()'s tensor
    (the same state read, the same update afterwards) and numpy's verdict of
    'finite and within the limit'; a regression guard for subclasses that
    override compensate() (DGC's velocity was once skipped)."""
    from deepreduce_tf.memory import MEMORIES, Sent

    a, b = MEMORIES[name](**kwargs), MEMORIES[name](**kwargs)
    limit = 3.0
    for step_ in range(3):
        g = rng.standard_normal(N).astype(np.float32)
        if step_ == 2:
            g[17] = 50.0  # beyond the limit: the check must say so
        ref = a.compensate(tf.constant(g), "w")
        got, fits = b.compensate_within(tf.constant(g), "w", limit)
        np.testing.assert_array_equal(got.numpy(), ref.numpy())
        r = ref.numpy()
        assert bool(fits) == bool(np.all(np.isfinite(r)) and np.all(np.abs(r) <= limit))
        positions = np.sort(np.argsort(-np.abs(r))[:40]).astype(np.int64)
        for mem, x in ((a, ref), (b, got)):
            rest = x.numpy().copy()
            rest[positions] = 0
            mem.update_sent("w", x, Sent(tf.constant(rest), tf.constant(positions),
                                         tf.constant(x.numpy()[positions])))


@pytest.mark.parametrize("masking", [True, False])
def test_whole_bucket_topk_with_dgc_warmup_and_small_tensors_matches_numpy(rng, masking):
    """max_reduction's recipe (deepreduce-bench --compare=max_reduction): one
    top-k over the whole bucket, the small tensors in it (min_size 1), DGC's
    momentum correction with factor masking (or without: momentum_masking
    False) and its exponential warm-up of the density, against numpy over
    the concatenated tensors."""
    m, ratio, warm = 0.9, 0.003, 3
    comp = make(memory="dgc", momentum=m, compress_ratio=ratio, topk_scope="bucket",
                min_size=1, warmup_steps=warm, warmup="exponential",
                **({} if masking else {"momentum_masking": False}))
    sizes = [3000, 10, 990]  # a bias-sized tensor between two large ones
    n = sum(sizes)
    u = np.zeros(n, np.float32)
    v = np.zeros(n, np.float32)
    for t in range(1, warm + 4):
        g = rng.standard_normal(n).astype(np.float32)
        g[3000:3010] *= 30.0  # the small tensor's gradients are large: it gets positions
        parts = np.split(g, np.cumsum(sizes)[:-1])
        names = ["a", "b", "c"]
        payload, ctx = comp.compress_batch([tf.constant(p) for p in parts], names=names)
        got = np.concatenate([x.numpy() for x in comp.decompress_batch(payload, ctx)])
        frac = min(t - 1, warm) / warm
        want_ratio = 0.25 * (ratio / 0.25) ** frac if t <= warm else ratio
        k = min(n, max(1, math.ceil(want_ratio * n)))
        want, sel, u, v = dgc_reference(u, v, g, m, k, masking)
        np.testing.assert_array_equal(np.flatnonzero(got), sel, err_msg=f"step {t}")
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        assert np.count_nonzero(got[3000:3010]) > 0  # the small tensor is in the selection
    (key,) = comp.memory.residuals  # one residual for the bucket, in the tensors' order
    np.testing.assert_allclose(comp.memory.residual(key).numpy(), v, rtol=1e-5, atol=1e-5)
