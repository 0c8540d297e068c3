"""Bloom-filter ops against the numpy reference (tests/bloom_reference.py):
exact bytes, positives and selections; edge cases; static shapes in graph
mode; the false-positive rate against theory. Input validation is in
test_bloom_validation.py."""
import math

import numpy as np
import pytest
import tensorflow as tf

import bloom_reference as ref
from deepreduce_tf.ops import _loader, bloom

POLICIES = bloom.POLICIES


def raw_ops():
    return _loader.load()


def random_indices(rng, n, k, dtype=np.int64):
    """k distinct indices of [0, n) in random (unsorted) order."""
    return rng.choice(n, size=k, replace=False).astype(dtype)


def np_dtype(tf_dtype):
    return tf_dtype.as_numpy_dtype


def build(rng, n, k, dtype, fpr=0.01, seed=0, with_ends=False):
    """Random index set (optionally holding 0 and n - 1), its kernel filter."""
    idx = random_indices(rng, n, k, np_dtype(dtype))
    if with_ends and k >= 2:
        rest = np.setdiff1d(idx, [0, n - 1])[: k - 2]
        idx = rng.permutation(np.concatenate([[0, n - 1], rest])).astype(np_dtype(dtype))
    f = bloom.insert(tf.constant(idx, dtype), n, fpr=fpr, seed=seed)
    return idx, f


# --------------------------------------------------------------------------
# The reference's own primitives (so that a match with it means something).


def test_reference_mix64_is_fmix64():
    def fmix64(x):
        mask = (1 << 64) - 1
        x ^= x >> 33
        x = (x * 0xFF51AFD7ED558CCD) & mask
        x ^= x >> 33
        x = (x * 0xC4CEB9FE1A85EC53) & mask
        x ^= x >> 33
        return x

    rng = np.random.default_rng(1)
    xs = [0, 1, 2**63, 2**64 - 1] + [int(v) for v in rng.integers(0, 2**63, 200)]
    got = ref.mix64(np.array(xs, dtype=np.uint64))
    assert [int(v) for v in got] == [fmix64(x) for x in xs]
    assert ref.mix64_int(0) == 0  # fmix64 fixes zero


def test_reference_mulhi64_matches_bigint():
    rng = np.random.default_rng(2)
    a = [0, 1, 2**64 - 1, 2**63] + [int(v) * 2 + 1 for v in rng.integers(0, 2**63, 300)]
    for m in [1, 2, 3, 96, 2**31 + 7, 2**34, 2**64 - 1]:
        got = ref.mulhi64(np.array(a, dtype=np.uint64), np.uint64(m))
        assert [int(v) for v in got] == [(x * m) >> 64 for x in a], m


# --------------------------------------------------------------------------
# Sizing.


@pytest.mark.parametrize("fpr", [0.6, 0.5, 0.2, 0.1, 0.05, 0.01, 0.003, 0.001, 1e-4, 1e-9])
def test_filter_size_matches_kernel_and_reference(fpr):
    for k in [0, 1, 2, 7, 100, 1000, 12345]:
        m, h = bloom.filter_size(k, fpr)
        assert (m, h) == ref.filter_size(k, fpr)
        f = bloom.insert(tf.range(k, dtype=tf.int64), k + 1, fpr=fpr)
        assert (int(f.num_bits), int(f.num_hashes)) == (m, h)
        assert f.bits.shape == (ref.num_bytes(m),)


def test_filter_size_bits_per_index_matches_reference_doc():
    # REFERENCE 1.1: 9.59 bits/index at 0.01, 14.38 at 0.001.
    assert bloom.filter_size(100000, 0.01)[0] / 1e5 == pytest.approx(9.59, abs=0.01)
    assert bloom.filter_size(100000, 0.001)[0] / 1e5 == pytest.approx(14.38, abs=0.01)
    assert bloom.filter_size(10, 0.01)[1] == 7
    assert bloom.filter_size(10, 0.001)[1] == 10
    assert bloom.filter_size(10, 0.6)[1] == 1


# --------------------------------------------------------------------------
# insert / query against the reference.

INSERT_CASES = [
    # n, k, fpr, num_bits, num_hashes, seed
    (1000, 10, 0.01, None, None, 0),
    (100000, 1000, 0.001, None, None, 7),
    (5000, 100, 0.6, None, None, -3),
    (2000, 50, 0.2, None, None, 2**40),
    (4097, 4097, 0.01, None, None, 1),       # K = n
    (10000, 300, 0.01, 1, 3, 5),             # a one-bit filter
    (10000, 300, 0.01, 33, 32, 5),           # h = 32, m just past a word
    (10000, 300, 0.01, 1000, 1, 5),
    (70000, 700, 0.01, 2**20, 4, 2**63 - 1),
]


@pytest.mark.parametrize("n,k,fpr,num_bits,num_hashes,seed", INSERT_CASES)
def test_insert_and_query_match_reference(device, run, index_dtype, rng, n, k, fpr, num_bits,
                                          num_hashes, seed):
    idx = random_indices(rng, n, k, np_dtype(index_dtype))
    bits, m, h = run(bloom.insert, tf.constant(idx, index_dtype), tf.constant(n, tf.int64),
                     fpr=fpr, num_bits=num_bits, num_hashes=num_hashes, seed=seed)
    want_m, want_h = ref.filter_size(k, fpr)
    m, h = int(m), int(h)
    assert (m, h) == (num_bits or want_m, num_hashes or want_h)
    assert bits.dtype == np.uint8
    np.testing.assert_array_equal(bits, ref.insert(idx, m, h, seed))
    # Insertion order does not matter.
    bits2 = bloom.insert(tf.constant(np.sort(idx), index_dtype), n, fpr=fpr,
                         num_bits=num_bits, num_hashes=num_hashes, seed=seed).bits
    np.testing.assert_array_equal(bits2.numpy(), bits)

    filt = bloom.BloomFilter(tf.constant(bits), tf.constant(m, tf.int64),
                             tf.constant(h, tf.int64))
    pos = run(bloom.query, filt, tf.constant(n, tf.int64), seed=seed, out_idx=index_dtype)
    assert pos.dtype == np_dtype(index_dtype)
    np.testing.assert_array_equal(pos, ref.query(bits, n, m, h, seed))
    assert np.all(np.isin(idx, pos)), "an inserted index is not a positive"


def test_seed_changes_the_filter(rng):
    idx = random_indices(rng, 10000, 200)
    a = bloom.insert(idx, 10000, fpr=0.01, seed=1)
    b = bloom.insert(idx, 10000, fpr=0.01, seed=2)
    assert not np.array_equal(a.bits.numpy(), b.bits.numpy())
    np.testing.assert_array_equal(b.bits.numpy(), ref.insert(idx, int(b.num_bits),
                                                             int(b.num_hashes), 2))


@pytest.mark.parametrize("n", [1, 2, 63, 64, 65, 4095, 4096, 4097, 8193, 20000])
def test_query_block_boundaries(device, index_dtype, rng, n):
    """Universe sizes around the 64-position words and 4096-position blocks,
    with the first and last position inserted."""
    k = min(n, max(2, n // 20))
    idx, f = build(rng, n, k, index_dtype, fpr=0.3, seed=n, with_ends=True)
    m, h = int(f.num_bits), int(f.num_hashes)
    pos = bloom.query(f, n, seed=n, out_idx=index_dtype).numpy()
    np.testing.assert_array_equal(pos, ref.query(f.bits.numpy(), n, m, h, seed=n))
    assert np.all(np.isin(idx, pos))
    if n >= 2:
        assert pos[0] == 0 and pos[-1] == n - 1


def test_query_n_smaller_than_insert_universe(rng):
    """Querying a prefix of the universe returns the positives in that prefix."""
    idx, f = build(rng, 10000, 500, tf.int64, fpr=0.05)
    full = bloom.query(f, 10000).numpy()
    prefix = bloom.query(f, 3000).numpy()
    np.testing.assert_array_equal(prefix, full[full < 3000])


# --------------------------------------------------------------------------
# Policies.

SELECT_CASES = [
    # n, k, fpr, seed, policy_seed
    (3000, 60, 0.3, 0, 0),
    (3000, 60, 0.6, 11, 5),
    (20000, 200, 0.01, 3, -7),
    (20000, 100, 0.001, 4, 2**62),
    (500, 250, 0.05, 9, 1),
]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("n,k,fpr,seed,policy_seed", SELECT_CASES)
def test_select_matches_reference(device, run, index_dtype, rng, policy, n, k, fpr, seed,
                                  policy_seed):
    idx, f = build(rng, n, k, index_dtype, fpr=fpr, seed=seed)
    m, h = int(f.num_bits), int(f.num_hashes)
    bits = f.bits.numpy()
    pos = bloom.query(f, n, seed=seed, out_idx=index_dtype)
    sel = run(bloom.select, f, pos, tf.constant(k, tf.int64), policy=policy, seed=seed,
              policy_seed=policy_seed)
    want = ref.select(bits, pos.numpy(), k, policy, m, h, seed, policy_seed)
    assert sel.dtype == np_dtype(index_dtype)
    np.testing.assert_array_equal(sel, want)
    assert len(sel) == (len(pos) if policy == "p0" else k)
    assert np.all(np.diff(sel) > 0), "selection is not sorted and distinct"
    assert np.all(np.isin(sel, pos.numpy())), "selected a position that is not a positive"
    again = bloom.select(f, pos, k, policy, seed=seed, policy_seed=policy_seed).numpy()
    np.testing.assert_array_equal(again, sel)


def test_random_configurations_match_reference(index_dtype):
    """Many small random (n, K, m, h, seeds), including tiny filters where an
    index's h probes repeat bits (conflict_sets must count each bit once)."""
    rng = np.random.default_rng(99)
    for trial in range(60):
        n = int(rng.integers(1, 3000))
        k = int(rng.integers(0, min(n, 200) + 1))
        m = int(rng.integers(1, 40)) if trial % 3 == 0 else int(rng.integers(1, 2000))
        h = int(rng.integers(1, 33))
        seed, policy_seed = (int(v) for v in rng.integers(-2**63, 2**63 - 1, 2))
        idx = random_indices(rng, n, k, np_dtype(index_dtype))
        f = bloom.insert(tf.constant(idx, index_dtype), n, num_bits=m, num_hashes=h,
                         seed=seed)
        bits = f.bits.numpy()
        msg = f"trial {trial}: n={n} k={k} m={m} h={h} seed={seed}"
        np.testing.assert_array_equal(bits, ref.insert(idx, m, h, seed), err_msg=msg)
        pos = bloom.query(f, n, seed=seed, out_idx=index_dtype)
        np.testing.assert_array_equal(pos.numpy(), ref.query(bits, n, m, h, seed),
                                      err_msg=msg)
        kk = int(rng.integers(0, int(pos.shape[0]) + 1))
        for policy in POLICIES:
            got = bloom.select(f, pos, kk, policy, seed=seed, policy_seed=policy_seed)
            want = ref.select(bits, pos.numpy(), kk, policy, m, h, seed, policy_seed)
            np.testing.assert_array_equal(got.numpy(), want, err_msg=f"{msg} {policy} k={kk}")


@pytest.mark.parametrize("policy", POLICIES)
def test_decode_is_query_then_select(device, run, index_dtype, rng, policy):
    n, k = 5000, 100
    idx, f = build(rng, n, k, index_dtype, fpr=0.05, seed=2)
    got = run(bloom.decode, f, tf.constant(n, tf.int64), tf.constant(k, tf.int64),
              policy=policy, seed=2, policy_seed=3, out_idx=index_dtype)
    pos = ref.query(f.bits.numpy(), n, int(f.num_bits), int(f.num_hashes), 2)
    want = ref.select(f.bits.numpy(), pos, k, policy, int(f.num_bits), int(f.num_hashes),
                      2, 3)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np_dtype(index_dtype)


def test_random_policy_depends_on_policy_seed_only(rng):
    idx, f = build(rng, 20000, 200, tf.int64, fpr=0.2, seed=1)
    pos = bloom.query(f, 20000, seed=1)
    a = bloom.select(f, pos, 200, "random", seed=1, policy_seed=1).numpy()
    b = bloom.select(f, pos, 200, "random", seed=1, policy_seed=2).numpy()
    assert not np.array_equal(a, b)
    # Selecting from the int32 copy of the same positives gives the same set.
    c = bloom.select(f, tf.cast(pos, tf.int32), 200, "random", seed=1, policy_seed=1)
    np.testing.assert_array_equal(c.numpy(), a)
    # A pure function of (policy_seed, position): the K smallest keys.
    keys = ref.random_policy_keys(pos.numpy(), 1)
    assert keys[np.isin(pos.numpy(), a)].max() < keys[~np.isin(pos.numpy(), a)].min()


@pytest.mark.parametrize("fpr", [0.001, 0.01, 0.2])
def test_conflict_sets_never_returns_a_certain_negative(index_dtype, fpr):
    """A positive alone on some bit is certainly inserted; every selection
    keeps all of them. When they number exactly K, every other positive is
    certainly a false positive, and the selection is exactly the true set."""
    exact_cases = 0
    for trial in range(25):
        rng = np.random.default_rng(1000 + trial)
        n, k = 2000, int(rng.integers(5, 60))
        idx, f = build(rng, n, k, index_dtype, fpr=fpr, seed=trial)
        m, h = int(f.num_bits), int(f.num_hashes)
        pos = bloom.query(f, n, seed=trial, out_idx=index_dtype)
        sel = bloom.select(f, pos, k, "conflict_sets", seed=trial).numpy()
        certain = ref.certain_positives(f.bits.numpy(), pos.numpy(), m, h, seed=trial)
        assert np.all(np.isin(certain, idx))  # sanity of the reference's claim
        assert np.all(np.isin(sel, pos.numpy()))
        assert np.all(np.isin(certain, sel)), "dropped a certainly genuine positive"
        if len(certain) == k:
            np.testing.assert_array_equal(sel, np.sort(idx))
            exact_cases += len(pos) > k
    if fpr == 0.001:  # at higher rates some true index always shares all its bits
        assert exact_cases > 0, "no trial exercised the certain-negative case"


def test_conflict_sets_beats_leftmost_and_random(rng):
    """REFERENCE 1.1: at eps = 0.001 conflict_sets recovers nearly all true indices."""
    n, k = 200000, 2000
    idx, f = build(rng, n, k, tf.int64, fpr=0.001, seed=5)
    pos = bloom.query(f, n, seed=5)
    true_frac = {p: np.isin(bloom.select(f, pos, k, p, seed=5).numpy(), idx).mean()
                 for p in ("leftmost", "random", "conflict_sets")}
    assert true_frac["conflict_sets"] > 0.99
    assert true_frac["conflict_sets"] > true_frac["leftmost"]
    assert true_frac["conflict_sets"] > true_frac["random"]


# --------------------------------------------------------------------------
# Edge cases.


@pytest.mark.parametrize("policy", POLICIES)
def test_empty_set(run, index_dtype, policy):
    for n in (0, 1, 100):
        bits, m, h = run(bloom.insert, tf.zeros([0], index_dtype), tf.constant(n, tf.int64),
                         fpr=0.01)
        assert int(m) == 1 and int(h) == 7
        np.testing.assert_array_equal(bits, np.zeros(4, np.uint8))
        f = bloom.BloomFilter(tf.constant(bits), tf.constant(m), tf.constant(h))
        pos = bloom.query(f, n, out_idx=index_dtype)
        assert pos.shape == (0,)
        sel = run(bloom.select, f, pos, tf.constant(0, tf.int64), policy=policy)
        assert sel.shape == (0,) and sel.dtype == np_dtype(index_dtype)


@pytest.mark.parametrize("policy", POLICIES)
def test_full_set(run, index_dtype, policy):
    """K = n: every position is a positive and every policy returns all of them."""
    n = 300
    idx = np.random.default_rng(3).permutation(n).astype(np_dtype(index_dtype))
    f = bloom.insert(tf.constant(idx), n, fpr=0.01)
    pos = bloom.query(f, n, out_idx=index_dtype)
    np.testing.assert_array_equal(pos.numpy(), np.arange(n))
    sel = run(bloom.select, f, pos, tf.constant(n, tf.int64), policy=policy)
    np.testing.assert_array_equal(sel, np.arange(n))


@pytest.mark.parametrize("policy", POLICIES)
def test_universe_of_one(run, index_dtype, policy):
    f = bloom.insert(tf.constant([0], index_dtype), 1, fpr=0.01)
    np.testing.assert_array_equal(f.bits.numpy(), ref.insert([0], int(f.num_bits),
                                                              int(f.num_hashes)))
    pos = run(bloom.query, f, tf.constant(1, tf.int64), out_idx=index_dtype)
    np.testing.assert_array_equal(pos, [0])
    sel = run(bloom.select, f, tf.constant(pos), tf.constant(1, tf.int64), policy=policy)
    np.testing.assert_array_equal(sel, [0])


@pytest.mark.parametrize("policy", POLICIES)
def test_k_zero_with_positives(index_dtype, policy):
    """k = 0 against a non-empty positive list: nothing selected except by p0."""
    f = bloom.insert(tf.constant([3, 9], index_dtype), 20, fpr=0.01)
    pos = bloom.query(f, 20, out_idx=index_dtype)
    sel = bloom.select(f, pos, 0, policy).numpy()
    assert len(sel) == (len(pos) if policy == "p0" else 0)


def test_int64_indices_beyond_2_pow_32(rng):
    """n > 2^32 with int64 indices: insert and select work (querying all n
    positions would take minutes, so positives come from a window)."""
    n = 2**32 + 5
    idx = np.array([2**32 + 4, 0, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 1], dtype=np.int64)
    k = len(idx)
    f = bloom.insert(tf.constant(idx), n, fpr=0.01, seed=3)
    m, h = int(f.num_bits), int(f.num_hashes)
    bits = f.bits.numpy()
    np.testing.assert_array_equal(bits, ref.insert(idx, m, h, seed=3))
    window = np.arange(2**32 - 2**15, n, dtype=np.int64)
    in_window = window[ref.contains(bits, window, m, h, seed=3)]
    pos = np.union1d(idx, in_window)
    assert len(pos) > k + 50  # there are false positives to choose from
    for policy in POLICIES:
        sel = bloom.select(f, tf.constant(pos), k, policy, seed=3, policy_seed=4).numpy()
        np.testing.assert_array_equal(sel, ref.select(bits, pos, k, policy, m, h, 3, 4),
                                      err_msg=policy)
        assert sel.dtype == np.int64
    # The certainly-genuine positives are all found.
    sel = bloom.select(f, tf.constant(pos), k, "conflict_sets", seed=3).numpy()
    assert np.all(np.isin(ref.certain_positives(bits, pos, m, h, 3), sel))


def test_int32_universe_of_exactly_2_pow_31():
    """int32 addresses exactly 2^31 positions: the last one is insertable."""
    n = 2**31
    idx = np.array([0, 2**31 - 1], dtype=np.int32)
    f = bloom.insert(tf.constant(idx), n, fpr=0.01)
    np.testing.assert_array_equal(f.bits.numpy(), ref.insert(idx, int(f.num_bits),
                                                             int(f.num_hashes)))
    sel = bloom.select(f, tf.constant(np.sort(idx)), 2, "conflict_sets").numpy()
    np.testing.assert_array_equal(sel, np.sort(idx))


# --------------------------------------------------------------------------
# Static shapes (shape functions, graph mode).


def concrete(fn, *specs):
    return tf.function(fn).get_concrete_function(*specs)


def output_shapes(cf):
    return [t.shape.as_list() if t.shape.rank is not None else None
            for t in tf.nest.flatten(cf.structured_outputs)]


@pytest.mark.parametrize("fpr", [0.6, 0.01, 0.001])
def test_insert_static_shape_known_k(index_dtype, fpr):
    cf = concrete(lambda i, n: bloom.insert(i, n, fpr=fpr),
                  tf.TensorSpec([1000], index_dtype), tf.TensorSpec([], tf.int64))
    m, _ = ref.filter_size(1000, fpr)
    assert output_shapes(cf) == [[ref.num_bytes(m)], [], []]


def test_insert_static_shape_unknown_k(index_dtype):
    cf = concrete(lambda i, n: bloom.insert(i, n, fpr=0.01),
                  tf.TensorSpec([None], index_dtype), tf.TensorSpec([], tf.int64))
    assert output_shapes(cf) == [[None], [], []]


def test_insert_static_shape_explicit_bits(index_dtype):
    cf = concrete(lambda i, n: bloom.insert(i, n, num_bits=100, num_hashes=3),
                  tf.TensorSpec([None], index_dtype), tf.TensorSpec([], tf.int64))
    assert output_shapes(cf) == [[16], [], []]
    cf = concrete(lambda i, n: bloom.insert(i, n, num_bits=97),
                  tf.TensorSpec(None, index_dtype), tf.TensorSpec(None, tf.int64))
    assert output_shapes(cf) == [[16], [], []]


def test_insert_static_shape_agrees_with_runtime(index_dtype, rng):
    idx = random_indices(rng, 5000, 321, np_dtype(index_dtype))
    fn = tf.function(lambda i: bloom.insert(i, 5000, fpr=0.003))
    static = fn.get_concrete_function(tf.TensorSpec([321], index_dtype)).structured_outputs
    out = fn(tf.constant(idx))
    assert static.bits.shape.as_list() == list(out.bits.shape)


def test_query_static_shape(index_dtype):
    cf = concrete(lambda b, n, m, h: bloom.query(bloom.BloomFilter(b, m, h), n,
                                                 out_idx=index_dtype),
                  tf.TensorSpec([None], tf.uint8), tf.TensorSpec([], tf.int64),
                  tf.TensorSpec([], tf.int64), tf.TensorSpec([], tf.int64))
    assert output_shapes(cf) == [[None]]
    assert cf.structured_outputs.dtype == index_dtype


FILTER_SPECS = (tf.TensorSpec([None], tf.uint8), tf.TensorSpec([], tf.int64),
                tf.TensorSpec([], tf.int64))


@pytest.mark.parametrize("policy", POLICIES)
def test_select_static_shape_constant_k(index_dtype, policy):
    def fn(b, m, h, p):
        return bloom.select(bloom.BloomFilter(b, m, h), p, 5, policy)

    for pos_shape in ([None], [37]):
        cf = concrete(fn, *FILTER_SPECS, tf.TensorSpec(pos_shape, index_dtype))
        want = pos_shape if policy == "p0" else [5]
        assert output_shapes(cf) == [want]
        assert cf.structured_outputs.dtype == index_dtype


@pytest.mark.parametrize("policy", POLICIES)
def test_select_static_shape_unknown_k(index_dtype, policy):
    def fn(b, m, h, p, k):
        return bloom.select(bloom.BloomFilter(b, m, h), p, k, policy)

    cf = concrete(fn, *FILTER_SPECS, tf.TensorSpec([37], index_dtype),
                  tf.TensorSpec([], tf.int64))
    assert output_shapes(cf) == [[37] if policy == "p0" else [None]]


RANK_ERRORS = (ValueError, tf.errors.InvalidArgumentError)


@pytest.mark.parametrize("which", ["indices", "universe_size"])
def test_insert_shape_fn_rejects_rank(which):
    ops = raw_ops()
    specs = {"indices": tf.TensorSpec([None], tf.int64),
             "universe_size": tf.TensorSpec([], tf.int64)}
    specs[which] = tf.TensorSpec([2, 3] if which == "indices" else [1], tf.int64)
    with pytest.raises(RANK_ERRORS, match="rank"):
        concrete(lambda i, n: ops.deep_reduce_bloom_filter_insert(i, n),
                 specs["indices"], specs["universe_size"])


@pytest.mark.parametrize("which", ["filter", "universe_size", "filter_bits",
                                   "filter_hashes"])
def test_query_shape_fn_rejects_rank(which):
    ops = raw_ops()
    names = ["filter", "universe_size", "filter_bits", "filter_hashes"]
    specs = [tf.TensorSpec([None], tf.uint8)] + [tf.TensorSpec([], tf.int64)] * 3
    i = names.index(which)
    specs[i] = tf.TensorSpec([2, 2] if i == 0 else [1], specs[i].dtype)
    with pytest.raises(RANK_ERRORS, match="rank"):
        concrete(lambda *a: ops.deep_reduce_bloom_filter_query(*a), *specs)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("which", ["filter", "positives", "filter_bits", "filter_hashes",
                                   "k"])
def test_select_shape_fn_rejects_rank(which, policy):
    ops = raw_ops()
    names = ["filter", "positives", "filter_bits", "filter_hashes", "k"]
    specs = [tf.TensorSpec([None], tf.uint8), tf.TensorSpec([None], tf.int64)] + \
        [tf.TensorSpec([], tf.int64)] * 3
    i = names.index(which)
    specs[i] = tf.TensorSpec([2, 2] if i < 2 else [1], specs[i].dtype)
    with pytest.raises(RANK_ERRORS, match="rank"):
        concrete(lambda *a: ops.deep_reduce_bloom_filter_select(*a, policy=policy), *specs)


@pytest.mark.parametrize("kwargs,match", [
    (dict(num_bits=-1), "num_bits.*-1"),
    (dict(num_hashes=33), "num_hashes.*33"),
    (dict(num_hashes=-2), "num_hashes.*-2"),
    (dict(fpr=0.0), "fpr"),
    (dict(fpr=1.0, num_bits=64), "fpr"),
    (dict(fpr=-0.5, num_hashes=4), "fpr"),
])
def test_insert_shape_fn_rejects_bad_sizing_attrs(kwargs, match):
    ops = raw_ops()
    with pytest.raises(RANK_ERRORS, match=match):
        concrete(lambda i, n: ops.deep_reduce_bloom_filter_insert(i, n, **kwargs),
                 tf.TensorSpec([None], tf.int64), tf.TensorSpec([], tf.int64))


def test_wrappers_reject_rank_at_graph_construction():
    with pytest.raises(tf.errors.InvalidArgumentError, match="indices must be a vector"):
        concrete(lambda i: bloom.insert(i, 10), tf.TensorSpec([2, 2], tf.int64))
    with pytest.raises(tf.errors.InvalidArgumentError, match="universe_size must be a scalar"):
        concrete(lambda i, n: bloom.insert(i, n), tf.TensorSpec([None], tf.int64),
                 tf.TensorSpec([1], tf.int64))
    with pytest.raises(tf.errors.InvalidArgumentError, match="positives must be a vector"):
        concrete(lambda b, m, h, p: bloom.select(bloom.BloomFilter(b, m, h), p, 1, "p0"),
                 *FILTER_SPECS, tf.TensorSpec([2, 2], tf.int64))


# --------------------------------------------------------------------------
# False-positive rate against theory.

FPR_N = 200_000
FPR_K = 2_000        # 1 % density
FPR_FILTERS = 30
FPR_Z = 6.0


def fpr_violations(n, k, m, h, set_bits, false_pos, z=FPR_Z):
    """Checks per-filter (set-bit count, false-positive count) against theory.

    Returns a list of human-readable violations (empty when all hold):
      fill   total set bits vs F m q, q = 1 - (1 - 1/m)^{hk}; binomial sd
             (conservative: occupancy counts are less variable) + 0.5 % slack.
      theory total false positives vs F (n - k) q^h; sd from the binomial
             count plus the spread of q^h across filters (delta method) + 3 %
             slack for the double-hashing approximation.
      fill^h per filter and in total, false positives vs (n - k) (X/m)^h given
             the filter's own fill X/m: a binomial sd + 3 % slack.
    A wrong h moves the fill by 5-40 % at these sizes (and fill^h by a factor
    of the fill when only the query's h is wrong), far outside the bounds.
    """
    set_bits = np.asarray(set_bits, dtype=np.float64)
    false_pos = np.asarray(false_pos, dtype=np.float64)
    f_count = len(set_bits)
    neg = n - k
    out = []
    q = ref.theory_fill(m, h, k)
    p = ref.theory_fpr(m, h, k)

    exp_fill = f_count * m * q
    sd_fill = math.sqrt(f_count * m * q * (1 - q))
    if abs(set_bits.sum() - exp_fill) > z * sd_fill + 0.005 * exp_fill:
        out.append(f"fill: {set_bits.sum() / (f_count * m):.5f} set vs theory {q:.5f}")

    exp_fp = f_count * neg * p
    var_fp = f_count * (neg * p * (1 - p) +
                        (neg * h * q ** (h - 1)) ** 2 * q * (1 - q) / m)
    if abs(false_pos.sum() - exp_fp) > z * math.sqrt(var_fp) + 0.03 * exp_fp:
        out.append(f"theory: measured rate {false_pos.sum() / (f_count * neg):.6g} vs "
                   f"theory {p:.6g} (bound {(z * math.sqrt(var_fp) + 0.03 * exp_fp) / (f_count * neg):.3g})")

    p_f = (set_bits / m) ** h
    exp_f = neg * p_f
    sd_f = np.sqrt(neg * p_f * (1 - p_f))
    bad = np.flatnonzero(np.abs(false_pos - exp_f) > z * sd_f + 0.03 * exp_f + 1)
    for i in bad:
        out.append(f"fill^h filter {i}: {false_pos[i]:.0f} false positives vs "
                   f"(set fraction)^h predicting {exp_f[i]:.1f}")
    if abs(false_pos.sum() - exp_f.sum()) > z * math.sqrt((sd_f ** 2).sum()) + 0.03 * exp_f.sum():
        out.append(f"fill^h total: {false_pos.sum():.0f} false positives vs "
                   f"{exp_f.sum():.1f} predicted from the fills")
    return out


def popcount(bits):
    return int(np.unpackbits(np.asarray(bits, dtype=np.uint8)).sum())


@pytest.mark.parametrize("fpr", [0.6, 0.01, 0.001])
def test_false_positive_rate_matches_theory(device, fpr):
    m, h = ref.filter_size(FPR_K, fpr)
    set_bits, false_pos = [], []
    for s in range(FPR_FILTERS):
        rng = np.random.default_rng(7000 + s)
        idx = random_indices(rng, FPR_N, FPR_K)
        f = bloom.insert(tf.constant(idx), FPR_N, fpr=fpr, seed=s)
        assert (int(f.num_bits), int(f.num_hashes)) == (m, h)
        pos = bloom.query(f, FPR_N, seed=s).numpy()
        assert np.all(np.isin(idx, pos)), "an inserted index is not a positive"
        set_bits.append(popcount(f.bits.numpy()))
        false_pos.append(len(pos) - FPR_K)
    violations = fpr_violations(FPR_N, FPR_K, m, h, set_bits, false_pos)
    assert not violations, "\n".join(violations)
    # At the target rate too (the sizing formula's own approximation: the
    # rate of an optimally sized filter is within a few percent of eps).
    measured = np.sum(false_pos) / (FPR_FILTERS * (FPR_N - FPR_K))
    assert measured == pytest.approx(fpr, rel=0.15)


@pytest.mark.parametrize("fpr", [0.6, 0.01, 0.001])
@pytest.mark.parametrize("insert_dh,query_dh", [(0, 0), (1, 1), (-1, -1), (0, 1), (1, 0)])
def test_false_positive_check_detects_wrong_hash_count(fpr, insert_dh, query_dh):
    """The statistical check itself: filters built by the reference with h
    off by one (in insert, query or both) while h is reported must fail it;
    correct reference filters must pass it."""
    m, h = ref.filter_size(FPR_K, fpr)
    h_ins, h_q = h + insert_dh, h + query_dh
    if min(h_ins, h_q) < 1:
        pytest.skip("h - 1 = 0 hashes")
    set_bits, false_pos = [], []
    for s in range(FPR_FILTERS):
        rng = np.random.default_rng(7000 + s)
        idx = random_indices(rng, FPR_N, FPR_K)
        bits = ref.insert(idx, m, h_ins, seed=s)
        set_bits.append(popcount(bits))
        pos = ref.query(bits, FPR_N, m, h_q, seed=s)
        false_pos.append(len(pos) - np.isin(idx, pos).sum())
    violations = fpr_violations(FPR_N, FPR_K, m, h, set_bits, false_pos)
    if insert_dh == query_dh == 0:
        assert not violations, "\n".join(violations)
    else:
        assert violations, "a filter with the wrong number of hashes passed"
