"""Lossless index codecs (deepreduce_tf.index) against the reference in
tests/index_reference.py: exact bytes and exact round trips on edge cases and
random/clustered sets, sizes against the information bound, input
validation, static shapes in graph mode, and adversarial payloads."""
import math

import numpy as np
import pytest
import tensorflow as tf

import index_reference as ref
from deepreduce_tf.ops import index

CODECS = index.CODECS
DTYPES = [tf.int32, tf.int64]


@pytest.fixture(params=DTYPES, ids=["int32", "int64"])
def dtype(request):
    return request.param


def roundtrip(codec, idx, n, dtype, **kw):
    """Encodes idx, checks the bytes against the reference and the decode."""
    idx = np.asarray(idx, dtype=dtype.as_numpy_dtype)
    payload = index.encode(codec, tf.constant(idx, dtype), n, **kw).numpy()
    assert payload.tobytes() == ref.encode(codec, idx, n, **kw), codec
    out = index.decode(codec, payload, out_idx=dtype).numpy()
    assert out.dtype == dtype.as_numpy_dtype
    np.testing.assert_array_equal(out, idx)
    return payload


def random_set(rng, n, k):
    return np.sort(rng.choice(n, size=k, replace=False)).astype(np.int64)


def clustered_set(rng, n, k, clusters=5, width=0.01):
    """Roughly k indices in a few dense clusters plus a sparse background,
    like real top-k sets (REFERENCE 3)."""
    centers = rng.integers(0, n, clusters)
    dense = np.concatenate([
        c + rng.integers(0, max(1, int(width * n)), k // (2 * clusters)) for c in centers])
    sparse = rng.integers(0, n, k - len(dense))
    return np.unique(np.clip(np.concatenate([dense, sparse]), 0, n - 1))


# --------------------------------------------------------------------------
# Round trips.

EDGE_CASES = {
    "empty": (1000, []),
    "empty_n0": (0, []),
    "n1_empty": (1, []),
    "n1_full": (1, [0]),
    "single_first": (1000, [0]),
    "single_last": (1000, [999]),
    "single_mid": (1000, [517]),
    "first_and_last": (1000, [0, 999]),
    "full": (3000, list(range(3000))),
    "full_but_one": (3000, [i for i in range(3000) if i != 1234]),
    "n_not_multiple_of_8": (13, [1, 2, 12]),
    "dense_prefix": (5000, list(range(2048))),
}


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("case", sorted(EDGE_CASES))
def test_roundtrip_edge_cases(codec, case, dtype):
    n, idx = EDGE_CASES[case]
    roundtrip(codec, idx, n, dtype)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("density", [0.001, 0.01, 0.1, 0.5])
def test_roundtrip_random(codec, density, dtype):
    rng = np.random.default_rng(int(density * 1e4))
    n = 200_003
    idx = random_set(rng, n, int(n * density))
    idx[0], idx[-1] = 0, n - 1
    roundtrip(codec, np.unique(idx), n, dtype)


@pytest.mark.parametrize("codec", CODECS)
def test_roundtrip_clustered(codec, dtype):
    rng = np.random.default_rng(7)
    n = 300_000
    roundtrip(codec, clustered_set(rng, n, 6000), n, dtype)


@pytest.mark.parametrize("block_size", [16, 64, 1024, 65536])
def test_golomb_block_sizes(block_size, dtype):
    rng = np.random.default_rng(block_size)
    n = 100_000
    idx = np.union1d(clustered_set(rng, n, 3000), [0, n - 1])
    roundtrip("golomb", idx, n, dtype, block_size=block_size)


def golomb_block_size_of(payload):
    """The block size recorded in a golomb payload (the byte after the header)."""
    _, _, n, k = ref.parse_common_header(payload.tobytes())
    return 1 << int(payload[ref.header_size(n, k)])


AUTO_SETS = {
    "random_1pct": lambda rng: (200_000, random_set(rng, 200_000, 2000)),
    "random_0.1pct": lambda rng: (2_000_000, random_set(rng, 2_000_000, 2000)),
    "clustered": lambda rng: (300_000, clustered_set(rng, 300_000, 6000)),
    "tight_clusters": lambda rng: (1_000_000, clustered_set(rng, 1_000_000, 3000, 20, 0.0005)),
    "dense_runs": lambda rng: (100_000, np.unique(np.concatenate(
        [np.arange(s, s + 300) for s in rng.integers(0, 99_000, 10)]))),
    "tiny": lambda rng: (1000, np.array([3, 5, 700], np.int64)),
    "single": lambda rng: (50, np.array([7], np.int64)),
    "empty": lambda rng: (50, np.array([], np.int64)),
}


@pytest.mark.parametrize("case", sorted(AUTO_SETS))
def test_golomb_auto_block_size(case, dtype):
    """Auto (the default) matches the reference's choice and bytes, decodes,
    and is never larger than any fixed block size."""
    n, idx = AUTO_SETS[case](np.random.default_rng(11))
    for kw in ({}, {"block_size": "auto"}, {"block_size": None}, {"block_size": 0}):
        payload = roundtrip("golomb", idx, n, dtype, **kw)
        if len(idx):
            assert golomb_block_size_of(payload) == ref.golomb_auto_block_size(idx, n)
    for log2b in range(4, 17):
        fixed = index.encode("golomb", tf.constant(idx, dtype), n, block_size=1 << log2b)
        assert len(payload) <= len(fixed.numpy()), (case, 1 << log2b)
        if log2b <= 12 and len(payload) == len(fixed.numpy()) and len(idx):
            # ties go to the larger block
            assert golomb_block_size_of(payload) >= 1 << log2b


def test_golomb_auto_prefers_small_blocks_when_clustered():
    rng = np.random.default_rng(3)
    n = 1_000_000
    idx = clustered_set(rng, n, 3000, clusters=20, width=0.0005)
    payload = index.encode("golomb", tf.constant(idx), n).numpy()
    fixed = index.encode("golomb", tf.constant(idx), n, block_size=1024).numpy()
    assert golomb_block_size_of(payload) < 1024
    assert len(payload) < len(fixed)


def test_golomb_auto_uniform_prefers_large_blocks():
    rng = np.random.default_rng(4)
    n = 2_000_000
    idx = random_set(rng, n, 20_000)
    payload = index.encode("golomb", tf.constant(idx), n).numpy()
    assert golomb_block_size_of(payload) >= 256


@pytest.mark.parametrize("codec", ["golomb", "rle"])
def test_roundtrip_large_multithreaded(codec):
    """Many blocks / chunks, so the thread pool splits the work."""
    rng = np.random.default_rng(11)
    n = 5_000_000
    idx = np.flatnonzero(rng.random(n) < 0.01)
    payload = index.encode(codec, idx, n)
    if codec == "golomb":  # the python reference is slow; compare decode only
        assert payload.numpy().tobytes()[:5] == ref.header("golomb", n, len(idx))[:5]
    else:
        assert payload.numpy().tobytes() == ref.encode(codec, idx, n)
    np.testing.assert_array_equal(index.decode(codec, payload).numpy(), idx)


def test_rle_power_of_two_runs(dtype):
    """The original bit-packer lost runs whose length was a power of two."""
    runs = []
    for e in range(21):
        runs += [2**e - 1, 2**e, 2**e + 1]
    idx = np.cumsum(np.array(runs, dtype=np.int64) + 1) - 1
    n = int(idx[-1]) + 2**20 + 1
    roundtrip("rle", idx, n, dtype)
    # Every run length in one set, and each power of two as the last run.
    for e in (0, 1, 7, 8, 16, 20):
        roundtrip("rle", [2**e], 2**e + 1, dtype)
        roundtrip("rle", [0, 2**e + 1], 2**e + 2, dtype)


@pytest.mark.parametrize("gap", [0, 1, 240, 241, 2287, 2288, 67823, 67824, 2**24 - 1,
                                 2**24, 2**32, 2**40, 2**48, 2**56, 2**62])
def test_rle_varint_classes(gap):
    n = gap + 2
    payload = roundtrip("rle", [gap], n, tf.int64)
    assert len(payload) == ref.header_size(n, 1) + len(ref.rle_gap(gap))


# The other forms of a gap that has a shorter one: each must be refused, so
# that every index set has exactly one payload (the fuzzer found 241 0).
@pytest.mark.parametrize("gap,form", [
    (240, bytes([241, 0])),
    (0, bytes([250, 0, 0, 0])),
    (2288, bytes([250]) + (2288).to_bytes(3, "big")),
    (67823, bytes([250]) + (67823).to_bytes(3, "big")),
    (2**24 - 1, bytes([251]) + (2**24 - 1).to_bytes(4, "big")),
    (2**32 - 1, bytes([252]) + (2**32 - 1).to_bytes(5, "big")),
    (2**56 - 1, bytes([255]) + (2**56 - 1).to_bytes(8, "big")),
])
def test_rle_refuses_longer_forms(gap, form):
    n = gap + 2
    assert ref.encode_rle([gap], n) != ref.header("rle", n, 1) + form
    payload = np.frombuffer(ref.header("rle", n, 1) + form, np.uint8)
    invalid(lambda: index.decode("rle", payload), "not in shortest form")


def test_huge_universe_int64():
    n = 2**62
    idx = [0, 5, 2**40, 2**61, n - 1]
    for codec in ("rle", "golomb"):
        roundtrip(codec, idx, n, tf.int64)


def test_aliases():
    idx = np.array([3, 9, 27], np.int64)
    for alias in ("gr", "rice"):
        p = index.encode(alias, idx, 100)
        assert index.peek_header(p) == ("golomb", 1, 100, 3)
        np.testing.assert_array_equal(index.decode(alias, p).numpy(), idx)


# --------------------------------------------------------------------------
# Sizes.


def test_size_baselines():
    rng = np.random.default_rng(3)
    for n in (1, 8, 9, 1000, 100_001):
        idx = random_set(rng, n, n // 10)
        k = len(idx)
        hdr = ref.header_size(n, k)
        assert index.encode("bitmap", idx, n).shape[0] == math.ceil(n / 8) + hdr
        assert index.encode("int32", idx, n).shape[0] == 4 * k + hdr


@pytest.mark.parametrize("n", [1_000_000, 4_000_000, 25_000_000])
@pytest.mark.parametrize("density", [0.01, 0.001])
def test_golomb_near_entropy(n, density):
    """<= 1.03 x log2 C(n, K) bits, header and block table included."""
    rng = np.random.default_rng(n + int(1e6 * density))
    idx = random_set(rng, n, int(n * density)) if n <= 4_000_000 else \
        np.flatnonzero(rng.random(n) < density)
    k = len(idx)
    bits = 8 * index.encode("golomb", idx, n).shape[0]
    ratio = bits / ref.log2_binomial(n, k)
    assert ratio <= 1.03, (n, k, bits / k, ratio)
    # rle: about a byte per index at 1 %, two at 0.1 %.
    rle_bits = 8 * index.encode("rle", idx, n).shape[0] / k
    assert rle_bits < (9.0 if density == 0.01 else 16.0)


def test_golomb_adapts_to_clusters():
    """A clustered set costs less than the uniform bound for its (n, K)."""
    rng = np.random.default_rng(5)
    n = 1_000_000
    idx = clustered_set(rng, n, 10_000, clusters=3, width=0.002)
    bits = 8 * index.encode("golomb", idx, n).shape[0]
    assert bits < ref.log2_binomial(n, len(idx))


# --------------------------------------------------------------------------
# Validation.


def invalid(fn, *match):
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        fn()
    for m in match:
        assert m in str(e.value), str(e.value)


@pytest.mark.parametrize("codec", CODECS)
def test_encode_validation(codec, dtype):
    c = lambda v: tf.constant(v, dtype)
    invalid(lambda: index.encode(codec, c([1, 5, 10]), 10), "indices[2] = 10", "universe_size=10")
    invalid(lambda: index.encode(codec, c([-1, 5]), 10), "indices[0] = -1")
    invalid(lambda: index.encode(codec, c([1, 5, 5]), 10), "strictly increasing",
            "indices[1] = 5 >= indices[2] = 5")
    invalid(lambda: index.encode(codec, c([4, 3]), 10), "indices[0] = 4 >= indices[1] = 3")
    invalid(lambda: index.encode(codec, c([0, 1, 2]), 2), "K=3", "universe_size=2")
    invalid(lambda: index.encode(codec, c([]), -1), "universe_size must be >= 0, got -1")
    invalid(lambda: index.encode(codec, c([[1, 2]]), 10), "vector")
    invalid(lambda: index.encode(codec, tf.constant([1.0]), 10), "int32 or int64")


def test_encode_validation_raw_op():
    """The kernel itself names the argument (the wrapper's checks bypassed)."""
    from deepreduce_tf.ops import _loader
    ops = _loader.load()
    invalid(lambda: ops.deep_reduce_index_encode_rle(tf.constant([[1]], tf.int64), 5),
            "indices must be a vector")
    invalid(lambda: ops.deep_reduce_index_encode_rle(tf.constant([1], tf.int64),
                                                    tf.constant([5], tf.int64)),
            "universe_size must be a scalar")


def test_int32_codec_refuses_large_universe():
    invalid(lambda: index.encode("int32", tf.constant([1], tf.int64), 2**31 + 1), "2^31")
    index.encode("int32", tf.constant([2**31 - 1], tf.int64), 2**31)  # the limit itself


@pytest.mark.parametrize("codec", ["bitmap", "rle", "golomb"])
def test_decode_int32_refuses_large_universe(codec):
    n = 2**31 + 8 if codec == "bitmap" else 2**40
    p = index.encode(codec, tf.constant([3, 2**31 + 1], tf.int64), n)
    invalid(lambda: index.decode(codec, p, out_idx=tf.int32), "out_idx=int32", str(n))
    np.testing.assert_array_equal(index.decode(codec, p).numpy(), [3, 2**31 + 1])


def test_decode_wrong_codec():
    p = index.encode("rle", tf.constant([1, 2], tf.int64), 10)
    for codec in ("int32", "bitmap", "golomb"):
        invalid(lambda: index.decode(codec, p), "another index codec", "codec id 3 = rle")


def test_unknown_codec_and_bad_args():
    with pytest.raises(ValueError, match="valid choices: int32, bitmap, rle, golomb"):
        index.encode("huffman", [1], 10)
    with pytest.raises(ValueError, match="valid choices"):
        index.decode("bloom", np.zeros(5, np.uint8))
    with pytest.raises(ValueError, match="out_idx"):
        index.decode("rle", np.zeros(5, np.uint8), out_idx=tf.float32)
    invalid(lambda: index.decode("rle", tf.zeros([5], tf.int32)), "uint8")
    for bs in (8, 100, 2**17, -16, "big", 16.0, True):
        with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="block_size"):
            index.encode("golomb", tf.constant([1], tf.int64), 10, block_size=bs)
    # the kernel's own check, bypassing the wrapper
    ops = index._loader.load()
    for bs in (8, 100, 2**17, -16):
        with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="block_size"):
            ops.deep_reduce_index_encode_golomb(tf.constant([1], tf.int64),
                                                tf.constant(10, tf.int64), block_size=bs)


# --------------------------------------------------------------------------
# Shape functions in graph mode.


@pytest.mark.parametrize("codec", CODECS)
def test_shapes_graph_mode(codec, dtype):
    enc = tf.function(lambda i, n: index.encode(codec, i, n))
    cf = enc.get_concrete_function(tf.TensorSpec([None], dtype), tf.TensorSpec([], tf.int64))
    assert cf.output_shapes.as_list() == [None]
    dec = tf.function(lambda p: index.decode(codec, p, out_idx=dtype))
    cf = dec.get_concrete_function(tf.TensorSpec([None], tf.uint8))
    assert cf.output_shapes.as_list() == [None]
    assert cf.structured_outputs.dtype == dtype

    # Static K and constant n: the baselines' payload length is known.
    @tf.function
    def static(i):
        return index.encode(codec, i, tf.constant(1000, tf.int64))

    shape = static.get_concrete_function(tf.TensorSpec([20], dtype)).output_shapes.as_list()
    want = {"int32": ref.header_size(1000, 20) + 80,
            "bitmap": ref.header_size(1000, 20) + 125, "rle": None, "golomb": None}
    if codec in want:
        assert shape == [want[codec]]
    else:  # a codec's static length, if it has one, is its payload's
        assert shape[0] in (None, len(ref.encode(codec, np.arange(20), 1000)))
    # Wrong ranks fail at graph construction, in the ops' shape functions
    # (the raw ops, so that the wrapper's own checks do not pre-empt them).
    from deepreduce_tf.ops import _loader
    ops = _loader.load()
    raw_enc = tf.function(lambda i, n: getattr(ops, f"deep_reduce_index_encode_{codec}")(i, n))
    raw_dec = tf.function(lambda p: getattr(ops, f"deep_reduce_index_decode_{codec}")(p))
    with pytest.raises(ValueError, match="rank"):
        raw_enc.get_concrete_function(tf.TensorSpec([2, 3], dtype), tf.TensorSpec([], tf.int64))
    with pytest.raises(ValueError, match="rank"):
        raw_enc.get_concrete_function(tf.TensorSpec([3], dtype), tf.TensorSpec([1], tf.int64))
    with pytest.raises(ValueError, match="rank"):
        raw_dec.get_concrete_function(tf.TensorSpec([], tf.uint8))


@pytest.mark.parametrize("codec", CODECS)
def test_graph_mode_roundtrip(codec):
    @tf.function
    def f(i, n):
        return index.decode(codec, index.encode(codec, i, n))

    idx = np.array([0, 2, 3, 99], np.int64)
    np.testing.assert_array_equal(f(tf.constant(idx), tf.constant(100, tf.int64)).numpy(), idx)


# --------------------------------------------------------------------------
# Adversarial payloads: InvalidArgumentError or a valid set, never a crash.


def check_decode(codec, payload, stats):
    """Decodes a (possibly corrupt) payload; it must fail cleanly or yield a
    strictly increasing set of K indices in [0, n) of its own header."""
    payload = np.asarray(bytearray(payload), dtype=np.uint8)
    try:
        out = index.decode(codec, payload).numpy()
    except tf.errors.InvalidArgumentError:
        stats["rejected"] += 1
        return
    hdr = ref.parse_common_header(payload.tobytes())
    assert hdr is not None and hdr[0] == ref.CODEC_IDS[codec], payload
    assert ref.is_valid_set(out, hdr[2], hdr[3]), (payload, out)
    stats["accepted"] += 1


def replace_varints(data, n=None, k=None):
    """A payload with the common header's n and/or K varints replaced."""
    n0, pos = ref.read_varint(data, 3)
    k0, end = ref.read_varint(data, pos)
    return (data[:3] + ref.varint(n0 if n is None else n) + ref.varint(k0 if k is None else k) +
            data[end:])


@pytest.mark.parametrize("codec", CODECS)
def test_fuzz_decoders(codec):
    rng = np.random.default_rng(ref.CODEC_IDS[codec])
    n = 3000 if codec == "bitmap" else 20_000
    idx = np.union1d(clustered_set(rng, n, 150, clusters=2), [0, n - 1])
    kw = {"block_size": 16} if codec == "golomb" else {}
    good = index.encode(codec, idx, n, **kw).numpy().tobytes()
    stats = {"rejected": 0, "accepted": 0}
    # Truncated at every length, and extended.
    for cut in range(len(good)):
        check_decode(codec, good[:cut], stats)
    for extra in range(1, 40):
        check_decode(codec, good + bytes(rng.integers(0, 256, extra, dtype=np.uint8)), stats)
        check_decode(codec, good + bytes(extra), stats)
    # Random bit flips (1-3 bits), focused half the time on the first bytes.
    for t in range(6000):
        b = bytearray(good)
        for _ in range(rng.integers(1, 4)):
            limit = len(b) if t % 2 else min(len(b), 48)
            pos = rng.integers(0, limit)
            b[pos] ^= 1 << rng.integers(0, 8)
        check_decode(codec, b, stats)
    # Random bytes, with and without a valid magic/codec/version prefix.
    prefix = bytes([ref.MAGIC, ref.CODEC_IDS[codec], ref.VERSION])
    for t in range(1500):
        body = bytes(rng.integers(0, 256, rng.integers(0, 64), dtype=np.uint8))
        check_decode(codec, body, stats)
        check_decode(codec, prefix + body, stats)
    # Header fields at extreme values.
    for nn in (0, 1, n - 1, n + 1, 2**31, 2**32, 2**62, 2**63 - 1):
        check_decode(codec, replace_varints(good, n=nn), stats)
    for kk in (0, 1, len(idx) - 1, len(idx) + 1, 2**31, 2**40, 2**63 - 1):
        check_decode(codec, replace_varints(good, k=kk), stats)
        check_decode(codec, replace_varints(good, n=2**63 - 1, k=kk), stats)
    for bad in (prefix[:1] + b"\x00" + prefix[2:], prefix[:2] + b"\x02", b"\x00" + prefix[1:]):
        check_decode(codec, bad + good[3:], stats)
    # Overlong / non-canonical varints.
    check_decode(codec, prefix + b"\xff" * 9 + b"\x01\x00", stats)
    check_decode(codec, prefix + b"\x80\x00\x00", stats)
    if codec == "golomb":
        hdr_end = len(ref.header("golomb", n, len(idx)))
        s0, s_end = ref.read_varint(good, hdr_end + 1)
        for log2b in (0, 3, 4, 5, 16, 17, 255):
            b = bytearray(good)
            b[hdr_end] = log2b
            check_decode(codec, b, stats)
        for s in (0, 1, s0 - 1, s0 + 1, 2**32, 2**63 - 1):
            check_decode(codec, good[:hdr_end + 1] + ref.varint(s) + good[s_end:], stats)
        # Every table byte set to extremes.
        for pos in range(s_end, s_end + 40):
            for v in (0x00, 0xFF):
                b = bytearray(good)
                b[pos] = v
                check_decode(codec, b, stats)
    assert stats["rejected"] > 0
    # The untouched payload still decodes.
    np.testing.assert_array_equal(index.decode(codec, np.frombuffer(good, np.uint8)).numpy(), idx)


def test_fuzz_small_payload_allocation():
    """A tiny payload claiming a huge K or n must be refused before any
    allocation of that size (the call returns quickly, without OOM)."""
    for codec in CODECS:
        for n, k in ((2**62, 2**61), (2**63 - 1, 2**63 - 1), (2**40, 2**40)):
            payload = ref.header(codec, n, k) + bytes(range(12))
            with pytest.raises(tf.errors.InvalidArgumentError):
                index.decode(codec, np.frombuffer(payload, np.uint8))
