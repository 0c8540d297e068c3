"""The codec registry (deepreduce_tf/codecs/base.py): ids, aliases, parameters,
from_params / flags / docs derived from it, new and stateful codecs."""
import math
import os
import warnings

import numpy as np
import pytest
import tensorflow as tf
from absl import flags as absl_flags

import deepreduce_tf as dr
from deepreduce_bench import flags as bench_flags
from deepreduce_tf import codecs, compressor
from deepreduce_tf import flags as dr_flags
from deepreduce_tf.codecs import base
from deepreduce_tf.codecs import index as ic
from deepreduce_tf.codecs import value as vc
from deepreduce_tf.ops import codec_table
from deepreduce_tf.ops import payload as payload_ops
from deepreduce_tf.ops import value as value_ops

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))
DOCS = os.path.join(REPO_ROOT, "docs", "codecs.md")

# The payload format's codec ids: permanent (a codec added to the codec
# table takes a new id).
HISTORIC_IDS = {
    "index": {"raw": 0, "int32": 1, "bitmap": 2, "rle": 3, "golomb": 4, "bloom": 5},
    "value": {"raw": 0, "polyfit": 1, "dexp": 2, "qsgd": 3, "fp16": 4, "bf16": 5, "deflate": 6,
              "ternary": 7},
}
HISTORIC_CLASSES = {
    "index": {"raw": ic.RawIndex, "int32": ic.Int32Index, "bitmap": ic.BitmapIndex,
              "rle": ic.RleIndex, "golomb": ic.GolombIndex, "bloom": ic.BloomIndex},
    "value": {"raw": vc.RawValue, "polyfit": vc.PolyfitValue, "dexp": vc.DexpValue,
              "qsgd": vc.QsgdValue, "fp16": vc.Fp16Value, "bf16": vc.Bf16Value,
              "deflate": vc.DeflateValue, "ternary": vc.TernaryValue},
}
# The aliases of the original tables (codecs' INDEX_ALIASES / VALUE_ALIASES and
# params.CODEC_ALIASES).
HISTORIC_ALIASES = {
    "index": {"gr": "golomb", "rice": "golomb", "lossless": "golomb", "none": "raw",
              "bloom_cpu": "bloom"},
    "value": {"none": "raw", "float16": "fp16", "half": "fp16", "bfloat16": "bf16",
              "zlib": "deflate", "gzip": "deflate", "polyfit_cpu": "polyfit", "stc": "ternary"},
}
BUILTIN = [(kind, name) for kind in base.KINDS for name in HISTORIC_IDS[kind]]
# Every codec of the codec table (a codec added per docs/codecs.md included).
TABLE = [(r.kind, r.name) for r in codec_table.rows()]


def build(params, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return dr.from_params(params, **kwargs)


# --------------------------------------------------------------------------- ids, aliases

def test_wire_ids_are_the_historic_ones_and_unique():
    for kind in base.KINDS:
        specs = codecs.specs(kind)
        ids = [s.wire_id for s in specs]
        assert len(ids) == len(set(ids)), kind
        assert HISTORIC_IDS[kind].items() <= {s.name: s.wire_id for s in specs}.items()
        for s in specs:
            assert s.cls is HISTORIC_CLASSES[kind].get(s.name, s.cls)
            assert (s.cls.name, s.cls.codec_id, s.cls.spec) == (s.name, s.wire_id, s)
            assert codecs.spec_by_wire_id(kind, s.wire_id) is s
    # The value ops' own payload ids agree with the registry's.
    for name, wire_id in value_ops.CODEC_IDS.items():
        assert codecs.get_spec("value", name).wire_id == wire_id


def test_unknown_wire_id():
    with pytest.raises(ValueError, match="no value codec has wire id 99; known: 0=raw"):
        codecs.spec_by_wire_id("value", 99)


@pytest.mark.parametrize("kind", base.KINDS)
def test_every_alias_resolves(kind):
    make = {"index": codecs.make_index_codec, "value": codecs.make_value_codec}[kind]
    view = {"index": codecs.INDEX_ALIASES, "value": codecs.VALUE_ALIASES}[kind]
    for alias, name in HISTORIC_ALIASES[kind].items():
        assert view[alias] == name
    for alias, name in view.items():
        spec = codecs.get_spec(kind, alias)
        assert spec.name == name and alias in spec.aliases
        assert type(make(alias)) is spec.cls
    for name in HISTORIC_IDS[kind]:
        assert codecs.get_spec(kind, name).name == name


def test_views_read_like_the_original_tables():
    n = len(HISTORIC_IDS["index"])
    assert list(codecs.INDEX_CODECS)[:n] == list(HISTORIC_IDS["index"])
    assert list(codecs.VALUE_CODECS)[:len(HISTORIC_IDS["value"])] == list(HISTORIC_IDS["value"])
    assert HISTORIC_CLASSES["index"].items() <= dict(codecs.INDEX_CODECS).items()
    assert codecs.VALUE_CODECS["qsgd"] is vc.QsgdValue and "golomb" in ic.INDEX_CODECS
    assert tuple(ic.INDEX_CODECS)[:n] == ("raw", "int32", "bitmap", "rle", "golomb", "bloom")
    # params' derived tables keep the original entries.
    from deepreduce_tf import params

    for alias, name in {"gzip": "deflate", "bloom_cpu": "bloom",
                        "polyfit_cpu": "polyfit"}.items():
        assert params.CODEC_ALIASES[alias] == name
    for key in ("fpr", "policy", "poly_degree", "segmentation", "segments", "quantum_num",
                "bits", "bucket_size", "deflate_level", "seed", "policy_seed", "block_size",
                "topk_scope", "bucket_cap_mb"):
        assert key in params.KEYS
    assert params.KEY_ALIASES == {"bloom_fpr": "fpr", "bloom_policy": "policy",
                                  "threshold_val": "threshold", "buckets_num": "bucket_size",
                                  "degree": "poly_degree", "levels": "quantum_num",
                                 "compress_rank": "rank"}


def test_attributes_kept():
    for cls in (vc.RawValue, vc.Fp16Value, vc.Bf16Value):
        assert cls.additive is True and cls.summable is True and cls().additive
    for cls in (vc.PolyfitValue, vc.DexpValue, vc.QsgdValue, vc.DeflateValue):
        assert cls.additive is False and cls.summable is False
    assert vc.PolyfitValue.sorting and vc.DexpValue.sorting and not vc.QsgdValue.sorting
    assert vc.QsgdValue.seeded and not vc.PolyfitValue.seeded
    assert vc.RawValue.lossless and vc.DeflateValue.lossless and not vc.Fp16Value.lossless
    assert ic.RawIndex.carries_order and not ic.GolombIndex.carries_order
    assert not ic.BloomIndex.lossless and ic.GolombIndex.lossless
    for kind, name in BUILTIN:
        spec = codecs.get_spec(kind, name)
        codec = spec.make()
        assert codec.stateful is False and codec.variables == ()
        assert codec.build(None) is None  # default hook: nothing
        for flag in ("lossless", "summable", "stateful", "sorting", "seeded", "carries_order"):
            assert getattr(codec, flag) == getattr(spec, flag), (name, flag)
        assert spec.additive == spec.summable
    assert repr(ic.BloomIndex(fpr=0.01)) == (
        "BloomIndex(fpr=0.01, policy='conflict_sets', policy_seed=0, seed=0)")


def test_unknown_codec_lists_choices():
    with pytest.raises(ValueError, match=r"unknown index codec 'huffman'; valid choices: raw, "
                                         r"int32, bitmap, rle, golomb, bloom\b.* \(aliases: "
                                         r"none=raw"):
        codecs.make_index_codec("huffman")
    with pytest.raises(ValueError, match="unknown value codec 'zstd'; valid choices: raw, "
                                         "polyfit, dexp, qsgd, fp16, bf16, deflate"):
        codecs.get_spec("value", "zstd")
    with pytest.raises(ValueError, match="index='huffman' is not valid; valid choices: 'raw', "
                                         "'int32', 'bitmap', 'rle', 'golomb', 'bloom'"):
        dr.from_params({"deepreduce": "index", "index": "huffman"})
    with pytest.raises(ValueError, match="codec kind must be one of index, value"):
        codecs.get_spec("values", "raw")


# --------------------------------------------------------------------------- parameters

def test_param_validation_messages():
    deg = codecs.get_spec("value", "polyfit").param("poly_degree")
    assert deg.arg == "degree" and codecs.get_spec("value", "polyfit").param("degree") is deg
    with pytest.raises(ValueError, match=r"^polyfit: degree must be an integer in \[0, 15\], "
                                         r"got 16$"):
        deg.validate(16, "polyfit")
    with pytest.raises(ValueError, match="degree must be an integer"):
        deg.validate(True, "polyfit")
    fpr = codecs.get_spec("index", "bloom").param("fpr")
    with pytest.raises(ValueError, match=r"^bloom: fpr must lie in \(0, 1\), got 1\.0$"):
        fpr.validate(1.0, "bloom")
    assert fpr.validate("0.5", "bloom") == "0.5"  # float() strings, as the original did
    policy = codecs.get_spec("index", "bloom").param("policy")
    with pytest.raises(ValueError, match="policy='p9' is not valid; valid choices: 'p0', "
                                         "'leftmost', 'random', 'conflict_sets'"):
        policy.validate("p9", "bloom")
    block = codecs.get_spec("index", "golomb").param("block_size")
    assert block.validate("auto") == "auto" and block.validate(64) == 64
    with pytest.raises(ValueError, match="power of two"):
        block.validate(63)
    with pytest.raises(ValueError, match="block_size must be 'auto' or None or an integer"):
        block.validate("big")
    assert block.parse("auto") == "auto" and block.parse("128") == 128
    bits = codecs.get_spec("value", "qsgd").param("bits")
    assert bits.validate(None) is None  # unset
    cap = base.Param("cap", float, 1.0, low=0, low_open=True)
    with pytest.raises(ValueError, match=r"^cap must be a number > 0, got 0$"):
        cap.validate(0)
    assert cap.describe() == "float > 0" and deg.describe() == "int in [0, 15]"


def test_shared_seed_declared_once():
    assert codecs.get_spec("index", "bloom").param("seed") is codecs.SEED
    assert codecs.REGISTRY.params()["seed"] is codecs.SEED


def _inside(param):
    """A value strictly inside the declared range."""
    if param.type is float:
        return (param.low + param.high) / 2
    return param.low


@pytest.mark.parametrize("kind,name", BUILTIN)
def test_declared_ranges_agree_with_the_constructors(kind, name):
    spec = codecs.get_spec(kind, name)
    for p in spec.params:
        if p.type not in (int, float) or p.low is None or p.high is None:
            continue
        edges = [(p.low, not p.low_open), (p.high, not p.high_open)]
        step = 1 if p.type is int else 1e-9
        edges += [(p.low - step, False), (p.high + step, False)]
        if p.type is float:
            edges.append((_inside(p), True))
        for value, ok in edges:
            if ok:
                spec.make(**{p.arg: value})
                p.validate(value, name)
            else:
                with pytest.raises(ValueError):
                    spec.make(**{p.arg: value})
                with pytest.raises(ValueError):
                    p.validate(value, name)
    # The declared defaults are the constructors' defaults.
    assert spec.make().config() == spec.make(**spec.kwargs_from({})).config()


# --------------------------------------------------------------------------- from_params

def _roundtrip_params(kind, name):
    return {"compressor": "topk", "compress_ratio": 0.1, "deepreduce": kind, kind: name}


@pytest.mark.parametrize("kind,name", TABLE)
def test_every_codec_from_params_roundtrips(kind, name):
    c = build(_roundtrip_params(kind, name))
    spec = codecs.get_spec(kind, name)
    codec = c.index_codec if kind == "index" else c.value_codec
    assert type(codec) is spec.cls
    g = tf.random.stateless_normal([64, 48], seed=[1, 2])
    payload, ctx = c.compress(g, name="w")
    meta, _ = payload_ops.unpack(payload, compressor.NUM_SECTIONS,
                                 len(compressor.META_FIELDS))
    field = compressor.F_INDEX if kind == "index" else compressor.F_VALUE
    assert int(meta[field]) == spec.wire_id
    out = c.decompress(payload, ctx).numpy()
    # What the receiver decodes is what the sender's error feedback assumed.
    local = g.numpy() - tf.reshape(c.memory.residual("w"), g.shape).numpy()
    np.testing.assert_allclose(out, local, rtol=0, atol=1e-6)
    if c.index_codec.lossless and c.value_codec.lossless:
        k = math.ceil(0.1 * g.shape.num_elements())
        assert np.count_nonzero(out) == k
        np.testing.assert_array_equal(out[out != 0], g.numpy()[out != 0])


# --------------------------------------------------------------------------- a new codec

class ByteReverseValue(vc.ValueCodec):
    """The raw float32 bytes, reversed and XOR-ed with a key (a test codec)."""

    def __init__(self, xor=0):
        self.xor = xor

    def config(self):
        return {"xor": self.xor}

    def encode(self, values, seed):
        data = tf.reverse(tf.reshape(tf.bitcast(values, tf.uint8), [-1]), [0])
        return vc.ValueEncoding(tf.bitwise.bitwise_xor(data, tf.constant(self.xor, tf.uint8)),
                                None)

    def decode(self, section, count, dtype, limit):
        data = tf.reverse(tf.bitwise.bitwise_xor(section, tf.constant(self.xor, tf.uint8)), [0])
        return tf.bitcast(tf.reshape(data, [-1, 4]), tf.float32)


XOR = base.Param("rev_xor", int, 0, arg="xor", low=0, high=255,
                 help="byte XOR key of the test codec")


@pytest.fixture
def byterev():
    cls = type("ByteReverseTest", (ByteReverseValue,), {})
    base.register("byterev_test", wire_id=100, aliases=("brt",), lossless=True,
                  params=(XOR,))(cls)
    try:
        yield cls
    finally:
        codecs.unregister("value", "byterev_test")


def test_new_codec_is_usable_through_from_params(byterev):
    assert codecs.VALUE_CODECS["byterev_test"] is byterev and byterev.codec_id == 100
    c = build({"deepreduce": "value", "compressor": "topk", "compress_ratio": 0.2,
               "value": "brt", "rev_xor": 7})
    assert type(c.value_codec) is byterev and c.value_codec.xor == 7
    g = tf.random.stateless_normal([40, 40], seed=[3, 4])
    payload, ctx = c.compress(g, name="w")
    out = c.decompress(payload, ctx).numpy()
    nz = out != 0
    assert np.count_nonzero(nz) == math.ceil(0.2 * 1600)
    np.testing.assert_array_equal(out[nz], g.numpy()[nz])
    meta, _ = payload_ops.unpack(payload, compressor.NUM_SECTIONS,
                                 len(compressor.META_FIELDS))
    assert int(meta[compressor.F_VALUE]) == 100
    with pytest.raises(ValueError, match=r"byterev_test: xor must be an integer in \[0, 255\]"):
        dr.from_params({"deepreduce": "value", "value": "byterev_test", "rev_xor": 256})
    with pytest.warns(UserWarning, match="rev_xor not used"):
        dr.from_params({"deepreduce": "value", "value": "qsgd", "rev_xor": 1})
    assert "byterev_test" in codecs.markdown_table() and "`rev_xor`" in codecs.markdown_table()


def test_unregistered_codec_and_key_are_gone(byterev):
    codecs.unregister("value", "byterev_test")
    try:
        with pytest.raises(ValueError, match="unknown parameter 'rev_xor'"):
            dr.from_params({"deepreduce": "value", "value": "raw", "rev_xor": 1})
        with pytest.raises(ValueError, match="value='brt' is not valid"):
            dr.from_params({"deepreduce": "value", "value": "brt"})
    finally:
        base.register("byterev_test", wire_id=100, aliases=("brt",), lossless=True,
                      params=(XOR,))(byterev)


def _subclass():
    return type("Dup", (ByteReverseValue,), {})


@pytest.mark.parametrize("kwargs,match", [
    (dict(name="raw", wire_id=50), "value codec name 'raw' is already registered"),
    (dict(name="dup", wire_id=50, aliases=("gzip",)), "'gzip' is already an alias of "
                                                     "'deflate'"),
    (dict(name="dup", wire_id=3), "wire id 3 is already used by value codec 'qsgd'"),
    (dict(name="dup", wire_id=-1), "wire id must be an int >= 0"),
    (dict(name="dup", wire_id=50, params=(base.Param("fpr", float, 0.5),)),
     "parameter 'fpr' differs from the declaration other codecs share"),
    (dict(name="dup", wire_id=50, params=(base.Param("compressor", str, "x"),)),
     "parameter key 'compressor' is taken by deepreduce_tf.params"),
    (dict(name="dup", wire_id=50, params=(base.Param("x1", int, 0, aliases=("degree",)),)),
     "key alias 'degree' already means 'poly_degree'"),
    (dict(name="dup", wire_id=50, params=(XOR, XOR)), "parameter 'rev_xor' declared twice"),
])
def test_duplicates_rejected(kwargs, match):
    before = [codecs.specs(k) for k in base.KINDS]
    name = kwargs.pop("name")
    with pytest.raises(ValueError, match=match):
        base.register(name, **kwargs)(_subclass())
    assert [codecs.specs(k) for k in base.KINDS] == before


def test_duplicate_index_id_rejected_and_kinds_are_separate(byterev):
    class DupIndex(ic.RawIndex):
        pass

    with pytest.raises(ValueError, match="wire id 0 is already used by index codec 'raw'"):
        base.register("raw2", wire_id=0)(DupIndex)
    # Wire ids are per kind: value id 100 is free for an index codec.
    base.register("idx100", wire_id=100)(DupIndex)
    try:
        assert codecs.spec_by_wire_id("index", 100).cls is DupIndex
        assert codecs.spec_by_wire_id("value", 100).cls is byterev
    finally:
        codecs.unregister("index", "idx100")


def test_register_needs_a_codec_class():
    with pytest.raises(TypeError, match="IndexCodec / ValueCodec subclasses"):
        base.register("x", wire_id=77)(object)
    with pytest.raises(TypeError, match="unknown properties"):
        base.register("x", wire_id=77, sortable=True)


# --------------------------------------------------------------------------- stateful

class CountingValue(ByteReverseValue):
    """A stateful test codec: counts its encodes in a variable."""

    def __init__(self, xor=0):
        super().__init__(xor)
        self.factories = []
        self.counter = None

    def build(self, variable_factory):
        self.factories.append(variable_factory)
        self.counter = variable_factory(tf.constant(0, tf.int64), "encodes")

    @property
    def variables(self):
        return () if self.counter is None else (self.counter,)

    def encode(self, values, seed):
        self.counter.assign_add(1)
        return super().encode(values, seed)


@pytest.fixture
def counting():
    cls = base.register("counting_test", wire_id=101, lossless=True, stateful=True)(
        type("CountingTest", (CountingValue,), {}))
    try:
        yield cls
    finally:
        codecs.unregister("value", "counting_test")


def test_stateful_codec_is_built_with_the_variable_factory(counting):
    made = []

    def factory(initial_value, name):
        var = tf.Variable(initial_value, trainable=False, name=name)
        made.append((name, var))
        return var

    assert counting.stateful and codecs.get_spec("value", "counting_test").stateful
    c = build({"deepreduce": "value", "compressor": "topk", "value": "counting_test"},
              variable_factory=factory)
    codec = c.value_codec
    assert codec.factories == [factory] and codec.built
    assert codec.variables == (codec.counter,) and ("encodes", codec.counter) in made
    codec.build(factory)  # runs once: the compressor and from_params both call it
    assert codec.factories == [factory]
    g = tf.random.stateless_normal([64, 64], seed=[5, 6])
    payload, ctx = c.compress(g, name="w")
    c.decompress(payload, ctx)
    assert int(codec.counter.numpy()) == 1


# --------------------------------------------------------------------------- flags, docs

def _flag_values(args=()):
    fv = absl_flags.FlagValues()
    bench_flags.define_flags(fv)
    fv(["deepreduce-bench"] + list(args))
    return fv


def test_flags_derive_from_the_registry():
    fv = _flag_values()
    for kind in base.KINDS:
        for spec in codecs.specs(kind):
            assert spec.name in fv[kind].help
    for key, param in codecs.REGISTRY.params().items():
        if param.flag:
            assert key in fv and param.help in fv[key].help, key
    assert fv["fpr"].value is None and fv["policy"].value == "conflict_sets"
    for name in ("fpr", "policy", "bits", "bucket_size", "poly_degree", "topk_scope",
                 "bucket_cap_mb"):
        assert name in dr_flags.PARAM_FLAGS


@pytest.mark.parametrize("args,expected", [
    (["--topk_scope=bucket", "--bucket_cap_mb=4"], {"topk_scope": "bucket",
                                                    "bucket_cap_mb": 4.0}),
    (["--index=golomb", "--block_size=64"], {"index": "golomb", "block_size": 64}),
    (["--value=qsgd", "--quantum_num=15", "--bucket_size=128"],
     {"value": "qsgd", "quantum_num": 15, "bucket_size": 128}),
    (["--value=deflate", "--deflate_level=9"], {"value": "deflate", "deflate_level": 9}),
    (["--index=bloom_cpu"], {"policy": "conflict_sets"}),
    (["--topk_skip_zeros=true"], {"topk_skip_zeros": True}),
    (["--memory=dgc", "--momentum_masking=false"], {"momentum_masking": False}),
])
def test_codec_flags_become_params(args, expected):
    p = bench_flags.compression_params(_flag_values(args))
    for key, value in expected.items():
        assert p[key] == value and type(p[key]) is type(value), key
    default = bench_flags.compression_params(_flag_values())
    assert "topk_scope" not in default and "bucket_cap_mb" not in default
    assert "block_size" not in default and default["policy"] == "conflict_sets"
    golomb = bench_flags.compression_params(_flag_values(["--index=golomb"]))
    assert "policy" not in golomb


@pytest.mark.parametrize("args,message", [
    (["--bucket_cap_mb=0"], "--bucket_cap_mb=0.0 must be > 0"),
    (["--poly_degree=16"], "--poly_degree=16 must be in [0, 15]"),
    (["--topk_scope=layer"], "topk_scope='layer' is not valid; valid choices: 'variable', "
                             "'bucket'"),
    (["--index=golomb", "--block_size=big"], "--block_size='big' is not valid"),
    (["--deepreduce=value", "--value=polyfit", "--segmentation=even"],
     "segmentation='even' is not valid; valid choices: 'greedy', 'geometric'"),
])
def test_bad_codec_flags_rejected(args, message):
    with pytest.raises(bench_flags.ConfigError) as e:
        bench_flags.resolve(_flag_values(args))
    assert message in str(e.value)


def test_docs_are_generated_from_the_registry():
    with open(DOCS, encoding="utf-8") as f:
        committed = f.read()
    assert committed == codecs.markdown_table(), (
        f"docs/codecs.md is out of date; regenerate it with `{codecs.REGENERATE_DOCS}`")
