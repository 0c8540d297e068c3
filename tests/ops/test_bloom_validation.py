"""Every error path of the Bloom-filter ops and wrappers: the exception type
and a message that names the argument and the offending value. Kernel checks
run in eager and graph mode (run fixture); Python-side checks raise while the
wrapper is called, so eager mode suffices for them."""
import re

import numpy as np
import pytest
import tensorflow as tf

from deepreduce_tf.ops import _loader, bloom

IAE = tf.errors.InvalidArgumentError
N = 20
INDICES = [1, 5, 9]


def expect(exc, pattern, fn, *args, **kwargs):
    """Calls fn and checks the exception type and that the message matches."""
    with pytest.raises(exc) as info:
        fn(*args, **kwargs)
    message = str(info.value)
    assert re.search(pattern, message), f"{pattern!r} not in:\n{message}"
    return message


@pytest.fixture
def filt():
    return bloom.insert(tf.constant(INDICES, tf.int64), N, fpr=0.01)


@pytest.fixture
def positives(filt):
    return bloom.query(filt, N)


def i64(v):
    return tf.constant(v, tf.int64)


def ins(dtype):
    return lambda idx, n, **kw: bloom.insert(tf.constant(idx, dtype), n, **kw)


# --------------------------------------------------------------------------
# insert: kernel checks (eager and graph).


@pytest.mark.parametrize("idx,pattern", [
    ([1, 20], r"indices\[1\] = 20 is outside \[0, universe_size=20\)"),
    ([3, -1, 2], r"indices\[1\] = -1 is outside \[0, universe_size=20\)"),
    ([19, 0, 2**30], r"indices\[2\] = 1073741824 is outside"),
])
def test_insert_index_out_of_range(run, index_dtype, idx, pattern):
    expect(IAE, pattern, run, bloom.insert, tf.constant(idx, index_dtype), i64(N))


def test_insert_duplicate_index(run, index_dtype):
    msg = expect(IAE, r"indices must be distinct, but 3 occurs more than once", run,
                 bloom.insert, tf.constant([3, 4, 3], index_dtype), i64(N))
    assert "position" in msg


def test_insert_duplicate_among_many(run, index_dtype):
    idx = np.random.default_rng(0).permutation(100000).astype(index_dtype.as_numpy_dtype)
    idx[77777] = idx[12]
    expect(IAE, rf"indices must be distinct, but {idx[12]} occurs more than once", run,
           bloom.insert, tf.constant(idx), i64(100000))


@pytest.mark.parametrize("k,n", [(5, 4), (1, 0), (11, 10)])
def test_insert_more_indices_than_universe(run, index_dtype, k, n):
    expect(IAE, rf"cannot insert {k} distinct indices into a universe of universe_size={n}",
           run, bloom.insert, tf.range(k, dtype=index_dtype), i64(n))


def test_insert_negative_universe(run, index_dtype):
    expect(IAE, r"universe_size must be >= 0, got -1", run, bloom.insert,
           tf.zeros([0], index_dtype), i64(-1))


def test_insert_int32_universe_beyond_2_pow_31(run):
    expect(IAE, r"universe_size 2147483649 exceeds 2\^31.*int64", run, bloom.insert,
           tf.constant([1], tf.int32), i64(2**31 + 1))


# --------------------------------------------------------------------------
# insert: sizing arguments (wrapper, op attrs in the kernel constructor and
# in the shape function).


@pytest.mark.parametrize("kwargs,pattern", [
    (dict(num_bits=0), r"num_bits must be >= 1, got 0"),
    (dict(num_bits=-5), r"num_bits must be >= 1, got -5"),
    (dict(num_hashes=0), r"num_hashes must lie in \[1, 32\], got 0"),
    (dict(num_hashes=33), r"num_hashes must lie in \[1, 32\], got 33"),
    (dict(num_hashes=-1), r"num_hashes must lie in \[1, 32\], got -1"),
    (dict(fpr=0.0), r"fpr must lie in \(0, 1\), got 0"),
    (dict(fpr=1.0), r"fpr must lie in \(0, 1\), got 1"),
    (dict(fpr=-0.1), r"fpr must lie in \(0, 1\), got -0.1"),
    (dict(fpr=1.5, num_bits=64), r"fpr must lie in \(0, 1\), got 1.5"),
    (dict(fpr=0.0, num_hashes=3), r"fpr must lie in \(0, 1\), got 0"),
])
def test_insert_wrapper_rejects_sizing(index_dtype, kwargs, pattern):
    expect(IAE, pattern, ins(index_dtype), INDICES, N, **kwargs)


def test_insert_fpr_ignored_when_bits_and_hashes_given(index_dtype):
    f = ins(index_dtype)(INDICES, N, fpr=0.0, num_bits=64, num_hashes=3)
    assert (int(f.num_bits), int(f.num_hashes)) == (64, 3)


@pytest.mark.parametrize("kwargs,pattern", [
    (dict(num_bits=-5), r"num_bits must be 0 .* got -5"),
    (dict(num_bits=2**34 + 1), r"num_bits must be 0 .* got 17179869185"),
    (dict(num_hashes=33), r"num_hashes must be 0 .* got 33"),
    (dict(num_hashes=-1), r"num_hashes must be 0 .* got -1"),
    (dict(fpr=1.5), r"fpr must lie in \(0, 1\) .* got 1.5"),
    (dict(fpr=0.0, num_bits=64), r"fpr must lie in \(0, 1\) .* got 0"),
])
def test_insert_op_rejects_sizing_attrs(run, kwargs, pattern):
    """The raw op (no wrapper): kernel constructor in eager mode, shape
    function when the graph is built."""
    ops = _loader.load()
    errors = (IAE, ValueError) if run.mode == "graph" else IAE
    expect(errors, pattern, run, lambda i, n: ops.deep_reduce_bloom_filter_insert(
        i, n, **kwargs), tf.constant(INDICES, tf.int64), i64(N))


# --------------------------------------------------------------------------
# insert: dtype and rank (wrapper and op).


@pytest.mark.parametrize("bad,pattern", [
    (tf.constant([1.0, 2.0]), r"indices must be int32 or int64, got float32"),
    (tf.constant([1, 2], tf.uint8), r"indices must be int32 or int64, got uint8"),
    (tf.constant([[1, 2]], tf.int64), r"indices must be a vector, got shape \(1, 2\)"),
    (tf.constant(3, tf.int64), r"indices must be a vector, got shape \(\)"),
])
def test_insert_wrapper_rejects_indices_dtype_and_rank(bad, pattern):
    expect(IAE, pattern, bloom.insert, bad, N)


@pytest.mark.parametrize("bad,pattern", [
    (20.0, r"universe_size must be an integer scalar, got float32"),
    ([20], r"universe_size must be a scalar, got shape \(1,\)"),
])
def test_insert_wrapper_rejects_universe_dtype_and_rank(bad, pattern):
    expect(IAE, pattern, bloom.insert, tf.constant(INDICES, tf.int64), bad)


def test_insert_op_rejects_rank_at_run_time():
    ops = _loader.load()
    expect(IAE, r"indices must be a vector, got shape \[1,3\]",
           ops.deep_reduce_bloom_filter_insert, tf.constant([INDICES], tf.int64), N)
    expect(IAE, r"universe_size must be a scalar, got shape \[1\]",
           ops.deep_reduce_bloom_filter_insert, tf.constant(INDICES, tf.int64), [N])


def test_insert_op_rejects_float_indices():
    ops = _loader.load()
    expect((IAE, TypeError), r"Tidx.*float.*int32, int64",
           ops.deep_reduce_bloom_filter_insert, tf.constant([1.0]), N)


def test_insert_wrapper_rejects_fractional_num_bits():
    expect((IAE, TypeError, ValueError), r"num_bits", bloom.insert,
           tf.constant(INDICES, tf.int64), N, num_bits=3.5, num_hashes=2)


def test_filter_size_rejects_negative_k():
    expect(ValueError, r"k.*-5", bloom.filter_size, -5, 0.01)


@pytest.mark.parametrize("fpr", [0.0, 1.0, -0.5, 1.5])
def test_filter_size_rejects_fpr(fpr):
    expect(ValueError, rf"fpr must lie in \(0, 1\), got {fpr}", bloom.filter_size, 10, fpr)


# --------------------------------------------------------------------------
# query.


def with_bits(f, bits=None, m=None, h=None):
    return bloom.BloomFilter(f.bits if bits is None else bits,
                             f.num_bits if m is None else m,
                             f.num_hashes if h is None else h)


def test_query_truncated_filter(run, filt):
    expect(IAE, r"filter holds 3 bytes but filter_bits=\d+ needs exactly 4", run,
           bloom.query, with_bits(filt, bits=filt.bits[:-1]), i64(N))


def test_query_extended_filter(run, filt):
    expect(IAE, r"filter holds 5 bytes but filter_bits=\d+ needs exactly 4", run,
           bloom.query, with_bits(filt, bits=tf.concat([filt.bits, [0]], 0)), i64(N))


def test_query_wrong_filter_bits(run, filt):
    expect(IAE, r"filter holds 4 bytes but filter_bits=100 needs exactly 16", run,
           bloom.query, with_bits(filt, m=i64(100)), i64(N))


def test_query_bit_set_in_padding(run, filt):
    m = int(filt.num_bits)
    assert m % 32 != 0
    bits = filt.bits.numpy().copy()
    bits[-1] |= 0x80
    expect(IAE, rf"filter has bit 31 set beyond filter_bits={m}", run,
           bloom.query, with_bits(filt, bits=tf.constant(bits)), i64(N))


@pytest.mark.parametrize("m,h,pattern", [
    (0, 7, r"filter_bits \(m\) must lie in \[1, 2\^34\], got 0"),
    (-3, 7, r"filter_bits \(m\) must lie in \[1, 2\^34\], got -3"),
    (2**34 + 1, 7, r"filter_bits \(m\) must lie in \[1, 2\^34\], got 17179869185"),
    (None, 0, r"filter_hashes \(h\) must lie in \[1, 32\], got 0"),
    (None, 33, r"filter_hashes \(h\) must lie in \[1, 32\], got 33"),
])
def test_query_bits_and_hashes_out_of_range(run, filt, m, h, pattern):
    f = with_bits(filt, m=None if m is None else i64(m), h=i64(h))
    expect(IAE, pattern, run, bloom.query, f, i64(N))


def test_query_negative_universe(run, filt):
    expect(IAE, r"universe_size must be >= 0, got -1", run, bloom.query, filt, i64(-1))


def test_query_int32_universe_beyond_2_pow_31(run, filt):
    expect(IAE, r"universe_size 2147483649 exceeds 2\^31", run,
           lambda f, n: bloom.query(f, n, out_idx=tf.int32), filt, i64(2**31 + 1))


def test_query_filter_rank(filt):
    """At run time (eager); in a graph the shape function rejects it first."""
    expect(IAE, r"filter must be a vector of uint8, got shape \[2,2\]",
           bloom.query, with_bits(filt, bits=tf.reshape(filt.bits, [2, 2])), N)
    graph = tf.function(lambda b: bloom.query(with_bits(filt, bits=b), N))
    expect(ValueError, r"Shape must be rank 1 but is rank 2", graph,
           tf.reshape(filt.bits, [2, 2]))


def test_query_dtypes(filt):
    expect(IAE, r"uint8", bloom.query, with_bits(filt, bits=tf.cast(filt.bits, tf.int32)), N)
    expect(IAE, r"universe_size must be an integer scalar, got float32", bloom.query,
           filt, 20.0)
    expect(IAE, r"num_bits must be an integer scalar, got float32", bloom.query,
           with_bits(filt, m=tf.constant(29.0)), N)
    expect((IAE, TypeError), r"out_idx.*float.*int32, int64", bloom.query, filt, N,
           out_idx=tf.float32)


# --------------------------------------------------------------------------
# select.


@pytest.mark.parametrize("policy", bloom.POLICIES)
def test_select_k_exceeds_positives(run, filt, positives, policy):
    p = int(positives.shape[0])
    expect(IAE, rf"k=50 exceeds the {p} positives", run,
           lambda f, pos, k: bloom.select(f, pos, k, policy), filt, positives, i64(50))


@pytest.mark.parametrize("policy", bloom.POLICIES)
def test_select_negative_k(run, filt, positives, policy):
    expect(IAE, r"k must be >= 0, got -1", run,
           lambda f, pos, k: bloom.select(f, pos, k, policy), filt, positives, i64(-1))


@pytest.mark.parametrize("policy", bloom.POLICIES)
@pytest.mark.parametrize("pos,bad", [
    ([5, 1, 9], r"positives\[1\] = 1"),      # unsorted
    ([1, 5, 5, 9], r"positives\[2\] = 5"),   # duplicated
    ([-1, 5, 9], r"positives\[0\] = -1"),    # negative
])
def test_select_positives_not_strictly_increasing(run, index_dtype, filt, policy, pos, bad):
    expect(IAE, r"positives must be non-negative and strictly increasing.*" + bad, run,
           lambda f, p, k: bloom.select(f, p, k, policy), filt, tf.constant(pos, index_dtype),
           i64(2))


def test_select_conflict_sets_rejects_a_non_positive(run, index_dtype, filt, positives):
    pos = positives.numpy()
    outsider = next(i for i in range(N) if i not in pos)
    claimed = np.sort(np.append(pos, outsider)).astype(index_dtype.as_numpy_dtype)
    where = int(np.flatnonzero(claimed == outsider)[0])
    expect(IAE, rf"positives\[{where}\] = {outsider} is not a positive of this filter", run,
           lambda f, p, k: bloom.select(f, p, k, "conflict_sets"), filt,
           tf.constant(claimed), i64(3))


def test_select_conflict_sets_rejects_wrong_seed(filt, positives):
    expect(IAE, r"is not a positive of this filter.*same filter and seed", bloom.select,
           filt, positives, 3, "conflict_sets", seed=1)


@pytest.mark.parametrize("policy", bloom.POLICIES)
def test_select_filter_checks(run, filt, positives, policy):
    sel = lambda f, p, k: bloom.select(f, p, k, policy)  # noqa: E731
    expect(IAE, r"filter holds 3 bytes but filter_bits=\d+ needs exactly 4", run, sel,
           with_bits(filt, bits=filt.bits[:-1]), positives, i64(3))
    expect(IAE, r"filter_bits \(m\) must lie in \[1, 2\^34\], got 0", run, sel,
           with_bits(filt, m=i64(0)), positives, i64(3))
    expect(IAE, r"filter_hashes \(h\) must lie in \[1, 32\], got 33", run, sel,
           with_bits(filt, h=i64(33)), positives, i64(3))
    if run.mode == "eager":  # in a graph the shape function rejects it first
        expect(IAE, r"filter must be a vector of uint8, got shape \[2,2\]", run, sel,
               with_bits(filt, bits=tf.reshape(filt.bits, [2, 2])), positives, i64(3))


@pytest.mark.parametrize("fn", ["select", "decode"])
@pytest.mark.parametrize("policy", ["first", "P0", "conflict-sets", ""])
def test_unknown_policy(filt, positives, fn, policy):
    call = {"select": lambda: bloom.select(filt, positives, 3, policy),
            "decode": lambda: bloom.decode(filt, N, 3, policy)}[fn]
    msg = expect(ValueError, rf"unknown Bloom-filter policy {re.escape(repr(policy))}", call)
    for choice in bloom.POLICIES:
        assert choice in msg


def test_unknown_policy_raw_op(filt, positives):
    ops = _loader.load()
    expect((IAE, TypeError, ValueError), r"policy.*p0.*leftmost.*random.*conflict_sets",
           ops.deep_reduce_bloom_filter_select, filt.bits, positives, filt.num_bits,
           filt.num_hashes, i64(3), policy="first")


@pytest.mark.parametrize("args,pattern", [
    (dict(positives=tf.constant([1.0, 5.0])), r"positives must be int32 or int64, got float32"),
    (dict(positives=tf.constant([[1, 5]])), r"positives must be a vector, got shape \(1, 2\)"),
    (dict(k=1.0), r"k must be an integer scalar, got float32"),
    (dict(k=[1]), r"k must be a scalar, got shape \(1,\)"),
])
def test_select_wrapper_dtype_and_rank(filt, positives, args, pattern):
    kw = dict(positives=positives, k=1)
    kw.update(args)
    expect(IAE, pattern, bloom.select, filt, kw["positives"], kw["k"], "p0")


def test_select_op_rejects_rank_at_run_time(filt, positives):
    ops = _loader.load()
    expect(IAE, r"positives must be a vector, got shape \[1,\d+\]",
           ops.deep_reduce_bloom_filter_select, filt.bits, positives[None, :],
           filt.num_bits, filt.num_hashes, i64(1), policy="leftmost")
    expect(IAE, r"k must be a scalar, got shape \[1\]",
           ops.deep_reduce_bloom_filter_select, filt.bits, positives,
           filt.num_bits, filt.num_hashes, i64([1]), policy="leftmost")


# --------------------------------------------------------------------------
# Adversarial filters: random bytes, flipped bits, wrong sizes never crash.


def test_bit_flipped_filter(index_dtype):
    """Clearing set bits of a filter: query still decodes it (it is well
    formed), conflict_sets rejects the stale positives with a clear error,
    and the fresh positives of the damaged filter select cleanly."""
    rng = np.random.default_rng(11)
    idx = rng.choice(5000, 100, replace=False).astype(index_dtype.as_numpy_dtype)
    f = bloom.insert(tf.constant(idx), 5000, fpr=0.01)
    stale = bloom.query(f, 5000, out_idx=index_dtype)
    bits = f.bits.numpy().copy()
    flat = np.unpackbits(bits, bitorder="little")
    on = np.flatnonzero(flat[: int(f.num_bits)])
    flat[rng.choice(on, 10, replace=False)] = 0
    damaged = with_bits(f, bits=tf.constant(np.packbits(flat, bitorder="little")))
    expect(IAE, r"positives\[\d+\] = \d+ is not a positive of this filter", bloom.select,
           damaged, stale, 100, "conflict_sets")
    fresh = bloom.query(damaged, 5000, out_idx=index_dtype)
    assert fresh.shape[0] < stale.shape[0]
    k = min(100, int(fresh.shape[0]))
    for policy in bloom.POLICIES:
        sel = bloom.select(damaged, fresh, k, policy).numpy()
        assert np.all(np.isin(sel, fresh.numpy()))


def test_query_and_select_on_random_filters(index_dtype):
    """Any well-formed filter of random bytes decodes without error; any
    byte count that does not match m is rejected."""
    rng = np.random.default_rng(5)
    for trial in range(30):
        m = int(rng.integers(1, 3000))
        h = int(rng.integers(1, 33))
        nbytes = 4 * ((m + 31) // 32)
        bits = rng.integers(0, 256, nbytes, dtype=np.uint8)
        # Clear the padding so the filter is well formed.
        flat = np.unpackbits(bits, bitorder="little")
        flat[m:] = 0
        bits = np.packbits(flat, bitorder="little")
        f = bloom.BloomFilter(tf.constant(bits), i64(m), i64(h))
        n = int(rng.integers(0, 5000))
        pos = bloom.query(f, n, out_idx=index_dtype)
        k = int(rng.integers(0, int(pos.shape[0]) + 1))
        for policy in bloom.POLICIES:
            sel = bloom.select(f, pos, k, policy).numpy()
            assert np.all(np.isin(sel, pos.numpy()))
        for delta in (-4, -1, 1, 4):
            if nbytes + delta < 0:
                continue
            wrong = tf.constant(rng.integers(0, 256, nbytes + delta, dtype=np.uint8))
            expect(IAE, rf"filter holds {nbytes + delta} bytes", bloom.query,
                   bloom.BloomFilter(wrong, i64(m), i64(h)), n)


# --------------------------------------------------------------------------
# Checks added with the sorted duplicate check and select's membership check.

@pytest.mark.parametrize("policy", bloom.POLICIES)
def test_select_every_policy_rejects_a_non_positive(run, index_dtype, filt, positives, policy):
    pos = positives.numpy()
    outsider = next(i for i in range(N) if i not in pos)
    claimed = np.sort(np.append(pos, outsider)).astype(index_dtype.as_numpy_dtype)
    where = int(np.flatnonzero(claimed == outsider)[0])
    expect(IAE, rf"positives\[{where}\] = {outsider} is not a positive of this filter", run,
           lambda f, p, k: bloom.select(f, p, k, policy), filt, tf.constant(claimed), i64(3))


@pytest.mark.parametrize("policy", bloom.POLICIES)
def test_select_rejects_padding_bits(filt, positives, policy):
    bits = filt.bits.numpy().copy()
    m = int(filt.num_bits)
    assert m < bits.size * 8, "the fixture's filter must have padding bits"
    bits[-1] |= 0x80  # the last bit of the last word lies past m
    expect(IAE, rf"filter has bit {bits.size * 8 - 1} set beyond filter_bits={m}",
           bloom.select, bloom.BloomFilter(tf.constant(bits), filt.num_bits, filt.num_hashes),
           positives, 3, policy)


HUGE_N = 2**40  # a bitmap over this universe would take 128 GiB: the sorted check is used


def test_insert_huge_universe_small_set_matches_reference():
    import bloom_reference as ref
    idx = np.array([HUGE_N - 1, 0, 2**35 + 7, 12345678901], dtype=np.int64)
    f = bloom.insert(tf.constant(idx), HUGE_N, fpr=0.01)
    m, h = int(f.num_bits), int(f.num_hashes)
    np.testing.assert_array_equal(f.bits.numpy(), ref.insert(idx, m, h))
    sel = bloom.select(f, tf.constant(np.sort(idx)), 4, "conflict_sets")
    np.testing.assert_array_equal(sel.numpy(), np.sort(idx))


def test_insert_huge_universe_rejects_duplicate_and_out_of_range(run):
    expect(IAE, r"indices must be distinct, but 17 occurs more than once", run, bloom.insert,
           tf.constant([17, 2**39, 17], tf.int64), i64(HUGE_N))
    expect(IAE, rf"indices\[1\] = {HUGE_N} is outside \[0, universe_size={HUGE_N}\)", run,
           bloom.insert, tf.constant([17, HUGE_N], tf.int64), i64(HUGE_N))
    expect(IAE, r"indices\[0\] = -3 is outside", run, bloom.insert,
           tf.constant([-3, 5], tf.int64), i64(HUGE_N))


def test_insert_accepts_an_empty_python_list():
    f = bloom.insert([], N)
    assert f.bits.dtype == tf.uint8 and int(f.num_bits) == 1
    assert bloom.decode(f, N, 0, "p0").numpy().size == 0
