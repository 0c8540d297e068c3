"""--compare: several configurations trained one after another, one table, one plot.

    deepreduce-bench                       # uncompressed vs golomb_qsgd_dgc (the default)
    deepreduce-bench --compare=uncompressed,topk,golomb_qsgd,bloom_polyfit
    deepreduce-bench --compare=uncompressed,flags --index=bloom --policy=p0

Every preset is declared once, in presets.PRESETS: a name, a one-line description and
the compression flags it stands for ('flags' stands for the compression flags
of the command line). The parent process resolves what the runs share (data,
steps, seed, batch, evaluation) and runs each configuration in a fresh process
of this command (runner.CHILD_BOOTSTRAP) with the same seed, hence the same
initial weights and data order, one after another. Each child trains, then
writes <out>/<preset>/results.json, its TensorBoard scalars in
<out>/<preset>/logs/ and its output in <out>/<preset>/log.txt; the parent
shows its progress bar on one line (a few lines off a terminal), then prints one table
(report.compare_table), writes the combined JSON (<out>/compare.json, or
--output_json) and the plot of test accuracy against cumulative bytes sent
(report.plot_comparison; <out>/compare.png, or --plot). <out> is --train_dir,
else ./deepreduce_bench_runs (flags.COMPARE_DIR).

This module does not import TensorFlow.
"""
import os
import re
import signal
import subprocess
import sys
import time

from deepreduce_bench import flags as bench_flags
from deepreduce_bench import report
from deepreduce_bench.presets import lookup
from deepreduce_bench.runner import CHILD_BOOTSTRAP

# Flags the parent sets for every child itself (or that only the parent reads).
_PARENT_FLAGS = ("compare", "output_json", "train_dir", "plot", "plot_compare", "fetch_data",
                 "eval", "eval_every", "num_batches", "num_epochs", "data_name", "seed",
                 "lr_schedule", "seeds", "num_eval_examples")


class CompareError(RuntimeError):
    """A configuration of the comparison failed (the message holds its log tail)."""


def preset_args(name, fv):
    """The compression flags of preset `name` (always with an explicit --exchange,
    so the child runs that one configuration)."""
    preset = lookup(name)
    if preset.args is not None:
        return list(preset.args)
    given = bench_flags.given_compression_flags(fv)
    args = [fv[n].serialize() for n in given]
    if "exchange" not in given:
        args.insert(0, f"--exchange={fv.exchange}")
    return args


def shared_args(config, fv):
    """The flags every child gets: the command line's own minus the compression
    flags and what the parent sets, plus the resolved data, steps, seed and
    evaluation (so no child picks its own). The codec-only timing after
    training (--codec_repeats) is skipped unless asked for."""
    drop = bench_flags.compression_flag_names() + _PARENT_FLAGS
    args = bench_flags.serialize(fv, drop=drop)
    args += [f"--data_name={config.data_name}", f"--seed={config.seed}", "--eval",
             f"--lr_schedule={config.lr_schedule}",
             f"--num_eval_examples={config.num_eval_examples}"]
    if config.num_epochs is not None:
        args.append(f"--num_epochs={config.num_epochs}")
    else:
        args.append(f"--num_batches={config.num_batches}")
    if config.eval_every is not None:
        args.append(f"--eval_every={config.eval_every}")
    if not fv["codec_repeats"].present:
        args.append("--codec_repeats=0")  # the table shows step times, not codec-only times
    return args


_PROGRESS = re.compile(r"train \[[#.]*\] (\d+)/(\d+) ")
PROGRESS_LINES = 5  # progress lines per configuration when stderr is not a terminal


def _progress(line):
    """(done, total) of a progress-bar line of a child, else None."""
    match = _PROGRESS.match(line)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _run_child(args, log_path, label, stream):
    """Runs one configuration; its output goes to log_path, its progress bar
    to `stream` as one line. Returns the wall time (s).

    Raises:
      CompareError: the child failed (the message holds the log's tail).
    """
    tty = bool(getattr(stream, "isatty", lambda: False)())
    shown = -1  # the last part (of PROGRESS_LINES - 1) shown, off a terminal
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    start = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-c", CHILD_BOOTSTRAP] + args, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                bufsize=1, start_new_session=True)
        try:
            for line in proc.stdout:
                log.write(line)
                progress = _progress(line) if stream is not None else None
                if progress is None:
                    continue
                text = f"{label} {line.rstrip()}"
                if tty:
                    stream.write("\r" + text.ljust(110))
                else:
                    part = progress[0] * (PROGRESS_LINES - 1) // progress[1]
                    if part == shown:
                        continue
                    shown = part
                    stream.write(text + "\n")
                stream.flush()
            code = proc.wait()
        except BaseException:
            _kill_group(proc)
            raise
    if stream is not None and tty:
        stream.write("\n")
    if code != 0:
        raise CompareError(f"{label} exited with code {code}; the end of its log ({log_path}):"
                           f"\n{_tail(log_path)}")
    return time.perf_counter() - start


def _kill_group(proc):
    """Stops a child and the workers it launched (its own process group)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=5)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


def _tail(path, lines=30):
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-lines:])


def run_comparison(config, fv, stream=sys.stderr, out=sys.stdout):
    """Runs the presets of config.compare one after another; prints the table.

    Returns:
      the combined results dict (also written to config.output_json).

    Raises:
      CompareError: a configuration failed.
    """
    out_dir = os.path.abspath(config.train_dir)
    os.makedirs(out_dir, exist_ok=True)
    common = shared_args(config, fv)
    steps = (f"{config.num_batches} steps" if config.num_epochs is None
             else f"{config.num_epochs:g} epoch(s)")
    if stream is not None:
        print(f"comparing {len(config.compare)} configurations ({', '.join(config.compare)}) on "
              f"{config.model} / {config.data_name}, {steps} each, seed {config.seed}; "
              f"outputs in {out_dir}", file=stream, flush=True)
    runs = []
    for i, name in enumerate(config.compare):
        run_dir = os.path.join(out_dir, name)
        os.makedirs(run_dir, exist_ok=True)
        results_path = os.path.join(run_dir, "results.json")
        if os.path.exists(results_path):
            os.remove(results_path)  # never report an earlier run's numbers
        args = common + preset_args(name, fv) + [f"--train_dir={run_dir}",
                                                 f"--output_json={results_path}"]
        label = f"[{i + 1}/{len(config.compare)}] {name}:"
        wall = _run_child(args, os.path.join(run_dir, "log.txt"), label, stream)
        results = report.load_results(results_path)
        runs.append({"preset": name, "description": lookup(name).description,
                     "args": args, "results_json": results_path,
                     "log": os.path.join(run_dir, "log.txt"),
                     "tensorboard": os.path.join(run_dir, "logs"), "wall_s": wall,
                     "results": results})
        if stream is not None:
            print(f"{label} done in {report.duration(wall)}: "
                  f"{report.run_outcome(results)}", file=stream, flush=True)
    return _finish(config, runs, out)


def _finish(config, runs, out):
    pairs = [(r["preset"], r["results"]) for r in runs]
    table = report.compare_table(pairs, descriptions={
        r["preset"]: r["description"] for r in runs})
    plot_path, plot_error = None, None
    try:
        plot_path = report.plot_comparison(pairs, config.plot)
    except (ImportError, ValueError) as e:
        plot_error = str(e)
    combined = report.comparison_record(
        pairs, table=table, plot=plot_path,
        runs_meta=[{k: v for k, v in r.items() if k != "results"} for r in runs])
    path = report.write_json(combined, config.output_json)
    if out is not None:
        print(table, file=out)
        print(f"combined results: {path}", file=out)
        print("per-run results:  " + ", ".join(r["results_json"] for r in runs), file=out)
        print("logs:             " + ", ".join(r["log"] for r in runs), file=out)
        print(f"TensorBoard:      tensorboard --logdir {os.path.abspath(config.train_dir)} "
              "(one run per <preset>/logs)", file=out)
        print(f"plot:             {plot_path}" if plot_path else f"plot: not drawn ({plot_error})",
              file=out)
        out.flush()
    return combined
