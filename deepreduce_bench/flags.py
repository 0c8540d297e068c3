"""The flags of deepreduce-bench, and the checks that run before any work.

Names follow tf_cnn_benchmarks where it has the concept (--model,
--batch_size, --num_batches, --num_epochs, --data_name, --data_dir,
--optimizer, --init_learning_rate, --variable_update, --num_gpus,
--worker_hosts, --task_index, --train_dir, --eval, --num_warmup_batches,
--display_every); DeepReduce's own flags carry the keys of its parameter
dictionary (--compressor, --compress_ratio, --memory, --communicator,
--deepreduce, --index, --value, --fpr, --policy, ...).

DeepReduce's flags are the library's (deepreduce_tf.flags, which the
tf_cnn_benchmarks adapter shares): the codec flags derive from the codec
registry (deepreduce_tf.codecs): the --index / --value choices and help, and
one flag per declared codec parameter (--fpr, --policy, --bits,
--bucket_size, --poly_degree, ...), named by its from_params key, with the
declared type, range and help. This module adds --exchange, the choice of
TensorFlow's own dense all-reduce instead.

define_flags() registers them (once per FlagValues); resolve() turns parsed
flags into a RunConfig and the from_params() dict, raising ConfigError with a
message that names the flag and the valid choices. resolve() builds one
Compressor with from_params() to reject inconsistent combinations, but never
builds a model or touches data; check_data() checks that the data of a
RunConfig exist (deepreduce-bench calls it once the op library has loaded, so
that a broken library is the first error, and before any training).

Importing this module does not import TensorFlow; neither do
define_flags(fv, codecs=False) and check_flags(), the part of resolve() that
covers every other flag (the command line checks them before TensorFlow
loads). The codec registry and from_params do import it.
"""
import collections
import math
import os
import warnings

from absl import flags

import deepreduce_tf
from deepreduce_bench import claims, data, movielens, presets
from deepreduce_tf import flags as dr_flags
from deepreduce_tf.flags import ConfigError, compression_params  # noqa: F401 (this module's API)

MODELS = ("resnet20", "resnet50", "ncf")
MODEL_ALIASES = {"neumf": "ncf"}
DATA_NAMES = ("synthetic", "fashion_mnist", "movielens")
OPTIMIZERS = ("sgd", "momentum", "adam", "rmsprop")
VARIABLE_UPDATES = ("replicated", "collective_all_reduce")
# Per-model defaults: (per-replica batch size, optimizer, learning rate).
MODEL_DEFAULTS = {
    "resnet20": (32, "momentum", 0.05),
    "resnet50": (16, "momentum", 0.05),
    "ncf": (256, "adam", 0.001),
}
IMAGE_DATA = ("synthetic", "fashion_mnist")
NCF_DATA = ("synthetic", "movielens")
FETCH_COMMAND = "deepreduce-bench --fetch_data"
EXCHANGES = ("deepreduce", "tf")
LR_SCHEDULES = ("constant", "cosine")
# Default number of history points (--display_every) and of test evaluations
# after the one before training (--eval_every) per run.
HISTORY_POINTS = 100
EVAL_POINTS = 8
# Timed steps of a comparison without --num_batches / --num_epochs: about
# 0.6 epoch of Fashion-MNIST at the default batch (32 per replica x 2).
COMPARE_STEPS = 600
# A comparison's output directory without --train_dir (in the current
# directory; not ./deepreduce_bench, which is this package in a checkout).
COMPARE_DIR = "deepreduce_bench_runs"
# Outputs never go inside the directory of one of these packages (a checkout's
# source tree or an installed copy).
PACKAGES = ("deepreduce_bench", "deepreduce_tf")


RunConfig = collections.namedtuple("RunConfig", [
    "model", "data_name", "data_dir", "batch_size", "num_batches", "num_epochs",
    "num_warmup_batches", "optimizer", "init_learning_rate", "momentum", "weight_decay",
    "image_size", "variable_update", "num_gpus", "num_workers", "worker_hosts", "task_index",
    "train_dir", "output_json", "eval", "num_eval_examples", "display_every", "seed",
    "codec_repeats", "worker_timeout", "plot", "plot_compare", "params", "flags",
    "compare", "exchange", "eval_every", "lr_schedule", "seeds"],
    defaults=((), "deepreduce", None, "constant", ()))
RunConfig.__doc__ = """Everything a run needs, resolved from the flags.

model, data_name: canonical names; batch_size: per replica; num_batches:
timed steps (after num_warmup_batches); worker_hosts: list of "host:port"
(empty: one process); params: the from_params dict; flags: {name: value} of
every deepreduce-bench flag, for the JSON record. compare: the presets of a
comparison (empty: one run); exchange: "deepreduce" or "tf"; eval_every:
steps between test evaluations (None: about EVAL_POINTS per run, 0: only at
the end); display_every: None picks it from the step count (runner); seeds:
the seeds of a comparison repeated over seeds (--seeds; empty: --seed alone)."""


def define_flags(flag_values=flags.FLAGS, codecs=True):
    """Registers the deepreduce-bench flags in `flag_values` (idempotent).

    codecs=False leaves out the flags that derive from the codec registry
    (--index, --value, the codec parameters, --topk_scope, --bucket_cap_mb),
    which import TensorFlow: the rest are what check_flags() reads.
    """
    fv = flag_values
    if "model" not in fv:
        _define_general_flags(fv)
    if codecs:
        dr_flags.define_flags(fv)  # the codec flags (idempotent)


def _define_general_flags(fv):
    """Every flag but the codec flags of deepreduce_tf.flags (no TensorFlow needed)."""
    # --- tf_cnn_benchmarks vocabulary
    flags.DEFINE_string("model", "resnet20",
                        f"Model to train: {', '.join(MODELS)} (neumf is accepted for ncf). "
                        "resnet20: CIFAR-style ResNet-20; resnet50: ImageNet-style ResNet-50 "
                        "v1.5 (at --image_size); ncf: NeuMF.", flag_values=fv)
    flags.DEFINE_integer("batch_size", None,
                         "Batch size per replica (per compute device, as in tf_cnn_benchmarks); "
                         "the global batch is batch_size * replicas. Default: resnet20 32, "
                         "resnet50 16, ncf 256.", flag_values=fv)
    flags.DEFINE_integer("num_batches", None,
                         "Number of timed training steps (after the warm-up). Default 100 "
                         "unless --num_epochs is given; not both.", flag_values=fv)
    flags.DEFINE_float("num_epochs", None,
                       "Train this many passes over the training data instead of "
                       "--num_batches (steps = ceil(epochs * examples / global batch)).",
                       flag_values=fv)
    flags.DEFINE_integer("num_warmup_batches", 2,
                         "Steps run (and trained) before timing starts; the first one traces "
                         "the graph.", flag_values=fv)
    flags.DEFINE_string("data_name", None,
                        f"Dataset: {', '.join(DATA_NAMES)}. Default: fashion_mnist for the "
                        "image models (if it is missing, the run stops and says how to get "
                        "it); ncf: movielens with --data_dir, else synthetic.", flag_values=fv)
    flags.DEFINE_string("data_dir", None,
                        "Fashion-MNIST's IDX files (default: $DEEPREDUCE_TF_FASHION_MNIST, "
                        "/usr/share/datasets/fashion-mnist, ~/.keras/datasets/fashion-mnist) "
                        "or MovieLens' cache root (default ~/.cache/deepreduce_tf).",
                        flag_values=fv)
    flags.DEFINE_integer("image_size", 32,
                         "Image side of the image models (Fashion-MNIST 28x28 is padded, and "
                         "upsampled by an integer factor first when size >= 56). 224 is "
                         "ImageNet's (slow on a CPU).", flag_values=fv)
    flags.DEFINE_string("optimizer", None,
                        f"Optimizer: {', '.join(OPTIMIZERS)} (momentum: SGD with --momentum). "
                        "Default: momentum for the ResNets, adam for ncf.", flag_values=fv)
    flags.DEFINE_float("init_learning_rate", None,
                       "Learning rate (constant). Default: 0.05 for the ResNets, 0.001 for ncf.",
                       flag_values=fv)
    flags.DEFINE_float("momentum", 0.9, "Momentum of --optimizer=momentum.", flag_values=fv)
    flags.DEFINE_float("weight_decay", 0.0,
                       "L2 penalty wd * sum(w^2) on the kernels (the models' weight_decay).",
                       flag_values=fv)
    flags.DEFINE_string("variable_update", None,
                        f"{' | '.join(VARIABLE_UPDATES)}: MirroredStrategy over --num_gpus local "
                        "devices in one process, or MultiWorkerMirroredStrategy across worker "
                        "processes. Default: replicated in one process, collective_all_reduce "
                        "with --num_workers > 1 or --worker_hosts.", flag_values=fv)
    flags.DEFINE_integer("num_gpus", None,
                         "Replicas per process. Without GPUs, replicated mode makes this many "
                         "logical CPU devices (one replica each; default 2); "
                         "collective_all_reduce on CPUs runs one replica per worker (default "
                         "1).", flag_values=fv)
    flags.DEFINE_list("worker_hosts", [],
                      "Comma-separated host:port of every worker of a real cluster (sets "
                      "TF_CONFIG); use with --task_index.", flag_values=fv)
    flags.DEFINE_integer("task_index", 0,
                         "Index of this process in --worker_hosts (not with --num_workers, "
                         "which starts every local worker itself).",
                         flag_values=fv)
    flags.DEFINE_string("train_dir", None,
                        "Directory for results.json (unless --output_json), worker logs and "
                        "TensorBoard scalars (logs/: loss, accuracy, sent/dense bytes, "
                        "reduction per step).", flag_values=fv)
    flags.DEFINE_bool("eval", False,
                      "Evaluate on the test split after training: top-1 accuracy (images), "
                      "HR@10 and NDCG@10 (ncf).", flag_values=fv)
    flags.DEFINE_integer("num_eval_examples", 2000,
                         "Test images evaluated by --eval (0: the whole split). ncf always "
                         "evaluates every user.", flag_values=fv)
    flags.DEFINE_integer("display_every", None,
                         "Record a history point (loss, accuracy, bytes, time) every N steps. "
                         f"Default: about {HISTORY_POINTS} points per run (every step for runs "
                         f"of up to {HISTORY_POINTS} steps).", flag_values=fv)
    # --- DeepReduce: the compression flags of the library (deepreduce_tf.flags)
    dr_flags.define_flags(fv, codecs=False)
    # --- this command
    flags.DEFINE_integer("num_workers", 1,
                         "Launch this many local worker processes on 127.0.0.1 (free ports, "
                         "TF_CONFIG) for a one-machine multi-worker trial; task 0 writes the "
                         "results.", flag_values=fv)
    flags.DEFINE_integer("worker_timeout", 1800,
                         "Seconds the --num_workers launcher waits for its workers before "
                         "killing them.", flag_values=fv)
    flags.DEFINE_bool("verbose", False,
                      "Show TensorFlow's own log lines (C++ notices and warnings, INFO lines "
                      "such as the strategy's device list), hidden by default.",
                      flag_values=fv)
    flags.DEFINE_string("output_json", None,
                        "Results file (default <train_dir>/results.json, else "
                        "./deepreduce_bench_results.json).", flag_values=fv)
    flags.DEFINE_integer("codec_repeats", 3,
                         "Timed repeats of the codec-only measurement after training "
                         "(compress_ms, decompress_ms); 0 skips it.", flag_values=fv)
    flags.DEFINE_string("plot", None,
                        "Also draw a PNG at this path: accuracy against bytes sent and against "
                        "time, for this run and --plot_compare (needs matplotlib).",
                        flag_values=fv)
    flags.DEFINE_list("plot_compare", [], "Results JSON files of earlier runs for --plot.",
                      flag_values=fv)
    flags.DEFINE_bool("fetch_data", False,
                      "Download what is missing: Fashion-MNIST with Keras (into "
                      "~/.keras/datasets), MovieLens-100K (from the recbole wheel on PyPI); "
                      "alone, does only that.", flag_values=fv)
    # --- comparisons (deepreduce_bench.compare, of deepreduce_bench.presets)
    flags.DEFINE_list("compare", None,
                      "Presets trained one after another (same seed, data and steps; "
                      f"{COMPARE_STEPS} steps by default) and compared in one table and plot "
                      f"in --train_dir: {presets.names_text()}; a variant changes flags of "
                      "one: powersgd+rank=4 (docs/cli.md). Default "
                      f"{','.join(presets.default_presets('momentum'))} "
                      f"({','.join(presets.default_presets('adam'))} without momentum SGD) "
                      "when no compression flag is given.", flag_values=fv)
    flags.DEFINE_string("seeds", None,
                        "The comparison on several seeds (a count, or 21-25): paired "
                        "differences, whether each holds (docs/benchmarks.md); resumes.",
                        flag_values=fv)
    flags.DEFINE_string("exchange", "deepreduce",
                        "deepreduce: DeepReduce's cross-device ops, compressed as the flags "
                        "say; tf: TensorFlow's own dense all-reduce, no compression flags (the "
                        "'uncompressed' preset).", flag_values=fv)
    flags.DEFINE_integer("eval_every", None,
                         "With --eval: evaluate the --num_eval_examples first test examples "
                         "before training, every N steps and at the end (0: only at the end). "
                         f"Default: about {EVAL_POINTS} points per run.", flag_values=fv)
    flags.DEFINE_string("lr_schedule", None,
                        f"{' | '.join(LR_SCHEDULES)} (decayed to 0 over the run, warm-up "
                        "included). Default: cosine in a comparison, else constant.",
                        flag_values=fv)


def _fail(message):
    raise ConfigError(message)


def _choice(flag, value, choices, aliases=None):
    value = (aliases or {}).get(value, value)
    if value not in choices:
        _fail(f"--{flag}={value!r} is not valid; valid choices: {', '.join(choices)}")
    return value


def _present(fv, name):
    return fv[name].present


def flag_dict(fv=flags.FLAGS):
    """{name: value} of every flag of this module (JSON-friendly)."""
    out = {}
    for name in sorted(own_flag_names(fv)):
        value = fv[name].value
        out[name] = list(value) if isinstance(value, (list, tuple)) else value
    return out


def own_flag_names(fv):
    """Names of the flags of deepreduce-bench in `fv`: this module's and the
    compression flags it defines through deepreduce_tf.flags."""
    for module, fl in fv.flags_by_module_dict().items():
        if module in (__name__, dr_flags.__name__) or module.endswith(
                ("deepreduce_bench.flags", "deepreduce_tf.flags")):
            for f in fl:
                yield f.name


def serialize(fv, drop=()):
    """Command-line arguments reproducing the explicitly given flags, minus `drop`."""
    args = []
    for name in sorted(own_flag_names(fv)):
        if name in drop or not fv[name].present:
            continue
        args.append(fv[name].serialize())
    return args


def _check_positive(fv, name, allow_none=True, allow_zero=False):
    value = fv[name].value
    if value is None and allow_none:
        return
    if value is None or value < 0 or (value == 0 and not allow_zero):
        _fail(f"--{name}={value} must be {'>= 0' if allow_zero else 'positive'}")


def check_flags(fv=flags.FLAGS):
    """The checks of resolve() that need neither TensorFlow nor the codec
    registry: every flag of define_flags(fv, codecs=False), so the command
    line can be checked in a second before TensorFlow is imported.

    Returns:
      {"model", "data_name", "hosts", "update", "num_gpus", "optimizer"}:
      the values resolved on the way.

    Raises:
      ConfigError: as resolve().
    """
    model = _choice("model", fv.model, MODELS, MODEL_ALIASES)
    for name in ("batch_size", "num_batches", "num_gpus", "num_workers", "display_every",
                 "worker_timeout", "image_size"):
        _check_positive(fv, name)
    for name in ("num_warmup_batches", "num_eval_examples", "codec_repeats", "task_index"):
        _check_positive(fv, name, allow_zero=True)
    if fv.num_epochs is not None and not fv.num_epochs > 0:
        _fail(f"--num_epochs={fv.num_epochs} must be positive")
    if fv.num_epochs is not None and fv.num_batches is not None:
        _fail("give --num_batches or --num_epochs, not both")
    if fv.init_learning_rate is not None and not fv.init_learning_rate > 0:
        _fail(f"--init_learning_rate={fv.init_learning_rate} must be positive")
    if not 0 <= fv.momentum < 1:
        _fail(f"--momentum={fv.momentum} must be in [0, 1)")
    if fv.weight_decay < 0:
        _fail(f"--weight_decay={fv.weight_decay} must be >= 0")
    if not 0 < fv.compress_ratio <= 1:
        _fail(f"--compress_ratio={fv.compress_ratio} must be in (0, 1]")
    if model != "ncf" and fv.image_size < 32:
        _fail(f"--image_size={fv.image_size}: the ResNets need at least 32")

    data_name = fv.data_name or default_data(model, fv.data_dir)
    data_name = _choice("data_name", data_name, DATA_NAMES,
                        {"fashion-mnist": "fashion_mnist", "ml-100k": "movielens"})
    valid_data = NCF_DATA if model == "ncf" else IMAGE_DATA
    if data_name not in valid_data:
        _fail(f"--data_name={data_name} does not fit --model={model}; valid choices: "
              f"{', '.join(valid_data)}")

    hosts, update, num_gpus = _check_cluster(fv)
    _check_positive(fv, "eval_every", allow_zero=True)
    optimizer = _choice("optimizer", fv.optimizer or MODEL_DEFAULTS[model][1], OPTIMIZERS)
    if fv.memory == "dgc" and optimizer != "momentum":
        _fail(f"--memory=dgc moves --optimizer=momentum's momentum into the compressor; it "
              f"does not fit --optimizer={optimizer} (use --optimizer=momentum, or "
              "--memory=residual)")
    _choice("exchange", fv.exchange, EXCHANGES)
    return {"model": model, "data_name": data_name, "hosts": hosts, "update": update,
            "num_gpus": num_gpus, "optimizer": optimizer}


def _check_cluster(fv):
    """(worker hosts, variable_update, replicas per process) of the cluster flags."""
    if fv.num_workers > 1 and fv.worker_hosts:
        _fail("--num_workers launches local workers; --worker_hosts describes a real "
              "cluster: give one of them")
    if fv["task_index"].present and not fv.worker_hosts and (
            fv.num_workers > 1 or fv.task_index != 0):
        _fail(f"--task_index={fv.task_index} needs --worker_hosts (it is this process's place "
              "in a real cluster); --num_workers starts every local worker itself: drop "
              "--task_index")
    hosts = list(fv.worker_hosts)
    for h in hosts:
        host, _, port = h.rpartition(":")
        if not host or not port.isdigit():
            _fail(f"--worker_hosts: {h!r} is not host:port")
    if hosts and fv.task_index >= len(hosts):
        _fail(f"--task_index={fv.task_index} is out of range for {len(hosts)} --worker_hosts")
    multi = fv.num_workers > 1 or len(hosts) > 1
    update = fv.variable_update or ("collective_all_reduce" if multi else "replicated")
    update = _choice("variable_update", update, VARIABLE_UPDATES)
    if multi and update == "replicated":
        _fail("--variable_update=replicated runs in one process; several workers need "
              "--variable_update=collective_all_reduce")
    return hosts, update, fv.num_gpus or (2 if update == "replicated" else 1)


def resolve(fv=flags.FLAGS):
    """Checks the parsed flags and returns a RunConfig.

    check_flags() first, then the codec flags, the comparison and the
    compression dict (from_params builds one Compressor: TensorFlow). Whether
    the data exist is check_data()'s question.

    Raises:
      ConfigError: a bad value or combination; the message names the flag and
        the valid choices (from_params' own message for compression keys).
    """
    checked = check_flags(fv)
    model, data_name = checked["model"], checked["data_name"]
    hosts, update, num_gpus = checked["hosts"], checked["update"], checked["num_gpus"]
    dr_flags.check_param_flags(fv)
    compare_names = resolve_compare(fv, checked["optimizer"])

    # Compression: from_params is the authority on keys, values and combinations.
    exchange = _choice("exchange", fv.exchange, EXCHANGES)
    lr_schedule = _choice("lr_schedule", fv.lr_schedule or "constant", LR_SCHEDULES)
    params = compression_params(fv) if exchange == "deepreduce" else tf_exchange_params(fv)
    seeds = _resolve_seeds(fv, compare_names)
    if seeds and "uncompressed" not in compare_names:
        compare_names = ("uncompressed",) + compare_names  # the paired baseline
    if params.get("schedule") not in (None, "none", "constant") and "schedule_steps" not in params:
        # The exchange's schedule spans the run, as the optimizer's would.
        params["schedule_steps"] = fv.num_warmup_batches + run_steps(
            fv, model, data_name, compare_names, hosts, num_gpus)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            deepreduce_tf.from_params(dict(params))
    except (ValueError, TypeError) as e:
        raise ConfigError(f"compression flags {params}: {e}") from e

    batch, optimizer, lr = MODEL_DEFAULTS[model]
    num_batches = fv.num_batches
    if num_batches is None and fv.num_epochs is None:
        num_batches = 100
    output_json = fv.output_json
    if output_json is None:
        output_json = (os.path.join(fv.train_dir, "results.json") if fv.train_dir
                       else "deepreduce_bench_results.json")
    config = RunConfig(
        model=model, data_name=data_name, data_dir=fv.data_dir,
        batch_size=fv.batch_size or batch, num_batches=num_batches, num_epochs=fv.num_epochs,
        num_warmup_batches=fv.num_warmup_batches, optimizer=fv.optimizer or optimizer,
        init_learning_rate=fv.init_learning_rate or lr, momentum=fv.momentum,
        weight_decay=fv.weight_decay, image_size=fv.image_size, variable_update=update,
        num_gpus=num_gpus, num_workers=fv.num_workers, worker_hosts=hosts,
        task_index=fv.task_index, train_dir=fv.train_dir, output_json=output_json,
        eval=fv.eval, num_eval_examples=fv.num_eval_examples, display_every=fv.display_every,
        seed=fv.seed, codec_repeats=fv.codec_repeats, worker_timeout=fv.worker_timeout,
        plot=fv.plot, plot_compare=list(fv.plot_compare), params=params, flags=flag_dict(fv),
        compare=compare_names, exchange=exchange, eval_every=fv.eval_every,
        lr_schedule=lr_schedule, seeds=seeds)
    if seeds:
        # A claim is made on the whole test split, evaluated once at the end
        # (docs/benchmarks.md), unless the command line says otherwise.
        config = config._replace(
            num_eval_examples=fv.num_eval_examples if fv["num_eval_examples"].present else 0,
            eval_every=fv.eval_every if fv["eval_every"].present else 0)
    if fv.eval_every and not fv.eval:
        config = config._replace(eval=True)  # evaluating every N steps is evaluating
    if compare_names:
        config = comparison_config(config, fv)
    for flag, path in (("train_dir", config.train_dir), ("output_json", config.output_json),
                       ("plot", config.plot)):
        check_output_path(flag, path)
    return config


def _resolve_seeds(fv, compare_names):
    """The seeds of --seeds (a tuple; () without it)."""
    if fv.seeds is None:
        return ()
    try:
        seeds = claims.parse_seeds(fv.seeds, first=fv.seed)
    except claims.SeedsError as e:
        _fail(str(e))
    if not compare_names:
        _fail("--seeds repeats a comparison over seeds: name the configurations with "
              "--compare (e.g. --compare=uncompressed,flags with these compression flags)")
    if fv["seed"].present and not fv.seeds.strip().isdigit():
        _fail(f"--seed={fv.seed} and --seeds={fv.seeds}: the list names the seeds; give one "
              "of them (--seed is the first seed of a count, --seeds=5)")
    return seeds


def run_steps(fv, model, data_name, compare_names=(), hosts=(), num_gpus=1):
    """The timed steps of a run of these flags: --num_batches, or --num_epochs
    passes over the training split at the global batch (as runner computes
    them), or the default (COMPARE_STEPS in a comparison, else 100)."""
    if fv.num_epochs is None:
        if fv.num_batches is not None:
            return fv.num_batches
        return COMPARE_STEPS if compare_names else 100
    examples = data.train_examples(data_name, fv.data_dir) if model != "ncf" else None
    if examples is None:
        _fail(f"--num_epochs={fv.num_epochs:g}: the run's steps depend on data that are not "
              "here yet (fetch them first), or give --schedule_steps (the run's steps) or "
              "--num_batches")
    workers = fv.num_workers if fv.num_workers > 1 else max(1, len(hosts))
    global_batch = (fv.batch_size or MODEL_DEFAULTS[model][0]) * num_gpus * workers
    return max(1, math.ceil(fv.num_epochs * examples / global_batch))


def check_output_path(flag, path):
    """Raises ConfigError if `path` (an output of --`flag`) lies inside the
    directory of a Python package of this project (PACKAGES)."""
    if not path:
        return
    here = os.path.abspath(path if flag == "train_dir" else os.path.dirname(path))
    while True:
        if (os.path.basename(here) in PACKAGES
                and os.path.isfile(os.path.join(here, "__init__.py"))):
            _fail(f"--{flag}={path} is inside the Python package {here}; write the outputs "
                  f"elsewhere (a comparison's default is ./{COMPARE_DIR})")
        parent = os.path.dirname(here)
        if parent == here:
            return
        here = parent


def compression_flag_names():
    """The flags that choose the gradient exchange and its compression (--seed
    is not one: it seeds the data and the model too)."""
    return dr_flags.compression_flag_names() + ("exchange",)


def given_compression_flags(fv):
    """Names of the compression flags given explicitly."""
    return [n for n in compression_flag_names() if n in fv and fv[n].present]


def resolve_compare(fv, optimizer):
    """The presets to compare (a tuple), or () for one run of the flags.

    Without --compare: the default comparison for this optimizer, unless a
    compression flag is given (then one run of it, as before comparisons
    existed) or --worker_hosts (a real cluster runs one configuration).
    """
    given = given_compression_flags(fv)
    if not fv["compare"].present:
        if given or fv.worker_hosts:
            return ()
        return presets.default_presets(optimizer)
    names = [n.strip() for n in fv.compare if n.strip()]
    if not names:
        _fail(f"--compare needs at least one preset; valid presets: {presets.names_text()}")
    resolved = {}
    for name in names:
        try:
            resolved[name] = presets.lookup(name, compression_flag_names())
        except ValueError as e:
            _fail(f"--compare: {e}")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        _fail(f"--compare names {', '.join(repeated)} more than once")
    if fv.worker_hosts:
        _fail("--compare runs its configurations one after another on this machine; with "
              "--worker_hosts (a real cluster) give the compression flags of one "
              "configuration instead")
    if given and "flags" not in names:
        flags_given = ", ".join(f"--{n}" for n in given)
        _fail(f"{flags_given} configure the 'flags' preset, which --compare={','.join(names)} "
              "does not include: add flags to --compare or drop them")
    for name in names:
        if optimizer != "momentum" and "--memory=dgc" in (resolved[name].args or ()):
            _fail(f"--compare: preset {name!r} applies DGC's momentum correction, which needs "
                  f"--optimizer=momentum, not {optimizer}; use "
                  f"{presets.default_presets(optimizer)[1]!r} instead")
    return tuple(names)


def tf_exchange_params(fv):
    """The params dict of --exchange=tf: dense, no compression flag but
    --compressor=none / --deepreduce=none."""
    allowed = {"exchange": None, "compressor": "none", "deepreduce": "none"}
    for name in given_compression_flags(fv):
        if name not in allowed or (allowed[name] and fv[name].value != allowed[name]):
            _fail(f"--exchange=tf sends dense gradients with TensorFlow's own all-reduce and "
                  f"takes no compression flag, got --{name}={fv[name].value}; drop it, or use "
                  "--exchange=deepreduce to compress")
    return {"compressor": "none", "deepreduce": None, "seed": fv.seed}


def comparison_config(config, fv):
    """The RunConfig of a comparison's parent process: its defaults (steps,
    evaluation, output directory; see compare.py) filled in."""
    if fv.plot_compare:
        _fail("--plot_compare adds earlier results to the --plot of one run; a comparison "
              "plots its own runs (compare them with deepreduce-plot <out>/*/results.json)")
    out_dir = fv.train_dir or COMPARE_DIR
    num_batches = config.num_batches
    if not fv["num_batches"].present and config.num_epochs is None:
        num_batches = COMPARE_STEPS
    return config._replace(
        train_dir=out_dir, num_batches=num_batches, eval=True,
        lr_schedule=fv.lr_schedule or "cosine",
        output_json=fv.output_json or os.path.join(out_dir, "compare.json"),
        plot=fv.plot or os.path.join(out_dir, "compare.png"))


def default_data(model, data_dir):
    """data_name when --data_name is not given: fashion_mnist for the image
    models (missing files stop the run: check_data; synthetic images only when
    asked for); ncf: movielens with --data_dir, else synthetic (as
    tf_cnn_benchmarks)."""
    if model == "ncf":
        return "synthetic" if data_dir is None else "movielens"
    return "fashion_mnist"


def check_data(model, data_name, data_dir):
    """Raises ConfigError saying how to get the real data of a run if absent."""
    if data_name == "fashion_mnist":
        if data.find_fashion_mnist(data_dir) is None:
            _fail(f"{data.how_to_get(data_dir, FETCH_COMMAND)}. --data_name=synthetic trains "
                  "on synthetic images instead.")
    elif data_name == "movielens":
        path = movielens.cached_path(data_dir)
        if not os.path.exists(path):
            dd = f" --data_dir={data_dir}" if data_dir else ""
            _fail(f"--data_name=movielens: {path} does not exist. Fetch it with "
                  f"`{FETCH_COMMAND}{dd}` (downloads the {movielens.WHEEL_REQUIREMENT} wheel "
                  "from PyPI and keeps only ml-100k.inter). Use --data_name=synthetic for "
                  "synthetic interactions.")
