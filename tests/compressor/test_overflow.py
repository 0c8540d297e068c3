"""A finite gradient never turns into Inf on the way (issue 13, item 3): a
value the value codec cannot carry makes the step travel dense in the
gradient's own dtype; the residual stays finite; a residual that is not
finite is reset with a warning instead of making every later step dense."""
import numpy as np
import pytest
import tensorflow as tf

import deepreduce_tf as dr
from deepreduce_tf import compressor

N = 4096


def make(value, **extra):
    p = {"compressor": "topk", "compress_ratio": 0.01, "memory": "residual",
         "deepreduce": "value", "value": value}
    p.update(extra)
    return dr.from_params(p)


def mode_of(payload):
    return int(dr.payload.unpack(payload, 3, len(compressor.META_FIELDS))[0][0])


def grad(rng, dtype, big=None, at=17):
    g = rng.normal(size=N).astype(np.float64)
    if big is not None:
        g[at] = big
    return tf.constant(g, dtype)


@pytest.mark.parametrize("value, dtype, big", [
    ("fp16", tf.float32, 1e5),                 # > 65504: would decode to Inf
    ("fp16", tf.float64, 1e300),
    ("bf16", tf.float32, 3.4e38),              # rounds above bfloat16's max
    ("bf16", tf.float16, 65500.0),             # bf16 rounds it to 65536: Inf in float16
    ("bf16", tf.float64, 1e300),
    ("deflate", tf.float64, 1e300),            # float32 bytes cannot hold it
    ("polyfit", tf.float32, 1e35),             # the fits would overflow: no failed step
    ("dexp", tf.float32, -1e35),
    ("qsgd", tf.float32, 1e35),
])
def test_value_beyond_the_codecs_range_travels_dense(rng, value, dtype, big):
    c = make(value)
    g = grad(rng, dtype, big)
    payload, ctx = c.compress(g, name="w")
    decoded = c.decompress(payload, ctx).numpy()
    assert mode_of(payload) == compressor.MODE_DENSE
    np.testing.assert_array_equal(decoded, g.numpy())  # exact, own dtype
    r = c.memory.residual("w").numpy()
    assert np.all(r == 0)  # everything was sent
    # The next ordinary step is compressed again.
    g2 = grad(rng, dtype)
    payload2, ctx2 = c.compress(g2, name="w")
    assert mode_of(payload2) == compressor.MODE_SPARSE
    assert np.all(np.isfinite(c.decompress(payload2, ctx2).numpy()))
    assert np.all(np.isfinite(c.memory.residual("w").numpy()))


@pytest.mark.parametrize("value", ["fp16", "bf16", "qsgd"])
def test_values_within_range_stay_compressed(rng, value):
    c = make(value)
    limit = c.value_limit(tf.float32)
    g = grad(rng, tf.float32, big=limit if value != "qsgd" else 1e29)
    payload, ctx = c.compress(g, name="w")
    assert mode_of(payload) == compressor.MODE_SPARSE
    decoded = c.decompress(payload, ctx).numpy()
    assert np.all(np.isfinite(decoded)) and decoded[17] != 0


def test_nonfinite_residual_is_reset_with_a_warning(rng, capfd):
    c = make("fp16")
    c.compress(grad(rng, tf.float32), name="w")
    r = c.memory.residual("w")
    r.assign(tf.fill([N], np.float32(np.inf)))  # e.g. restored from a poisoned run
    payload, ctx = c.compress(grad(rng, tf.float32), name="w")
    assert mode_of(payload) == compressor.MODE_DENSE  # g + inf: this step is dense
    assert np.all(r.numpy() == 0)
    assert "residual of 'w' held NaN or Inf; it is reset to zero" in capfd.readouterr().err
    payload, ctx = c.compress(grad(rng, tf.float32), name="w")
    assert mode_of(payload) == compressor.MODE_SPARSE  # not dense forever


def test_finite_residual_is_kept_over_a_nonfinite_step(rng):
    c = make("fp16")
    c.compress(grad(rng, tf.float32), name="w")
    before = c.memory.residual("w").numpy().copy()
    assert np.any(before != 0)
    payload, _ = c.compress(grad(rng, tf.float32, big=np.nan), name="w")
    assert mode_of(payload) == compressor.MODE_DENSE
    np.testing.assert_array_equal(c.memory.residual("w").numpy(), before)


def test_bucket_path_overflow(rng):
    """The fused (bucket) path applies the same rule to the bucket."""
    c = make("fp16")
    grads = [grad(rng, tf.float32, 1e5), grad(rng, tf.float32)]
    payload, bctx = c.compress_batch(grads, names=["a", "b"])
    out = c.decompress_batch(payload, bctx)
    for g, o in zip(grads, out):
        np.testing.assert_array_equal(o.numpy(), g.numpy())
