"""Where a compressed step runs when its replicas are GPUs, checked without a GPU.

With the CUDA build of the op library loaded (DEEPREDUCE_TF_CUDA=1), the
recommended configuration's step is traced for two replicas on /GPU:0 and
/GPU:1 (a TF1 graph: nothing runs, so no GPU is needed) for ResNet-20's and
ResNet-50's gradient shapes. Every op of the trace, the bodies of its
conditionals included, is then placed as TensorFlow's placer would place it:
on its requested GPU if a GPU (or any-device) kernel accepts its dtypes,
else on the host. The kernels come from TensorFlow's registry: the live one
for the library's ops (the CUDA build registers them), and for TensorFlow's
own ops the registry of TensorFlow's CUDA build of the pinned version,
recorded in tests/data/tf_gpu_kernels.json.gz by build_deps/tf_gpu_kernels.py
(tensorflow-cpu registers no GPU kernel of its own ops). An op without a
device takes its first input's (a variable's reads are colocated with it).

Asserted: the only ops that land on the host are the payload framing ops
(host-side by design) and string formatting of error messages; and every
tensor that crosses between the GPU and the host is payload-sized: a byte
vector that the framing ops take or give (its length is data-dependent), or
a tensor of statically known size no larger than the compressed size bound
(K positions and values, the raw dense section, headers), which is itself
far below the bucket's dense size. The same check fails for the step as it
was built before the fused ops chose TensorFlow's kernels by the replica's
device (test_check_catches_a_bucket_on_the_host).
"""
import gzip
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import kernels

import deepreduce_tf
from deepreduce_tf import distribute as drd
from deepreduce_tf.ops import fusion as fusion_ops
from deepreduce_tf.ops import sparsify

pytestmark = pytest.mark.skipif(
    not deepreduce_tf.cuda_built(),
    reason="CPU-only build of the op library: the placement check needs the CUDA build's "
           "kernel registry (DEEPREDUCE_TF_CUDA=1 bash build_deps/dev.sh setup)")

RECOMMENDED = {"compressor": "topk", "compress_ratio": 0.01, "memory": "dgc",
               "deepreduce": "both", "index": "golomb", "value": "qsgd", "bits": 7}
TABLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data",
                     "tf_gpu_kernels.json.gz")
# Host-side by design (docs/ops.md): payload framing of a few small byte
# buffers; and the formatting of an error message's text.
HOST_BY_DESIGN = {"DeepReduce>PayloadPack", "DeepReduce>PayloadUnpack"}
HOST_TEXT_OPS = {"StringFormat", "PrintV2", "Const"}
FRAMING = HOST_BY_DESIGN
FUNCTION_ATTRS = ("then_branch", "else_branch", "f", "body", "cond", "branches")


def resnet20_shapes():
    shapes = []

    def conv_bn(cin, cout):
        shapes.extend([(3, 3, cin, cout), (cout,), (cout,)])

    conv_bn(3, 16)
    cin = 16
    for width in (16, 32, 64):
        for _ in range(3):
            conv_bn(cin, width)
            conv_bn(width, width)
            cin = width
    return shapes + [(64, 10), (10,)]


def resnet50_shapes():
    shapes = []

    def conv_bn(k, cin, cout):
        shapes.extend([(k, k, cin, cout), (cout,), (cout,)])

    conv_bn(7, 3, 64)
    cin = 64
    for width, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for b in range(blocks):
            conv_bn(1, cin, width)
            conv_bn(3, width, width)
            conv_bn(1, width, 4 * width)
            if b == 0:
                conv_bn(1, cin, 4 * width)
            cin = 4 * width
    return shapes + [(2048, 1000), (1000,)]


def test_layouts():
    assert len(resnet20_shapes()) == 59
    assert sum(int(np.prod(s)) for s in resnet20_shapes()) == 269_722
    assert len(resnet50_shapes()) == 161
    assert sum(int(np.prod(s)) for s in resnet50_shapes()) == 25_557_032


def trace(shapes, spec):
    """The step of two replicas on /GPU:0 and /GPU:1, as a TF1 graph."""
    graph = tf.Graph()
    with graph.as_default():
        ops = drd.DeepReduceCrossDeviceOps(spec)
        lists = []
        for device in ("/GPU:0", "/GPU:1"):
            with tf.device(device):
                lists.append([tf.compat.v1.placeholder(tf.float32, s) for s in shapes])
        ops.reduce_tensors(lists)
    return graph


def walk(graph, root, device="", seen=None):
    """(op, device) for every op of graph and of the functions its ops call
    (a function's ops without a device run on the caller's)."""
    seen = set() if seen is None else seen
    for op in graph.get_operations():
        dev = op.device or device
        yield op, dev
        for attr in FUNCTION_ATTRS:
            try:
                value = op.get_attr(attr)
            except (ValueError, TypeError):
                continue
            for fn in value if isinstance(value, list) else [value]:
                if fn.name not in seen:
                    seen.add(fn.name)
                    yield from walk(root._get_function(fn.name).graph, root, dev, seen)  # pylint: disable=protected-access


def _accepts(constraints, op):
    for attr, allowed in constraints.items():
        try:
            value = op.get_attr(attr)
        except ValueError:
            continue
        if isinstance(value, tf.DType) and value.name not in allowed:
            return False
    return True


def has_gpu_kernel(op, tf_table):
    if op.type.startswith("DeepReduce>"):
        for k in kernels.get_registered_kernels_for_op(op.type).kernel:
            if k.device_type == "GPU" and _accepts(
                    {c.name: [tf.as_dtype(t).name for t in c.allowed_values.list.type]
                     for c in k.constraint}, op):
                return True
        return False
    return any(_accepts(k["constraints"], op) for k in tf_table.get(op.type, []))


def place(graph, tf_table):
    """{op: True if it runs on a GPU}, as the placer would place the trace."""
    placed = {}
    for op, dev in walk(graph, graph):
        if not dev:
            inputs = [i.op for i in op.inputs if i.op in placed]
            on_gpu = bool(inputs) and placed[inputs[0]]
        else:
            on_gpu = (tf.DeviceSpec.from_string(dev).device_type == "GPU"
                      and has_gpu_kernel(op, tf_table))
        placed[op] = on_gpu
    return placed


def crossings(placed):
    """(tensor, producer on GPU?) for every edge between a GPU op and a host op."""
    for op, on_gpu in placed.items():
        for t in op.inputs:
            if t.op in placed and placed[t.op] != on_gpu:
                yield t, op


def compressed_bound(shapes, spec):
    """Bytes: K int64 positions and K values, the raw dense section (tensors
    below the fusion's min_size), and 4 KiB of headers."""
    sizes = [int(np.prod(s)) for s in shapes]
    min_size = deepreduce_tf.from_params(spec).min_size
    sparse = [n for n in sizes if n >= min_size]
    dense = sum(n for n in sizes if n < min_size)
    k = int(sparsify.segment_ks(sparse, spec["compress_ratio"]).sum())
    return k * (8 + 4) + dense * 4 + 4096, sum(sizes) * 4


@pytest.fixture(scope="module")
def tf_table():
    with gzip.open(TABLE, "rt") as f:
        doc = json.load(f)
    assert doc["tensorflow"] == tf.__version__, (
        f"{TABLE} was recorded from TensorFlow {doc['tensorflow']}, this is {tf.__version__}: "
        "regenerate it with build_deps/tf_gpu_kernels.py")
    return doc["ops"]


def check_step(shapes, spec, tf_table):
    graph = trace(shapes, spec)
    placed = place(graph, tf_table)
    on_host = {op.type for op, gpu in placed.items() if not gpu and op.type != "Placeholder"}
    unexpected = sorted(on_host - HOST_BY_DESIGN - HOST_TEXT_OPS)
    bound, dense_bytes = compressed_bound(shapes, spec)
    assert bound * 4 < dense_bytes, "the bound would not tell a payload from a bucket"
    problems = [f"ops without a GPU kernel: {unexpected}"] if unexpected else []
    into = {}  # bytes of statically sized tensors crossing into each op
    for t, consumer in crossings(placed):
        n = t.shape.num_elements()
        framing = FRAMING & {t.op.type, consumer.type}
        if n is None:
            if not (t.dtype == tf.uint8 and framing):
                problems.append(f"{t.name} ({t.dtype.name}, unknown size) crosses from "
                                f"{t.op.type} to {consumer.type}")
        elif t.dtype != tf.string:
            into[consumer] = into.get(consumer, 0) + n * t.dtype.size
            if n * t.dtype.size > bound:
                problems.append(f"{t.name} ({t.dtype.name}{t.shape}, {n * t.dtype.size} bytes "
                                f"> bound {bound}) crosses from {t.op.type} to {consumer.type}")
    for consumer, total in into.items():
        if total > bound:
            problems.append(f"{total} bytes cross into {consumer.name} ({consumer.type}) in all, "
                            f"> bound {bound}")
    return problems, placed


@pytest.mark.parametrize("shapes", [resnet20_shapes(), resnet50_shapes()],
                         ids=["resnet20", "resnet50"])
def test_recommended_step_on_two_gpus_moves_only_payloads(shapes, tf_table):
    problems, placed = check_step(shapes, RECOMMENDED, tf_table)
    assert not problems, "\n".join(problems)
    on_gpu = {op.type for op, gpu in placed.items() if gpu}
    # The step's work is on the GPUs: selection, both codecs, fusion.
    for op_type in ("DeepReduce>SegmentedTopK", "DeepReduce>IndexEncodeGolomb",
                    "DeepReduce>QsgdEncode", "DeepReduce>IndexDecodeGolomb",
                    "DeepReduce>QsgdDecode", "DeepReduce>FlattenConcat",
                    "DeepReduce>SplitReshape"):
        assert op_type in on_gpu, op_type


SPARSE_ALLREDUCE = {"compressor": "topk", "compress_ratio": 0.01, "memory": "dgc",
                    "warmup_steps": 60, "warmup": "exponential",
                    "communicator": "sparse_allreduce", "deepreduce": "both",
                    "index": "golomb", "value": "fp16"}


def test_sparse_allreduce_step_on_two_gpus_moves_only_payloads(tf_table):
    """The sparse all-reduce (positions gathered, values at their union
    summed): every op on the GPUs but the payload framing, as for the
    all-gather."""
    problems, placed = check_step(resnet20_shapes(), SPARSE_ALLREDUCE, tf_table)
    assert not problems, "\n".join(problems)
    on_gpu = {op.type for op, gpu in placed.items() if gpu}
    for op_type in ("DeepReduce>SegmentedTopK", "DeepReduce>IndexEncodeGolomb",
                    "DeepReduce>IndexDecodeGolomb", "Unique", "DeepReduce>FlattenConcat",
                    "DeepReduce>SplitReshape"):
        assert op_type in on_gpu, op_type


SPARSE_MAX_INT8 = dict(SPARSE_ALLREDUCE, compress_ratio=0.005, topk_scope="bucket", min_size=1,
                       warmup_steps=30, schedule="cosine", schedule_steps=100, value="int8")


def test_sparse_max_int8_step_on_two_gpus_moves_only_payloads(tf_table):
    """sparse_max: the int8 codes' quantization, packing to int32 words and
    unpacking of their sum place on the GPUs like the rest of the step."""
    problems, placed = check_step(resnet20_shapes(), SPARSE_MAX_INT8, tf_table)
    assert not problems, "\n".join(problems)
    on_gpu = {op.type for op, gpu in placed.items() if gpu}
    for op_type in ("DeepReduce>SegmentedTopK", "DeepReduce>IndexEncodeGolomb",
                    "DeepReduce>IndexDecodeGolomb", "FloorMod", "Round"):
        assert op_type in on_gpu, op_type


def test_check_catches_a_bucket_on_the_host(tf_table, monkeypatch):
    # The fused ops' host kernels (AddWithin, ScatterSum, ScatterSubtract)
    # take whole buckets: chosen on a GPU replica, they copy the bucket.
    monkeypatch.setattr(fusion_ops, "_on_gpu", lambda *tensors: False)
    problems, _ = check_step(resnet20_shapes(), RECOMMENDED, tf_table)
    assert any("AddWithin" in p or "Scatter" in p for p in problems), problems


def test_placement_tells_gpu_kernels_from_host_ones(tf_table):
    # The check's two sources of kernels, on ops whose answer is known: a
    # float add runs on the GPU, string formatting and the library's payload
    # framing on the host, the library's top-k on the GPU.
    graph = tf.Graph()
    with graph.as_default(), tf.device("/GPU:0"):
        x = tf.compat.v1.placeholder(tf.float32, [100])
        y = x + 1.0
        tf.strings.format("{}", y)
        sparsify.top_k(y, 5)
    placed = {op.type: gpu for op, gpu in place(graph, tf_table).items()}
    assert placed["AddV2"] and placed["DeepReduce>TopK"]
    assert not placed["StringFormat"]
