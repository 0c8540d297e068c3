"""The CUDA kernels of the lossless index codecs (kernels/index/
index_kernels_gpu.cc) against their CPU kernels: the same payload bytes for
the same indices, the same decoded indices, and the same InvalidArgumentError
messages for bad indices and for corrupt payloads.

These tests need a CUDA build (DEEPREDUCE_TF_CUDA=1) and a GPU visible to
TensorFlow; without them they skip. Registration (which ops have GPU kernels,
which arguments live in host memory) is checked in tests/ops/test_cuda_build.py on
every CUDA build; tests/cuda/index_cuda_test.cu compares the kernels with the
codec headers without TensorFlow.
"""
import numpy as np
import pytest
import tensorflow as tf

import deepreduce_tf
import index_reference as ref
from deepreduce_tf.ops import index

CODECS = index.CODECS
DTYPES = [tf.int32, tf.int64]


@pytest.fixture(autouse=True)
def gpu():
    if not deepreduce_tf.cuda_built():
        pytest.skip("CPU-only build of the op library; rebuild with DEEPREDUCE_TF_CUDA=1 "
                    "bash build_deps/dev.sh setup to test the CUDA kernels")
    if not tf.config.list_physical_devices("GPU"):
        pytest.skip("no GPU visible to TensorFlow: the GPU kernels cannot run here")


@pytest.fixture(params=DTYPES, ids=["int32", "int64"])
def dtype(request):
    return request.param


def on(device, fn, *args, **kwargs):
    with tf.device(device):
        return fn(*args, **kwargs)


def random_set(rng, n, k):
    return np.sort(rng.choice(n, size=k, replace=False)).astype(np.int64)


def clustered_set(rng, n, k, clusters=5, width=0.01):
    centers = rng.integers(0, n, clusters)
    dense = np.concatenate([
        c + rng.integers(0, max(1, int(width * n)), k // (2 * clusters)) for c in centers])
    sparse = rng.integers(0, n, k - len(dense))
    return np.unique(np.clip(np.concatenate([dense, sparse]), 0, n - 1))


def assert_same_roundtrip(codec, idx, n, dtype, **kw):
    idx = np.asarray(idx, dtype=dtype.as_numpy_dtype)
    p_cpu = on("/CPU:0", index.encode, codec, tf.constant(idx, dtype), n, **kw)
    p_gpu = on("/GPU:0", index.encode, codec, tf.constant(idx, dtype), n, **kw)
    assert "GPU" in p_gpu.device, p_gpu.device
    assert p_gpu.numpy().tobytes() == p_cpu.numpy().tobytes(), codec
    for out_idx in DTYPES:
        if out_idx == tf.int32 and n > 2**31:
            continue
        d_gpu = on("/GPU:0", index.decode, codec, p_cpu, out_idx=out_idx)
        assert "GPU" in d_gpu.device, d_gpu.device
        assert d_gpu.dtype == out_idx
        np.testing.assert_array_equal(d_gpu.numpy(), idx.astype(np.int64))


EDGE_CASES = {
    "empty": (1000, []),
    "empty_n0": (0, []),
    "n1_empty": (1, []),
    "n1_full": (1, [0]),
    "single_first": (1000, [0]),
    "single_last": (1000, [999]),
    "first_and_last": (1000, [0, 999]),
    "full": (3000, list(range(3000))),
    "full_but_one": (3000, [i for i in range(3000) if i != 1234]),
    "n_not_multiple_of_8": (13, [1, 2, 12]),
    "n_not_multiple_of_32": (45, [0, 31, 32, 44]),
    "dense_prefix": (5000, list(range(2048))),
}


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("case", sorted(EDGE_CASES))
def test_gpu_matches_cpu_edge_cases(codec, case, dtype):
    n, idx = EDGE_CASES[case]
    assert_same_roundtrip(codec, idx, n, dtype)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("density", [0.001, 0.01, 0.1, 0.5])
def test_gpu_matches_cpu_random(codec, density, dtype):
    rng = np.random.default_rng(int(density * 1e4) + 1)
    n = 1_000_003
    idx = np.union1d(random_set(rng, n, int(n * density)), [0, n - 1])
    assert_same_roundtrip(codec, idx, n, dtype)


@pytest.mark.parametrize("codec", CODECS)
def test_gpu_matches_cpu_clustered(codec, dtype):
    rng = np.random.default_rng(7)
    n = 3_000_000
    assert_same_roundtrip(codec, clustered_set(rng, n, 60_000), n, dtype)


@pytest.mark.parametrize("block_size", [16, 64, 1024, 65536])
def test_gpu_golomb_block_sizes(block_size, dtype):
    rng = np.random.default_rng(block_size)
    n = 500_000
    idx = np.union1d(clustered_set(rng, n, 20_000), [0, n - 1])
    assert_same_roundtrip("golomb", idx, n, dtype, block_size=block_size)


GOLOMB_AUTO_SETS = {
    "random_1pct": lambda rng: (1_000_003, random_set(rng, 1_000_003, 10_000)),
    "random_0.1pct": lambda rng: (1_000_003, random_set(rng, 1_000_003, 1_000)),
    "clustered": lambda rng: (3_000_000, clustered_set(rng, 3_000_000, 60_000)),
    "tight_clusters": lambda rng: (1_000_000, clustered_set(rng, 1_000_000, 3000, 20, 0.0005)),
    "tiny": lambda rng: (1000, np.array([3, 5, 700], np.int64)),
    "empty": lambda rng: (1000, np.array([], np.int64)),
}


@pytest.mark.parametrize("case", sorted(GOLOMB_AUTO_SETS))
@pytest.mark.parametrize("block_size", ["auto", None, 0])
def test_gpu_golomb_auto_block_size(case, block_size, dtype):
    """The GPU's candidate pass picks the CPU's (and the reference's) block
    size: the same bytes."""
    n, idx = GOLOMB_AUTO_SETS[case](np.random.default_rng(5))
    assert_same_roundtrip("golomb", idx, n, dtype, block_size=block_size)
    p_gpu = on("/GPU:0", index.encode, "golomb", tf.constant(idx, dtype), n,
               block_size=block_size)
    assert p_gpu.numpy().tobytes() == ref.encode("golomb", idx, n)


@pytest.mark.parametrize("gap", [0, 240, 241, 2287, 2288, 67823, 67824, 2**24, 2**40, 2**62])
def test_gpu_rle_varint_classes(gap):
    assert_same_roundtrip("rle", [gap], gap + 2, tf.int64)


def test_gpu_huge_universe_int64():
    n = 2**62
    for codec in ("rle", "golomb"):
        assert_same_roundtrip(codec, [0, 5, 2**40, 2**61, n - 1], n, tf.int64)


def test_gpu_in_a_graph():
    @tf.function
    def f(i, n):
        return [index.decode(c, index.encode(c, i, n)) for c in CODECS]

    idx = np.array([0, 2, 3, 99], np.int64)
    with tf.device("/GPU:0"):
        outs = f(tf.constant(idx), tf.constant(100, tf.int64))
    for out in outs:
        np.testing.assert_array_equal(out.numpy(), idx)


# --------------------------------------------------------------------------
# The same errors on both devices.


def message(device, fn, *args, **kwargs):
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        with tf.device(device):
            fn(*args, **kwargs).numpy()
    return e.value.message


def decode_outcome(device, codec, payload, out_idx=tf.int64):
    """("ok", indices) or ("error", message) of one decode."""
    try:
        with tf.device(device):
            return "ok", index.decode(codec, payload, out_idx=out_idx).numpy().tolist()
    except tf.errors.InvalidArgumentError as e:
        return "error", e.message


@pytest.mark.parametrize("codec", CODECS)
def test_gpu_encode_errors_match_cpu(codec, dtype):
    cases = [([1, 5, 10], 10), ([-1, 5], 10), ([1, 5, 5], 10), ([4, 3], 10),
             ([0, 1, 2], 2), ([], -1)]
    if codec == "int32":
        cases.append(([1], 2**31 + 1))
    for idx, n in cases:
        if dtype == tf.int32 and n > 2**31:
            continue
        t = tf.constant(idx, dtype)
        assert message("/GPU:0", index.encode, codec, t, n) == \
            message("/CPU:0", index.encode, codec, t, n), (idx, n)


@pytest.mark.parametrize("codec", CODECS)
def test_gpu_decode_errors_match_cpu(codec):
    """Truncated, extended, bit-flipped and random payloads: the GPU kernel
    accepts exactly what the CPU kernel accepts, with the same result or the
    same message."""
    rng = np.random.default_rng(ref.CODEC_IDS[codec] + 100)
    n = 3000 if codec == "bitmap" else 20_000
    idx = np.union1d(clustered_set(rng, n, 150, clusters=2), [0, n - 1])
    kw = {"block_size": 16} if codec == "golomb" else {}
    good = index.encode(codec, idx, n, **kw).numpy().tobytes()
    payloads = [good[:cut] for cut in range(0, len(good), max(1, len(good) // 60))]
    payloads += [good + bytes(extra) for extra in (1, 3, 9)]
    for t in range(300):
        b = bytearray(good)
        for _ in range(rng.integers(1, 4)):
            limit = len(b) if t % 2 else min(len(b), 48)
            b[rng.integers(0, limit)] ^= 1 << rng.integers(0, 8)
        payloads.append(bytes(b))
    prefix = bytes([ref.MAGIC, ref.CODEC_IDS[codec], ref.VERSION])
    for _ in range(100):
        payloads.append(prefix + bytes(rng.integers(0, 256, rng.integers(0, 64), dtype=np.uint8)))
    for p in payloads:
        arr = np.frombuffer(p, np.uint8)
        for out_idx in DTYPES:
            assert decode_outcome("/GPU:0", codec, arr, out_idx) == \
                decode_outcome("/CPU:0", codec, arr, out_idx), (p, out_idx)
