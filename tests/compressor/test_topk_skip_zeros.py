"""topk_skip_zeros: top-k that never selects a zero, against numpy."""
import warnings

import numpy as np
import pytest
import tensorflow as tf

from deepreduce_tf import from_params, sparsifiers
from deepreduce_tf.federated.codec import ModelCodec


def numpy_topk_nonzero(x, lengths, ratio):
    """Per segment: the min(ceil(ratio * n), non-zeros) largest magnitudes
    (distinct magnitudes here), ascending positions."""
    out, start = [], 0
    for n in lengths:
        seg = x[start:start + n]
        k = min(max(1, int(np.ceil(ratio * n))) if n else 0, int(np.count_nonzero(seg)))
        order = np.argsort(-np.abs(seg), kind="stable")[:k]
        out.extend(sorted(start + order))
        start += n
    return np.array(out, np.int64)


def _bucket(rng, lengths, nonzeros):
    parts = []
    for n, nz in zip(lengths, nonzeros):
        seg = np.zeros(n, np.float32)
        where = rng.choice(n, size=nz, replace=False)
        seg[where] = rng.permutation(np.arange(1, nz + 1)).astype(np.float32) * rng.choice(
            [-1, 1], size=nz)
        parts.append(seg)
    return np.concatenate(parts)


@pytest.mark.parametrize("lengths,nonzeros", [
    ([100, 50, 200], [3, 50, 0]),    # fewer non-zeros than k, all, none
    ([1000], [40]),                  # one segment: select()
    ([30, 30], [30, 2]),
])
def test_selects_the_largest_non_zeros_per_segment(lengths, nonzeros):
    rng = np.random.default_rng(sum(lengths))
    x = _bucket(rng, lengths, nonzeros)
    sp = sparsifiers.TopK(0.1, skip_zeros=True)
    got = sp.select_segments(tf.constant(x), lengths, tf.constant(0, tf.int64)).numpy()
    np.testing.assert_array_equal(got, numpy_topk_nonzero(x, lengths, 0.1))
    assert np.all(x[got] != 0)
    # The run-time ratio of the warm-up follows the same rule.
    got = sp.select_ratio(tf.constant(x), lengths, tf.constant(0.2, tf.float64)).numpy()
    np.testing.assert_array_equal(got, numpy_topk_nonzero(x, lengths, 0.2))
    # Without skip_zeros the k of every segment is ceil(0.1 n), zeros or not.
    plain = sparsifiers.TopK(0.1).select_segments(tf.constant(x), lengths,
                                                  tf.constant(0, tf.int64)).numpy()
    assert len(plain) == sum(int(np.ceil(0.1 * n)) for n in lengths)


def test_same_decoded_update_at_fewer_bytes():
    """An embedding-like update (two rows changed) through the federated
    codec: the same decoded update and residual, fewer bytes."""
    rng = np.random.default_rng(0)
    table = np.zeros((500, 16), np.float32)
    table[[7, 300]] = rng.normal(size=(2, 16))
    dense = rng.normal(size=(64, 32)).astype(np.float32)
    update = [table, dense]
    base = {"compressor": "topk", "compress_ratio": 0.1, "deepreduce": "both",
            "index": "golomb", "value": "raw"}
    out = {}
    for skip in (False, True, None):  # None: the federated codec's default
        given = base if skip is None else dict(base, topk_skip_zeros=skip)
        codec = ModelCodec(given, ["t", "d"], [a.shape for a in update],
                           ["float32", "float32"])
        payload, decoded, residual = codec.encode(update)
        out[skip] = (len(payload), decoded, residual, codec.decode(payload))
    assert out[None][0] == out[True][0]  # federated updates skip zeros by default
    for i in range(2):
        for j in (1, 2, 3):
            np.testing.assert_array_equal(out[True][j][i], out[False][j][i])
    # 800 entries of the table were zeros selected at 4 + ~0.5 bytes each.
    assert out[True][0] < out[False][0] - 800 * 4


def test_parameter_checks():
    comp = from_params({"compressor": "topk", "compress_ratio": 0.1, "topk_skip_zeros": True})
    assert comp.sparsifier.skip_zeros is True
    with pytest.raises(ValueError, match="topk_skip_zeros must be a bool, got 'yes'"):
        from_params({"compressor": "topk", "topk_skip_zeros": "yes"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from_params({"compressor": "randomk", "topk_skip_zeros": True})
    assert any("topk_skip_zeros" in str(w.message) for w in caught)
