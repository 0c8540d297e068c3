"""Console entry points: deepreduce-bench (main) and deepreduce-plot (plot_main).

    deepreduce-bench [flags]          # train, print the summary table, write the JSON
    deepreduce-bench --fetch_data     # fetch MovieLens-100K, locate Fashion-MNIST
    deepreduce-bench --help           # every flag of this command (also -h, --helpfull)
    deepreduce-plot a.json b.json --out=compare.png

Every flag is checked before any work, in two rounds: the flags that need no
TensorFlow (flags.check_flags) before TensorFlow is even imported, then the
codec flags and the compression dict (flags.resolve); then the op library is
loaded, and then the data are looked for (flags.check_data), so that a broken
op library is the first error. A bad value or combination, a missing op
library or missing data is one error line on stderr and exit code 1, without
a traceback; nothing has trained by then.

TensorFlow's own log lines (the C++ notices it prints while loading, INFO
lines such as the strategy's device list) are hidden unless --verbose.
"""
import logging
import os
import re
import sys
import tempfile
import textwrap

from absl import app
from absl import flags as absl_flags
from absl import logging as absl_logging

import deepreduce_tf
from deepreduce_bench import compare, data, movielens, report, runner, seeds
from deepreduce_bench import flags as bench_flags

FLAGS = absl_flags.FLAGS
HELP_ARGS = ("-h", "-?", "--help", "-help", "--helpshort", "-helpshort", "--helpfull",
             "-helpfull")
# The --help groups of deepreduce-bench: tf_cnn_benchmarks' vocabulary first
# (model and data, training, distribution, evaluation and output), then
# DeepReduce's. A flag in none of them is listed under "codec parameters" when
# it derives from the codec registry (one line per codec, names and defaults:
# docs/cli.md has their meanings and ranges), else under "other".
HELP_GROUPS = (
    ("model and data", ("model", "data_name", "data_dir", "image_size", "fetch_data")),
    ("training", ("batch_size", "num_batches", "num_epochs", "num_warmup_batches", "optimizer",
                  "init_learning_rate", "lr_schedule", "momentum", "weight_decay",
                  "seed")),
    ("replicas and workers", ("variable_update", "num_gpus", "worker_hosts", "task_index",
                              "num_workers", "worker_timeout")),
    ("evaluation, results and output", (
        "eval", "num_eval_examples", "eval_every", "display_every", "train_dir", "output_json",
        "plot", "plot_compare", "verbose")),
    ("gradient exchange and compression (DeepReduce)", (
        "compare", "seeds", "exchange", "compressor", "compress_ratio", "threshold", "topk_scope",
        "topk_skip_zeros", "memory", "momentum_masking", "warmup_steps", "warmup", "clip_norm",
        "schedule", "schedule_steps", "hierarchical", "communicator",
        "bucket_cap_mb", "deepreduce", "index", "value", "min_size", "codec_repeats")),
)
CODEC_HELP_TITLE = "codec and communicator parameters, defaults (docs/cli.md#codec-parameters)"
# What TensorFlow prints on stderr while it loads, below TF_CPP_MIN_LOG_LEVEL's
# reach: absl-format INFO / WARNING lines (the oneDNN notice, cpu_feature_guard),
# absl's note that logging is not initialised yet, and cpu_feature_guard's
# second line.
_LOAD_NOISE = re.compile(r"[IW]\d{4} [\d:.]+ +\d+ \S+:\d+\] |"
                         r"WARNING: All log messages before absl::InitializeLog\(\) |"
                         r"To enable the following instructions: ")


def _error(message, prog="deepreduce-bench"):
    """One error block on stderr (no usage text, no traceback); returns exit code 1."""
    print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
    return 1


def _one_line_errors(fn, prog="deepreduce-bench"):
    """fn for app.run, with usage errors as _error() lines instead of absl's usage text."""

    def run(argv):
        try:
            return fn(argv)
        except app.UsageError as e:
            return _error(e, prog)

    return run


def _flags_parser(prog="deepreduce-bench"):
    """app.run's flags_parser: a bad flag is one error line (exit code 1)."""

    def parse(argv):
        try:
            return FLAGS(argv)
        except absl_flags.Error as e:
            sys.exit(_error(f"{e} ({prog} --help lists the flags)", prog))

    return parse


def _wants_help(argv):
    args = list(argv[1:])
    if "--" in args:
        args = args[:args.index("--")]
    return any(a in HELP_ARGS for a in args)


def quiet_environment(environ, verbose):
    """Sets the TensorFlow log level of `environ` (os.environ: before TensorFlow is
    imported; the local workers inherit it): errors only, unless `verbose` or the
    user set TF_CPP_MIN_LOG_LEVEL already."""
    if not verbose:
        environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _quiet_python_logs():
    """TensorFlow's and absl's Python log records below ERROR are dropped
    ("Using MirroredStrategy with devices ...", printed by two handlers)."""
    absl_logging.set_verbosity(absl_logging.ERROR)
    logging.getLogger("tensorflow").setLevel(logging.ERROR)


def _import_tensorflow(verbose):
    """Imports TensorFlow; unless `verbose`, without the notices it prints while it
    loads (TF_CPP_MIN_LOG_LEVEL does not hide them): stderr goes to a temporary
    file during the import, and every other line of it is written back."""
    if verbose or "tensorflow" in sys.modules:
        import tensorflow  # noqa: F401

        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow  # noqa: F401
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            lines = captured.read().decode(errors="replace").splitlines(keepends=True)
            kept = "".join(line for line in lines if not _LOAD_NOISE.match(line))
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()


def _precheck(argv):
    """Parses and checks the flags that need no TensorFlow; exits with one error
    line on a bad one. Returns --verbose."""
    fv = absl_flags.FlagValues()
    bench_flags.define_flags(fv, codecs=False)
    try:
        fv(list(argv), known_only=True)  # the codec flags are checked by resolve()
        if not _only_fetch(fv):
            bench_flags.check_flags(fv)  # the data: after the op library (_bench)
    except (absl_flags.Error, bench_flags.ConfigError) as e:
        hint = " (deepreduce-bench --help lists the flags)" if isinstance(
            e, absl_flags.Error) else ""
        sys.exit(_error(f"{e}{hint}"))
    return fv.verbose


def _only_fetch(fv):
    """True for --fetch_data without other flags of this command (it then does only that)."""
    return fv.fetch_data and not any(
        fv[name].present for name in bench_flags.own_flag_names(fv)
        if name not in ("fetch_data", "data_dir", "verbose"))


def help_text(fv, usage, groups=HELP_GROUPS, module_names=None):
    """The --help text: the flags of `module_names` (default: deepreduce-bench's)
    in `groups`; the rest as "codec parameters" (registry flags: one line of
    names and defaults per codec) or under "other"."""
    names = sorted(module_names if module_names is not None
                   else bench_flags.own_flag_names(fv))
    listed = set()
    out = [usage]
    for title, members in groups:
        chosen = [n for n in members if n in names]
        listed.update(chosen)
        if chosen:
            out.append(f"\n{title}:")
            out += [_flag_help(fv[n]) for n in chosen]
    rest = [n for n in names if n not in listed]
    codec = [n for n in rest if getattr(fv[n], "deepreduce_param", None)]
    if codec:
        out.append(f"\n{CODEC_HELP_TITLE}:")
        out += _codec_param_lines(fv, codec)
    other = [n for n in rest if n not in codec]
    if other:
        out.append("\nother:")
        out += [_flag_help(fv[n]) for n in other]
    return "\n".join(out) + "\n"


def _codec_param_lines(fv, names):
    """'  owner: --name=default --name ...' lines, one per owner (codec or
    communicator), in the order the owners first appear in sorted names."""
    by_owner = {}
    for name in names:
        owner = getattr(fv[name], "deepreduce_owners", None) or "any codec"
        default = fv[name].deepreduce_param.default  # the flag's own is None: unset
        by_owner.setdefault(owner, []).append(
            f"--{name}" if default is None else f"--{name}={default}")
    return [textwrap.fill(f"{owner}: {' '.join(flags)}", width=88, initial_indent="  ",
                          subsequent_indent="      ", break_on_hyphens=False)
            for owner, flags in by_owner.items()]


def _flag_help(flag):
    name = f"--[no]{flag.name}" if isinstance(flag, absl_flags.BooleanFlag) else f"--{flag.name}"
    text = flag.help or ""
    default = flag.default
    if default not in (None, [], ()) and "default" not in text.lower():
        if isinstance(default, bool):
            default = str(default).lower()
        elif isinstance(default, (list, tuple)):
            default = ",".join(map(str, default))
        text += f" (default: {default})"
    return textwrap.fill(f"{name}: {text}", width=88, initial_indent="  ",
                         subsequent_indent="      ", break_on_hyphens=False)


BENCH_USAGE = ("usage: deepreduce-bench [--flag=value ...]\n\n"
               "Trains a model with DeepReduce's gradient compression (or a comparison of "
               "configurations),\nprints a summary table and writes a results JSON. The "
               "flags of this command:")


def _fetch(data_dir):
    try:
        found = data.fetch_all(data_dir, stream=sys.stderr)
    except movielens.MovieLensError as e:
        raise app.UsageError(f"--fetch_data: {e}") from e
    return found


def _bench(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}; every setting is a --flag "
                             "(see --helpfull)")
    if not FLAGS.verbose:
        _quiet_python_logs()
    if FLAGS.fetch_data:
        found = _fetch(FLAGS.data_dir)
        if _only_fetch(FLAGS):
            return 0 if all(found.values()) else 1
    try:
        config = bench_flags.resolve(FLAGS)
        if config.compare or config.num_workers > 1:
            # These parents train nothing: one error here, not one per child.
            # A training process loads it in make_strategy, once its devices
            # are set up, and then checks the data (runner.run).
            runner.check_op_library()
            bench_flags.check_data(config.model, config.data_name, config.data_dir)
    except bench_flags.ConfigError as e:
        raise app.UsageError(str(e)) from e
    except deepreduce_tf.OpLibraryError as e:
        return _error(e)
    if config.compare:
        return _compare(config)

    if config.num_workers > 1:
        child_args = bench_flags.serialize(
            FLAGS, drop=("num_workers", "worker_hosts", "task_index", "output_json",
                         "fetch_data", "plot", "plot_compare"))
        try:
            runner.launch_local_workers(config, child_args)
        except runner.WorkerError as e:
            print(f"deepreduce-bench: {e}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("deepreduce-bench: interrupted; workers stopped", file=sys.stderr)
            return 130
        results_path = config.output_json
        if config.plot:
            _plot([results_path] + config.plot_compare, config.plot)
        return 0

    try:
        results = runner.run(config)
    except (deepreduce_tf.OpLibraryError, bench_flags.ConfigError) as e:
        return _error(e)
    except runner.PeerFailure as e:  # another worker failed: one line, no traceback
        return e.announce(sys.stderr, FLAGS.verbose)
    if results is None:  # a non-chief worker
        return 0
    path = report.write_json(results, config.output_json)
    print(report.summary_table(results))
    print(f"results: {path}")
    if config.plot:
        _plot([path] + config.plot_compare, config.plot)
    return 0


def _compare(config):
    """--compare (or the default comparison): one process per configuration."""
    try:
        if config.seeds:
            seeds.run_seeds(config, FLAGS)
        else:
            compare.run_comparison(config, FLAGS)
    except compare.CompareError as e:
        return _error(e)
    except KeyboardInterrupt:
        print("deepreduce-bench: interrupted; the running configuration was stopped",
              file=sys.stderr)
        return 130
    return 0


def _plot(paths, out):
    try:
        print(f"plot: {report.plot_runs(paths, out)}")
    except (ImportError, ValueError, OSError) as e:
        raise app.UsageError(f"--plot: {e}") from e


def main(argv=None):
    """deepreduce-bench: absl app over the flags of deepreduce_bench.flags.

    --help / -h / --helpshort / --helpfull print this command's flags and exit 0.
    Otherwise the flags that need no TensorFlow are checked before TensorFlow is
    imported (quietly unless --verbose), then app.run parses and checks them all.
    """
    argv = list(sys.argv if argv is None else argv)
    if _wants_help(argv):
        verbose = "--verbose" in argv
        quiet_environment(os.environ, verbose)
        _import_tensorflow(verbose)  # the codec flags follow the registry
        bench_flags.define_flags(FLAGS)
        sys.stdout.write(help_text(FLAGS, BENCH_USAGE))
        sys.exit(0)
    verbose = _precheck(argv)
    quiet_environment(os.environ, verbose)
    _import_tensorflow(verbose)
    bench_flags.define_flags(FLAGS)
    app.run(_one_line_errors(_bench), argv=argv, flags_parser=_flags_parser())


# ---------------------------------------------------------------------------
# deepreduce-plot

def _plot_main(argv):
    paths = argv[1:]
    if not paths:
        raise app.UsageError("give one or more results JSON files: "
                             "deepreduce-plot a.json b.json --out=compare.png")
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise app.UsageError(f"no such file: {', '.join(missing)}")
    try:
        print(report.plot_runs(paths, FLAGS.out, title=FLAGS.title))
    except (ImportError, ValueError) as e:
        raise app.UsageError(str(e)) from e
    return 0


PLOT_USAGE = ("usage: deepreduce-plot RESULTS.json [RESULTS.json ...] [--out=PNG] "
              "[--title=TEXT]\n\nDraws accuracy against bytes sent and against time of "
              "deepreduce-bench results files.")


def plot_main(argv=None):
    """deepreduce-plot: accuracy against bytes sent and against time, one PNG."""
    absl_flags.DEFINE_string("out", "deepreduce_bench.png", "PNG to write.")
    absl_flags.DEFINE_string("title", None, "Figure title.")
    argv = list(sys.argv if argv is None else argv)
    if _wants_help(argv):
        sys.stdout.write(help_text(FLAGS, PLOT_USAGE, groups=(("flags", ("out", "title")),),
                                   module_names=("out", "title")))
        sys.exit(0)
    app.run(_one_line_errors(_plot_main, "deepreduce-plot"), argv=argv,
            flags_parser=_flags_parser("deepreduce-plot"))
