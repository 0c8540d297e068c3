"""from_params(): the GRACE / DeepReduce parameter dictionary -> a Compressor.

    compressor = deepreduce_tf.from_params({
        'compressor': 'topk', 'compress_ratio': 0.01, 'memory': 'residual',
        'communicator': 'allgather', 'deepreduce': 'both', 'index': 'bloom',
        'value': 'polyfit'})

Keys (defaults in brackets; every key may be left out):
  compressor      topk | randomk | threshold | none
                  [topk when deepreduce is set, else none]
  compress_ratio  (0, 1] [0.01]            topk, randomk
  threshold       >= 0 [0.01]              threshold
  memory          none | residual [residual with a sparsifier, else none]
  beta, gamma     residual memory r <- beta r + gamma g [1.0, 1.0]
  communicator    allgather | allreduce [allgather]
  deepreduce      None | 'index' | 'value' | 'both' [None]
  index           bloom | golomb | rle | bitmap | int32 | raw [bloom]
                  (golomb: the project's lossless near-entropy codec;
                  aliases gr, rice, lossless)
  value           polyfit | dexp | qsgd | fp16 | bf16 | deflate | raw [polyfit]
  fpr             Bloom false-positive rate (0, 1) [0.001]
  policy          p0 | leftmost | random | conflict_sets [conflict_sets]
  poly_degree     polyfit degree 0..15 [5]; segmentation greedy | geometric
                  [greedy]; segments 0 (automatic) or a count [0]
  quantum_num     QSGD levels s, 1..255 [127]; or bits 1..8 (s = 2^bits - 1)
  bucket_size     QSGD bucket size [512]
  deflate_level   zlib level 0..9 [6]
  min_size        tensors with fewer elements travel dense [1024]
  nonfinite       dense | raise [dense]
  seed            base seed (randomk, QSGD rounding, Bloom hashing) [0]

Spellings of the original code are accepted: bloom_fpr (fpr), bloom_policy
(policy), threshold_val (threshold), buckets_num (bucket_size), use_memory
(True/False for memory), codec names gzip (deflate), bloom_cpu (bloom),
polyfit_cpu (polyfit). Keys that configured the original's benchmark
harness or logging (HARNESS_KEYS, e.g. 'micro-benchmark') are ignored with
a warning. Any other key, or an unknown value, raises ValueError listing the
valid choices; so does a combination that cannot work (e.g. an index codec
with deepreduce='value', or allreduce with a sparsifier that picks different
positions on every worker). A known option that the chosen configuration
does not use (e.g. fpr without a Bloom filter) is ignored with a warning.
"""
import warnings

from deepreduce_tf import communicators, memory, sparsifiers
from deepreduce_tf.codecs import index as index_codecs
from deepreduce_tf.codecs import value as value_codecs
from deepreduce_tf.compressors import DEFAULT_MIN_SIZE, NONFINITE_CHOICES, Compressor

DEEPREDUCE_MODES = (None, "index", "value", "both")
KEYS = ("compressor", "compress_ratio", "threshold", "memory", "beta", "gamma",
        "communicator", "deepreduce", "index", "value", "fpr", "policy", "poly_degree",
        "segmentation", "segments", "quantum_num", "bits", "bucket_size", "deflate_level",
        "min_size", "nonfinite", "seed", "policy_seed", "block_size")
KEY_ALIASES = {"bloom_fpr": "fpr", "bloom_policy": "policy", "threshold_val": "threshold",
               "buckets_num": "bucket_size", "degree": "poly_degree", "levels": "quantum_num"}
CODEC_ALIASES = {"gzip": "deflate", "bloom_cpu": "bloom", "polyfit_cpu": "polyfit"}
HARNESS_KEYS = frozenset({
    "micro-benchmark", "micro_benchmark", "world_size", "horovod_size", "gradient_id",
    "bloom_logs_path", "bloom_verbosity", "bloom_verbosity_frequency", "logs_path",
    "verbosity", "mem_mode", "model", "bloom_false_positives_aware", "average",
    "tensors_size_are_same", "hash_table", "dense_tensor", "bloom_on", "sort"})


def _choice(key, value, choices):
    if value not in choices:
        shown = ", ".join("None" if c is None else repr(c) for c in choices)
        raise ValueError(f"{key}={value!r} is not valid; valid choices: {shown}")
    return value


def _normalize(params):
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict, got {type(params).__name__}")
    out = {}
    for key, value in params.items():
        if key in HARNESS_KEYS:
            warnings.warn(f"deepreduce_tf.from_params: ignoring {key!r}, which configured the "
                          "original code's benchmark harness or logging, not compression",
                          stacklevel=3)
            continue
        if key == "use_memory":
            key, value = "memory", ("residual" if value else "none")
        canonical = KEY_ALIASES.get(key, key)
        if canonical not in KEYS:
            import difflib

            close = difflib.get_close_matches(canonical, KEYS + tuple(KEY_ALIASES), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"unknown parameter {key!r}{hint}; valid keys: {', '.join(KEYS)} "
                             f"(also accepted: {', '.join(sorted(KEY_ALIASES))}, use_memory)")
        if canonical in out:
            raise ValueError(f"parameter {canonical!r} given twice (as {key!r} and another "
                             "spelling)")
        out[canonical] = value
    return out


def from_params(params, variable_factory=None):
    """Builds a Compressor from a GRACE/DeepReduce parameter dict (see module doc).

    variable_factory: optional callable(initial_value, name) -> tf.Variable
    for every state variable of the compressor (residuals, step counters,
    byte counters); deepreduce_tf.distribute passes one per replica.

    Raises:
      ValueError: unknown key or value, or an invalid combination; the
        message lists the valid choices.
    """
    p = _normalize(params)
    used = set()

    def get(key, default):
        used.add(key)
        return p.get(key, default)

    mode = get("deepreduce", None)
    if isinstance(mode, str) and mode.lower() in ("none", ""):
        mode = None
    _choice("deepreduce", mode, DEEPREDUCE_MODES)
    sparsifier_name = get("compressor", "topk" if mode else "none")
    sparsifier_key = sparsifiers.SPARSIFIER_ALIASES.get(sparsifier_name, sparsifier_name)
    _choice("compressor", sparsifier_key, tuple(sparsifiers.SPARSIFIERS))
    sp_kwargs = {}
    if sparsifier_key in ("topk", "randomk"):
        sp_kwargs["compress_ratio"] = get("compress_ratio", 0.01)
    elif sparsifier_key == "threshold":
        sp_kwargs["threshold"] = get("threshold", 0.01)
    sparsifier = sparsifiers.make_sparsifier(sparsifier_key, **sp_kwargs)

    # Index codec.
    seed = get("seed", 0)
    if mode in ("index", "both"):
        if sparsifier.dense:
            raise ValueError(f"deepreduce={mode!r} compresses the indices of a sparse tensor, "
                             "but compressor 'none' sends every position; choose compressor "
                             "topk, randomk or threshold, or deepreduce None/'value'")
        iname = get("index", "bloom")
        iname = CODEC_ALIASES.get(iname, iname)
        ikey = index_codecs.INDEX_ALIASES.get(iname, iname)
        _choice("index", ikey, tuple(index_codecs.INDEX_CODECS))
        ikw = {}
        if ikey == "bloom":
            ikw = {"fpr": get("fpr", 0.001), "policy": get("policy", "conflict_sets"),
                   "seed": seed, "policy_seed": get("policy_seed", 0)}
            _choice("policy", ikw["policy"], ("p0", "leftmost", "random", "conflict_sets"))
        elif ikey == "golomb":
            ikw = {"block_size": get("block_size", "auto")}
        index_codec = index_codecs.make_index_codec(ikey, **ikw)
    else:
        if "index" in p and index_codecs.INDEX_ALIASES.get(p["index"], p["index"]) != "raw":
            raise ValueError(f"index={p['index']!r} needs deepreduce='index' or 'both' "
                             f"(got deepreduce={mode!r}); valid deepreduce choices: None, "
                             "'index', 'value', 'both'")
        used.add("index")
        index_codec = index_codecs.RawIndex()

    # Value codec.
    if mode in ("value", "both"):
        vname = get("value", "polyfit")
        vname = CODEC_ALIASES.get(vname, vname)
        vkey = value_codecs.VALUE_ALIASES.get(vname, vname)
        _choice("value", vkey, tuple(value_codecs.VALUE_CODECS))
        vkw = {}
        if vkey == "polyfit":
            vkw = {"degree": get("poly_degree", 5), "segmentation": get("segmentation", "greedy"),
                   "segments": get("segments", 0)}
        elif vkey == "qsgd":
            bits, levels = p.get("bits"), p.get("quantum_num")
            used.update({"bits", "quantum_num"})
            vkw = {"bits": bits, "levels": levels, "bucket_size": get("bucket_size", 512)}
        elif vkey == "deflate":
            vkw = {"level": get("deflate_level", 6)}
        value_codec = value_codecs.make_value_codec(vkey, **vkw)
    else:
        if "value" in p and value_codecs.VALUE_ALIASES.get(p["value"], p["value"]) != "raw":
            raise ValueError(f"value={p['value']!r} needs deepreduce='value' or 'both' "
                             f"(got deepreduce={mode!r}); valid deepreduce choices: None, "
                             "'index', 'value', 'both'")
        used.add("value")
        value_codec = value_codecs.RawValue()

    mem_name = get("memory", "none" if sparsifier.dense else "residual")
    _choice("memory", mem_name, tuple(memory.MEMORIES))
    mem = (memory.ResidualMemory(beta=get("beta", 1.0), gamma=get("gamma", 1.0),
                                 variable_factory=variable_factory)
           if mem_name == "residual" else memory.NoMemory())
    comm_name = get("communicator", "allgather")
    _choice("communicator", comm_name, tuple(communicators.COMMUNICATORS))
    nonfinite = get("nonfinite", "dense")
    _choice("nonfinite", nonfinite, NONFINITE_CHOICES)
    compressor = Compressor(sparsifier, index_codec, value_codec, mem,
                            communicators.make_communicator(comm_name),
                            min_size=get("min_size", DEFAULT_MIN_SIZE), nonfinite=nonfinite,
                            seed=seed, variable_factory=variable_factory)
    unused = sorted(set(p) - used)
    if unused:
        warnings.warn(f"deepreduce_tf.from_params: {', '.join(unused)} not used by this "
                      f"configuration ({compressor!r})", stacklevel=2)
    compressor.params = dict(params)
    return compressor
