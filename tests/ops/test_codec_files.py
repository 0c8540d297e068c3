"""What a new index or value codec touches (docs/codecs.md, "Adding a codec"):
its row in the codec table, its class, its header kernels/<family>/<name>.h and
its numpy reference; a value codec with GPU kernels also its CUDA source
kernels/value/<name>.cu. Everything else derives from the table, so every row with
kernels="index" or "value" is checked here for what it must get without being
listed anywhere else: its two ops, their CPU kernels (for both index dtypes),
GPU kernels exactly when the row says gpu=True (CUDA build), its fuzz target
and seeds, the generated include, the registry entry and a round trip
against the reference; and the families' shared files are checked to name no
codec beyond those registered by hand, so that a codec added per the doc is
covered by the same tests."""
import os
import re

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import kernels, op_def_registry

import deepreduce_tf
import index_reference as ref
import value_reference as vref
from deepreduce_tf import codecs
from deepreduce_tf.codecs import page
from deepreduce_tf.ops import _loader, codec_table
from deepreduce_tf.ops import index as index_ops
from deepreduce_tf.ops import value as value_ops

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INDEX_ROWS = codec_table.rows("index", "index")
VALUE_ROWS = codec_table.rows("value", "value")
# The files a new index or value codec touches, as docs/codecs.md lists them.
INDEX_CODEC_FILES = ("deepreduce_tf/ops/codec_table.py", "deepreduce_tf/codecs/index.py",
                     "kernels/index/<name>.h", "tests/index_reference.py")
VALUE_CODEC_FILES = ("deepreduce_tf/ops/codec_table.py", "deepreduce_tf/codecs/value.py",
                     "kernels/value/<name>.h", "tests/value_reference.py")
VALUE_GPU_CODEC_FILES = VALUE_CODEC_FILES + ("kernels/value/<name>.cu",)


def _read(path):
    with open(os.path.join(REPO_ROOT, path), encoding="utf-8") as f:
        return f.read()


def _says(kind, name, flag):
    """True if the codec's struct (kernels/<kind>/<name>.h) sets flag."""
    return bool(re.search(rf"\b{flag} = true;", _read(f"kernels/{kind}/{name}.h")))


# The index codecs whose encode op is registered by hand (golomb: block_size)
# and the value codecs whose ops and kernels are (parameters, other inputs or
# outputs, GPU kernels): their structs say so.
OWN_ENCODE_OP = {r.name for r in INDEX_ROWS if _says("index", r.name, "kOwnEncodeOp")}
OWN_VALUE_OPS = {r.name for r in VALUE_ROWS if _says("value", r.name, "kOwnOps")}
# The family's files that register, dispatch and fuzz every codec of the table
# without naming one, but for the encode ops registered by hand. (The codecs'
# own device functors live in index_kernels.h/.cc/_gpu.cc/.cu.)
FAMILY_FILES = {"kernels/ops/index_ops.cc": {f"IndexEncode{codec_table.camel(name)}"
                                             for name in OWN_ENCODE_OP},
                "kernels/index/index_kernels.cc": set(),
                "kernels/index/index_kernels_gpu.cc": set(),
                "kernels/fuzz/decoders_fuzzer.cpp": set(),
                "deepreduce_tf/ops/index.py": set()}
VALUE_FAMILY_FILES = ("kernels/ops/value_ops.cc", "kernels/value/value_kernels.h",
                      "kernels/value/value_kernels.cc", "kernels/value/value_kernels_gpu.cc",
                      "kernels/value/value_kernels.cu", "kernels/value/value_gpu.h",
                      "kernels/fuzz/decoders_fuzzer.cpp", "deepreduce_tf/ops/value.py")
# The value codecs of the convention with GPU kernels: kernels/value/<name>.cu.
VALUE_GPU_ROWS = [r for r in VALUE_ROWS if r.gpu and r.name not in OWN_VALUE_OPS]


def _kernels(op_name, device):
    return [k for k in kernels.get_registered_kernels_for_op(op_name).kernel
            if k.device_type == device]


def _dtypes(kernel, attr):
    return {tf.as_dtype(t) for c in kernel.constraint if c.name == attr
            for t in c.allowed_values.list.type}


def test_the_structs_say_which_ops_are_registered_by_hand():
    assert OWN_ENCODE_OP >= {"golomb"}
    # docs/codecs.md names these as the value codecs on the older path.
    assert OWN_VALUE_OPS == {"polyfit", "dexp", "qsgd"}
    # deflate follows the convention with an attribute (its table row's level),
    # fp16 and bf16 with GPU kernels.
    assert "deflate" not in OWN_VALUE_OPS and codec_table.attrs("value", "deflate")
    assert {r.name for r in VALUE_GPU_ROWS} >= {"fp16", "bf16"}


@pytest.mark.parametrize("row", INDEX_ROWS, ids=lambda r: r.name)
def test_every_index_codec_of_the_table_has_ops_and_kernels(row):
    deepreduce_tf.build_info()  # loads the library
    camel = codec_table.camel(row.name)
    for op, attr in (("Encode", "Tidx"), ("Decode", "out_idx")):
        name = f"DeepReduce>Index{op}{camel}"
        cpu = _kernels(name, "CPU")
        assert set().union(*(_dtypes(k, attr) for k in cpu)) == {tf.int32, tf.int64}, name
        gpu = _kernels(name, "GPU")
        if deepreduce_tf.cuda_built() and row.gpu:
            assert set().union(*(_dtypes(k, attr) for k in gpu)) == {tf.int32, tf.int64}, name
        else:
            assert gpu == [], name


@pytest.mark.parametrize("row", INDEX_ROWS, ids=lambda r: r.name)
def test_every_index_codec_of_the_table_has_its_files(row):
    header = f"kernels/index/{row.name}.h"
    assert re.search(r"\bstruct Codec\b", _read(header)), header
    assert f'#include "{header}"' in _read(codec_table.FAMILY_HEADERS["index"])
    assert row.name in codec_table.fuzz_targets()
    assert os.listdir(os.path.join(REPO_ROOT, "tests", "fuzz_corpus", row.name))
    assert codecs.get_spec("index", row.name).wire_id == row.wire_id
    assert callable(getattr(ref, f"encode_{row.name}"))


@pytest.mark.parametrize("row", INDEX_ROWS, ids=lambda r: r.name)
@pytest.mark.parametrize("dtype", [tf.int32, tf.int64], ids=["int32", "int64"])
def test_every_index_codec_of_the_table_round_trips(row, dtype):
    n = 1000
    idx = np.array([0, 3, 4, 17, 512, 999], dtype=dtype.as_numpy_dtype)
    payload = index_ops.encode(row.name, tf.constant(idx), n).numpy()
    assert payload.tobytes() == ref.encode(row.name, idx, n)
    out = index_ops.decode(row.name, payload, out_idx=dtype).numpy()
    np.testing.assert_array_equal(out, idx)
    codec = codecs.make_index_codec(row.name)
    enc = codec.encode(tf.constant(idx, tf.int64), n)
    np.testing.assert_array_equal(codec.decode(enc.section, n, len(idx), enc.aux).numpy(), idx)


@pytest.mark.parametrize("path", sorted(FAMILY_FILES))
def test_the_family_files_register_no_codec_by_name(path):
    """A codec's ops, kernel registrations (CPU and GPU), wrapper call and fuzz
    target come from the table's X-macros: these files register none by
    name (golomb's encode op, which takes block_size, aside)."""
    text = _read(path)
    for row in INDEX_ROWS:
        camel = codec_table.camel(row.name)
        for op in (f"IndexEncode{camel}", f"IndexDecode{camel}"):
            if op not in FAMILY_FILES[path]:
                assert not re.search(rf'(REGISTER_OP|Name)\("DeepReduce>{op}"', text), (path, op)
        assert not re.search(rf"\bvoid Fuzz{camel}\(", text), (path, row.name)
        if row.name not in OWN_ENCODE_OP:
            assert f"deep_reduce_index_encode_{row.name}" not in text, (path, row.name)
        assert f"deep_reduce_index_decode_{row.name}" not in text, (path, row.name)


@pytest.mark.parametrize("row", VALUE_ROWS, ids=lambda r: r.name)
def test_every_value_codec_of_the_table_has_ops_kernels_and_files(row):
    deepreduce_tf.build_info()  # loads the library
    camel = codec_table.camel(row.name)
    for op in ("Encode", "Decode"):
        name = f"DeepReduce>{camel}{op}"
        assert _kernels(name, "CPU"), name
        assert bool(_kernels(name, "GPU")) == (deepreduce_tf.cuda_built() and row.gpu), name
    header = f"kernels/value/{row.name}.h"
    assert re.search(r"\bstruct Codec\b", _read(header)), header
    assert f'#include "{header}"' in _read(codec_table.FAMILY_HEADERS["value"])
    assert row.name in codec_table.fuzz_targets()
    assert os.listdir(os.path.join(REPO_ROOT, "tests", "fuzz_corpus", row.name))
    assert codecs.get_spec("value", row.name).wire_id == row.wire_id
    assert vref.CODEC_IDS[row.name] == row.wire_id


@pytest.mark.parametrize("row", [r for r in VALUE_ROWS
                                 if r.name not in value_ops._ENCODE_PARAMS],
                         ids=lambda r: r.name)
def test_every_plain_value_codec_matches_its_reference(row):
    """A value codec whose ops take no parameters: its payload is its
    reference's, <name>_encode_reference, and it round trips through the
    registry's codec."""
    values = np.array([0.0, 1.5, -2.25, 3e-3, 1000.0, -7.0], np.float32)
    payload = value_ops.encode(row.name, values).payload.numpy()
    assert payload.tobytes() == getattr(vref, f"{row.name}_encode_reference")(values)
    codec = codecs.make_value_codec(row.name)
    enc = codec.encode(tf.constant(values), None)
    out = codec.decode(enc.section, len(values), tf.float32, len(values)).numpy()
    np.testing.assert_allclose(out, values, rtol=1e-2)


TABLE_ARGS_ROWS = [r for r in VALUE_ROWS if r.name not in OWN_VALUE_OPS and (r.attrs or r.seeded)]


@pytest.mark.parametrize("row", TABLE_ARGS_ROWS, ids=lambda r: r.name)
def test_a_value_codec_with_table_attributes_gets_them_everywhere(row):
    """A row's attributes (and seed) reach the generated op (declared with the
    row's defaults), its kernel (checked against the row's bounds), the
    wrapper (by name, with the row's defaults and bounds) and the registry's
    Param; every value in bounds round trips."""
    deepreduce_tf.build_info()  # loads the library
    camel = codec_table.camel(row.name)
    op_def = op_def_registry.get(f"DeepReduce>{camel}Encode")
    assert [a.name for a in op_def.input_arg] == ["values"] + (["seed"] if row.seeded else [])
    assert {a.name: a.default_value.i for a in op_def.attr} == \
        {a.name: a.default for a in row.attrs}
    spec_params = {p.arg: p for p in codecs.get_spec("value", row.name).params}
    values = np.array([0.0, 1.5, -2.25, 3e-3, 1000.0, -7.0] * 50, np.float32)
    seed = {"seed": 7} if row.seeded else {}
    for a in row.attrs:
        assert (spec_params[a.name].default, spec_params[a.name].low,
                spec_params[a.name].high) == (a.default, a.low, a.high)
        for v in sorted({a.low, a.default, a.high}):
            payload = value_ops.encode(row.name, values, **{a.name: v}, **seed).payload
            assert payload.numpy()[2] == row.wire_id
            out = value_ops.decode(row.name, payload).numpy()
            if codecs.get_spec("value", row.name).lossless:
                np.testing.assert_allclose(out, values, rtol=1e-2)
            else:  # a lossy codec's accuracy is its own tests' to bound
                assert out.shape == values.shape and np.all(np.isfinite(out))
        with pytest.raises(ValueError, match=rf"{a.name} must be an integer in "
                                             rf"\[{a.low}, {a.high}\]"):
            value_ops.encode(row.name, values, **{a.name: a.high + 1}, **seed)
        raw_op = getattr(_loader.load(), f"deep_reduce_{row.name}_encode")
        inputs = (tf.constant(values),) + ((tf.constant(7, tf.int64),) if row.seeded else ())
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=rf"{row.name}: {a.name} must lie in \[{a.low}, {a.high}\], "
                                 rf"got {a.high + 1}"):
            raw_op(*inputs, **{a.name: a.high + 1})


@pytest.mark.parametrize("path", VALUE_FAMILY_FILES)
def test_the_value_family_files_name_only_the_codecs_with_own_ops(path):
    text = _read(path)
    for row in VALUE_ROWS:
        if row.name in OWN_VALUE_OPS:
            continue
        camel = codec_table.camel(row.name)
        assert f"{camel}Encode" not in text and f"{camel}Decode" not in text, (path, row.name)
        assert f"deep_reduce_{row.name}_" not in text, (path, row.name)
        assert not re.search(rf"\bvoid Fuzz{camel}\(", text), (path, row.name)


@pytest.mark.parametrize("row", VALUE_ROWS, ids=lambda r: r.name)
def test_a_value_codec_of_the_convention_has_a_cuda_source_exactly_when_gpu(row):
    """kernels/value/<name>.cu exists exactly for a codec of the convention
    whose row says gpu=True: it defines the launchers its struct declares
    (EncodeGpu, DecodeGpu) and includes no TensorFlow header; the generic
    GPU kernels (registered from the table) call them."""
    cu = os.path.join(REPO_ROOT, "kernels", "value", f"{row.name}.cu")
    header = _read(f"kernels/value/{row.name}.h")
    if row not in VALUE_GPU_ROWS:
        assert not os.path.exists(cu), cu
        if row.name not in OWN_VALUE_OPS:
            assert "EncodeGpu" not in header and "DecodeGpu" not in header, row.name
        return
    source = _read(f"kernels/value/{row.name}.cu")
    for launcher in ("EncodeGpu", "DecodeGpu"):
        assert re.search(rf"\bstatic gpu_launch::GpuStatus {launcher}\(", header), \
            (row.name, launcher)
        assert re.search(rf"\bCodec::{launcher}\(", source), (row.name, launcher)
    assert not re.search(r'#include\s+"tensorflow/', source), row.name
    assert f'#include "kernels/value/{row.name}.h"' in source


def test_the_value_gpu_registrations_follow_the_table():
    """The generic GPU kernels are registered over the table's gpu=True rows
    (DR_VALUE_GPU_CODECS), CPU ones over every row: no list of codecs to
    edit."""
    gpu = _read("kernels/value/value_kernels_gpu.cc")
    cpu = _read("kernels/value/value_kernels.cc")
    assert re.search(r"^DR_VALUE_GPU_CODECS\(DR_REGISTER_VALUE_GPU\)$", gpu, re.M)
    assert re.search(r"^DR_VALUE_PAYLOAD_CODECS\(DR_REGISTER_VALUE_CPU\)$", cpu, re.M)
    header = _read(codec_table.HEADER_PATH)
    listed = re.search(r"#define DR_VALUE_GPU_CODECS\(X\)(.*?)\n\n", header, re.S).group(1)
    assert re.findall(r"X\((\w+),", listed) == [r.name for r in VALUE_ROWS if r.gpu]


def test_the_doc_lists_the_files_of_a_new_codec():
    doc = _read("docs/codecs.md")
    section = doc[doc.index("## Adding a codec"):]
    for path in INDEX_CODEC_FILES + VALUE_GPU_CODEC_FILES:
        assert f"`{path}`" in section, path
    assert len(INDEX_CODEC_FILES) <= 5 and len(VALUE_CODEC_FILES) <= 5
    # A GPU value codec: at most six hand-edited files (issue 40).
    assert len(VALUE_GPU_CODEC_FILES) <= 6
    # The codecs still on the older path are named, with the reason.
    for name in sorted(OWN_VALUE_OPS) + ["int32", "bitmap", "rle", "golomb"]:
        assert name in section[section.index("Beyond that convention"):], name
    assert page.ADDING_A_CODEC[0] == "## Adding a codec"
