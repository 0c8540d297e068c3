"""Console entry points: deepreduce-bench (main) and deepreduce-plot (plot_main).

    deepreduce-bench [flags]          # train, print the summary table, write the JSON
    deepreduce-bench --fetch_data     # fetch MovieLens-100K, locate Fashion-MNIST
    deepreduce-bench --helpfull       # every flag
    deepreduce-plot a.json b.json --out=compare.png

Every flag is checked (flags.resolve) before TensorFlow builds anything; a bad
value or combination is an absl usage error (exit code 1) naming the flag.
"""
import os
import sys

from absl import app
from absl import flags as absl_flags

from deepreduce_tf.benchmark import flags as bench_flags
from deepreduce_tf.benchmark import report

FLAGS = absl_flags.FLAGS


def _fetch(data_dir):
    from deepreduce_tf import data, movielens

    try:
        found = data.fetch_all(data_dir, stream=sys.stderr)
    except movielens.MovieLensError as e:
        raise app.UsageError(f"--fetch_data: {e}") from e
    return found


def _bench(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}; every setting is a --flag "
                             "(see --helpfull)")
    only_fetch = FLAGS.fetch_data and not any(
        FLAGS[name].present for name in bench_flags.own_flag_names(FLAGS)
        if name not in ("fetch_data", "data_dir"))
    if FLAGS.fetch_data:
        _fetch(FLAGS.data_dir)
        if only_fetch:
            return 0
    try:
        config = bench_flags.resolve(FLAGS)
    except bench_flags.ConfigError as e:
        raise app.UsageError(str(e)) from e

    from deepreduce_tf.benchmark import runner

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

    results = runner.run(config)
    if results is None:  # a non-chief worker
        return 0
    path = report.write_json(results, config.output_json)
    print(report.summary_table(results))
    print(f"results: {path}")
    if config.plot:
        _plot([path] + config.plot_compare, config.plot)
    return 0


def _plot(paths, out):
    try:
        print(f"plot: {report.plot_runs(paths, out)}")
    except (ImportError, ValueError, OSError) as e:
        raise app.UsageError(f"--plot: {e}") from e


def main(argv=None):
    """deepreduce-bench: absl app over the flags of deepreduce_tf.benchmark.flags."""
    bench_flags.define_flags(FLAGS)
    app.run(_bench, argv=argv)


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


def plot_main(argv=None):
    """deepreduce-plot: accuracy against bytes sent and against time, one PNG."""
    absl_flags.DEFINE_string("out", "deepreduce_bench.png", "PNG to write.")
    absl_flags.DEFINE_string("title", None, "Figure title.")
    app.run(_plot_main, argv=argv)
