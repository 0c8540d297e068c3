"""absl flags for from_params' dictionary: the compression flags of a command line.

    from absl import flags
    from deepreduce_tf import flags as dr_flags

    dr_flags.define_flags(flags.FLAGS)        # --compressor --compress_ratio --memory ...
    ...                                       # parse the command line
    params = dr_flags.compression_params(flags.FLAGS)
    ops = deepreduce_tf.from_params(params)

A command line that trains with DeepReduce's exchange (deepreduce-bench, the
tf_cnn_benchmarks adapter deepreduce-tf-cnn-benchmarks) takes the keys of its
parameter dictionary as flags: --compressor, --compress_ratio, --threshold,
--memory, --warmup_steps, --warmup, --clip_norm, --hierarchical, --communicator, --deepreduce,
--index, --value, --min_size, --seed, and the flags that derive from the
registries: one per codec parameter (deepreduce_tf.codecs: --fpr, --policy,
--bits, --bucket_size, --poly_degree, ...) and per communicator parameter
(--lgc_*), named by its from_params key, with the declared type, range and
help, plus --topk_scope, --topk_skip_zeros and --bucket_cap_mb.

define_flags() registers them (once per FlagValues); compression_params()
turns the parsed flags into the from_params() dict, raising ConfigError with
a message that names the flag. from_params() remains the authority on keys,
values and combinations. The host command keeps its own --momentum, which
compression_params() reads for --memory=dgc.

Importing this module does not import TensorFlow, nor does
define_flags(fv, codecs=False); the codec registry and from_params do.
"""
import importlib

from absl import flags


class _LazyModule:
    """A module imported on first attribute access: the codec registry and
    from_params import TensorFlow, which the flags defined by
    define_flags(..., codecs=False) do not need."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        return getattr(importlib.import_module(self._name), attr)


dr_params = _LazyModule("deepreduce_tf.params")
# deepreduce_tf.params.LOW_RANK (spelt here: reading it would import TensorFlow)
LOW_RANK = "powersgd"
codec_base = _LazyModule("deepreduce_tf.codecs.base")

# Compression flags that are not codec parameters, and the from_params Params
# of the fusion / scope flags.
GENERAL_PARAM_FLAGS = ("compressor", "compress_ratio", "threshold", "topk_scope",
                       "topk_skip_zeros", "memory", "momentum_masking",
                       "warmup_steps", "warmup", "clip_norm", "schedule", "schedule_steps",
                       "hierarchical", "communicator",
                       "bucket_cap_mb", "deepreduce", "index", "value")


class ConfigError(ValueError):
    """A flag value, or a combination of them, that cannot run."""


def codec_flag_params():
    """{flag name: Param} of the registered codecs' parameters that have a flag."""
    return {k: p for k, p in codec_base.REGISTRY.params().items() if p.flag}


def communicator_flag_params():
    """{flag name: Param} of the registered communicators' keys (lgc_*)."""
    comms = dr_params.communicators.COMMUNICATORS  # importing params registers them all
    return {p.key: p for c in comms.values() for p in getattr(c, "PARAMS", ())}


def param_flags():
    """The flags that configure compression, in the order of the params dict."""
    return (GENERAL_PARAM_FLAGS + tuple(communicator_flag_params()) + tuple(codec_flag_params())
            + ("min_size", "seed"))


def extra_params():
    """The from_params Params of the fusion / selection flags (--topk_scope,
    --topk_skip_zeros, --bucket_cap_mb)."""
    return (dr_params.TOPK_SCOPE, dr_params.TOPK_SKIP_ZEROS, dr_params.BUCKET_CAP_MB,
            dr_params.MOMENTUM_MASKING)


def __getattr__(name):
    if name == "PARAM_FLAGS":  # follows the codec registry
        return param_flags()
    if name == "EXTRA_PARAMS":  # imports TensorFlow
        return extra_params()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def compression_flag_names():
    """The flags that choose the compression (--seed is not one: a command may
    seed its data and model with it too)."""
    return tuple(n for n in param_flags() if n != "seed")


def given_compression_flags(fv, names=None):
    """Names of the compression flags (or of `names`) given explicitly."""
    names = compression_flag_names() if names is None else names
    return [n for n in names if n in fv and fv[n].present]


def _codec_choices_help(kind):
    specs = codec_base.REGISTRY.specs(kind)
    aliases = codec_base.REGISTRY.aliases(kind)
    text = " | ".join(s.name for s in specs)
    if aliases:
        text += " (aliases: " + ", ".join(f"{a}={b}" for a, b in aliases.items()) + ")"
    return text


def _param_help(param, owners=None):
    owners = f"{owners}: " if owners else ""
    default = "unset" if param.default is None else param.default
    return f"{owners}{param.help} ({param.describe()}; default {default})."


def _define_param_flag(param, fv, owners=None):
    """Defines --<param.key> from a Param (string flags parse with Param.parse)."""
    helptext = _param_help(param, owners)
    define = {"integer": flags.DEFINE_integer, "float": flags.DEFINE_float}.get(
        param.flag_type, flags.DEFINE_string)
    define(param.key, param.flag_default, helptext, flag_values=fv)
    fv[param.key].deepreduce_param = param  # what compression_params() reads
    fv[param.key].deepreduce_owners = owners  # the codecs / communicators it configures


def _param_flags(fv):
    """[(name, Param)] of the flags that define_flags() derived from a Param."""
    out = []
    for name in param_flags():
        param = getattr(fv[name], "deepreduce_param", None) if name in fv else None
        if param is not None:
            out.append((name, param))
    return out


def define_flags(flag_values=flags.FLAGS, codecs=True):
    """Registers the compression flags in `flag_values` (idempotent).

    codecs=False leaves out the flags that derive from the codec registry
    (--index, --value, the codec and communicator parameters, --topk_scope,
    --topk_skip_zeros, --bucket_cap_mb), which import TensorFlow.
    """
    fv = flag_values
    if "compressor" not in fv:
        _define_general_flags(fv)
    if codecs and "index" not in fv:
        _define_codec_flags(fv)


def _define_general_flags(fv):
    """The compression flags of _define_codec_flags' complement (no TensorFlow)."""
    flags.DEFINE_string("compressor", "topk",
                        "Sparsifier: topk | randomk | threshold | none (GRACE's 'compressor'); "
                        "powersgd: low-rank factors that all-reduce (--rank, --start_iter, "
                        "--min_compression_rate, --warm_start; docs/powersgd.md).",
                        flag_values=fv)
    flags.DEFINE_float("compress_ratio", 0.01,
                       "Fraction of elements kept by topk / randomk, in (0, 1].", flag_values=fv)
    flags.DEFINE_float("threshold", None, "Magnitude threshold of --compressor=threshold.",
                       flag_values=fv)
    flags.DEFINE_string("memory", None,
                        "Error feedback: none | residual | dgc (default residual with a "
                        "sparsifier). dgc: DGC's momentum correction and factor masking; "
                        "--momentum then moves from the optimizer into the compressor (the "
                        "optimizer becomes plain SGD).", flag_values=fv)
    flags.DEFINE_integer("warmup_steps", None,
                         "Compression warm-up: the first N steps are sent dense (--warmup=dense) or with "
                         "top-k density falling from 25 % to --compress_ratio "
                         "(--warmup=exponential, DGC's).", flag_values=fv)
    flags.DEFINE_string("warmup", None, "dense | exponential (default dense).", flag_values=fv)
    flags.DEFINE_float("clip_norm", None,
                       "Local gradient clipping: each worker scales its gradients to this "
                       "global L2 norm at most, before error feedback (DGC).", flag_values=fv)
    flags.DEFINE_string("schedule", None,
                        "none | cosine: the learning-rate schedule, applied by the exchange "
                        "before error feedback (the optimizer's rate then constant).",
                        flag_values=fv)
    flags.DEFINE_integer("schedule_steps", None, "Steps the --schedule spans (default: the run's).",
                         flag_values=fv)
    flags.DEFINE_boolean("hierarchical", None,
                         "MultiWorkerMirroredStrategy with several devices per worker: sum the "
                         "local replicas, compress once per worker (default on; "
                         "--nohierarchical: every replica is its own worker on the wire).",
                         flag_values=fv)
    flags.DEFINE_string("communicator", "allgather",
                        "allgather | allreduce | lgc_ps | lgc_rar (Learned Gradient "
                        "Compression, --lgc_* flags; docs/lgc.md) | sparse_allreduce (top-k "
                        "positions gathered, values all-reduced; docs/sparse_allreduce.md).",
                        flag_values=fv)
    flags.DEFINE_string("deepreduce", "both",
                        "What DeepReduce compresses: none | index | value | both. Default both, "
                        "or none when --compressor=none.", flag_values=fv)
    flags.DEFINE_integer("min_size", None,
                         "Tensors with fewer elements travel dense (default 1024).",
                         flag_values=fv)
    flags.DEFINE_integer("seed", 0, "Seed of the data, the model and the compressor.",
                         flag_values=fv)


def _define_codec_flags(fv):
    """The flags that follow the codec registry and from_params' Params."""
    for param in extra_params():
        _define_param_flag(param, fv)
    flags.DEFINE_string("index", dr_params.DEFAULT_CODECS["index"],
                        "Index codec (with --deepreduce=index/both): "
                        f"{_codec_choices_help('index')}. See docs/codecs.md.", flag_values=fv)
    flags.DEFINE_string("value", dr_params.DEFAULT_CODECS["value"],
                        "Value codec (with --deepreduce=value/both): "
                        f"{_codec_choices_help('value')}. See docs/codecs.md.", flag_values=fv)
    for key, param in communicator_flag_params().items():
        comms = dr_params.communicators.COMMUNICATORS.values()
        owners = "/".join(c.name for c in comms if param in getattr(c, "PARAMS", ()))
        _define_param_flag(param, fv, f"--communicator={owners}")
    # One flag per codec parameter, as the registry declares it (a key that
    # is already a flag of the command keeps its own meaning).
    for key, param in codec_flag_params().items():
        if key in fv:
            continue
        owners = "/".join(s.name for s in codec_base.REGISTRY.codecs_of(key))
        _define_param_flag(param, fv, owners)


def _fail(message):
    raise ConfigError(message)


def _present(fv, name):
    return fv[name].present


def compression_params(fv=flags.FLAGS):
    """The from_params dict of the flags.

    A key is included when it configures the chosen mode, or when its flag was
    given explicitly (so from_params rejects e.g. --index=bloom with
    --deepreduce=none instead of it being silently dropped).
    """
    compressor = fv.compressor
    mode = fv.deepreduce
    low_rank = compressor == LOW_RANK
    if (compressor == "none" or low_rank) and not _present(fv, "deepreduce"):
        mode = "none"
    mode = None if mode in (None, "none", "None", "") else mode
    p = {"compressor": compressor}
    if compressor in ("topk", "randomk") or _present(fv, "compress_ratio"):
        p["compress_ratio"] = fv.compress_ratio
    if fv.threshold is not None:
        p["threshold"] = fv.threshold
    for key in ("memory", "warmup_steps", "warmup", "clip_norm", "schedule", "schedule_steps",
                "hierarchical"):
        if fv[key].value is not None:
            p[key] = fv[key].value
    if fv.memory == "dgc" and "momentum" in fv:  # the host command's optimizer
        p["momentum"] = fv.momentum  # momentum, applied by the compressor
    if not (low_rank and not _present(fv, "communicator")):  # powersgd: its own communicator
        p["communicator"] = fv.communicator
    p["deepreduce"] = mode
    chosen = []
    for kind in codec_base.KINDS:
        used = mode in (kind, "both")
        if used or _present(fv, kind):
            p[kind] = fv[kind].value
        spec = codec_base.REGISTRY.lookup(kind, fv[kind].value) if used else None
        if spec is not None:
            chosen.append(spec)
    # A parameter travels when given, or when its flag has a default of its
    # own (--policy) and the chosen codec reads it.
    for key, param in _param_flags(fv):
        value = fv[key].value
        if value is None:
            continue
        if _present(fv, key) or any(key in s.keys for s in chosen):
            p[key] = _parsed(param, value)
    if fv.min_size is not None:
        p["min_size"] = fv.min_size
    p["seed"] = fv.seed
    return p


def _parsed(param, value):
    try:
        return param.parse(value)
    except ValueError:
        _fail(f"--{param.key}={value!r} is not valid: {param.describe()}")


def _check_param_flag(fv, param):
    """Range / choice check of a given codec-parameter flag, naming the flag."""
    value = fv[param.key].value
    if value is None or param.flag_type == "string":
        return  # choices and special values: from_params names the valid ones
    try:
        param.validate(value)
    except ValueError:
        rng = param.range_text()
        need = f"in {rng}" if rng[:1] in "([" else (rng or f"a valid {param.type.__name__}")
        _fail(f"--{param.key}={value} must be {need}")



def check_param_flags(fv=flags.FLAGS):
    """Range checks of the flags derived from a Param (a codec, communicator
    or fusion parameter); the message names the flag.

    Raises:
      ConfigError: a value out of its declared range.
    """
    for _, param in _param_flags(fv):
        _check_param_flag(fv, param)
