"""The sparse ternary value codec (STC), a codec written in Python alone:
its section against the numpy reference (tests/value_reference.py), the
round trip through a compressor with error feedback, and hostile sections."""
import numpy as np
import pytest
import tensorflow as tf

import value_reference as ref
from deepreduce_tf import from_params
from deepreduce_tf.codecs import value as vc


@pytest.mark.parametrize("k,bucket", [(0, 512), (1, 512), (7, 4), (8, 8), (1000, 512),
                                      (1537, 512), (300, 1)])
def test_section_matches_the_numpy_reference(k, bucket):
    rng = np.random.default_rng(k + bucket)
    values = rng.normal(size=k).astype(np.float32)
    if k:
        values[rng.integers(k)] = 0.0  # a zero travels as +mean
    codec = vc.TernaryValue(bucket_size=bucket)
    section = codec.encode(tf.constant(values), tf.constant(0, tf.int64)).section.numpy()
    expected = ref.ternary_encode_reference(values, bucket)
    assert len(section) == 4 * -(-k // bucket) + -(-k // 8)
    got_means = np.frombuffer(section[:4 * -(-k // bucket)].tobytes(), "<f4")
    want_means = np.frombuffer(expected[:4 * -(-k // bucket)], "<f4")
    np.testing.assert_array_equal(got_means, want_means)
    assert section[4 * -(-k // bucket):].tobytes() == expected[4 * -(-k // bucket):]
    decoded = codec.decode(tf.constant(section), k, tf.float32, max(k, 1)).numpy()
    np.testing.assert_array_equal(decoded, ref.ternary_decode_reference(section.tobytes(), k,
                                                                         bucket))
    # Each decoded value has the input's sign (a zero: +) and its bucket's mean.
    assert np.all((decoded < 0) == (values < 0))
    for i in range(0, k, bucket):
        assert np.allclose(np.abs(decoded[i:i + bucket]), np.abs(values[i:i + bucket]).mean())


def test_through_the_compressor_update_plus_residual_is_conserved():
    """top-k + golomb + ternary with error feedback: what is decoded plus
    the new residual is the compensated gradient (STC's error feedback)."""
    ex = from_params({"compressor": "topk", "compress_ratio": 0.3, "deepreduce": "both",
                      "index": "golomb", "value": "stc", "bucket_size": 64,
                      "memory": "residual"})
    rng = np.random.default_rng(0)
    g = tf.constant(rng.normal(size=(40, 50)).astype(np.float32))
    payload, ctx = ex.compress(g, "w")
    decoded = ex.decompress(payload, ctx).numpy()
    residual = ex.memory.residual("w").numpy().reshape(g.shape)
    nz = decoded[decoded != 0]
    assert np.count_nonzero(decoded) == int(np.ceil(0.3 * 2000))
    assert len(np.unique(np.abs(nz))) <= int(np.ceil(0.3 * 2000 / 64))
    np.testing.assert_allclose(decoded + residual, g.numpy(), rtol=1e-6, atol=1e-6)
    assert np.abs(residual).max() > 0


@pytest.mark.parametrize("edit,match", [
    (lambda s: s[:-1], "sign bit per value"),
    (lambda s: s + b"\0", "sign bit per value"),
    (lambda s: np.float32(-1.0).tobytes() + s[4:], "negative or not finite"),
    (lambda s: np.float32(np.nan).tobytes() + s[4:], "negative or not finite"),
    (lambda s: np.float32(np.inf).tobytes() + s[4:], "negative or not finite"),
])
def test_hostile_sections_are_refused(edit, match):
    codec = vc.TernaryValue(bucket_size=16)
    values = np.linspace(-1, 1, 40).astype(np.float32)
    section = codec.encode(tf.constant(values), 0).section.numpy().tobytes()
    with pytest.raises(tf.errors.InvalidArgumentError, match=match):
        codec.decode(tf.constant(np.frombuffer(edit(section), np.uint8)), 40, tf.float32, 40)


def test_a_count_beyond_the_limit_allocates_nothing():
    codec = vc.TernaryValue(bucket_size=16)
    with pytest.raises(tf.errors.InvalidArgumentError, match="value count outside"):
        codec.decode(tf.constant(np.zeros(8, np.uint8)), 1 << 40, tf.float32, 100)
    with pytest.raises(ValueError, match="bucket_size"):
        vc.TernaryValue(bucket_size=0)
