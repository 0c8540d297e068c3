"""Value codec int8: 8-bit integers on a max scale, and under the sparse
all-reduce summed as integers on a scale the workers share.

Against numpy: the standalone codec's round trip; the packing of four codes
to an int32 word and the lane-wise sums of packed words at every W up to 127
with every code at its bound (overflow impossible by construction); three
steps of the exchange at W = 2, 3 and 8 (sums, residuals, replicas
bit-identical), adversarial values at W = 8, the bytes (one per value), a
dense step's floats, peers of another value codec refused."""
import numpy as np
import pytest
import tensorflow as tf

import deepreduce_tf as dr
from deepreduce_tf.codecs.value import (INT8_MAX, int8_levels, int8_pack, int8_unpack,
                                        make_value_codec)

import sparsify_reference as sref
from test_sparse_allreduce import BASE, _share, _step, check_step

INT8 = dict(BASE, deepreduce="both", index="golomb", value="int8")


def test_codec_round_trip_against_numpy(rng):
    codec = make_value_codec("int8")
    for values in (rng.normal(size=1000).astype(np.float32) * 3,
                   np.zeros(17, np.float32), np.zeros(0, np.float32),
                   np.array([-2.0, 2.0, 1.0, -1.0, 0.004], np.float32)):
        enc = codec.encode(tf.constant(values), tf.constant(0, tf.int64))
        section = enc.section.numpy()
        assert section.size == 4 + values.size  # the scale, one byte per value
        peak = np.float32(np.abs(values).max()) if values.size else np.float32(0)
        assert section[:4].view(np.float32)[0] == peak
        codes = np.clip(np.round(np.divide(values, peak, out=np.zeros_like(values),
                                           where=peak > 0) * np.float32(127)), -127, 127)
        np.testing.assert_array_equal(section[4:].view(np.int8), codes)
        got = codec.decode(enc.section, values.size, tf.float32, values.size).numpy()
        np.testing.assert_array_equal(got, codes * (peak * np.float32(1 / 127)))
        assert np.all(np.abs(got - values) <= peak / 254 * (1 + 1e-5))


@pytest.mark.parametrize("section,match", [
    (np.zeros(3, np.uint8), "4-byte scale"),
    (np.concatenate([np.float32([1.0]).view(np.uint8), np.zeros(5, np.uint8)]), "one byte"),
    (np.concatenate([np.float32([np.nan]).view(np.uint8), np.zeros(4, np.uint8)]),
     "not finite"),
    (np.concatenate([np.float32([-1.0]).view(np.uint8), np.zeros(4, np.uint8)]), "negative"),
])
def test_codec_refuses_malformed_sections(section, match):
    with pytest.raises(tf.errors.InvalidArgumentError, match=match):
        make_value_codec("int8").decode(tf.constant(section), 4, tf.float32, 4)


@pytest.mark.parametrize("W", [1, 2, 3, 7, 8, 64, 127])
def test_packed_words_sum_lane_by_lane_without_overflow(rng, W):
    """W workers' codes within +-floor(127 / W): at their bounds (every code
    +L, every code -L, alternating), and at random, the sum of the packed
    int32 words unpacks to the numpy sum of the codes."""
    L = int8_levels(W)
    n = 1001  # not a multiple of 4: the padding
    codes = rng.integers(-L, L + 1, size=(W, n))
    codes[:, :100] = L
    codes[:, 100:200] = -L
    codes[:, 200:300:2], codes[:, 201:300:2] = L, -L
    words = [int8_pack(tf.constant(c, tf.int32)) for c in codes]
    assert words[0].dtype == tf.int32 and words[0].shape == (251,)
    total = words[0]
    for w in words[1:]:
        total = total + w  # int32 addition: a partial sum never leaves the int32 range
    np.testing.assert_array_equal(int8_unpack(total, n).numpy(), codes.sum(axis=0))
    # Every partial sum of a ring (any subset of workers) unpacks too.
    np.testing.assert_array_equal(int8_unpack(tf.add_n(words[: (W + 1) // 2]), n).numpy(),
                                  codes[: (W + 1) // 2].sum(axis=0))


def test_levels_leave_the_sum_in_8_bits_and_refuse_128_workers():
    for W in range(1, INT8_MAX + 1):
        assert W * int8_levels(W) <= INT8_MAX and int8_levels(W) >= 1
    with pytest.raises(ValueError, match="at most 127 workers"):
        int8_levels(128)


def _reference_int8_step(grads, residuals, ratio, W, fused):
    """grads[w][j], residuals[w][j] (flat) -> (sums[j], new residuals): the
    scale is the workers' largest |x| over the bucket (all variables when
    fused, else the variable's), codes round-half-even within +-L, the
    value of a code scale * float32(1 / L)."""
    L = np.float32(INT8_MAX // W)
    xs = [[(np.ravel(g[j]) + r[j]).astype(np.float32) for j in range(len(g))]
          for g, r in zip(grads, residuals)]
    if fused:
        scale = np.float32(max(np.abs(np.concatenate(x)).max() for x in xs))
    sums = []
    new = [[None] * len(grads[0]) for _ in grads]
    for j in range(len(grads[0])):
        if not fused:
            scale = np.float32(max(np.abs(x[j]).max() for x in xs))
        step = scale * np.float32(1.0 / (INT8_MAX // W))  # as TensorFlow: fl32(1 / L)
        n = xs[0][j].size
        support = np.unique(np.concatenate([sref.top_k(x[j], _share(n, ratio, W))[0]
                                            for x in xs]))
        code_sum = np.zeros(support.size, np.int64)
        for w, x in enumerate(xs):
            codes = np.clip(np.round(x[j][support] / scale * L), -L, L)
            code_sum += codes.astype(np.int64)
            res = x[j].copy()
            res[support] = x[j][support] - codes.astype(np.float32) * step
            new[w][j] = res
        assert np.abs(code_sum).max() <= INT8_MAX
        total = np.zeros(n, np.float32)
        total[support] = code_sum.astype(np.float32) * step
        sums.append(total)
    return sums, new


@pytest.mark.parametrize("W,fused", [(2, False), (3, True), (8, False), (8, True)])
def test_three_steps_match_the_numpy_reference(rng, W, fused):
    shapes = [(40, 30), (500,), (7, 9)]
    params = dict(INT8)
    if not fused:
        params["bucket_cap_mb"] = 1e-6  # one bucket (and scale, residual) per variable
    exchanges = [dr.from_params(params) for _ in range(W)]
    keys = [f"v{j}" for j in range(len(shapes))]
    residuals = [[np.zeros(int(np.prod(s)), np.float32) for s in shapes] for _ in range(W)]
    for step in range(3):
        grads = [[rng.normal(size=s).astype(np.float32) * (w + 1) for s in shapes]
                 for w in range(W)]
        out = _step(exchanges, grads, keys)
        sums, residuals = _reference_int8_step(grads, residuals, 0.05, W, fused)
        check_step(out, sums, residuals, exchanges, keys, shapes, fused, step, sum_atol=1e-7,
                   residual_rtol=1e-5)


def test_eight_workers_at_the_bound_sum_exactly(rng):
    """Adversarial: every worker's largest entries at the same positions, at
    +-the shared scale: every code is +-15 and their sum +-120, which 8 bits
    hold; the result is exactly 8x the value there."""
    W, n = 8, 4000
    peak = np.float32(3.0)
    base = rng.normal(size=n).astype(np.float32) * 0.01
    base[:10], base[10:20] = peak, -peak
    grads = [[base.copy()] for _ in range(W)]
    exchanges = [dr.from_params(dict(INT8, memory="none")) for _ in range(W)]
    out = _step(exchanges, grads, ["g"])[0][0]
    step = peak * np.float32(1 / 15)
    np.testing.assert_array_equal(out[:10], np.float32(120) * step)
    np.testing.assert_array_equal(out[10:20], np.float32(-120) * step)
    np.testing.assert_allclose(out[:10], 8 * peak, rtol=1e-6)


def test_one_byte_per_value_and_the_scale_with_the_positions(rng):
    """Sent per worker: the fp16 exchange's bytes minus 2 |U| plus
    4 ceil(|U| / 4) (the codes, four to a word) plus the scale, one more
    meta field of the positions payload (a varint: 1 to 10 bytes), on the
    same gradients."""
    W, n = 4, 20_000
    grads = [[rng.normal(size=n).astype(np.float32)] for _ in range(W)]
    sent = {}
    for value in ("fp16", "int8"):
        exchanges = [dr.from_params(dict(INT8, value=value, memory="none")) for _ in range(W)]
        out = _step(exchanges, grads, ["g"])
        sent[value] = [ex.ledger.per_variable()["g"][0] for ex in exchanges]
        support = np.flatnonzero(out[0][0]).size if value == "fp16" else support
    for a, b in zip(sent["fp16"], sent["int8"]):
        assert 1 <= b - (a - 2 * support + 4 * ((support + 3) // 4)) <= 10


def test_a_dense_step_sums_floats_and_a_nan_reaches_everyone(rng):
    grads = [[rng.normal(size=2000).astype(np.float32)] for _ in range(2)]
    exchanges = [dr.from_params(dict(INT8, warmup_steps=1, warmup="dense", memory="none"))
                 for _ in range(2)]
    first = _step(exchanges, grads, ["g"])[0][0]
    np.testing.assert_array_equal(first, grads[0][0] + grads[1][0])  # exact, not quantized
    nan = [[g[0].copy()] for g in grads]
    nan[1][0][5] = np.nan
    out = _step(exchanges, nan, ["g"])
    for o in out:
        assert np.isnan(o[0][5]) and np.isfinite(np.delete(o[0], 5)).all()


def test_a_peer_with_another_value_codec_is_refused(rng):
    grads = [[rng.normal(size=4000).astype(np.float32)] for _ in range(2)]
    exchanges = [dr.from_params(INT8), dr.from_params(dict(INT8, value="fp16"))]
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="replica 1's positions .* another layout, density, codec"):
        _step(exchanges, grads, ["g"])


def test_only_the_sparse_allreduce_sums_int8():
    with pytest.raises(ValueError, match="only communicator 'sparse_allreduce'"):
        dr.from_params({"compressor": "randomk", "compress_ratio": 0.1,
                        "communicator": "allreduce", "deepreduce": "value", "value": "int8"})
