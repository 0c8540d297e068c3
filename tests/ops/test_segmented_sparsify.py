"""Segmented sparsifier ops (segmented_top_k, segmented_random_k, segment_ks)
against the numpy reference (tests/sparsify_reference.py) and against the
per-tensor ops: exact indices and bit-exact values for every dtype, empty
segments, k = 0 and k = len, short segments (run many at a time, one per
worker) and long ones (run over the whole pool, including the sampled-bounds
path), NaN/inf/-0/ties; random-k determinism, per-segment seeds and
uniformity; independence from the thread count; static shapes; every
validation error and its message."""
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

IAE = tf.errors.InvalidArgumentError
DTYPES = [tf.float16, tf.bfloat16, tf.float32, tf.float64]
BLOCK = 16384             # kBlock in sparsify_kernels.cc
INLINE_MAX = 4 * BLOCK    # kInlineMaxLen: shorter segments run one per worker
SAMPLED_N = 300_007       # >= 2^16 (kSampleMinN = INLINE_MAX): the sampled path


@pytest.fixture(params=DTYPES, ids=lambda d: d.name)
def dtype(request):
    return request.param


def bits(a):
    """Raw bit pattern, so that values compare exactly (NaN, -0.0)."""
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def assert_selection(got, want):
    gi, gv = got
    wi, wv = want
    assert gi.dtype == np.int64
    np.testing.assert_array_equal(gi, wi)
    assert gv.dtype == wv.dtype
    np.testing.assert_array_equal(bits(gv), bits(wv))


def to_np(out):
    return tf.nest.map_structure(lambda t: t.numpy(), out)


def offsets_of(lengths):
    return np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)


def make(kind, n, dtype, rng):
    npd = dtype.as_numpy_dtype
    if kind == "normal":
        x = rng.standard_normal(n) * 10.0 ** rng.integers(-3, 3, n)
    elif kind == "int_ties":  # many equal magnitudes of both signs
        x = rng.integers(-4, 5, n).astype(np.float64)
    elif kind == "all_equal":
        x = np.full(n, -1.5)
    elif kind == "signed_zeros":
        x = np.where(rng.random(n) < 0.5, -0.0, 0.0) * (rng.random(n) < 0.9)
        x = np.where(rng.random(n) < 0.02, rng.standard_normal(n), x)
    elif kind == "nan_inf":
        x = rng.standard_normal(n)
        for v in (np.inf, -np.inf, np.nan, -np.nan):
            x[rng.integers(0, n, max(1, n // 40))] = v
    elif kind == "tiny":  # subnormals of every dtype, and values that flush
        x = rng.standard_normal(n) * 1e-40
        x[::7] = 5e-324
    else:
        raise ValueError(kind)
    return x.astype(npd)


KINDS = ["normal", "int_ties", "all_equal", "signed_zeros", "nan_inf", "tiny"]


def random_ks(lengths, rng):
    """k in [0, len] per segment, with k = 0, 1, len - 1 and len all present."""
    ks = np.array([rng.integers(0, n + 1) for n in lengths], np.int64)
    choices = [0, 1, -1, None]
    for j, n in enumerate(lengths):
        c = choices[j % 4]
        if n > 0 and c is not None:
            ks[j] = c if c >= 0 else n - 1
        elif n > 0:
            ks[j] = n
    return ks


def segmented(op, x, offsets, k, seed=0):
    if op == "top_k":
        return sparsify.segmented_top_k(x, offsets, k)
    return sparsify.segmented_random_k(x, offsets, k, seed)


def reference(op, x, offsets, k, seed=0):
    if op == "top_k":
        return ref.segmented_top_k(x, offsets, k)
    return ref.segmented_random_k(x, offsets, k, seed)


# Lengths with empty segments, single elements, and short segments that span
# more than one block.
MIXED = [0, 1, 5, 0, 100, 37, 1000, 2, 0, 300, BLOCK + 3, 3, 0]


# --------------------------------------------------------------------------
# The reference itself.


def test_reference_segment_seed():
    assert ref.segment_seed(12345, 0) == 12345  # Mix64(0) == 0
    assert ref.segment_seed(-1, 0) == 2**64 - 1
    assert ref.segment_seed(7, 3) == 7 ^ int(ref.mix64(np.array([3], np.uint64))[0])


def test_reference_segmented_is_concatenated_per_segment():
    x = np.array([1, -5, 3, 2, 0, 7, -8, 1], np.float32)
    idx, val = ref.segmented_top_k(x, [0, 3, 3, 8], [1, 0, 2])
    assert list(idx) == [1, 5, 6] and list(val) == [-5, 7, -8]


# --------------------------------------------------------------------------
# segmented_top_k against the reference.


@pytest.mark.parametrize("kind", KINDS)
def test_top_k_matches_reference(run, dtype, kind, rng):
    off = offsets_of(MIXED)
    x = make(kind, int(off[-1]), dtype, rng)
    for trial in range(2):
        ks = random_ks(MIXED, rng) if trial else np.array(MIXED, np.int64)  # k = len
        got = run(sparsify.segmented_top_k, tf.constant(x), tf.constant(off),
                  tf.constant(ks))
        assert_selection(got, ref.segmented_top_k(x, off, ks))


def test_top_k_hand_checked(run):
    nan, inf = float("nan"), float("inf")
    #                seg 0 ------------  seg 1 (empty)  seg 2 ------------------------
    x = np.array([1.0, -0.0, 0.0, -3.0, 2.0, 3.0, nan, -inf, 0.5, -nan, -2.0, 2.0],
                 np.float32)
    off = np.array([0, 4, 4, 12], np.int64)
    # seg 0: |-3| largest, then 1; seg 2 (4..11): NaN@6, NaN@9, inf@7, 3@5, then
    # the tie 2@4, -2@10, 2@11 taken lowest index first.
    for ks, want in [([2, 0, 4], [0, 3, 5, 6, 7, 9]),
                     ([1, 0, 5], [3, 4, 5, 6, 7, 9]),
                     ([3, 0, 6], [0, 1, 3, 4, 5, 6, 7, 9, 10]),
                     ([4, 0, 0], [0, 1, 2, 3]),
                     ([0, 0, 8], [4, 5, 6, 7, 8, 9, 10, 11])]:
        idx, val = run(sparsify.segmented_top_k, tf.constant(x), tf.constant(off),
                       tf.constant(ks, tf.int64))
        assert list(idx) == want, ks
        np.testing.assert_array_equal(bits(val), bits(x[want]))
    # Signed zeros keep their sign in the values.
    idx, val = to_np(sparsify.segmented_top_k(x, off, [3, 0, 0]))
    assert list(idx) == [0, 1, 3] and list(np.signbit(val)) == [False, True, True]


@pytest.mark.parametrize("n", [1, 1000, 40000, INLINE_MAX, SAMPLED_N])
def test_one_segment_equals_top_k(dtype, n, rng):
    """S = 1 is top_k exactly, on every path (short, sampled, its fallback)."""
    x = make("normal", n, dtype, rng)
    x[::13] = x[::11][: len(x[::13])]  # some exact ties
    xt = tf.constant(x)
    for k in sorted({0, 1, n // 100, n // 3, n - 1, n}):
        got = to_np(sparsify.segmented_top_k(xt, [0, n], [k]))
        assert_selection(got, to_np(sparsify.top_k(xt, k)))


def test_one_segment_ties_equal_top_k(dtype, rng):
    """Tie-heavy input on the long path: the sampled bounds fall back."""
    for n in [INLINE_MAX - 1, SAMPLED_N]:
        x = make("int_ties", n, dtype, rng)
        for k in [1, n // 7, n // 2]:
            assert_selection(to_np(sparsify.segmented_top_k(x, [0, n], [k])),
                             to_np(sparsify.top_k(x, k)))


def test_two_hundred_small_segments(run, dtype, rng):
    lengths = rng.integers(0, 500, 200)
    lengths[::17] = 0
    off = offsets_of(lengths)
    x = make("normal", int(off[-1]), dtype, rng)
    x[::5] = np.round(x[::5])  # ties inside segments
    ks = random_ks(lengths, rng)
    got = run(sparsify.segmented_top_k, tf.constant(x), tf.constant(off), tf.constant(ks))
    assert_selection(got, ref.segmented_top_k(x, off, ks))


@pytest.mark.parametrize("kind", ["normal", "int_ties", "nan_inf"])
def test_huge_segment_among_small_ones(kind, rng):
    """Long segments (the sampled path, and its exact fallback on ties)
    between many short ones; lengths at the short/long border."""
    small = list(rng.integers(1, 300, 120))
    lengths = (small[:40] + [SAMPLED_N] + small[40:80] + [INLINE_MAX, INLINE_MAX - 1, 70000]
               + small[80:] + [0])
    off = offsets_of(lengths)
    x = make(kind, int(off[-1]), tf.float32, rng)
    for ks in [sparsify.segment_ks(lengths, 0.01), random_ks(lengths, rng)]:
        assert_selection(to_np(sparsify.segmented_top_k(x, off, ks)),
                         ref.segmented_top_k(x, off, ks))


def test_many_tiny_segments(rng):
    lengths = rng.integers(0, 4, 5000)
    off = offsets_of(lengths)
    x = make("int_ties", int(off[-1]), tf.float32, rng)
    ks = np.array([rng.integers(0, n + 1) for n in lengths], np.int64)
    assert_selection(to_np(sparsify.segmented_top_k(x, off, ks)),
                     ref.segmented_top_k(x, off, ks))


def test_segments_equal_per_segment_top_k_ratio(rng):
    """What the bucketed step computes equals per-variable top_k_ratio."""
    shapes = [(3, 3, 16, 16), (16,), (16,), (3, 3, 16, 32), (32,), (64, 10), (10,)]
    grads = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    lengths = [g.size for g in grads]
    off = offsets_of(lengths)
    idx, val = to_np(sparsify.segmented_top_k(np.concatenate([g.ravel() for g in grads]),
                                              off, sparsify.segment_ks(lengths, 0.05)))
    want_i, want_v = [], []
    for g, o in zip(grads, off):
        i, v = to_np(sparsify.top_k_ratio(g, 0.05))
        want_i.append(i + o)
        want_v.append(v)
    np.testing.assert_array_equal(idx, np.concatenate(want_i))
    np.testing.assert_array_equal(val, np.concatenate(want_v))


def test_x_any_shape_and_empty(run):
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 12
    got = run(sparsify.segmented_top_k, tf.constant(x), tf.constant([0, 10, 24], tf.int64),
              tf.constant([2, 3], tf.int64))
    assert_selection(got, ref.segmented_top_k(x, [0, 10, 24], [2, 3]))
    for off, ks in [([0], []), ([0, 0, 0], [0, 0])]:
        got = run(sparsify.segmented_top_k, tf.zeros([0, 3]), tf.constant(off, tf.int64),
                  tf.constant(ks, tf.int64))
        assert got[0].shape == (0,) and got[0].dtype == np.int64 and got[1].shape == (0,)
    got = run(sparsify.segmented_top_k, tf.constant(x), tf.constant([0, 24], tf.int64),
              tf.constant([0], tf.int64))
    assert got[0].shape == (0,)


def test_offsets_and_k_accept_int32_lists_and_tensors(rng):
    x = rng.standard_normal(100).astype(np.float32)
    off, ks = [0, 40, 40, 100], [3, 0, 5]
    want = ref.segmented_top_k(x, off, ks)
    assert_selection(to_np(sparsify.segmented_top_k(x, off, ks)), want)
    assert_selection(to_np(sparsify.segmented_top_k(
        x, np.array(off, np.int32), tf.constant(ks, tf.int32))), want)
    assert_selection(to_np(sparsify.segmented_top_k(
        x, tf.constant(off, tf.int64), np.array(ks, np.uint16))), want)


def test_cpu_kernel_under_any_device_scope(device, rng):
    """No GPU kernel: under a GPU scope TensorFlow places the op on the CPU."""
    x = rng.standard_normal(300).astype(np.float32)
    idx, val = sparsify.segmented_top_k(x, [0, 100, 300], [3, 4])
    assert "CPU" in idx.device
    assert_selection(to_np((idx, val)), ref.segmented_top_k(x, [0, 100, 300], [3, 4]))
    idx, _ = sparsify.segmented_random_k(x, [0, 100, 300], [3, 4], 1)
    assert "CPU" in idx.device and idx.shape == (7,)


# --------------------------------------------------------------------------
# segmented_random_k.


@pytest.mark.parametrize("seed", [0, 1, -7, 2**62 + 3])
def test_random_k_matches_reference(run, dtype, seed, rng):
    lengths = MIXED + list(rng.integers(0, 200, 30))
    off = offsets_of(lengths)
    x = make("normal", int(off[-1]), dtype, rng)
    ks = random_ks(lengths, rng)
    got = run(sparsify.segmented_random_k, tf.constant(x), tf.constant(off),
              tf.constant(ks), tf.constant(seed, tf.int64))
    assert_selection(got, ref.segmented_random_k(x, off, ks, seed))


def test_random_k_long_segments_match_reference(rng):
    lengths = [5, SAMPLED_N, 17, INLINE_MAX, 70000, 3]
    off = offsets_of(lengths)
    x = rng.standard_normal(int(off[-1])).astype(np.float32)
    ks = sparsify.segment_ks(lengths, 0.01)
    for seed in [3, 2**40 + 1]:
        assert_selection(to_np(sparsify.segmented_random_k(x, off, ks, seed)),
                         ref.segmented_random_k(x, off, ks, seed))


@pytest.mark.parametrize("n", [1, 10, 1000, INLINE_MAX + 5, SAMPLED_N])
def test_random_k_one_segment_equals_random_k(n, rng):
    """seed ^ Mix64(0) == seed: S = 1 is random_k with the same seed."""
    x = rng.standard_normal(n).astype(np.float32)
    for k in sorted({0, 1, n // 10, n - 1, n}):
        for seed in [0, -3, 2**63 - 1]:
            assert_selection(to_np(sparsify.segmented_random_k(x, [0, n], [k], seed)),
                             to_np(sparsify.random_k(x, k, seed)))


def test_random_k_segment_i_is_random_k_with_its_seed(rng):
    lengths = [30, 0, 500, 7, 2000]
    off = offsets_of(lengths)
    x = rng.standard_normal(int(off[-1])).astype(np.float64)
    ks = [4, 0, 50, 7, 13]
    idx, _ = to_np(sparsify.segmented_random_k(x, off, ks, 99))
    start = 0
    for i, (o, n, k) in enumerate(zip(off, lengths, ks)):
        seed_i = ref.segment_seed(99, i)
        seed_i -= (1 << 64) if seed_i >= (1 << 63) else 0  # as int64
        want, _ = to_np(sparsify.random_k(x[o:o + n], k, seed_i))
        np.testing.assert_array_equal(idx[start:start + k], want + o)
        start += k


def test_random_k_properties(dtype):
    lengths = [50] * 20 + [0, 1, 333]
    off = offsets_of(lengths)
    x = np.arange(off[-1]).astype(dtype.as_numpy_dtype)
    ks = np.array([5] * 20 + [0, 1, 100], np.int64)
    runs = []
    for seed in range(4):
        idx, val = to_np(sparsify.segmented_random_k(x, off, ks, seed))
        assert idx.shape == (ks.sum(),) and np.all(np.diff(idx) > 0)
        np.testing.assert_array_equal(bits(val), bits(x[idx]))
        # Exactly k[i] positions inside each segment.
        counts = [np.sum((idx >= off[i]) & (idx < off[i + 1])) for i in range(len(ks))]
        assert counts == list(ks)
        again, _ = to_np(sparsify.segmented_random_k(x, off, ks, seed))
        np.testing.assert_array_equal(idx, again)  # deterministic
        # Equal segments (same length and k) get different subsets.
        subsets = {tuple(idx[(idx >= off[i]) & (idx < off[i + 1])] - off[i])
                   for i in range(20)}
        assert len(subsets) == 20, subsets
        runs.append(idx)
    for a in range(4):
        for b in range(a + 1, 4):
            assert not np.array_equal(runs[a], runs[b])  # seeds differ


def test_random_k_depends_only_on_seed_lengths_and_k(rng):
    off, ks = [0, 100, 100, 1600], [9, 0, 40]
    want, _ = to_np(sparsify.segmented_random_k(np.zeros(1600, np.float32), off, ks, 5))
    for x in [rng.standard_normal(1600).astype(np.float64),
              np.full((40, 40), np.nan, np.float16)]:
        np.testing.assert_array_equal(to_np(sparsify.segmented_random_k(x, off, ks, 5))[0],
                                      want)


def test_random_k_seed_changes_without_retracing():
    traces = []

    @tf.function
    def f(x, seed):
        traces.append(1)
        return sparsify.segmented_random_k(x, [0, 50, 100], [5, 5], seed)

    x = tf.zeros([100])
    a = f(x, tf.constant(1, tf.int64))[0].numpy()
    b = f(x, tf.constant(2, tf.int64))[0].numpy()
    assert len(traces) == 1 and not np.array_equal(a, b)


def test_random_k_inclusion_is_uniform_per_position():
    """Over 4000 fixed seeds each position of segment i is chosen with
    probability k_i/len_i. Per segment: the chi-square statistic over its
    positions has mean len - k <= len - 1 = dof (counts of a k-subset are
    negatively correlated, which only lowers it) and sd <= sqrt(2 dof); the
    bound dof + 8 sd is exceeded with probability < 1e-7 under uniformity.
    Every count also lies within 6 binomial sd of its mean (p < 2e-9 each,
    < 1e-6 over the 72 positions by the union bound)."""
    lengths, ks, seeds = [40, 7, 25], [6, 3, 1], 4000
    off = offsets_of(lengths)
    x = tf.zeros([int(off[-1])])
    counts = np.zeros(int(off[-1]))
    for s in range(seeds):
        idx, _ = to_np(sparsify.segmented_random_k(x, off, ks, s))
        counts[idx] += 1
    for i, (n, k) in enumerate(zip(lengths, ks)):
        c = counts[off[i]:off[i + 1]]
        p = k / n
        expected = seeds * p
        dof = n - 1
        chi2 = np.sum((c - expected) ** 2 / expected)
        assert chi2 < dof + 8 * np.sqrt(2 * dof), (i, chi2)
        sd = np.sqrt(seeds * p * (1 - p))
        assert np.all(np.abs(c - expected) < 6 * sd), (i, c)


# --------------------------------------------------------------------------
# The result does not depend on the number of threads.


def test_results_independent_of_thread_count(rng):
    lengths = list(rng.integers(0, 3000, 150)) + [SAMPLED_N, 80000] + list(
        rng.integers(0, 50, 100))
    off = offsets_of(lengths)
    x = make("int_ties", int(off[-1]), tf.float32, rng)
    x[::5] = rng.standard_normal(len(x[::5]))
    ks = sparsify.segment_ks(lengths, 0.01)
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"segmented_threads_{os.getpid()}.npz")
    np.savez(path, x=x, off=off, ks=ks)
    script = textwrap.dedent(f"""
        import sys, numpy as np, tensorflow as tf
        tf.config.threading.set_intra_op_parallelism_threads(int(sys.argv[1]))
        from deepreduce_tf import sparsify
        d = np.load({path!r})
        out = [sparsify.segmented_top_k(d["x"], d["off"], d["ks"]),
               sparsify.segmented_random_k(d["x"], d["off"], d["ks"], 5)]
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
    want = [ref.segmented_top_k(x, off, ks)[0], ref.segmented_random_k(x, off, ks, 5)[0]]
    assert outs == {",".join(str(int(np.sum(i * 7919 % 1000003))) for i in want)}


# --------------------------------------------------------------------------
# segment_ks.


def test_segment_ks_is_k_for_ratio():
    lengths = [0, 1, 7, 10, 99, 1000, 25_000_000, 3]
    for ratio in [0.01, 0.001, 0.3, 1.0, 0.0015]:
        ks = sparsify.segment_ks(lengths, ratio)
        assert ks.dtype == np.int64 and ks.shape == (len(lengths),)
        assert list(ks) == [sparsify.k_for_ratio(n, ratio) for n in lengths]
    assert list(sparsify.segment_ks(np.array([10, 20], np.int32), 0.5)) == [5, 10]
    empty = sparsify.segment_ks([], 0.1)
    assert empty.dtype == np.int64 and empty.shape == (0,)


def test_segment_ks_rejects():
    with pytest.raises(ValueError, match=r"compress_ratio must lie in \(0, 1\]"):
        sparsify.segment_ks([10], 0.0)
    with pytest.raises(ValueError, match=r"compress_ratio must lie in \(0, 1\]"):
        sparsify.segment_ks([], 1.5)
    with pytest.raises(ValueError, match=r"lengths must be non-negative, got -3"):
        sparsify.segment_ks([4, -3], 0.5)
    with pytest.raises(ValueError, match=r"lengths must be a 1-D sequence of integers"):
        sparsify.segment_ks([1.5, 2.0], 0.5)
    with pytest.raises(ValueError, match=r"lengths must be a 1-D sequence of integers"):
        sparsify.segment_ks([[1, 2]], 0.5)


# --------------------------------------------------------------------------
# Static shapes (shape functions, graph mode).


def out_shapes(fn, *specs):
    cf = tf.function(fn).get_concrete_function(*specs)
    return [t.shape.as_list() for t in tf.nest.flatten(cf.structured_outputs)]


@pytest.mark.parametrize("x_shape", [[1000], [None], [10, None, 10], None])
def test_static_shapes(x_shape):
    spec = tf.TensorSpec(x_shape, tf.float32)
    vec = tf.TensorSpec([None], tf.int64)
    off = [0, 300, 300, 1000]
    assert out_shapes(lambda x: sparsify.segmented_top_k(x, off, [3, 0, 7]), spec) == [
        [10], [10]]
    assert out_shapes(lambda x: sparsify.segmented_random_k(x, off, [1, 0, 2], 4),
                      spec) == [[3], [3]]
    assert out_shapes(lambda x, k: sparsify.segmented_top_k(x, off, k), spec, vec) == [
        [None], [None]]
    assert out_shapes(lambda x, o: sparsify.segmented_random_k(x, o, [1, 0, 2], 4),
                      spec, vec) == [[3], [3]]
    assert out_shapes(lambda x: sparsify.segmented_top_k(
        x, off, sparsify.segment_ks([300, 0, 700], 0.01)), spec) == [[10], [10]]


def test_static_shape_with_constant_k_in_tf_function(rng):
    x = rng.standard_normal(1000).astype(np.float32)

    @tf.function
    def f(a):
        k = tf.constant([3, 0, 7], tf.int64)
        idx, val = sparsify.segmented_top_k(a, tf.constant([0, 300, 300, 1000], tf.int64), k)
        assert idx.shape.as_list() == [10] and val.shape.as_list() == [10]
        return idx, val

    assert_selection(to_np(f(x)), ref.segmented_top_k(x, [0, 300, 300, 1000], [3, 0, 7]))


def test_shape_fn_rejects():
    from deepreduce_tf.ops import _loader

    lib = _loader.load()
    spec = tf.TensorSpec([10], tf.float32)
    i64 = lambda v: tf.constant(v, tf.int64)  # noqa: E731
    cases = [
        (r"must be rank 1", lambda x: lib.deep_reduce_segmented_top_k(
            x, i64([[0, 10]]), i64([1]))),
        (r"must be rank 1", lambda x: lib.deep_reduce_segmented_top_k(x, i64([0, 10]), i64(1))),
        (r"Dimensions must be equal, but are 1 and 2",
         lambda x: lib.deep_reduce_segmented_top_k(x, i64([0, 10]), i64([1, 1]))),
        (r"must be rank 0", lambda x: lib.deep_reduce_segmented_random_k(
            x, i64([0, 10]), i64([1]), i64([1]))),
        (r"k\[1\] must be >= 0, got -1", lambda x: lib.deep_reduce_segmented_top_k(
            x, i64([0, 5, 10]), i64([1, -1]))),
        (r"sum\(k\)=11 exceeds the number of elements n=10 of x",
         lambda x: lib.deep_reduce_segmented_random_k(x, i64([0, 5, 10]), i64([5, 6]), i64(0))),
    ]
    for pattern, fn in cases:
        with pytest.raises(ValueError, match=pattern):
            out_shapes(fn, spec)


# --------------------------------------------------------------------------
# Validation: kernel checks in eager and graph mode, wrapper checks eagerly.


def expect(pattern, fn, *args, exc=IAE):
    with pytest.raises(exc) as info:
        fn(*args)
    assert re.search(pattern, str(info.value)), str(info.value)


OPS = ["top_k", "random_k"]
VALUE_ERRORS = [
    # offsets, k, message (x has 10 elements)
    ([1, 5, 10], [1, 1], r"offsets\[0\] must be 0, got 1"),
    ([-2, 5, 10], [1, 1], r"offsets\[0\] must be 0, got -2"),
    ([0, 6, 4, 10], [1, 1, 1], r"offsets must be non-decreasing, got offsets\[2\]=4 < "
                               r"offsets\[1\]=6"),
    ([0, 5, 9], [1, 1], r"offsets\[S\] must equal n=10, the number of elements of x, "
                        r"got offsets\[2\]=9"),
    ([0, 5, 11], [1, 1], r"offsets\[S\] must equal n=10, the number of elements of x, "
                         r"got offsets\[2\]=11"),
    ([0], [], r"offsets\[S\] must equal n=10, the number of elements of x, got offsets\[0\]=0"),
    ([0, 5, 10], [-1, 1], r"k\[0\] must lie in \[0, 5\], the length of segment 0, got "
                          r"k\[0\]=-1"),
    ([0, 7, 7, 10], [2, 1, 3], r"k\[1\] must lie in \[0, 0\], the length of segment 1, got "
                               r"k\[1\]=1"),
    ([0, 5, 10], [5, 6], r"k\[1\] must lie in \[0, 5\], the length of segment 1, got k\[1\]=6"),
    ([0, 5, 10], [2**40, 0], r"k\[0\] must lie in \[0, 5\], .*got k\[0\]=1099511627776"),
]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("offsets,ks,pattern", VALUE_ERRORS)
def test_kernel_rejects_bad_values(run, op, offsets, ks, pattern):
    fn = lambda x, o, k: segmented(op, x, o, k, tf.constant(3, tf.int64))  # noqa: E731
    expect(pattern, run, fn, tf.zeros([2, 5]), tf.constant(offsets, tf.int64),
           tf.constant(ks, tf.int64))


SHAPE_ERRORS = [
    # offsets, k, message (x has 10 elements)
    ([[0, 10]], [1], r"offsets must be a vector of S\+1 >= 1 segment boundaries, got shape "
                     r"\[1,2\]"),
    (0, [], r"offsets must be a vector of S\+1 >= 1 segment boundaries, got shape \[\]"),
    ([], [], r"offsets must be a vector of S\+1 >= 1 segment boundaries, got shape \[0\]"),
    ([0, 10], 1, r"k must be a vector of S per-segment counts, got shape \[\]"),
    ([0, 10], [[1]], r"k must be a vector of S per-segment counts, got shape \[1,1\]"),
    ([0, 10], [1, 1], r"k has 2 elements but offsets has 2, i.e. S=1 segments; k needs one "
                      r"element per segment"),
    ([0, 4, 10], [1], r"k has 1 elements but offsets has 3, i.e. S=2 segments"),
]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("offsets,ks,pattern", SHAPE_ERRORS)
def test_kernel_rejects_bad_shapes(op, offsets, ks, pattern):
    """Eagerly, and in a graph whose shapes are unknown at trace time (where
    the shape function cannot see them): the kernel names the argument."""
    from deepreduce_tf.ops import _loader

    lib = _loader.load()
    if op == "top_k":
        raw = lambda x, o, k: lib.deep_reduce_segmented_top_k(x, o, k)  # noqa: E731
    else:
        raw = lambda x, o, k: lib.deep_reduce_segmented_random_k(  # noqa: E731
            x, o, k, tf.constant(0, tf.int64))
    args = (tf.zeros([10]), tf.constant(offsets, tf.int64), tf.constant(ks, tf.int64))
    expect(pattern, raw, *args)
    unknown = tf.TensorSpec(None, tf.int64)
    f = tf.function(raw, input_signature=[tf.TensorSpec(None, tf.float32), unknown, unknown])
    expect(pattern, f, *args)


def test_kernel_rejects_non_scalar_seed():
    f = tf.function(lambda s: sparsify.segmented_random_k(tf.zeros([4]), [0, 4], [1], s),
                    input_signature=[tf.TensorSpec(None, tf.int64)])
    expect(r"seed must be a scalar, got shape \[2\]", f, tf.constant([1, 2], tf.int64))


def test_wrapper_argument_checks():
    x = tf.zeros([4])
    expect(r"offsets must be an integer vector, got float32", sparsify.segmented_top_k,
           x, tf.constant([0.0, 4.0]), [1])
    expect(r"offsets must be an integer vector, got float64", sparsify.segmented_top_k,
           x, [0.0, 4.0], [1])
    expect(r"offsets must be a vector, got shape \(1, 2\)", sparsify.segmented_top_k,
           x, [[0, 4]], [1])
    expect(r"k must be a vector, got shape \(\)", sparsify.segmented_random_k,
           x, [0, 4], tf.constant(1), 0)
    expect(r"k must be an integer vector, got float64", sparsify.segmented_random_k,
           x, [0, 4], [1.5], 0)
    expect(r"seed must be a scalar, got shape \(1,\)", sparsify.segmented_random_k,
           x, [0, 4], [1], [3])
    for bad in [tf.int32, tf.complex64]:
        pat = rf"x must be float16, bfloat16, float32 or float64, got {bad.name}"
        expect(pat, sparsify.segmented_top_k, tf.zeros([4], bad), [0, 4], [1])
        expect(pat, sparsify.segmented_random_k, tf.zeros([4], bad), [0, 4], [1], 0)


# The remaining check, n > 2^32 - 1 ("x has N elements; the sparsifiers support
# at most 2^32 - 1"), is the per-tensor ops' CheckSize; testing it here would
# take an 8 GiB tensor.


class _EveryOther:
    """A sparsifier of one's own, as a subclass of a built-in that overrides
    select() only: every other position, from the first."""

    def select(self, x, seed):
        return tf.range(0, tf.size(x, out_type=tf.int64), 2, dtype=tf.int64)


@pytest.mark.parametrize("base", ["topk", "randomk", "threshold"])
def test_subclass_overriding_select_is_used_by_the_values_paths(base):
    """The compressor calls select_values / select_segments_values, whose
    built-in fast paths use the class's kernel: a subclass that overrides only
    select() must still get its own positions (per segment, as
    Sparsifier.select_segments), with x's values at them."""
    from deepreduce_tf import sparsifiers

    cls = type("EveryOther", (_EveryOther, sparsifiers.SPARSIFIERS[base]), {})
    s = cls()
    x = tf.constant(np.arange(1, 12, dtype=np.float32) * np.float32(-1.5))  # 11 values
    seed = tf.constant(3, tf.int64)
    idx, val = s.select_values(x, seed)
    np.testing.assert_array_equal(idx.numpy(), np.arange(0, 11, 2))
    np.testing.assert_array_equal(val.numpy(), x.numpy()[0::2])
    idx, val = s.select_segments_values(x, [5, 6], seed)
    want = np.array([0, 2, 4, 5, 7, 9] if base != "threshold" else [0, 2, 4, 6, 8, 10])
    np.testing.assert_array_equal(idx.numpy(), want)
    np.testing.assert_array_equal(val.numpy(), x.numpy()[want])
    # The built-in class itself keeps its kernel.
    plain = sparsifiers.SPARSIFIERS[base]()
    assert plain.select_values(x, seed)[0].numpy().tolist() != list(range(0, 11, 2))
