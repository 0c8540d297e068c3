"""Sparsifier ops (top-k, threshold, random-k) against the numpy reference
(tests/sparsify_reference.py): exact indices and bit-exact values for every
dtype, tie-heavy inputs, signed zeros, inf and NaN; random-k determinism and
uniformity; independence from the thread count; static shapes in graph mode;
validation errors and their messages."""
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import sparsify_reference as ref
from deepreduce_tf import sparsify

# tests/ops/<this file> -> the repository root
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

IAE = tf.errors.InvalidArgumentError
DTYPES = [tf.float16, tf.bfloat16, tf.float32, tf.float64]
BLOCK = 16384  # kBlock in sparsify_kernels.cc: sizes around it cross blocks


@pytest.fixture(params=["eager", "graph"])
def run(request):
    """run(fn, *args, **kwargs): calls fn eagerly or inside a tf.function
    whose tensor arguments are graph inputs (values unknown when traced)."""

    def call(fn, *args, **kwargs):
        if request.param == "eager":
            out = fn(*args, **kwargs)
        else:
            out = tf.function(lambda *a: fn(*a, **kwargs))(*args)
        return tf.nest.map_structure(lambda t: t.numpy(), out)

    call.mode = request.param
    return call


@pytest.fixture(params=DTYPES, ids=lambda d: d.name)
def dtype(request):
    return request.param


@pytest.fixture
def rng():
    return np.random.default_rng(20240601)


def bits(a):
    """Raw bit pattern, so that values compare exactly (NaN, -0.0)."""
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def assert_selection(got, want, dtype=None):
    gi, gv = got
    wi, wv = want
    assert gi.dtype == (np.int64 if dtype is None else dtype)
    np.testing.assert_array_equal(gi, wi)
    assert gv.dtype == wv.dtype
    np.testing.assert_array_equal(bits(gv), bits(wv))


def make(kind, n, dtype, rng):
    npd = dtype.as_numpy_dtype
    if kind == "normal":
        x = rng.standard_normal(n) * 10.0 ** rng.integers(-3, 3, n)
    elif kind == "int_ties":  # many equal magnitudes of both signs
        x = rng.integers(-4, 5, n).astype(np.float64)
    elif kind == "all_equal":
        x = np.full(n, -1.5)
    elif kind == "all_zero":
        x = np.zeros(n)
    elif kind == "signed_zeros":
        x = np.where(rng.random(n) < 0.5, -0.0, 0.0) * (rng.random(n) < 0.9)
        x = np.where(rng.random(n) < 0.02, rng.standard_normal(n), x)
    elif kind == "with_inf":
        x = rng.standard_normal(n)
        x[rng.integers(0, n, max(1, n // 50))] = np.inf
        x[rng.integers(0, n, max(1, n // 50))] = -np.inf
    elif kind == "negative":
        x = -np.abs(rng.standard_normal(n)) - 0.5
    elif kind == "tiny":  # subnormals of every dtype, and values that flush
        x = rng.standard_normal(n) * 1e-40
        x[::7] = 5e-324
    else:
        raise ValueError(kind)
    return x.astype(npd)


KINDS = ["normal", "int_ties", "all_equal", "all_zero", "signed_zeros", "with_inf",
         "negative", "tiny"]


def k_values(n):
    return sorted({0, 1, n // 3, n - 1, n})


# --------------------------------------------------------------------------
# The reference itself.


def test_reference_mix64_is_fmix64():
    def fmix64(x):
        mask = (1 << 64) - 1
        x ^= x >> 33
        x = (x * 0xFF51AFD7ED558CCD) & mask
        x ^= x >> 33
        x = (x * 0xC4CEB9FE1A85EC53) & mask
        x ^= x >> 33
        return x

    xs = [0, 1, 2**63, 2**64 - 1, 12345678901234567]
    assert [int(v) for v in ref.mix64(np.array(xs, np.uint64))] == [fmix64(x) for x in xs]


def test_reference_top_k_tie_rule():
    x = np.array([1.0, -3.0, 3.0, np.nan, 0.0, -0.0, np.inf, np.nan], np.float32)
    # Order: NaN@3, NaN@7, inf@6, -3@1, 3@2, 1@0, 0@4, -0@5.
    for k, want in [(1, [3]), (2, [3, 7]), (3, [3, 6, 7]), (4, [1, 3, 6, 7]),
                    (5, [1, 2, 3, 6, 7]), (7, [0, 1, 2, 3, 4, 6, 7])]:
        assert list(ref.top_k(x, k)[0]) == want


# --------------------------------------------------------------------------
# top_k.


@pytest.mark.parametrize("n", [1000, 40000])  # radix digits of 8 and 11 bits
@pytest.mark.parametrize("kind", KINDS)
def test_top_k_matches_reference(run, dtype, kind, n, rng):
    x = make(kind, n, dtype, rng)
    for k in k_values(n):
        got = run(sparsify.top_k, tf.constant(x), tf.constant(k, tf.int64))
        assert_selection(got, ref.top_k(x, k))


@pytest.mark.parametrize("kind", ["normal", "int_ties", "all_equal", "signed_zeros"])
def test_top_k_many_blocks(dtype, kind, rng):
    """Sizes that span several blocks and threads, k across a block border."""
    n = 5 * BLOCK + 123
    x = make(kind, n, dtype, rng)
    xt = tf.constant(x)
    for k in [1, 7, n // 100, n // 2, BLOCK + 1, n - 1]:
        assert_selection(to_np(sparsify.top_k(xt, k)), ref.top_k(x, k))


SAMPLED_N = 300_007  # >= 2^16: the sampled-bounds path (kSampleMinN)


@pytest.mark.parametrize("kind", KINDS)
def test_top_k_large_sampled_path(dtype, kind, rng):
    """n large enough for the sampled-bounds path; tie-heavy kinds make it
    fall back to the exact radix path, which must give the same answer."""
    x = make(kind, SAMPLED_N, dtype, rng)
    xt = tf.constant(x)
    for k in [1, 3001, SAMPLED_N // 10, SAMPLED_N // 2, SAMPLED_N - 2]:
        assert_selection(to_np(sparsify.top_k(xt, k)), ref.top_k(x, k))


def test_top_k_unrepresentative_sample_falls_back(rng):
    """Large values only outside the sampled chunks (the kernel samples
    n/4096 evenly spaced chunks of 128, between 32 and 512 of them): the
    sampled bounds miss, the exact path answers."""
    for n in [SAMPLED_N, 70_001]:
        check_unrepresentative_sample(n, rng)


def check_unrepresentative_sample(n, rng):
    chunks = min(max(n // 4096, 32), 512)
    sampled = np.zeros(n, bool)
    for c in range(chunks):
        start = c * (n - 128) // (chunks - 1)
        sampled[start:start + 128] = True
    x = (rng.standard_normal(n) * 1e-3).astype(np.float32)
    outside = np.flatnonzero(~sampled)
    big = rng.choice(outside, 5000, replace=False)
    x[big] = rng.standard_normal(5000).astype(np.float32) * 100 + 1000
    for k in [100, 4999, 5000, 5001, 20000]:
        assert_selection(to_np(sparsify.top_k(x, k)), ref.top_k(x, k))


def test_top_k_candidate_overflow_falls_back(dtype, rng):
    """Two magnitudes, k at their border: the sampled bracket [lo, hi] holds
    every element, more candidates than the buffer takes, so the exact path
    answers (ties by index within both groups)."""
    n = SAMPLED_N
    x = np.where(rng.random(n) < 0.5, 1.0, -2.0).astype(dtype.as_numpy_dtype)
    twos = int(np.sum(np.abs(x) == 2))
    for k in [twos - 1, twos, twos + 1, n // 2]:
        assert_selection(to_np(sparsify.top_k(x, k)), ref.top_k(x, k))


def to_np(out):
    return tf.nest.map_structure(lambda t: t.numpy(), out)


def test_top_k_all_equal_takes_lowest_indices(dtype):
    n = 3 * BLOCK
    x = np.full(n, 2.0, dtype.as_numpy_dtype)
    for k in [1, BLOCK - 1, BLOCK + 5, n - 2]:
        idx, val = to_np(sparsify.top_k(x, k))
        np.testing.assert_array_equal(idx, np.arange(k))


def test_top_k_ties_at_the_boundary_break_by_index(dtype):
    # 10 large values, then 20 equal ones of which k - 10 are taken: lowest first.
    x = np.zeros(100, np.float64)
    big = [3, 17, 29, 40, 41, 55, 60, 77, 88, 99]
    x[big] = 9.0
    tie = [2, 5, 8, 13, 21, 34, 44, 50, 52, 58, 61, 63, 66, 70, 72, 80, 84, 90, 93, 97]
    x[tie] = [-4.0 if i % 2 else 4.0 for i in range(len(tie))]
    x = x.astype(dtype.as_numpy_dtype)
    idx, _ = to_np(sparsify.top_k(x, 15))
    assert list(idx) == sorted(big + tie[:5])


def test_top_k_signed_zero_values_keep_their_sign():
    x = np.array([-0.0, 0.0, -0.0, 0.0], np.float32)
    idx, val = to_np(sparsify.top_k(x, 3))
    assert list(idx) == [0, 1, 2]
    assert list(np.signbit(val)) == [True, False, True]


def test_top_k_nan_counts_as_largest(run, dtype):
    nan = float("nan")
    x = np.array([1.0, nan, -np.inf, 5.0, -nan, 2.0, nan], dtype.as_numpy_dtype)
    for k, want in [(1, [1]), (2, [1, 4]), (3, [1, 4, 6]), (4, [1, 2, 4, 6]),
                    (5, [1, 2, 3, 4, 6])]:
        idx, val = run(sparsify.top_k, tf.constant(x), tf.constant(k, tf.int64))
        assert list(idx) == want
        np.testing.assert_array_equal(bits(val), bits(x[want]))


@pytest.mark.parametrize("shape", [(40, 25), (6, 7, 11), (1, 1000, 1)])
def test_top_k_flattens(run, shape, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    n = x.size
    for k in [1, n // 10, n]:
        got = run(sparsify.top_k, tf.constant(x), tf.constant(k, tf.int64))
        assert_selection(got, ref.top_k(x, k))
        np.testing.assert_array_equal(got[1], x.ravel()[got[0]])


def test_top_k_scalar_and_empty(run):
    assert_selection(run(sparsify.top_k, tf.constant(-2.5), tf.constant(1, tf.int64)),
                     (np.array([0]), np.array([-2.5], np.float32)))
    got = run(sparsify.top_k, tf.zeros([0, 3]), tf.constant(0, tf.int64))
    assert got[0].shape == (0,) and got[1].shape == (0,)


def test_top_k_int32_indices(run, dtype, rng):
    x = make("int_ties", 3000, dtype, rng)
    got = run(lambda a, k: sparsify.top_k(a, k, out_idx=tf.int32), tf.constant(x),
              tf.constant(100, tf.int64))
    assert_selection(got, ref.top_k(x, 100), dtype=np.int32)


def test_top_k_k_accepts_int32_and_python_int(rng):
    x = rng.standard_normal(500).astype(np.float32)
    want = ref.top_k(x, 9)
    assert_selection(to_np(sparsify.top_k(x, 9)), want)
    assert_selection(to_np(sparsify.top_k(x, tf.constant(9, tf.int32))), want)
    assert_selection(to_np(sparsify.top_k(x, np.int16(9))), want)


def test_top_k_agrees_with_tf_top_k_on_distinct_magnitudes(rng):
    x = rng.standard_normal(200000).astype(np.float32)
    k = 2000
    idx, _ = to_np(sparsify.top_k(x, k))
    tf_idx = np.sort(tf.math.top_k(tf.abs(x), k).indices.numpy())
    np.testing.assert_array_equal(idx, tf_idx)


# --------------------------------------------------------------------------
# threshold.


@pytest.mark.parametrize("kind", ["normal", "int_ties", "signed_zeros", "with_inf",
                                  "negative", "tiny"])
def test_threshold_matches_reference(run, dtype, kind, rng):
    x = make(kind, 3 * BLOCK + 17, dtype, rng)
    for t in [0.0, 0.5, 1.0, 2.0, 3.999, 1e-30, float("inf")]:
        t_cast = float(np.asarray(t, dtype.as_numpy_dtype).astype(np.float64))
        got = run(sparsify.threshold, tf.constant(x), tf.constant(t, dtype))
        assert_selection(got, ref.threshold(x, t_cast))


def test_threshold_converts_t_to_x_dtype():
    # float16(0.1) = 0.09998 < 0.1: x[0] and x[1] pass only because the
    # comparison is made in x's dtype, against float16(0.1).
    x = np.array([0.1, -0.1, 0.0999, 0.2], np.float16)
    t16 = float(np.float16(0.1))
    assert float(x[0]) < 0.1 and float(x[2]) < t16
    idx, _ = to_np(sparsify.threshold(x, 0.1))
    np.testing.assert_array_equal(idx, ref.threshold(x, t16)[0])
    assert list(idx) == [0, 1, 3]


def test_threshold_nan_always_selected_and_negative_zero_threshold():
    x = np.array([np.nan, 0.0, -0.0, 1.0, -np.nan], np.float32)
    assert list(to_np(sparsify.threshold(x, np.inf))[0]) == [0, 4]
    assert list(to_np(sparsify.threshold(x, -0.0))[0]) == [0, 1, 2, 3, 4]
    assert list(to_np(sparsify.threshold(x, 0.5))[0]) == [0, 3, 4]


def test_threshold_shapes_and_int32(run, rng):
    x = rng.standard_normal((30, 40)).astype(np.float64)
    got = run(lambda a, t: sparsify.threshold(a, t, out_idx=tf.int32), tf.constant(x),
              tf.constant(1.5, tf.float64))
    assert_selection(got, ref.threshold(x, 1.5), dtype=np.int32)
    none = run(sparsify.threshold, tf.constant(x), tf.constant(100.0, tf.float64))
    assert none[0].shape == (0,) and none[1].shape == (0,)


# --------------------------------------------------------------------------
# random_k.


@pytest.mark.parametrize("n", [1, 10, 1000, 3 * BLOCK + 5, SAMPLED_N])
def test_random_k_matches_reference(run, n, rng):
    x = rng.standard_normal(n).astype(np.float32)
    for k in k_values(n):
        for seed in [0, 1, -7, 2**62 + 3]:
            got = run(sparsify.random_k, tf.constant(x), tf.constant(k, tf.int64),
                      tf.constant(seed, tf.int64))
            assert_selection(got, ref.random_k(x, k, seed))


def test_random_k_properties(dtype):
    n, k = 5000, 333
    x = np.arange(n).astype(dtype.as_numpy_dtype)
    sets = []
    for seed in range(5):
        idx, val = to_np(sparsify.random_k(x, k, seed))
        assert idx.shape == (k,) and len(np.unique(idx)) == k
        assert np.all(np.diff(idx) > 0) and idx[0] >= 0 and idx[-1] < n
        np.testing.assert_array_equal(bits(val), bits(x[idx]))
        again, _ = to_np(sparsify.random_k(x, k, seed))
        np.testing.assert_array_equal(idx, again)
        sets.append(idx)
    for a in range(5):
        for b in range(a + 1, 5):
            assert not np.array_equal(sets[a], sets[b])


def test_random_k_depends_only_on_seed_n_k(rng):
    """Not on the values, the dtype or the shape of x."""
    n, k, seed = 6000, 77, 99
    want, _ = to_np(sparsify.random_k(np.zeros(n, np.float32), k, seed))
    for x in [rng.standard_normal(n).astype(np.float64),
              np.full((60, 100), np.nan, np.float16),
              rng.standard_normal((10, 20, 30)).astype(tf.bfloat16.as_numpy_dtype)]:
        idx, _ = to_np(sparsify.random_k(x, k, seed))
        np.testing.assert_array_equal(idx, want)


def test_random_k_seed_changes_without_retracing():
    traces = []

    @tf.function
    def f(x, seed):
        traces.append(1)
        return sparsify.random_k(x, 5, seed)

    x = tf.zeros([100])
    a = f(x, tf.constant(1, tf.int64))[0].numpy()
    b = f(x, tf.constant(2, tf.int64))[0].numpy()
    assert len(traces) == 1 and not np.array_equal(a, b)


def test_random_k_inclusion_is_uniform():
    """Over many seeds each position is chosen with probability k/n: a
    chi-square statistic over positions (n - 1 = 39 degrees of freedom,
    mean 39, sd ~8.8) stays far below 39 + 8 sd, and every position's count
    lies within 6 sd of its mean. Also first-position uniformity of the
    smallest chosen index would follow; the count test is the strong one."""
    n, k, seeds = 40, 6, 4000
    x = tf.zeros([n])
    counts = np.zeros(n)
    pairs = np.zeros((n, n))
    for s in range(seeds):
        idx, _ = to_np(sparsify.random_k(x, k, s))
        counts[idx] += 1
        pairs[idx[0], idx[1]] += 1
    expected = seeds * k / n
    chi2 = np.sum((counts - expected) ** 2 / expected)
    assert chi2 < 39 + 8 * np.sqrt(2 * 39), chi2
    sd = np.sqrt(seeds * (k / n) * (1 - k / n))
    assert np.all(np.abs(counts - expected) < 6 * sd), counts


def test_random_k_subset_frequencies_are_uniform():
    """n = 6, k = 2: all 15 subsets equally likely (chi-square, 14 dof)."""
    n, k, seeds = 6, 2, 6000
    x = tf.zeros([n])
    freq = {}
    for s in range(seeds):
        idx, _ = to_np(sparsify.random_k(x, k, s))
        freq[tuple(idx)] = freq.get(tuple(idx), 0) + 1
    assert len(freq) == 15
    expected = seeds / 15
    chi2 = sum((c - expected) ** 2 / expected for c in freq.values())
    assert chi2 < 14 + 8 * np.sqrt(2 * 14), freq


# --------------------------------------------------------------------------
# The result does not depend on the number of threads.


def test_results_independent_of_thread_count(rng):
    n = 20 * BLOCK + 3
    x = make("int_ties", n, tf.float32, rng)
    x[::5] = rng.standard_normal(len(x[::5]))
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"sparsify_threads_{os.getpid()}.npy")
    np.save(path, x)
    script = textwrap.dedent(f"""
        import sys, numpy as np, tensorflow as tf
        tf.config.threading.set_intra_op_parallelism_threads(int(sys.argv[1]))
        from deepreduce_tf import sparsify
        x = np.load({path!r})
        out = [sparsify.top_k(x, {n // 100}), sparsify.top_k(x, {n // 2}),
               sparsify.random_k(x, {n // 100}, 5), sparsify.threshold(x, 1.0)]
        print(",".join(str(int(np.sum(i.numpy() * 7919 % 1000003))) for i, _ in out))
    """)
    try:
        outs = set()
        for threads in (1, 3):
            res = subprocess.run([sys.executable, "-c", script, str(threads)],
                                 capture_output=True, text=True, timeout=240,
                                 env=dict(os.environ),
                                 # not the repository root: `python -c` would
                                 # import the source tree, which has no library
                                 cwd=os.path.dirname(path))
            assert res.returncode == 0, res.stderr[-3000:]
            outs.add(res.stdout.strip().splitlines()[-1])
    finally:
        os.remove(path)
    want = [ref.top_k(x, n // 100)[0], ref.top_k(x, n // 2)[0],
            ref.random_k(x, n // 100, 5)[0], ref.threshold(x, 1.0)[0]]
    assert outs == {",".join(str(int(np.sum(i * 7919 % 1000003))) for i in want)}


# --------------------------------------------------------------------------
# Ratio helpers.


@pytest.mark.parametrize("n,ratio,k", [
    (25_000_000, 0.01, 250_000), (25_000_000, 0.001, 25_000), (1_000_000, 0.01, 10_000),
    (10, 0.01, 1), (1, 0.5, 1), (0, 0.01, 0), (7, 1.0, 7), (7, 0.3, 3), (1000, 0.0015, 2)])
def test_k_for_ratio(n, ratio, k):
    assert sparsify.k_for_ratio(n, ratio) == k
    assert int(sparsify.k_for_ratio(tf.constant(n), ratio)) == k


@pytest.mark.parametrize("ratio", [0.0, -0.1, 1.5, float("nan")])
def test_k_for_ratio_rejects(ratio):
    with pytest.raises(ValueError, match=r"compress_ratio must lie in \(0, 1\]"):
        sparsify.k_for_ratio(10, ratio)


def test_ratio_wrappers(rng):
    x = rng.standard_normal((50, 41)).astype(np.float32)
    k = sparsify.k_for_ratio(x.size, 0.01)
    assert_selection(to_np(sparsify.top_k_ratio(x, 0.01)), ref.top_k(x, k))
    assert_selection(to_np(sparsify.random_k_ratio(x, 0.01, 3)), ref.random_k(x, k, 3))
    # Unknown shape: k computed in the graph.
    f = tf.function(lambda a: sparsify.top_k_ratio(a, 0.01),
                    input_signature=[tf.TensorSpec([None, None], tf.float32)])
    assert_selection(to_np(f(x)), ref.top_k(x, k))
    assert f.get_concrete_function().structured_outputs[0].shape.as_list() == [None]


# --------------------------------------------------------------------------
# Static shapes (shape functions, graph mode).


def out_shapes(fn, *specs):
    cf = tf.function(fn).get_concrete_function(*specs)
    return [t.shape.as_list() for t in tf.nest.flatten(cf.structured_outputs)]


@pytest.mark.parametrize("x_shape", [[1000], [None], [10, None, 3], None])
def test_static_shapes(x_shape):
    spec = tf.TensorSpec(x_shape, tf.float32)
    k_spec = tf.TensorSpec([], tf.int64)
    assert out_shapes(lambda x: sparsify.top_k(x, 10), spec) == [[10], [10]]
    assert out_shapes(lambda x: sparsify.random_k(x, 7, 1), spec) == [[7], [7]]
    assert out_shapes(lambda x, k: sparsify.top_k(x, k), spec, k_spec) == [[None], [None]]
    assert out_shapes(lambda x, k: sparsify.random_k(x, k, 3), spec, k_spec) == [[None], [None]]
    assert out_shapes(lambda x: sparsify.threshold(x, 0.5), spec) == [[None], [None]]
    assert out_shapes(lambda x: sparsify.top_k_ratio(x, 0.01), spec) == (
        [[10], [10]] if x_shape == [1000] else [[None], [None]])


def test_shape_fn_rejects_k_beyond_static_n():
    with pytest.raises(ValueError, match=r"k=11 exceeds the number of elements n=10"):
        out_shapes(lambda x: sparsify.top_k(x, 11), tf.TensorSpec([2, 5], tf.float32))
    with pytest.raises(ValueError, match=r"k must be >= 0, got -1"):
        out_shapes(lambda x: sparsify.random_k(x, -1, 0), tf.TensorSpec([None], tf.float32))


def test_shape_fn_rejects_rank():
    from deepreduce_tf.ops import _loader

    lib = _loader.load()
    spec = tf.TensorSpec([5], tf.float32)
    with pytest.raises(ValueError, match=r"must be rank 0"):
        out_shapes(lambda x: lib.deep_reduce_top_k(x, tf.constant([1], tf.int64)), spec)
    with pytest.raises(ValueError, match=r"must be rank 0"):
        out_shapes(lambda x: lib.deep_reduce_threshold_select(x, tf.constant([1.0])), spec)
    with pytest.raises(ValueError, match=r"must be rank 0"):
        out_shapes(lambda x: lib.deep_reduce_random_k(
            x, tf.constant(1, tf.int64), tf.constant([1], tf.int64)), spec)


# --------------------------------------------------------------------------
# Validation: kernel checks in eager and graph mode, wrapper checks eagerly.


def expect(pattern, fn, *args, exc=IAE, **kwargs):
    with pytest.raises(exc) as info:
        fn(*args, **kwargs)
    assert re.search(pattern, str(info.value)), str(info.value)


@pytest.mark.parametrize("op", ["top_k", "random_k"])
@pytest.mark.parametrize("k", [-1, 11, 2**40])
def test_k_out_of_range(run, op, k):
    fn = (sparsify.top_k if op == "top_k"
          else lambda x, kk: sparsify.random_k(x, kk, tf.constant(0, tf.int64)))
    expect(rf"k must lie in \[0, n\] where n=10 .*got k={k}", run, fn,
           tf.zeros([2, 5]), tf.constant(k, tf.int64))


@pytest.mark.parametrize("t", [-1.0, -1e-30, float("nan"), -float("inf")])
def test_threshold_rejects_negative_or_nan(run, dtype, t):
    expect(r"threshold must be a non-negative number \(not NaN\), got", run,
           sparsify.threshold, tf.zeros([4], dtype), tf.constant(t, tf.float64))
    expect(r"threshold must be a non-negative number \(not NaN\), got", sparsify.threshold,
           tf.zeros([4], dtype), t)


def test_threshold_kernel_names_value(run):
    expect(r"threshold must be a non-negative number \(not NaN\), got -2\.5", run,
           sparsify.threshold, tf.zeros([4]), tf.constant(-2.5))


@pytest.mark.parametrize("bad", [tf.int32, tf.int64, tf.complex64, tf.bool])
def test_wrong_x_dtype(bad):
    x = tf.zeros([4], bad)
    pat = rf"x must be float16, bfloat16, float32 or float64, got {bad.name}"
    expect(pat, sparsify.top_k, x, 1)
    expect(pat, sparsify.threshold, x, 0.5)
    expect(pat, sparsify.random_k, x, 1, 0)
    expect(pat, sparsify.top_k_ratio, x, 0.5)


def test_raw_op_rejects_wrong_x_dtype():
    from deepreduce_tf.ops import _loader

    with pytest.raises((TypeError, IAE, tf.errors.NotFoundError)):
        _loader.load().deep_reduce_top_k(tf.zeros([4], tf.int32), tf.constant(1, tf.int64))


def test_scalar_arguments():
    x = tf.zeros([4])
    expect(r"k must be a scalar, got shape \(2,\)", sparsify.top_k, x, [1, 2])
    expect(r"k must be an integer scalar, got float32", sparsify.top_k, x, 1.0)
    expect(r"seed must be a scalar, got shape \(1,\)", sparsify.random_k, x, 1, [3])
    expect(r"seed must be an integer scalar, got float32", sparsify.random_k, x, 1, 0.5)
    expect(r"threshold must be a scalar, got shape \(2,\)", sparsify.threshold, x, [1.0, 2.0])
    expect(r"out_idx must be int32 or int64, got int16", sparsify.top_k, x, 1,
           out_idx=tf.int16)


def test_kernel_scalar_checks_in_graph_with_unknown_rank():
    """Shapes unknown at trace time: the kernel itself names the argument."""
    x = tf.zeros([4])
    f = tf.function(lambda k: sparsify.top_k(x, k),
                    input_signature=[tf.TensorSpec(None, tf.int64)])
    expect(r"k must be a scalar, got shape \[2\]", f, tf.constant([1, 2], tf.int64))
    g = tf.function(lambda s: sparsify.random_k(x, 1, s),
                    input_signature=[tf.TensorSpec(None, tf.int64)])
    expect(r"seed must be a scalar, got shape \[1\]", g, tf.constant([1], tf.int64))
    h = tf.function(lambda t: sparsify.threshold(x, t),
                    input_signature=[tf.TensorSpec(None, tf.float32)])
    expect(r"threshold must be a scalar, got shape \[3\]", h, tf.zeros([3]))


# --------------------------------------------------------------------------
# CUDA sources: compile-checked where nvcc exists (no GPU is needed to compile).


def test_cuda_kernels_compile():
    """The sparsifier's CUDA kernels compile for sm_75, with the op library's
    nvcc command (build_deps/kernel_objects.py: an unchanged kernel tree
    reuses the object, e.g. in CI's CUDA stage after the CPU one)."""
    import shutil

    if shutil.which("nvcc") is None and not os.path.exists(
            os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")):
        pytest.skip("nvcc not found")
    env = dict(os.environ)
    if "TEST_TMPDIR" in env:  # bazel test: the runfiles tree is not ours to write
        env["DEEPREDUCE_KERNEL_OBJECTS"] = os.path.join(env["TEST_TMPDIR"], "objects")
    res = subprocess.run(
        [sys.executable, os.path.join(_REPO_ROOT, "build_deps", "kernel_objects.py"),
         "cuda", "--archs", "75", "--no-common", "sparsify"],
        capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    objs = res.stdout.split()
    assert any(o.endswith(".o") and "sparsify_kernels.cu" in o for o in objs), res.stdout
    assert all(os.path.getsize(o) > 0 for o in objs)


def test_radix_plan_host_emulation(tmp_path):
    """sparsify.h's radix arithmetic at the CPU's and the GPU's level widths,
    driven as the CUDA kernels drive it, against a brute-force sort
    (tests/cpp/radix_plan_test.cc)."""
    import shutil

    cxx = shutil.which(os.environ.get("CXX", "g++"))
    if cxx is None:
        pytest.skip("no C++ compiler")
    root = _REPO_ROOT
    exe = str(tmp_path / "radix_plan_test")
    build = subprocess.run(
        [cxx, "-std=c++17", "-O2", f"-I{root}",
         os.path.join(root, "tests", "cpp", "radix_plan_test.cc"), "-o", exe],
        capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    res = subprocess.run([exe], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.strip() == "OK", res.stdout[-3000:]
