"""The codec table (deepreduce_tf/ops/codec_table.py): the one declaration of
every codec's name, wire id and aliases. The C++ header, the registry, the
op wrappers, the all-reduce's wire dtypes and the fuzz targets derive from it,
and a mismatch cannot build (setup.py's header check) or load (the loader's
codec-table check)."""
import os
import shutil

import pytest
import tensorflow as tf

import deepreduce_tf as dr
from deepreduce_tf import codecs, communicators
from deepreduce_tf.codecs import base
from deepreduce_tf.codecs import value as vc
from deepreduce_tf.ops import _loader, codec_table
from deepreduce_tf.ops import index as index_ops
from deepreduce_tf.ops import value as value_ops

from test_codec_registry import HISTORIC_ALIASES, HISTORIC_IDS

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))


def test_the_table_holds_the_historic_ids_and_aliases():
    # Never renumbered; a codec added to the table takes a new id.
    for kind in codec_table.KINDS:
        assert HISTORIC_IDS[kind].items() <= codec_table.wire_ids(kind).items()
        assert HISTORIC_ALIASES[kind].items() <= codec_table.aliases(kind).items()
    assert index_ops.CODECS[:4] == ("int32", "bitmap", "rle", "golomb")
    assert index_ops.CODEC_IDS.items() >= {"int32": 1, "bitmap": 2, "rle": 3,
                                           "golomb": 4}.items()
    assert index_ops.ALIASES.items() >= {"gr": "golomb", "rice": "golomb",
                                         "lossless": "golomb"}.items()
    assert value_ops.CODECS[:6] == ("polyfit", "dexp", "qsgd", "fp16", "bf16", "deflate")
    assert value_ops.CODEC_IDS.items() >= {"polyfit": 1, "dexp": 2, "qsgd": 3, "fp16": 4,
                                           "bf16": 5, "deflate": 6}.items()


def test_the_committed_header_is_generated_from_the_table():
    with open(f"{REPO_ROOT}/{codec_table.HEADER_PATH}", encoding="utf-8") as f:
        assert f.read() == codec_table.header_text(), (
            f"regenerate the header with `{codec_table.REGENERATE_HEADER}`")
    assert codec_table.header_mismatch(REPO_ROOT) is None


def test_a_stale_header_cannot_build(tmp_path, monkeypatch):
    """setup.py compiles nothing while the header differs from the table."""
    for path in codec_table.generated_files():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(f"{REPO_ROOT}/{path}", tmp_path / path)
    assert codec_table.header_mismatch(str(tmp_path)) is None
    rows = list(codec_table.INDEX_CODECS)
    rows[4] = rows[4]._replace(wire_id=9)  # golomb
    monkeypatch.setattr(codec_table, "INDEX_CODECS", tuple(rows))
    problem = codec_table.header_mismatch(str(tmp_path))
    assert problem.startswith(f"{codec_table.HEADER_PATH} does not match")
    assert codec_table.REGENERATE_HEADER in problem
    with open(f"{REPO_ROOT}/setup.py", encoding="utf-8") as f:
        assert "problem = table.header_mismatch(ROOT)" in f.read()


@pytest.mark.parametrize("change,match", [
    (lambda r: r._replace(wire_id=1), "share wire id 1"),
    (lambda r: r._replace(name="int32"), "name 'int32' is used twice"),
    (lambda r: r._replace(aliases=("gr",)), "name 'gr' is used twice"),
    (lambda r: r._replace(kernels="value"), "kernels must be one of"),
    (lambda r: r._replace(wire_id=256), r"wire id must be an int in \[0, 255\]"),
    (lambda r: r._replace(name="Bloom-2"), "must be a lower-case identifier"),
])
def test_a_malformed_table_is_refused(change, match):
    rows = list(codec_table.rows())
    rows[5] = change(rows[5])  # bloom
    with pytest.raises(ValueError, match=match):
        codec_table.check(rows)


A = codec_table.Attr


@pytest.mark.parametrize("change,match", [
    (lambda r: r._replace(attrs=(A("level", 10, 0, 9),)), "low <= default <= high"),
    (lambda r: r._replace(attrs=(A("level", 1, 0, 9), A("level", 1, 0, 9))),
     "must be a new lower-case identifier"),
    (lambda r: r._replace(attrs=(A("seed", 1, 0, 9),)), "must be a new lower-case identifier"),
    (lambda r: r._replace(attrs=(A("level", 1.5, 0, 9),)), "needs integers"),
    (lambda r: r._replace(attrs=tuple(A(f"a{i}", 0, 0, 1) for i in range(5))), "at most 4"),
    (lambda r: r._replace(seeded="yes"), "seeded must be True or False"),
    (lambda r: r._replace(kernels=None), "of kernels/index and kernels/value only"),
    (lambda r: r._replace(attrs=(), kernels=None, seeded=True), "seeded is read by"),
])
def test_malformed_attributes_are_refused(change, match):
    rows = list(codec_table.rows())
    i = next(i for i, r in enumerate(rows) if r.kind == "value" and r.name == "deflate")
    rows[i] = change(rows[i])
    with pytest.raises(ValueError, match=match):
        codec_table.check(rows)


def test_the_registry_takes_ids_aliases_and_summable_from_the_table():
    for r in codec_table.rows():
        spec = codecs.get_spec(r.kind, r.name)
        assert (spec.wire_id, spec.aliases) == (r.wire_id, r.aliases)
        assert spec.cls.codec_id == r.wire_id
        if r.kind == "value":
            assert spec.summable == (r.wire_dtype is not None)
    assert {k: [s.name for s in codecs.specs(k)] for k in codec_table.KINDS} == {
        k: list(codec_table.names(k)) for k in codec_table.KINDS}
    assert communicators.Allreduce.WIRE_DTYPES == {
        "raw": None, "fp16": tf.float16, "bf16": tf.bfloat16}


class _Dup(vc.RawValue):
    pass


@pytest.mark.parametrize("kwargs,match", [
    (dict(name="qsgd", wire_id=9), r"value codec 'qsgd': wire id 9 differs from the codec "
                                   r"table .*which gives it 3"),
    (dict(name="unlisted"), r"value codec 'unlisted' is not in the codec table .*: pass its "
                            "wire_id"),
    (dict(name="unlisted", wire_id=4), "wire id 4 is already used by value codec 'fp16'"),
    (dict(name="fp16", summable=False), "summable=False differs from the codec table"),
])
def test_registration_that_contradicts_the_table_is_refused(kwargs, match):
    spec = codecs.unregister("value", "fp16") if kwargs["name"] == "fp16" else None
    spec_q = codecs.unregister("value", "qsgd") if kwargs["name"] == "qsgd" else None
    try:
        before = codecs.specs()
        with pytest.raises(ValueError, match=match):
            base.register(kwargs.pop("name"), **kwargs)(type("Dup", (_Dup,), {}))
        assert codecs.specs() == before
    finally:
        for s in (spec, spec_q):
            if s is not None:
                base.REGISTRY.register(s)


def test_a_table_id_stays_reserved_when_its_codec_is_unregistered():
    spec = codecs.unregister("value", "deflate")
    try:
        with pytest.raises(ValueError, match="wire id 6 is reserved for value codec 'deflate' "
                                             "by the codec table"):
            base.register("deflate2", wire_id=6)(type("Dup", (_Dup,), {}))
    finally:
        base.REGISTRY.register(spec)


def test_the_library_reports_the_table_it_was_compiled_with():
    info = dr.build_info()
    assert info["codecs"] == codec_table.build_info_table()
    assert _loader.codec_table_mismatch(info["codecs"]) is None


def test_a_library_with_another_table_cannot_load(monkeypatch):
    compiled = dr.build_info()["codecs"]
    rows = list(codec_table.VALUE_CODECS)
    rows[3] = rows[3]._replace(wire_id=7)  # qsgd
    monkeypatch.setattr(codec_table, "VALUE_CODECS", tuple(rows))
    why = _loader.codec_table_mismatch(compiled)
    assert "value codec 'qsgd': wire id 3 in the binary, 7 in codec_table.py" in why
    assert codec_table.REGENERATE_HEADER in why
    assert "binary reports no codec table" in _loader.codec_table_mismatch(None)
    # The loader itself refuses it: a fresh load of the same library fails.
    module, info = _loader._module, _loader._build_info
    monkeypatch.setattr(_loader, "_module", None)
    try:
        with pytest.raises(_loader.OpLibraryError, match="compiled with another codec table "
                                                         r"\(value codec 'qsgd'"):
            _loader.load()
    finally:
        _loader._module, _loader._build_info = module, info
