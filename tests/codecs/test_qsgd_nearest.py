"""QSGD with nearest rounding (QsgdValue(rounding='nearest')), an encoder
written with TensorFlow ops whose payload the QSGD decode op reads: the
payload against the numpy reference (tests/value_reference.py), the error
bound, determinism, and the round trip through a compressor with error
feedback."""
import numpy as np
import pytest
import tensorflow as tf

import value_reference as ref
from deepreduce_tf import from_params
from deepreduce_tf.codecs import value as vc
from deepreduce_tf.ops import value as value_ops


@pytest.mark.parametrize("k,levels,bucket", [(0, 3, 512), (1, 3, 512), (7, 1, 4), (1000, 3, 512),
                                             (1537, 7, 512), (300, 255, 1), (777, 15, 100)])
def test_payload_matches_the_numpy_reference(k, levels, bucket):
    rng = np.random.default_rng(k + levels + bucket)
    values = rng.laplace(size=k).astype(np.float32)
    if k > 3:
        values[0] = 0.0
        values[1:3] = [np.abs(values).max(), -np.abs(values).max()]  # levels s and -s
    codec = vc.QsgdValue(levels=levels, bucket_size=bucket, rounding="nearest")
    payload = codec.encode(tf.constant(values), tf.constant(5, tf.int64)).section.numpy()
    expected = ref.qsgd_encode_reference(values, levels, bucket, seed=5, rounding="nearest")
    assert payload.tobytes() == expected.tobytes()
    # The QSGD decode op reads it; each value is within half a level of the input.
    decoded = value_ops.decode("qsgd", tf.constant(payload)).numpy()
    np.testing.assert_array_equal(decoded, ref.qsgd_decode_reference(payload))
    for i in range(0, k, bucket):
        chunk = values[i:i + bucket]
        half = np.abs(chunk).max() / (2 * levels)
        assert np.all(np.abs(decoded[i:i + bucket] - chunk) <= half * (1 + 1e-6))


def test_nearest_is_deterministic_and_stochastic_is_not():
    values = tf.constant(np.random.default_rng(0).laplace(size=4096).astype(np.float32))
    nearest = vc.QsgdValue(bits=2, rounding="nearest")
    stochastic = vc.QsgdValue(bits=2)
    assert (nearest.encode(values, 1).section.numpy().tobytes()
            == nearest.encode(values, 2).section.numpy().tobytes())
    assert (stochastic.encode(values, 1).section.numpy().tobytes()
            != stochastic.encode(values, 2).section.numpy().tobytes())
    # Nearest has the smaller error: no variance.
    v = values.numpy()
    err = {name: float(np.sum((value_ops.decode("qsgd", c.encode(values, 1).section).numpy()
                               - v) ** 2)) for name, c in (("n", nearest), ("s", stochastic))}
    assert err["n"] < err["s"]


def test_through_the_compressor_update_plus_residual_is_conserved():
    ex = from_params({"compressor": "topk", "compress_ratio": 0.3, "deepreduce": "both",
                      "index": "golomb", "value": "qsgd", "bits": 2,
                      "qsgd_rounding": "nearest", "memory": "residual"})
    assert ex.compressor.value_codec.config() == {"levels": 3, "bucket_size": 512,
                                                  "rounding": "nearest"}
    rng = np.random.default_rng(0)
    g = tf.constant(rng.normal(size=(40, 50)).astype(np.float32))
    payload, ctx = ex.compress(g, "w")
    decoded = ex.decompress(payload, ctx).numpy()
    residual = ex.memory.residual("w").numpy().reshape(g.shape)
    assert 0 < np.count_nonzero(decoded) <= int(np.ceil(0.3 * 2000))
    np.testing.assert_allclose(decoded + residual, g.numpy(), rtol=1e-6, atol=1e-6)


def test_an_unknown_rounding_is_refused():
    with pytest.raises(ValueError, match="rounding must be one of stochastic, nearest"):
        vc.QsgdValue(bits=2, rounding="up")
    with pytest.raises(ValueError, match="qsgd_rounding"):
        from_params({"compressor": "topk", "compress_ratio": 0.3, "deepreduce": "both",
                     "index": "golomb", "value": "qsgd", "qsgd_rounding": "up"})
