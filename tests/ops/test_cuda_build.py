"""What the compiled op library registers, per build variant, and the GPU
kernels against the CPU kernels.

Always (CPU and CUDA builds): every DeepReduce op has a CPU kernel for every
index dtype it accepts, and a CPU build registers no GPU kernel.
CUDA build (DEEPREDUCE_TF_CUDA=1, deepreduce_tf.cuda_built()): exactly the ops
in GPU_OPS have GPU kernels, for int32 and int64, with their scalars in host
memory; the library loads in tensorflow-cpu (it got this far).
With a GPU: GPU and CPU kernels agree byte for byte on random inputs and
reject bad input with the same errors. Without one these tests skip.

The index and value codecs' GPU-vs-CPU tests are in tests/ops/test_index_cuda.py
and tests/ops/test_value_cuda.py. The same comparisons without TensorFlow:
tests/cuda/*_cuda_test.cu
(bash build_deps/build_cuda_test.sh).
"""
import glob
import itertools
import os
import re

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import op_def_pb2
from tensorflow.python.client import pywrap_tf_session
from tensorflow.python.framework import kernels

import deepreduce_tf
from deepreduce_tf.ops import bloom, codec_table

PREFIX = "DeepReduce>"
# The index codecs' ops, from the codec table: with CUDA kernels where the
# row says gpu=True (kernels/index/index_kernels_gpu.cc), else CPU only.
INDEX_CODECS = tuple(codec_table.camel(r.name) for r in codec_table.rows("index", "index")
                     if r.gpu)
INDEX_CPU_CODECS = tuple(codec_table.camel(r.name) for r in codec_table.rows("index", "index")
                         if not r.gpu)
# The value codecs without CUDA kernels (gpu=False, e.g. deflate): CPU only.
VALUE_CPU_CODECS = tuple(codec_table.camel(r.name) for r in codec_table.rows("value", "value")
                         if not r.gpu)
# Ops with a CUDA kernel (kernels/bloom/bloom_kernels_gpu.cc,
# kernels/index/index_kernels_gpu.cc), and the inputs and outputs those
# kernels keep in host memory.
GPU_OPS = {
    PREFIX + "BloomFilterInsert": {"universe_size", "filter_bits", "filter_hashes"},
    PREFIX + "BloomFilterQuery": {"universe_size", "filter_bits", "filter_hashes"},
    PREFIX + "TopK": {"k"},
    PREFIX + "RandomK": {"k", "seed"},
    PREFIX + "ThresholdSelect": {"threshold"},
    # kernels/sparsify/sparsify_kernels_gpu.cc: one OpKernel class with the
    # CPU's (SegmentedSelectOp), a segmented radix select on the GPU
    PREFIX + "SegmentedTopK": {"offsets", "k"},
    PREFIX + "SegmentedRandomK": {"offsets", "k", "seed"},
    **{PREFIX + f"IndexEncode{codec}": {"universe_size"} for codec in INDEX_CODECS},
    **{PREFIX + f"IndexDecode{codec}": set() for codec in INDEX_CODECS},
    # kernels/value/value_kernels_gpu.cc
    PREFIX + "Fp16Encode": set(),
    PREFIX + "Fp16Decode": set(),
    PREFIX + "Bf16Encode": set(),
    PREFIX + "Bf16Decode": set(),
    PREFIX + "QsgdEncode": {"seed"},
    PREFIX + "QsgdDecode": set(),
    PREFIX + "PolyfitEncode": set(),
    PREFIX + "PolyfitDecode": set(),
    PREFIX + "DexpEncode": set(),
    PREFIX + "DexpDecode": set(),
    # kernels/fusion/fusion_kernels_gpu.cc
    PREFIX + "FlattenConcat": set(),
    PREFIX + "SplitReshape": set(),
    # kernels/fusion/check_kernels_gpu.cc: the decoding's checks (a value
    # forwarded, its bool condition read on the host)
    PREFIX + "Check": {"condition"},
}
# Ops that are CPU-only by design: Select works on the ~K positives with a
# sequential greedy (conflict_sets); BuildInfo returns a string; Deflate is zlib;
# the payload container and permutation ops (kernels/payload/) are host-side
# framing of small byte buffers (header varints, one memcpy per section, a
# hardware CRC32C, a sequential bit packer): a GPU kernel would only add
# device round trips. ScatterSum/ScatterSubtract (in-order scatters of a
# step's decoded values): a replica on a GPU uses TensorFlow's scatter ops;
# AllWithin and AddWithin (a step's range check, with or without the
# compensation) likewise use TensorFlow's ops there (ops/fusion.py: _on_gpu;
# tests/ops/test_gpu_placement.py checks the whole step's placement).
CPU_ONLY_OPS = {PREFIX + "BloomFilterSelect", PREFIX + "BuildInfo",
                *(PREFIX + f"{codec}{op}" for codec in VALUE_CPU_CODECS
                  for op in ("Encode", "Decode")),
                PREFIX + "PayloadPack", PREFIX + "PayloadUnpack",
                PREFIX + "PermEncode", PREFIX + "PermDecode",
                PREFIX + "ScatterSum", PREFIX + "ScatterSubtract", PREFIX + "AllWithin",
                PREFIX + "AddWithin",
                *(PREFIX + f"Index{op}{codec}" for codec in INDEX_CPU_CODECS
                  for op in ("Encode", "Decode"))}
# Ops whose CUDA kernels are not written yet (TensorFlow would place them on
# the CPU). Empty: every op on a gradient's path has one. A new op without a
# GPU kernel has to be listed here, or in CPU_ONLY_OPS, on purpose.
CUDA_PENDING_OPS = set()
INDEX_DTYPES = (tf.int32, tf.int64)


def registered_ops():
    """OpDefs of every registered DeepReduce op, by name (loads the library)."""
    deepreduce_tf.build_info()
    buf = pywrap_tf_session.TF_GetAllOpList()
    try:
        op_list = op_def_pb2.OpList()
        op_list.ParseFromString(pywrap_tf_session.TF_GetBuffer(buf))
    finally:
        pywrap_tf_session.TF_DeleteBuffer(buf)
    return {op.name: op for op in op_list.op if op.name.startswith(PREFIX)}


def type_attrs(op_def):
    """{attr name: allowed DataType enums} of the op's type attributes."""
    return {a.name: list(a.allowed_values.list.type) for a in op_def.attr
            if a.type == "type"}


def kernels_for(op_name, device):
    return [k for k in kernels.get_registered_kernels_for_op(op_name).kernel
            if k.device_type == device]


def has_kernel(op_name, device, bindings):
    """True if a kernel of op_name on device accepts the type bindings
    ({attr: DataType enum})."""
    for k in kernels_for(op_name, device):
        allowed = {c.name: set(c.allowed_values.list.type) for c in k.constraint}
        if all(attr not in allowed or t in allowed[attr] for attr, t in bindings.items()):
            return True
    return False


def type_bindings(op_def):
    """Every assignment of allowed dtypes to the op's type attributes."""
    attrs = type_attrs(op_def)
    names = sorted(attrs)
    return [dict(zip(names, combo)) for combo in itertools.product(*(attrs[n] for n in names))]


def cuda_built():
    return deepreduce_tf.cuda_built()


@pytest.fixture
def cuda_build():
    if not cuda_built():
        pytest.skip("CPU-only build of the op library (deepreduce_tf.cuda_built() "
                    "is False); rebuild with DEEPREDUCE_TF_CUDA=1 bash "
                    "build_deps/dev.sh setup to test the CUDA kernels")


@pytest.fixture
def gpu(cuda_build):
    if not tf.config.list_physical_devices("GPU"):
        pytest.skip("no GPU visible to TensorFlow (tensorflow-cpu, or no CUDA "
                    "device): the GPU kernels are registered but cannot run here")


requires_cuda_build = pytest.mark.usefixtures("cuda_build")
requires_gpu = pytest.mark.usefixtures("gpu")


# --------------------------------------------------------------------------
# Registration, every build.


def test_the_expected_ops_are_registered():
    assert set(registered_ops()) == set(GPU_OPS) | CPU_ONLY_OPS | CUDA_PENDING_OPS


@pytest.mark.parametrize("op_name", sorted(set(GPU_OPS) | CPU_ONLY_OPS | CUDA_PENDING_OPS))
def test_every_op_has_a_cpu_kernel_for_every_dtype(op_name):
    op_def = registered_ops()[op_name]
    for bindings in type_bindings(op_def):
        assert has_kernel(op_name, "CPU", bindings), (op_name, bindings)


def test_cpu_build_registers_no_gpu_kernel():
    if cuda_built():
        pytest.skip("CUDA build: GPU kernels are expected (tested below)")
    for op_name in registered_ops():
        assert kernels_for(op_name, "GPU") == [], op_name


def test_build_info_is_consistent():
    info = deepreduce_tf.build_info()
    assert info["cuda"] is cuda_built()
    if info["cuda"]:
        archs = info["cuda_archs"].split(",")
        assert archs and all(a.isdigit() and int(a) >= 75 for a in archs), info
    else:
        assert info["cuda_archs"] == ""


# --------------------------------------------------------------------------
# Registration, CUDA build.


@requires_cuda_build
@pytest.mark.parametrize("op_name", sorted(GPU_OPS))
def test_gpu_kernel_registered(op_name):
    op_def = registered_ops()[op_name]
    for bindings in type_bindings(op_def):  # every dtype the op accepts (or none)
        assert has_kernel(op_name, "GPU", bindings), (op_name, bindings)
    for k in kernels_for(op_name, "GPU"):
        assert set(k.host_memory_arg) == GPU_OPS[op_name], k


def test_the_cuda_launch_helpers_are_defined_once():
    """GpuStatus and GridSize (and the rest of the launch glue) live in
    kernels/common/gpu_launch.h; no kernel family defines its own."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    found = {"struct GpuStatus": [], "GridSize": [], "ErrorString": []}
    patterns = {"struct GpuStatus": r"^\s*struct GpuStatus\s*\{",
                "GridSize": r"^\s*cudaError_t GridSize\(",
                "ErrorString": r"^const char\* ErrorString\(int cuda_error\) \{"}
    for path in glob.glob(os.path.join(root, "kernels", "**", "*"), recursive=True):
        if not path.endswith((".h", ".cc", ".cu", ".cuh")):
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for what, pattern in patterns.items():
            found[what] += [os.path.relpath(path, root)] * len(re.findall(pattern, text, re.M))
    assert found == {"struct GpuStatus": ["kernels/common/gpu_launch.h"],
                     "GridSize": ["kernels/common/gpu_launch.h"],
                     "ErrorString": ["kernels/common/gpu_launch.cu"]}


@requires_cuda_build
def test_exactly_the_gpu_ops_have_gpu_kernels():
    with_gpu = {name for name in registered_ops() if kernels_for(name, "GPU")}
    assert with_gpu == set(GPU_OPS)


# --------------------------------------------------------------------------
# Execution on a GPU: the CUDA kernels against the CPU kernels.

CASES = [
    # n, k, fpr, seed
    (1, 1, 0.01, 0),
    (1000, 10, 0.01, 0),
    (1023, 1023, 0.5, 3),       # full set
    (1024, 0, 0.01, 0),         # empty set
    (4097, 64, 0.001, 7),
    (100_000, 1000, 0.01, 1),
    (1_000_003, 10_000, 0.001, 2**40 + 5),
    (250_000, 25_000, 0.6, 9),  # NCF-like rate: many positives
]


def random_indices(rng, n, k, np_dtype):
    return rng.choice(n, size=k, replace=False).astype(np_dtype)


def on(device, fn, *args, **kwargs):
    with tf.device(device):
        return fn(*args, **kwargs)


def assert_on_gpu(t):
    assert "GPU" in t.device, f"ran on {t.device}, not the GPU kernel"


@requires_gpu
@pytest.mark.parametrize("n,k,fpr,seed", CASES)
@pytest.mark.parametrize("dtype", INDEX_DTYPES, ids=["int32", "int64"])
def test_gpu_insert_and_query_match_cpu(n, k, fpr, seed, dtype):
    rng = np.random.default_rng(n * 31 + k)
    idx = random_indices(rng, n, k, dtype.as_numpy_dtype)
    f_cpu = on("/CPU:0", bloom.insert, tf.constant(idx, dtype), n, fpr=fpr, seed=seed)
    f_gpu = on("/GPU:0", bloom.insert, tf.constant(idx, dtype), n, fpr=fpr, seed=seed)
    assert_on_gpu(f_gpu.bits)
    assert f_gpu.bits.numpy().tobytes() == f_cpu.bits.numpy().tobytes()
    assert int(f_gpu.num_bits) == int(f_cpu.num_bits)
    assert int(f_gpu.num_hashes) == int(f_cpu.num_hashes)

    p_cpu = on("/CPU:0", bloom.query, f_cpu, n, seed=seed, out_idx=dtype)
    p_gpu = on("/GPU:0", bloom.query, f_gpu, n, seed=seed, out_idx=dtype)
    assert_on_gpu(p_gpu)
    assert p_gpu.dtype == dtype
    np.testing.assert_array_equal(p_gpu.numpy(), p_cpu.numpy())
    assert np.isin(idx, p_gpu.numpy()).all()


@requires_gpu
@pytest.mark.parametrize("dtype", INDEX_DTYPES, ids=["int32", "int64"])
def test_gpu_query_in_a_graph(dtype):
    rng = np.random.default_rng(5)
    n, k = 50_000, 500
    idx = random_indices(rng, n, k, dtype.as_numpy_dtype)

    @tf.function
    def encode_decode(i, n_t):
        f = bloom.insert(i, n_t, fpr=0.01)
        return f.bits, bloom.query(f, n_t, out_idx=dtype)

    with tf.device("/GPU:0"):
        bits_g, pos_g = encode_decode(tf.constant(idx, dtype), tf.constant(n, tf.int64))
    with tf.device("/CPU:0"):
        bits_c, pos_c = encode_decode(tf.constant(idx, dtype), tf.constant(n, tf.int64))
    assert bits_g.numpy().tobytes() == bits_c.numpy().tobytes()
    np.testing.assert_array_equal(pos_g.numpy(), pos_c.numpy())


def error_message(device, fn, *args, **kwargs):
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        with tf.device(device):
            out = fn(*args, **kwargs)
            tf.nest.map_structure(lambda t: t.numpy(), out)
    return e.value.message


@requires_gpu
@pytest.mark.parametrize("dtype", INDEX_DTYPES, ids=["int32", "int64"])
@pytest.mark.parametrize("bad,pattern", [
    ([3, 1, 99], r"indices\[2\] = 99 is outside \[0, universe_size=50\)"),
    ([3, -1, 7], r"indices\[1\] = -1 is outside \[0, universe_size=50\)"),
    ([3, 1, 3], r"indices must be distinct, but 3 occurs more than once"),
])
def test_gpu_insert_rejects_bad_indices_like_cpu(dtype, bad, pattern):
    for device in ("/CPU:0", "/GPU:0"):
        msg = error_message(device, bloom.insert, tf.constant(bad, dtype), 50)
        assert re.search(pattern, msg), (device, msg)


@requires_gpu
@pytest.mark.parametrize("dtype", INDEX_DTYPES, ids=["int32", "int64"])
def test_gpu_query_rejects_bad_filters_like_cpu(dtype):
    f = bloom.insert(tf.constant([1, 5, 9], dtype), 20, num_bits=40, num_hashes=3)
    bits = f.bits.numpy()
    corrupt = bits.copy()
    corrupt[-1] |= 0x80  # bit 63 > m = 40
    cases = [
        (bloom.BloomFilter(tf.constant(corrupt), f.num_bits, f.num_hashes), 20),
        (bloom.BloomFilter(tf.constant(bits[:-1]), f.num_bits, f.num_hashes), 20),
        (bloom.BloomFilter(tf.constant(bits), f.num_bits, tf.constant(0, tf.int64)), 20),
        (bloom.BloomFilter(tf.constant(bits), f.num_bits, f.num_hashes), -1),
        # A corrupted filter is reported before a bad universe size, as on the CPU.
        (bloom.BloomFilter(tf.constant(corrupt), f.num_bits, f.num_hashes), -1),
    ]
    for bf, n in cases:
        cpu = error_message("/CPU:0", bloom.query, bf, n, out_idx=dtype)
        gpu = error_message("/GPU:0", bloom.query, bf, n, out_idx=dtype)
        assert gpu == cpu


# --------------------------------------------------------------------------
# Segmented selection on a GPU: the same indices and value bits as the CPU
# kernel (one OpKernel class, SegmentedSelectOp; only the functor differs).

SEGMENT_LAYOUTS = [
    # (segment lengths, k per segment)
    ([5, 0, 1025, 3, 40000, 1], [2, 0, 1025, 0, 400, 1]),  # empty, k = 0, k = len
    ([432, 16, 16] + [2304, 16, 16] * 6 + [640, 10], None),  # ResNet-20-like, 1 %
    ([16384, 16385, 1, 33], [16384, 1, 1, 32]),
]


@requires_gpu
@pytest.mark.parametrize("lengths,ks", SEGMENT_LAYOUTS)
@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32, tf.float64])
def test_gpu_segmented_selection_matches_cpu(lengths, ks, dtype):
    from deepreduce_tf.ops import sparsify
    rng = np.random.default_rng(sum(lengths))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    if ks is None:
        ks = [max(1, int(np.ceil(0.01 * n))) for n in lengths]
    x = rng.standard_normal(int(offsets[-1])).astype(np.float64)
    x[rng.integers(0, x.size, 20)] = np.nan
    x[rng.integers(0, x.size, 20)] = np.inf
    x[rng.integers(0, x.size, 200)] = 0.5  # ties
    xt = tf.constant(x, dtype)
    for fn, extra in ((sparsify.segmented_top_k, ()), (sparsify.segmented_random_k, (1234,))):
        i_cpu, v_cpu = on("/CPU:0", fn, xt, offsets, ks, *extra)
        i_gpu, v_gpu = on("/GPU:0", fn, xt, offsets, ks, *extra)
        assert_on_gpu(i_gpu)
        np.testing.assert_array_equal(i_gpu.numpy(), i_cpu.numpy())
        assert v_gpu.numpy().tobytes() == v_cpu.numpy().tobytes()


@requires_gpu
def test_gpu_segmented_selection_rejects_bad_segments_like_cpu():
    from deepreduce_tf.ops import sparsify
    x = tf.constant(np.arange(10, dtype=np.float32))
    for offsets, ks, pattern in (([0, 4, 9], [1, 1], r"offsets\[S\] must equal n=10"),
                                 ([0, 6, 4, 10], [1, 1, 1], r"non-decreasing"),
                                 ([0, 4, 10], [5, 1], r"k\[0\] must lie in \[0, 4\]")):
        cpu = error_message("/CPU:0", sparsify.segmented_top_k, x, offsets, ks)
        gpu = error_message("/GPU:0", sparsify.segmented_top_k, x, offsets, ks)
        assert gpu == cpu and re.search(pattern, cpu), (cpu, gpu)
