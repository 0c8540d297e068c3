"""from_params(): the GRACE / DeepReduce parameter dictionary -> an Exchange
(a stateless Compressor, the state beside it, the communicator chosen once).

    exchange = deepreduce_tf.from_params({
        'compressor': 'topk', 'compress_ratio': 0.01, 'memory': 'residual',
        'communicator': 'allgather', 'deepreduce': 'both', 'index': 'bloom',
        'value': 'polyfit'})

Keys (defaults in brackets; every key may be left out):
  compressor      topk | randomk | threshold | none
                  [topk when deepreduce is set, else none]
  compress_ratio  (0, 1] [0.01]            topk, randomk
  threshold       >= 0 [0.01]              threshold
  memory          none | residual | dgc [residual with a sparsifier, else none]
                  (dgc: DGC's momentum correction + factor masking; use it
                  with plain SGD, the momentum lives in the compressor)
  beta, gamma     residual memory r <- beta r + gamma g [1.0, 1.0]
  momentum        dgc memory's momentum [0.9]
  momentum_masking True | False [True]   dgc memory: DGC's factor masking
                  (the velocity is zeroed where a value was sent); False
                  keeps it, so the values sent add up to momentum SGD's steps
  warmup_steps    first steps of every tensor as a warm-up [0]
  warmup          dense | exponential [dense] (exponential: DGC's top-k
                  density 25 % -> compress_ratio over warmup_steps)
  clip_norm       local gradient clipping by global L2 norm [None]
  schedule        none | cosine [none]: the learning-rate schedule applied by
                  the exchange, before error feedback (the optimizer then runs
                  at the peak learning rate, constant); needs memory
  schedule_steps  the steps the schedule spans (with schedule)
  communicator    allgather | allreduce | lgc_ps | lgc_rar | sparse_allreduce
                  (top-k's positions gathered, the values at their union
                  all-reduced; docs/sparse_allreduce.md) [allgather; the
                  cross-device ops use allreduce for compressor none with raw
                  values and no memory when this key is absent]
                  (lgc_*: Learned Gradient Compression, deepreduce_tf.learned;
                  its keys lgc_warmup_steps [100], lgc_train_steps [200],
                  lgc_lr [1e-3], lgc_innovation [0.05], lgc_channels
                  ['64,128,256,64'], lgc_latent_channels [4], lgc_leader [0];
                  docs/lgc.md)
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
  policy_seed     seed of the Bloom 'random' policy [0]
  block_size      Golomb-Rice block size: auto or a power of two [auto]
  seed            base seed (randomk, QSGD rounding, Bloom hashing) [0]
  topk_scope      variable | bucket [variable]   topk, randomk: the K
                  positions are chosen per variable or over a whole fusion bucket
  topk_skip_zeros True | False [False]   topk: never select a zero, k =
                  min(ceil(ratio * n), non-zeros) (same decoded tensor, fewer
                  bytes where an update is exactly zero: embedding rows)
  bucket_cap_mb   > 0 [25.0]   fusion bucket size in MiB (as PyTorch DDP's)
  hierarchical    True | False [True]   MultiWorkerMirroredStrategy with
                  several devices per worker: sum the local replicas first,
                  compress once per worker, exchange one payload per worker
                  (communicators that send bytes: allgather, lgc_ps);
                  False: every replica is its own worker on the wire

The codec keys (index, value and every codec parameter) come from the codec
registry (deepreduce_tf.codecs; docs/codecs.md): a codec registered there is
accepted here, with its declared parameters, defaults and checks.

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
import difflib
import inspect
import math
import warnings

from deepreduce_tf import codecs, communicators, memory, sparsifiers
from deepreduce_tf.compressor import DEFAULT_MIN_SIZE, NONFINITE_CHOICES, Compressor
from deepreduce_tf.exchange.base import Communicator
from deepreduce_tf.exchange.endpoint import Exchange

DEEPREDUCE_MODES = (None, "index", "value", "both")
DEFAULT_CODECS = {"index": "bloom", "value": "polyfit"}
# Keys of the sparsifier, memory, communicator and compressor; the codec keys
# (index, value and codec parameters) come from the codec registry.
GENERAL_KEYS = ("compressor", "compress_ratio", "threshold", "topk_scope", "topk_skip_zeros",
                "memory", "beta",
                "gamma", "momentum", "momentum_masking", "communicator", "bucket_cap_mb",
                "deepreduce", "index",
                "value", "min_size", "nonfinite", "warmup_steps", "warmup", "clip_norm",
                "hierarchical", "schedule", "schedule_steps")
GENERAL_KEY_ALIASES = {"threshold_val": "threshold"}
HARNESS_KEYS = frozenset({
    "micro-benchmark", "micro_benchmark", "world_size", "horovod_size", "gradient_id",
    "bloom_logs_path", "bloom_verbosity", "bloom_verbosity_frequency", "logs_path",
    "verbosity", "mem_mode", "model", "bloom_false_positives_aware", "average",
    "tensors_size_are_same", "hash_table", "dense_tensor", "bloom_on", "sort"})
HIERARCHICAL = codecs.Param(
    "hierarchical", bool, True,
    help="multi-worker: sum each worker's local replicas, compress once per worker")
TOPK_SCOPES = ("variable", "bucket")
SCOPED_SPARSIFIERS = ("topk", "randomk")
TOPK_SCOPE = codecs.Param(
    "topk_scope", str, "variable", choices=TOPK_SCOPES,
    help="topk / randomk: select per variable or over a whole fusion bucket")
MOMENTUM_MASKING = codecs.Param(
    "momentum_masking", bool, True,
    help="memory dgc: zero the velocity where a value was sent (DGC's factor masking)")
TOPK_SKIP_ZEROS = codecs.Param(
    "topk_skip_zeros", bool, False,
    help="topk: never select a zero (k = min(ceil(ratio * n), non-zeros))")


LOW_RANK = "powersgd"


def _low_rank(p, mode, sparsifier_name):
    """{'compressor': 'powersgd', ...} (or communicator 'powersgd'): the
    PowerSGD communicator over whole gradients with error feedback; GRACE's
    spelling (memory 'powersgd', communicator 'allreduce', compress_rank)
    means the same. Rewrites p in place; returns the sparsifier ('none')."""
    if sparsifier_name not in (LOW_RANK, "none"):
        raise ValueError(f"communicator 'powersgd' compresses whole gradients into low-rank "
                         f"factors; it cannot follow compressor {sparsifier_name!r}: use "
                         "compressor='powersgd'")
    if mode is not None:
        raise ValueError(f"compressor 'powersgd' sends its factors as float32 values, without "
                         f"index or value codecs: leave deepreduce unset (got {mode!r})")
    comm = p.get("communicator", LOW_RANK)
    if comm not in (LOW_RANK, "allreduce"):
        raise ValueError(f"compressor 'powersgd' all-reduces its factors: communicator must be "
                         f"'powersgd' (or GRACE's 'allreduce'), got {comm!r}")
    p["communicator"] = LOW_RANK
    if p.get("memory", LOW_RANK) == LOW_RANK:  # GRACE's PowerSGD memory: error feedback
        p["memory"] = "residual"
    p.setdefault("min_size", 0)  # PowerSGD's own rule decides what is compressed
    return "none"


def _finite(value):
    if not math.isfinite(float(value)):
        raise ValueError(f"bucket_cap_mb must be a finite number > 0 (MiB), got {value!r}")


BUCKET_CAP_MB = codecs.Param(
    "bucket_cap_mb", float, 25.0, low=0, low_open=True, check=_finite,
    help="fusion bucket size in MiB (as PyTorch DDP's bucket_cap_mb)")
codecs.REGISTRY.reserve(GENERAL_KEYS + tuple(GENERAL_KEY_ALIASES) + ("use_memory",)
                        + communicators.param_keys(), "deepreduce_tf.params")


def keys():
    """Every from_params key, codec parameters of registered codecs included."""
    codec_keys = tuple(k for k in codecs.REGISTRY.params() if k != codecs.SEED.key)
    return GENERAL_KEYS + communicators.param_keys() + codec_keys + (codecs.SEED.key,)


def key_aliases():
    """{other spelling: key}: the original code's names of from_params keys."""
    communicator_aliases = {alias: param.key for c in communicators.COMMUNICATORS.values()
                            for param in getattr(c, "PARAMS", ()) for alias in param.aliases}
    return {**GENERAL_KEY_ALIASES, **codecs.REGISTRY.param_aliases(), **communicator_aliases}


def codec_aliases():
    """{alias: codec name} of both kinds (e.g. gzip, bloom_cpu, polyfit_cpu)."""
    return {**codecs.REGISTRY.aliases("index"), **codecs.REGISTRY.aliases("value")}


def __getattr__(name):
    # KEYS, KEY_ALIASES and CODEC_ALIASES follow the codec registry (a codec
    # registered after import adds its keys), so they are computed on access.
    if name == "KEYS":
        return keys()
    if name == "KEY_ALIASES":
        return key_aliases()
    if name == "CODEC_ALIASES":
        return codec_aliases()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _choice(key, value, choices):
    if value not in choices:
        shown = ", ".join("None" if c is None else repr(c) for c in choices)
        raise ValueError(f"{key}={value!r} is not valid; valid choices: {shown}")
    return value


def _normalize(params):
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict, got {type(params).__name__}")
    all_keys, aliases = keys(), key_aliases()
    out = {}
    for key, value in params.items():
        if key in HARNESS_KEYS:
            warnings.warn(f"deepreduce_tf.from_params: ignoring {key!r}, which configured the "
                          "original code's benchmark harness or logging, not compression",
                          stacklevel=3)
            continue
        if key == "use_memory":
            key, value = "memory", ("residual" if value else "none")
        canonical = aliases.get(key, key)
        if canonical not in all_keys:
            close = difflib.get_close_matches(canonical, all_keys + tuple(aliases), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"unknown parameter {key!r}{hint}; valid keys: "
                             f"{', '.join(all_keys)} (also accepted: "
                             f"{', '.join(sorted(aliases))}, use_memory)")
        if canonical in out:
            raise ValueError(f"parameter {canonical!r} given twice (as {key!r} and another "
                             "spelling)")
        out[canonical] = value
    return out


def _accepts(callable_, arg):
    try:
        return arg in inspect.signature(callable_).parameters
    except (TypeError, ValueError):
        return False


def _codec(kind, p, mode, get, used):
    """The codec of `kind` ('index' | 'value') that p configures under the
    deepreduce `mode`: the named one with its declared parameters if the
    mode compresses this component, else raw."""
    default = DEFAULT_CODECS[kind]
    if mode not in (kind, "both"):
        if kind in p:
            spec = codecs.REGISTRY.lookup(kind, p[kind])
            if spec is None or spec.name != "raw":
                raise ValueError(f"{kind}={p[kind]!r} needs deepreduce={kind!r} or 'both' "
                                 f"(got deepreduce={mode!r}); valid deepreduce choices: None, "
                                 "'index', 'value', 'both'")
        used.add(kind)
        return codecs.REGISTRY.get(kind, "raw").make()
    name = get(kind, default)
    spec = codecs.REGISTRY.lookup(kind, name)
    if spec is None:
        _choice(kind, name, codecs.REGISTRY.names(kind))
    values = {}
    for param in spec.params:
        values[param.key] = get(param.key, param.default)
    return spec.make(**spec.kwargs_from(values))


def from_params(params, variable_factory=None, communicator=None):
    """Builds an Exchange from a GRACE/DeepReduce parameter dict (see module
    doc): a stateless Compressor (sparsifier + index codec + value codec),
    its memory and counters beside it, and the communicator.

    variable_factory: optional callable(initial_value, name) -> tf.Variable
    for every state variable (residuals, step counters, byte counters,
    stateful codecs' variables); deepreduce_tf.distribute passes one per
    replica.
    communicator: a Communicator object to use instead of the one the
    parameters name (deepreduce_tf.distribute passes the one its ops chose,
    so that every replica's exchange runs that one object); it is checked
    against the configuration like the named one.

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
    if sparsifier_name == LOW_RANK or p.get("communicator") == LOW_RANK:
        sparsifier_name = _low_rank(p, mode, sparsifier_name)
    sparsifier_key = sparsifiers.SPARSIFIER_ALIASES.get(sparsifier_name, sparsifier_name)
    _choice("compressor", sparsifier_key, tuple(sparsifiers.SPARSIFIERS))
    for param in (TOPK_SCOPE, BUCKET_CAP_MB, TOPK_SKIP_ZEROS):
        if param.key in p:
            param.validate(p[param.key])
    sp_kwargs = {}
    if sparsifier_key in SCOPED_SPARSIFIERS:
        sp_kwargs["compress_ratio"] = get("compress_ratio", 0.01)
        # The scope reaches sparsifiers that know it; without it 'variable' is
        # what every sparsifier does, and 'bucket' cannot be honoured.
        scope = p.get("topk_scope", TOPK_SCOPE.default)
        if _accepts(sparsifiers.SPARSIFIERS[sparsifier_key], "scope"):
            sp_kwargs["scope"] = get("topk_scope", TOPK_SCOPE.default)
        elif scope != "variable":
            raise ValueError(f"topk_scope={scope!r} needs a sparsifier with bucket scope, "
                             "which this version of deepreduce_tf.sparsifiers lacks; use "
                             "topk_scope='variable'")
        else:
            used.add("topk_scope")
        if _accepts(sparsifiers.SPARSIFIERS[sparsifier_key], "skip_zeros"):
            sp_kwargs["skip_zeros"] = get("topk_skip_zeros", TOPK_SKIP_ZEROS.default)
    elif sparsifier_key == "threshold":
        sp_kwargs["threshold"] = get("threshold", 0.01)
    sparsifier = sparsifiers.make_sparsifier(sparsifier_key, **sp_kwargs)

    seed = get("seed", codecs.SEED.default)
    if mode in ("index", "both") and sparsifier.dense:
        raise ValueError(f"deepreduce={mode!r} compresses the indices of a sparse tensor, "
                         "but compressor 'none' sends every position; choose compressor "
                         "topk, randomk or threshold, or deepreduce None/'value'")
    index_codec = _codec("index", p, mode, get, used)
    value_codec = _codec("value", p, mode, get, used)

    mem_name = get("memory", "none" if sparsifier.dense else "residual")
    _choice("memory", mem_name, tuple(memory.MEMORIES))
    if mem_name == "residual":
        mem = memory.ResidualMemory(beta=get("beta", 1.0), gamma=get("gamma", 1.0),
                                    variable_factory=variable_factory)
    elif mem_name == "dgc":
        mem = memory.MomentumCorrectionMemory(
            momentum=get("momentum", 0.9), variable_factory=variable_factory,
            masking=MOMENTUM_MASKING.validate(get(MOMENTUM_MASKING.key,
                                                  MOMENTUM_MASKING.default)))
    else:
        mem = memory.NoMemory()
    comm_name = get("communicator", "allgather")
    _choice("communicator", comm_name, tuple(communicators.COMMUNICATORS))
    nonfinite = get("nonfinite", "dense")
    _choice("nonfinite", nonfinite, NONFINITE_CHOICES)
    comm_kwargs = {}
    for param in getattr(communicators.COMMUNICATORS[comm_name], "PARAMS", ()):
        comm_kwargs[param.arg] = param.validate(get(param.key, param.default))
    if comm_kwargs:
        comm_kwargs["seed"] = seed
    if communicator is None:
        communicator = communicators.make_communicator(comm_name, **comm_kwargs)
    elif not isinstance(communicator, Communicator):
        raise TypeError(f"communicator must be a deepreduce_tf.communicators.Communicator, "
                        f"got {communicator!r}")
    compressor = Compressor(sparsifier, index_codec, value_codec,
                            min_size=get("min_size", DEFAULT_MIN_SIZE), nonfinite=nonfinite,
                            seed=seed,
                            bucket_cap_mb=float(get("bucket_cap_mb", BUCKET_CAP_MB.default)))
    exchange = Exchange(compressor, mem, communicator, variable_factory=variable_factory,
                        warmup_steps=get("warmup_steps", 0), warmup=get("warmup", "dense"),
                        clip_norm=get("clip_norm", None),
                        schedule=get("schedule", None),
                        schedule_steps=get("schedule_steps", None),
                        hierarchical=HIERARCHICAL.validate(get(HIERARCHICAL.key,
                                                               HIERARCHICAL.default)),
                        params=params)
    unused = sorted(set(p) - used)
    if unused:
        warnings.warn(f"deepreduce_tf.from_params: {', '.join(unused)} not used by this "
                      f"configuration ({exchange!r})", stacklevel=2)
    return exchange
