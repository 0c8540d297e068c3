"""The value codecs' GPU kernels against their CPU kernels (CUDA build with a
GPU only; those tests skip otherwise), and one check that needs only nvcc:
the kernels that must reproduce the CPU's bits contain no fused double
multiply-add.

Byte for byte: fp16/bf16 encode and decode, qsgd encode and decode, polyfit
encode (payload and perm, both segmentations) and decode. dexp decode
evaluates exp() in double on both sides, and CUDA's exp and glibc's may
differ in the last bit of a double, so its float results are required to
agree within 1 ulp (in practice they are identical). dexp encode: the same
perm, header, sign split and exponents p, q (computed without exp()); the
amplitudes a, b within 4 float ulps, unless the two candidate fits tie to
within that rounding, where both devices' choices fit equally well (see
kernels/value/dexp.h). Error messages on bad input must be the same on both
devices.
"""
import os
import re
import shutil
import subprocess

import numpy as np
import pytest
import tensorflow as tf

import deepreduce_tf
import value_reference as ref
from deepreduce_tf.ops import _loader, value

# tests/ops/<this file> -> the repository root
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

IAE = tf.errors.InvalidArgumentError
SIZES = (0, 1, 7, 8, 9, 1000, 100_003)


# Self-contained (Bazel runs each test file without the others): the GPU
# fixture of test_cuda_build.py and input generators like test_value_codecs.py's.
@pytest.fixture
def gpu():
    if not deepreduce_tf.cuda_built():
        pytest.skip("CPU-only build of the op library (deepreduce_tf.cuda_built() is "
                    "False); rebuild with DEEPREDUCE_TF_CUDA=1 bash build_deps/dev.sh "
                    "setup to test the CUDA kernels")
    if not tf.config.list_physical_devices("GPU"):
        pytest.skip("no GPU visible to TensorFlow (tensorflow-cpu, or no CUDA device): "
                    "the GPU kernels are registered but cannot run here")


requires_gpu = pytest.mark.usefixtures("gpu")


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def heavy_tailed(rng, k, dist="laplace", factor=10):
    """The top 1/factor by magnitude of factor*k Laplace/normal values, in
    random order: what top-k hands to a value codec."""
    v = rng.laplace(size=factor * k) if dist == "laplace" else rng.normal(size=factor * k)
    idx = np.argpartition(-np.abs(v), k - 1)[:k] if k else np.zeros(0, np.int64)
    return rng.permutation(v[idx]).astype(np.float32)


def special_floats(rng):
    """Edge cases of the casts, random bit patterns and rounding ties."""
    specials = np.array([0.0, -0.0, 1.0, -1.0, 65504.0, 65520.0, 65519.99, 1e-8, 6e-8,
                         5.96e-8, 2.98e-8, 2.9802322e-8, 6.1035156e-05, 6.1e-05, 3e38, -3e38,
                         1.0009765625, 1.00048828125, 1.000732421875, 1.001953125,
                         np.inf, -np.inf, np.nan], np.float32)
    raw = rng.integers(0, 2 ** 32, size=200_000, dtype=np.uint64).astype(np.uint32)
    ties = (rng.integers(0, 2 ** 16, size=20_000, dtype=np.uint32) << 16) | 0x8000
    ties13 = (rng.integers(0, 2 ** 19, size=20_000, dtype=np.uint32) << 13) | 0x1000
    return np.concatenate([specials, raw.view(np.float32), ties.view(np.float32),
                           ties13.view(np.float32)])


def mutations(p, rng):
    """Truncations, extensions, bit flips, byte overwrites and extreme fixed
    fields of one valid payload."""
    n = p.size
    for cut in sorted(set(np.linspace(0, n - 1, min(n, 40)).astype(int))):
        yield p[:cut]
    for extra in (1, 8):
        yield np.concatenate([p, np.zeros(extra, np.uint8)])
    for b in rng.choice(8 * n, size=min(8 * n, 300), replace=False):
        q = p.copy()
        q[b // 8] ^= np.uint8(1 << (b % 8))
        yield q
    for _ in range(100):
        q = p.copy()
        pos = rng.integers(0, n, size=rng.integers(1, 4))
        q[pos] = rng.integers(0, 256, size=pos.size, dtype=np.uint8)
        yield q
    for off in range(0, min(n, 40), 4):
        for width, vals in ((4, (0, 1, 2 ** 31 - 1, 2 ** 32 - 1)),
                            (8, (2 ** 40, 2 ** 48, 2 ** 63, 2 ** 64 - 1))):
            if off + width <= n:
                for val in vals:
                    q = p.copy()
                    q[off:off + width] = np.frombuffer(val.to_bytes(width, "little"), np.uint8)
                    yield q


def on(device, fn, *args, **kwargs):
    with tf.device(device):
        return fn(*args, **kwargs)


def encode_both(codec, v, **params):
    """Payload bytes from the CPU and from the GPU kernel."""
    out = []
    for device in ("/CPU:0", "/GPU:0"):
        with tf.device(device):
            payload = value.encode(codec, tf.constant(v, tf.float32), **params).payload
        if device == "/GPU:0":
            assert "GPU" in payload.device, f"ran on {payload.device}, not the GPU kernel"
        out.append(payload.numpy())
    return out


def decode_both(codec, payload, **params):
    out = []
    for device in ("/CPU:0", "/GPU:0"):
        with tf.device(device):
            if codec in value.SORTING_CODECS:
                params.setdefault("max_values", 1 << 24)  # the receiver's bound
            dec = value.decode(codec, tf.constant(payload, tf.uint8), **params)
        if device == "/GPU:0":
            assert "GPU" in dec.device, f"ran on {dec.device}, not the GPU kernel"
        out.append(dec.numpy())
    return out


def bits(x):
    return np.asarray(x, np.float32).view(np.uint32)


def outcome(device, decode_op, payload):
    """('ok', float bits) or ('error', message) of one decode."""
    try:
        with tf.device(device):
            return "ok", bits(decode_op(tf.constant(payload, tf.uint8)).numpy())
    except IAE as e:
        return "error", e.message


# --------------------------------------------------------------------------
# fp16 / bf16


@requires_gpu
@pytest.mark.parametrize("codec", ["fp16", "bf16"])
@pytest.mark.parametrize("k", SIZES)
def test_half_encode_decode_match_cpu(rng, codec, k):
    v = rng.standard_normal(k).astype(np.float32) * 1e3
    cpu, gpu_ = encode_both(codec, v)
    assert cpu.tobytes() == gpu_.tobytes()
    d_cpu, d_gpu = decode_both(codec, cpu)
    np.testing.assert_array_equal(bits(d_gpu), bits(d_cpu))


@requires_gpu
@pytest.mark.parametrize("codec", ["fp16", "bf16"])
def test_half_special_floats_and_every_pattern_match_cpu(rng, codec):
    cpu, gpu_ = encode_both(codec, special_floats(rng))
    assert cpu.tobytes() == gpu_.tobytes()
    patterns = np.arange(2 ** 16, dtype=np.uint16)
    payload = np.concatenate([np.frombuffer(ref.HEADER.pack(ref.MAGIC, ref.CODEC_IDS[codec], 1,
                                                            0, patterns.size), np.uint8),
                              patterns.view(np.uint8)])
    d_cpu, d_gpu = decode_both(codec, payload)
    np.testing.assert_array_equal(bits(d_gpu), bits(d_cpu))


# --------------------------------------------------------------------------
# qsgd


@requires_gpu
@pytest.mark.parametrize("k", SIZES + (300_000,))
@pytest.mark.parametrize("bits_,bucket", [(1, 512), (2, 1), (3, 7), (4, 512), (7, 512),
                                          (8, 100_000), (5, 1 << 30)])
def test_qsgd_matches_cpu(rng, k, bits_, bucket):
    v = heavy_tailed(rng, k)
    if k > 4:
        v[:3] = 0.0
        v[3] = -0.0
    params = dict(bits=bits_, bucket_size=bucket, seed=2 ** 63 + k)
    cpu, gpu_ = encode_both("qsgd", v, **params)
    assert cpu.tobytes() == gpu_.tobytes()
    d_cpu, d_gpu = decode_both("qsgd", cpu)
    np.testing.assert_array_equal(bits(d_gpu), bits(d_cpu))


@requires_gpu
def test_qsgd_seed_as_graph_input_matches_cpu(rng):
    v = heavy_tailed(rng, 5000)

    @tf.function
    def enc(x, seed):
        return value.encode("qsgd", x, bits=4, bucket_size=64, seed=seed).payload

    out = [on(d, enc, tf.constant(v), tf.constant(123, tf.int64)).numpy()
           for d in ("/CPU:0", "/GPU:0")]
    assert out[0].tobytes() == out[1].tobytes()


def error_message(device, fn, *args, **kwargs):
    with pytest.raises(IAE) as e:
        with tf.device(device):
            out = fn(*args, **kwargs)
            tf.nest.map_structure(lambda t: t.numpy(), out)
    return e.value.message


@requires_gpu
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_qsgd_rejects_non_finite_like_cpu(rng, bad):
    v = rng.standard_normal(10_000).astype(np.float32)
    v[1234] = bad
    v[5000] = np.nan
    msgs = [error_message(d, lambda: value.encode("qsgd", tf.constant(v)).payload)
            for d in ("/CPU:0", "/GPU:0")]
    assert msgs[0] == msgs[1]
    assert "values[1234]" in msgs[1]


def _qsgd_corruptions(payload, k, bucket, w):
    nb = (k + bucket - 1) // bucket
    scales = 24
    codes = scales + 4 * nb
    out = []
    for b, val in ((0, np.nan), (nb - 1, -1.0), (nb // 2, np.inf)):
        q = payload.copy()
        q[scales + 4 * b:scales + 4 * b + 4] = np.frombuffer(np.float32(val).tobytes(), np.uint8)
        out.append(q)
    if (k * w) % 8:
        q = payload.copy()
        q[-1] |= 0x80
        out.append(q)
    q = payload.copy()
    q[codes + 5] = 0x88  # w = 4, s = 7: code 8 is a sign on level 0 ("-0")
    out.append(q)
    q = payload.copy()
    q[codes:codes + 10] = 0x88  # and a bad scale later: the scale is reported
    q[scales + 4 * (nb - 1):scales + 4 * nb] = 0xff
    out.append(q)
    return out


@requires_gpu
def test_qsgd_decode_rejects_corruption_like_cpu(rng):
    k, bucket = 1001, 100
    v = heavy_tailed(rng, k)
    payload = value.encode("qsgd", v, bits=3, bucket_size=bucket).payload.numpy()
    for q in _qsgd_corruptions(payload, k, bucket, 4):
        msgs = [error_message(d, value.decode, "qsgd", tf.constant(q)) for d in
                ("/CPU:0", "/GPU:0")]
        assert msgs[0] == msgs[1]


# --------------------------------------------------------------------------
# polyfit and dexp encode


def encode_both_with_perm(codec, v, **params):
    out = []
    for device in ("/CPU:0", "/GPU:0"):
        with tf.device(device):
            enc = value.encode(codec, tf.constant(v, tf.float32), **params)
        if device == "/GPU:0":
            assert "GPU" in enc.payload.device, f"ran on {enc.payload.device}"
        out.append((enc.payload.numpy(), enc.perm.numpy()))
    return out


@requires_gpu
@pytest.mark.parametrize("k", SIZES + (250_000,))
@pytest.mark.parametrize("segmentation,degree,segments", [
    ("greedy", 5, 0), ("geometric", 5, 0), ("greedy", 0, 3), ("geometric", 1, 7),
    ("greedy", 15, 40), ("geometric", 2, 1000), ("greedy", 5, 1000)])
@pytest.mark.parametrize("out_idx", [tf.int32, tf.int64], ids=["int32", "int64"])
def test_polyfit_encode_matches_cpu(rng, k, segmentation, degree, segments, out_idx):
    v = heavy_tailed(rng, k)
    if k > 8:
        v[: k // 10] = np.round(v[: k // 10], 1)  # ties: the sort must be stable
    (p_cpu, i_cpu), (p_gpu, i_gpu) = encode_both_with_perm(
        "polyfit", v, segmentation=segmentation, degree=degree, segments=segments,
        out_idx=out_idx)
    np.testing.assert_array_equal(i_gpu, i_cpu)
    assert p_gpu.tobytes() == p_cpu.tobytes()


@requires_gpu
@pytest.mark.parametrize("k", SIZES + (250_000,))
@pytest.mark.parametrize("dist", ["laplace", "normal"])
def test_dexp_encode_matches_cpu(rng, k, dist):
    v = heavy_tailed(rng, k, dist)
    (p_cpu, i_cpu), (p_gpu, i_gpu) = encode_both_with_perm("dexp", v)
    np.testing.assert_array_equal(i_gpu, i_cpu)
    assert p_gpu[:24].tobytes() == p_cpu[:24].tobytes()  # header and P
    c_cpu, c_gpu = p_cpu[24:].view(np.float32), p_gpu[24:].view(np.float32)
    for part in range(2):
        cc, cg = c_cpu[4 * part:4 * part + 4], c_gpu[4 * part:4 * part + 4]
        if cc[1] == cg[1] and cc[3] == cg[3]:  # same candidate: p, q equal
            np.testing.assert_array_max_ulp(cg, cc, maxulp=4)
        else:  # a tie between the candidates decided differently
            y = np.sort(v)[::-1].astype(np.float64)
            dec = [value.decode("dexp", tf.constant(p), max_values=v.size).numpy() for p in (p_cpu, p_gpu)]
            errs = [np.sum((d - y) ** 2) for d in dec]
            assert errs[1] <= errs[0] * (1 + 1e-5) + 1e-30


# --------------------------------------------------------------------------
# polyfit and dexp decode (payloads from the CPU encoder)


@requires_gpu
@pytest.mark.parametrize("k", SIZES)
@pytest.mark.parametrize("segmentation,degree,segments", [
    ("greedy", 5, 0), ("geometric", 5, 0), ("greedy", 0, 3), ("greedy", 15, 40),
    ("geometric", 2, 1000)])
def test_polyfit_decode_matches_cpu(rng, k, segmentation, degree, segments):
    v = heavy_tailed(rng, k)
    payload = value.encode("polyfit", v, segmentation=segmentation, degree=degree,
                           segments=segments).payload.numpy()
    d_cpu, d_gpu = decode_both("polyfit", payload)
    np.testing.assert_array_equal(bits(d_gpu), bits(d_cpu))


@requires_gpu
@pytest.mark.parametrize("k", SIZES)
@pytest.mark.parametrize("dist", ["laplace", "normal"])
def test_dexp_decode_matches_cpu_within_an_ulp(rng, k, dist):
    v = heavy_tailed(rng, k, dist)
    payload = value.encode("dexp", v).payload.numpy()
    d_cpu, d_gpu = decode_both("dexp", payload)
    assert d_gpu.shape == d_cpu.shape
    np.testing.assert_array_max_ulp(d_gpu, d_cpu, maxulp=1)
    np.testing.assert_array_equal(np.signbit(d_gpu), np.signbit(d_cpu))


# --------------------------------------------------------------------------
# Adversarial payloads: both devices accept the same payloads, with the same
# values, and reject the others with the same message.


@requires_gpu
@pytest.mark.parametrize("codec", ["polyfit", "dexp", "qsgd", "fp16", "bf16"])
def test_fuzzed_payloads_same_outcome_on_both_devices(codec):
    rng = np.random.default_rng(ref.CODEC_IDS[codec] + 100)
    v = heavy_tailed(rng, 150)
    v[:3] = 0.0
    valid = [value.encode(codec, v).payload.numpy()]
    if codec == "qsgd":
        valid.append(value.encode(codec, v, bits=3, bucket_size=7).payload.numpy())
    ops = _loader.load()
    decode_op = {
        "polyfit": lambda p: ops.deep_reduce_polyfit_decode(p, max_values=1 << 20),
        "dexp": lambda p: ops.deep_reduce_dexp_decode(p, max_values=1 << 20),
        "qsgd": ops.deep_reduce_qsgd_decode,
        "fp16": ops.deep_reduce_fp16_decode,
        "bf16": ops.deep_reduce_bf16_decode,
    }[codec]
    for payload in valid:
        for q in mutations(payload, rng):
            cpu = outcome("/CPU:0", decode_op, q)
            gpu_ = outcome("/GPU:0", decode_op, q)
            assert cpu[0] == gpu_[0], (cpu, gpu_)
            if cpu[0] == "error":
                assert cpu[1] == gpu_[1]
            elif codec == "dexp":
                np.testing.assert_array_max_ulp(cpu[1].view(np.float32),
                                                gpu_[1].view(np.float32), maxulp=1)
            else:
                np.testing.assert_array_equal(cpu[1], gpu_[1])


# --------------------------------------------------------------------------
# Without a GPU: the PTX of the kernels whose results must equal the CPU's
# bits has no fma.rn.f64. nvcc contracts a * b + c into an FMA unless the
# product is DR_DMUL (__dmul_rn); g++ on x86-64 never fuses. One missed
# DR_DMUL in lsq.h / polyfit.h / dexp.h would make the GPU payloads differ
# in the last bits, and no machine here can run the kernels to notice.
# (exp() and log() are libdevice code built on FMAs: the dexp steps that
# call them are excluded; dexp.h documents the resulting tolerance.)
EXACT_KERNELS = [
    "PolyfitGreedyKernel", "PolyfitBlocksKernel", "PolyfitFinishKernel",
    "PolyfitDecodeKernel", "QsgdPackKernel",
    "DexpBlocksKernelILi1E",   # kDexpIntegral
    "DexpBlocksKernelILi2E",   # kDexpRows
    "DexpCombineKernelILi1E",  # IntegralStarts
    "DexpCombineKernelILi2E",  # Roots: p and q
]


def test_exact_kernels_have_no_double_fma(tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not found")
    root = _REPO_ROOT
    ptx = tmp_path / "value_kernels.ptx"
    res = subprocess.run(
        [nvcc, "-std=c++17", "-O3", f"-I{root}", "--expt-relaxed-constexpr", "-ptx",
         "-arch=compute_75", os.path.join(root, "kernels", "value", "value_kernels.cu"),
         "-o", str(ptx)],
        capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    entries = re.split(r"\n(?=\.(?:visible \.)?entry )", ptx.read_text())
    for kernel in EXACT_KERNELS:
        bodies = [e for e in entries if re.match(r"\.(?:visible \.)?entry \S*" + kernel, e)]
        assert len(bodies) == 1, (kernel, len(bodies))
        assert "fma.rn.f64" not in bodies[0], f"{kernel} fuses a double multiply-add"
