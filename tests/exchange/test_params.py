"""from_params: the GRACE / DeepReduce vocabulary, defaults and errors."""
import warnings

import pytest
import tensorflow as tf

import deepreduce_tf as dr
from deepreduce_tf import communicators, memory, sparsifiers
from deepreduce_tf.codecs import index as ic
from deepreduce_tf.codecs import value as vc


def build(params):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return dr.from_params(params)


def test_reference_example_dict():
    # REFERENCE 1: DeepReduce's GRACE-style entry point, as users write it.
    c = build({"compressor": "topk", "memory": "residual", "communicator": "allgather",
               "compress_ratio": 0.01, "deepreduce": "index", "index": "bloom"})
    assert isinstance(c.sparsifier, sparsifiers.TopK) and c.sparsifier.compress_ratio == 0.01
    assert isinstance(c.memory, memory.ResidualMemory)
    assert isinstance(c.communicator, communicators.Allgather)
    assert isinstance(c.index_codec, ic.BloomIndex)
    assert c.index_codec.fpr == 0.001 and c.index_codec.policy == "conflict_sets"
    assert isinstance(c.value_codec, vc.RawValue)


def test_both_alone_uses_defaults():
    c = build({"deepreduce": "both"})
    assert isinstance(c.sparsifier, sparsifiers.TopK) and c.sparsifier.compress_ratio == 0.01
    assert isinstance(c.index_codec, ic.BloomIndex)
    assert isinstance(c.value_codec, vc.PolyfitValue) and c.value_codec.degree == 5
    assert isinstance(c.memory, memory.ResidualMemory)
    assert isinstance(c.communicator, communicators.Allgather)


def test_empty_dict_is_plain_allgather():
    c = build({})
    assert isinstance(c.sparsifier, sparsifiers.NoSparsifier)
    assert isinstance(c.memory, memory.NoMemory)
    g = tf.random.normal([50, 50])
    p, ctx = c.compress(g)
    tf.debugging.assert_equal(c.decompress(p, ctx), g)


@pytest.mark.parametrize("params", [
    {"compressor": "topk", "compress_ratio": 0.3, "memory": "residual"},      # GRACE
    {"compressor": "randomk", "compress_ratio": 0.1, "memory": "none"},
    {"compressor": "threshold", "threshold": 0.5, "memory": "residual"},
    {"compressor": "none", "memory": "none", "communicator": "allreduce"},
    {"compressor": "none", "deepreduce": "value", "value": "fp16", "communicator": "allreduce"},
    {"compressor": "randomk", "deepreduce": "value", "value": "bf16",
     "communicator": "allreduce"},
])
def test_grace_dicts(params):
    c = build(params)
    g = tf.random.normal([64, 64])
    p, ctx = c.compress(g, name="v")
    assert c.decompress(p, ctx).shape == g.shape


def test_original_spellings():
    c = build({"deepreduce": "both", "index": "bloom", "value": "qsgd", "quantum_num": 15,
               "buckets_num": 256, "bloom_fpr": 0.6, "bloom_policy": "p0", "use_memory": True})
    assert c.value_codec.levels == 15 and c.value_codec.bucket_size == 256
    assert c.index_codec.fpr == 0.6 and c.index_codec.policy == "p0"
    assert isinstance(c.memory, memory.ResidualMemory)
    c = build({"deepreduce": "value", "value": "gzip", "use_memory": False})
    assert isinstance(c.value_codec, vc.DeflateValue) and isinstance(c.memory, memory.NoMemory)
    c = build({"deepreduce": "both", "index": "bloom_cpu", "value": "polyfit_cpu",
               "threshold_val": 0.2, "compressor": "threshold"})
    assert c.sparsifier.threshold == 0.2
    c = build({"deepreduce": "index", "index": "lossless"})
    assert isinstance(c.index_codec, ic.GolombIndex)
    c = build({"deepreduce": "value", "value": "qsgd", "bits": 4})
    assert c.value_codec.levels == 15


def test_harness_keys_ignored_with_warning():
    with pytest.warns(UserWarning, match="micro-benchmark"):
        c = dr.from_params({"deepreduce": "both", "micro-benchmark": True})
    assert isinstance(c.index_codec, ic.BloomIndex)


def test_unused_known_key_warns():
    with pytest.warns(UserWarning, match="fpr"):
        dr.from_params({"deepreduce": "index", "index": "golomb", "fpr": 0.01})


def test_misspelt_key_is_an_error():
    with pytest.raises(ValueError, match="compres_ratio.*did you mean 'compress_ratio'.*valid keys"):
        dr.from_params({"compressor": "topk", "compres_ratio": 0.01})


@pytest.mark.parametrize("key,value,listed", [
    ("compressor", "dgc", "'topk', 'randomk', 'threshold', 'none'"),
    ("memory", "ef21", "'none', 'residual', 'dgc'"),
    ("communicator", "broadcast", "'allgather', 'allreduce'"),
    ("deepreduce", "all", "None, 'index', 'value', 'both'"),
])
def test_unknown_values_list_choices(key, value, listed):
    with pytest.raises(ValueError, match=f"{key}='{value}' is not valid; valid choices: {listed}"):
        dr.from_params({key: value, **({"deepreduce": "both"} if key != "deepreduce" else {})})


def test_unknown_codec_values_list_choices():
    with pytest.raises(ValueError, match="index='huffman'.*'golomb'.*'bloom'"):
        dr.from_params({"deepreduce": "index", "index": "huffman"})
    with pytest.raises(ValueError, match="value='zstd'.*'polyfit'.*'deflate'"):
        dr.from_params({"deepreduce": "value", "value": "zstd"})
    with pytest.raises(ValueError, match="policy='p1'.*conflict_sets"):
        dr.from_params({"deepreduce": "index", "policy": "p1"})


@pytest.mark.parametrize("params,match", [
    ({"compressor": "topk", "compress_ratio": 0}, r"compress_ratio must lie in \(0, 1\]"),
    ({"compressor": "topk", "compress_ratio": 1.5}, r"compress_ratio must lie in \(0, 1\]"),
    ({"compressor": "threshold", "threshold": -1}, "threshold must be >= 0"),
    ({"deepreduce": "index", "fpr": 1.5}, r"fpr must lie in \(0, 1\)"),
    ({"deepreduce": "value", "poly_degree": 99}, r"degree must be an integer in \[0, 15\]"),
    ({"deepreduce": "value", "value": "qsgd", "quantum_num": 0}, "levels must be an integer"),
    ({"deepreduce": "value", "value": "qsgd", "bits": 4, "quantum_num": 7}, "not both"),
    ({"min_size": -1}, "min_size"),
    ({"nonfinite": "ignore"}, "nonfinite='ignore' is not valid"),
])
def test_bad_numbers(params, match):
    with pytest.raises(ValueError, match=match):
        dr.from_params(params)


@pytest.mark.parametrize("params,match", [
    ({"compressor": "none", "deepreduce": "index"}, "compressor 'none' sends every position"),
    ({"compressor": "none", "deepreduce": "both"}, "compressor 'none' sends every position"),
    ({"compressor": "topk", "index": "bloom"}, "index='bloom' needs deepreduce='index' or 'both'"),
    ({"deepreduce": "index", "value": "qsgd"}, "value='qsgd' needs deepreduce='value' or 'both'"),
    ({"deepreduce": "both", "communicator": "allreduce"}, "Use communicator='allgather'"),
])
def test_invalid_combinations(params, match):
    with pytest.raises(ValueError, match=match):
        dr.from_params(params)


def test_params_not_a_dict():
    with pytest.raises(TypeError, match="dict"):
        dr.from_params([("compressor", "topk")])


def test_direct_composition():
    """Classes compose without from_params."""
    c = dr.make_exchange(sparsifiers.TopK(0.05), ic.GolombIndex(), vc.QsgdValue(bits=4),
                         memory.ResidualMemory(), communicators.Allgather(), min_size=10)
    assert isinstance(c, dr.Exchange) and isinstance(c.compressor, dr.Compressor)
    assert c.hierarchical  # as from_params' default
    g = tf.random.normal([100, 10])
    p, ctx = c.compress(g, name="w")
    out = c.decompress(p, ctx)
    assert int(tf.math.count_nonzero(out)) <= 50
    with pytest.raises(TypeError, match="Sparsifier"):
        dr.make_exchange("topk")
    with pytest.raises(ValueError, match="needs a sparsifier"):
        dr.make_exchange(sparsifiers.NoSparsifier(), ic.GolombIndex())


# ---------------------------------------------------------------------------
# Keys from the codec registry, topk_scope, bucket_cap_mb

def _scope_supported():
    import inspect

    return "scope" in inspect.signature(sparsifiers.TopK.__init__).parameters


def _bucket_cap_supported():
    import inspect

    return "bucket_cap_mb" in inspect.signature(dr.compressor.Compressor).parameters


def test_codec_parameters_reach_the_constructors():
    c = build({"deepreduce": "both", "index": "bloom", "fpr": 0.01, "policy": "random",
               "policy_seed": 3, "seed": 5, "value": "polyfit", "degree": 3,
               "segmentation": "geometric", "segments": 4})
    assert c.index_codec.config() == {"fpr": 0.01, "policy": "random", "seed": 5,
                                      "policy_seed": 3}
    assert c.value_codec.config() == {"degree": 3, "segmentation": "geometric", "segments": 4}
    assert c.seed == 5
    c = build({"deepreduce": "both", "index": "rice", "block_size": 64, "value": "zlib",
               "deflate_level": 1})
    assert c.index_codec.block_size == 64 and c.value_codec.level == 1


@pytest.mark.parametrize("params,match", [
    ({"deepreduce": "value", "value": "polyfit", "segmentation": "even"},
     "segmentation='even' is not valid; valid choices: 'greedy', 'geometric'"),
    ({"deepreduce": "value", "value": "deflate", "deflate_level": 10},
     r"deflate: level must be an integer in \[0, 9\], got 10"),
    ({"deepreduce": "index", "index": "golomb", "block_size": 100}, "power of two"),
    ({"topk_scope": "layer"}, "topk_scope='layer' is not valid; valid choices: 'variable', "
                              "'bucket'"),
    ({"bucket_cap_mb": 0}, "bucket_cap_mb must be a number > 0, got 0"),
    ({"bucket_cap_mb": "big"}, "bucket_cap_mb must be a number > 0"),
])
def test_bad_codec_and_fusion_values(params, match):
    with pytest.raises(ValueError, match=match):
        dr.from_params(params)


@pytest.mark.parametrize("sparsifier", ["topk", "randomk"])
def test_topk_scope_default_is_per_variable(sparsifier):
    c = build({"compressor": sparsifier, "topk_scope": "variable"})
    if _scope_supported():
        assert c.sparsifier.scope == "variable"


@pytest.mark.parametrize("sparsifier", ["topk", "randomk"])
def test_topk_scope_bucket_reaches_the_sparsifier(sparsifier):
    if not _scope_supported():
        pytest.skip("sparsifier scope not yet available")
    c = build({"compressor": sparsifier, "topk_scope": "bucket"})
    assert c.sparsifier.scope == "bucket"


def test_topk_scope_bucket_refused_without_support():
    if _scope_supported():
        pytest.skip("sparsifier scope is available")
    with pytest.raises(ValueError, match="topk_scope='bucket' needs a sparsifier with bucket"):
        dr.from_params({"compressor": "topk", "topk_scope": "bucket"})


@pytest.mark.parametrize("sparsifier", ["threshold", "none"])
def test_topk_scope_unused_by_other_sparsifiers_warns(sparsifier):
    with pytest.warns(UserWarning, match="topk_scope not used by this configuration"):
        dr.from_params({"compressor": sparsifier, "topk_scope": "bucket"})


def test_bucket_cap_mb():
    if _bucket_cap_supported():
        c = build({"compressor": "topk", "bucket_cap_mb": 4})
        assert c.bucket_cap_mb == 4.0
    else:
        with pytest.warns(UserWarning, match="bucket_cap_mb not used by this configuration"):
            dr.from_params({"compressor": "topk", "bucket_cap_mb": 4})
