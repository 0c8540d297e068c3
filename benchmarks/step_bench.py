"""A compressed training step against a plain one: trace, first step, steady state.

For every (model, strategy, configuration) row, a FRESH process (or, for
MultiWorkerMirroredStrategy, a fresh pair of worker processes) builds the
model, wraps one custom training step in a tf.function and measures:

  graph nodes     nodes of the step's own graph (concrete.graph.as_graph_def())
  library nodes   nodes of every function in that graph's function library
                  (the per-replica bodies, Keras' layers, the codecs' loops ...)
  trace s         step.get_concrete_function(x_spec, y_spec): Python tracing and
                  graph building, nothing executed
  first step s    wall time of the first call: Grappler's rewrite of the graph,
                  kernel creation, one execution (read back)
  median step ms  median wall time of the --steps calls after the first
  first step x, median x   the same against the plain row of that model and
                  strategy (TensorFlow's own cross-device ops, no DeepReduce)

The step (the custom-loop form the README describes):

    @tf.function
    def step(x, y):
        return strategy.run(replica_step, args=(x, y))

replica_step computes the loss under tf.GradientTape and calls a Keras 3
SGD-with-momentum optimizer's apply_gradients, which all-reduces the gradient
list through the strategy's cross-device ops (batch_reduce). A DeepReduce row
fails unless ops.totals()['steps'] grew, i.e. unless the gradients really went
through DeepReduce.

Strategies: "mirrored" = one process, MirroredStrategy over 2 logical CPU
devices (MirroredStrategy() for plain, cross_device_ops=
DeepReduceCrossDeviceOps(params) otherwise); "mwms" = 2 worker processes on
127.0.0.1 (TF_CONFIG), 1 CPU device each, plain
tf.distribute.MultiWorkerMirroredStrategy() or
deepreduce_tf.distribute.multi_worker_strategy(params); task 0 reports (the
workers start the first step together after a file barrier, so it does not
include waiting for the other worker's trace).

Data: synthetic, fixed shape, a different batch per replica. ResNet-20:
32x32x3, 10 classes, 32 images per replica; ResNet-50 (v1.5):
--resnet50_image_size (64) square, 10 classes, 4 images per replica.

Rows of one model are interleaved: every --repeats round runs each of its
rows once (in reverse order on odd rounds), so load on the shared machine
hits all rows alike; times are medians over the rounds.

    DEEPREDUCE_TF_OPS_LIB=.venv/lib/python3.11/site-packages/deepreduce_tf/ops/_deepreduce_ops.so \\
    PYTHONPATH=. .venv/bin/python benchmarks/step_bench.py \\
        [--models resnet20,resnet50] [--strategies mirrored,mwms] [--configs all] \\
        [--steps 10] [--repeats 1] [--timeout 1800] [--json out.json]

Prints progress on stderr and, at the end, a header line (TF version, CPUs,
date, load average at start and end) and the markdown table on stdout.
Exits 1 if a row failed (its cells then say why), 130 on Ctrl-C (after
reaping the workers and printing the rows done so far).
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from deepreduce_bench.runner import free_ports  # imports no TensorFlow
from deepreduce_bench.workers import _tail  # the last lines of a worker's log

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

_TOPK = {"compressor": "topk", "compress_ratio": 0.01, "communicator": "allgather", "seed": 0}
# The parameter dicts of the README's reproduction rows (benchmarks/results/resnet20_*.json).
CONFIGS = {
    "plain": None,
    # compression off: the cross-device ops take TF's all-reduce route by default
    "none": {"compressor": "none", "deepreduce": None, "seed": 0},
    "none_allgather": {"compressor": "none", "communicator": "allgather", "deepreduce": None,
                       "seed": 0},
    "topk": dict(_TOPK, deepreduce=None),
    "bloom_p0": dict(_TOPK, deepreduce="index", index="bloom", policy="p0"),
    "bloom_cs": dict(_TOPK, deepreduce="index", index="bloom", policy="conflict_sets"),
    "polyfit": dict(_TOPK, deepreduce="value", value="polyfit"),
    "both": dict(_TOPK, deepreduce="both", index="bloom", policy="p0", value="polyfit"),
    "golomb_qsgd7": dict(_TOPK, deepreduce="both", index="golomb", value="qsgd", bits=7),
    # PowerSGD's factors, all-reduced (docs/powersgd.md)
    "powersgd_r1": {"compressor": "powersgd", "rank": 1, "seed": 0},
    "powersgd_r2": {"compressor": "powersgd", "rank": 2, "seed": 0},
    "powersgd_r4": {"compressor": "powersgd", "rank": 4, "seed": 0},
}
MODELS = {
    # name -> (label, per-replica batch)
    "resnet20": ("ResNet-20", 32),
    "resnet50": ("ResNet-50", 4),
}
STRATEGIES = {"mirrored": "MirroredStrategy", "mwms": "MultiWorkerMirroredStrategy"}
REPLICAS = 2  # logical CPU devices (mirrored), worker processes (mwms)
NUM_CLASSES = 10
LEARNING_RATE = 0.01
MOMENTUM = 0.9
EXIT_NOT_DEEPREDUCE = 3


class RowError(RuntimeError):
    """A row's process(es) failed or timed out: a one-line summary, the log tail."""

    def __init__(self, summary, log_tail=""):
        super().__init__(f"{summary}; log tail:\n{log_tail}" if log_tail else summary)
        self.summary = summary


# ---------------------------------------------------------------------------
# One row, inside its fresh process (or one of its two worker processes)

def _file_barrier(directory, name, task, count, timeout):
    """Waits until all `count` tasks have reached barrier `name` (files in `directory`)."""
    open(os.path.join(directory, f"{name}.{task}"), "w").close()
    deadline = time.monotonic() + timeout
    while not all(os.path.exists(os.path.join(directory, f"{name}.{i}")) for i in range(count)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"barrier {name!r}: not all {count} workers arrived in {timeout} s")
        time.sleep(0.01)


def _make_strategy(spec):
    """(strategy, DeepReduce ops or None). Call before any other TensorFlow work."""
    import tensorflow as tf

    params = spec["params"]
    if spec["strategy"] == "mirrored":
        cpus = tf.config.list_physical_devices("CPU")
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration()] * REPLICAS)
        if params is None:
            return tf.distribute.MirroredStrategy(), None
        from deepreduce_tf import distribute as drd

        ops = drd.DeepReduceCrossDeviceOps(params)
        return tf.distribute.MirroredStrategy(cross_device_ops=ops), ops
    if params is None:
        return tf.distribute.MultiWorkerMirroredStrategy(), None
    from deepreduce_tf import distribute as drd

    strategy = drd.multi_worker_strategy(params)
    return strategy, drd.get_ops(strategy)


def run_row(spec):
    """Measures one row in this process; returns its results dict."""
    if spec["strategy"] == "mwms":
        from deepreduce_bench import runner

        os.environ["TF_CONFIG"] = runner.tf_config_for(spec["hosts"], spec["task"])
    import numpy as np
    import tensorflow as tf
    import keras

    import deepreduce_tf
    from deepreduce_bench import models

    strategy, ops = _make_strategy(spec)
    replicas = strategy.num_replicas_in_sync
    local = len(strategy.extended.worker_devices)
    if replicas != REPLICAS:
        raise RuntimeError(f"expected {REPLICAS} replicas, the strategy has {replicas}")
    keras.utils.set_random_seed(spec["seed"])

    batch = spec["batch"]
    side = spec["image_size"]
    global_batch = batch * replicas
    with strategy.scope():
        if spec["model"] == "resnet20":
            model = models.resnet20((side, side, 3), NUM_CLASSES)
        else:
            model = models.resnet50((side, side, 3), NUM_CLASSES)
        optimizer = keras.optimizers.SGD(LEARNING_RATE, momentum=MOMENTUM)
        optimizer.build(model.trainable_variables)  # slots now, not inside the trace
    variables = model.trainable_variables

    def replica_step(x, y):
        # x holds one batch per local replica: [local, batch, side, side, 3].
        i = tf.distribute.get_replica_context().replica_id_in_sync_group % local
        x, y = tf.gather(x, i), tf.gather(y, i)
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        grads = tape.gradient(loss, variables)
        optimizer.apply_gradients(zip(grads, variables))
        return tf.reduce_mean(per_example)

    @tf.function
    def step(x, y):
        return strategy.run(replica_step, args=(x, y))

    rng = np.random.default_rng(spec["seed"] + 1000 * spec["task"])
    x = tf.constant(rng.standard_normal((local, batch, side, side, 3)).astype(np.float32))
    y = tf.constant(rng.integers(0, NUM_CLASSES, (local, batch)).astype(np.int32))
    x_spec = tf.TensorSpec(x.shape, x.dtype)
    y_spec = tf.TensorSpec(y.shape, y.dtype)

    def run_step():
        out = step(x, y)
        return float(np.mean([t.numpy() for t in strategy.experimental_local_results(out)]))

    t0 = time.perf_counter()
    concrete = step.get_concrete_function(x_spec, y_spec)
    trace_s = time.perf_counter() - t0
    graph_def = concrete.graph.as_graph_def()
    library = graph_def.library.function

    if spec["strategy"] == "mwms":
        _file_barrier(spec["barrier_dir"], "traced", spec["task"], REPLICAS, spec["timeout"])
    before = ops.totals()["steps"] if ops is not None else None
    t0 = time.perf_counter()
    first_loss = run_step()
    first_s = time.perf_counter() - t0
    step_s, last_loss = [], first_loss
    for _ in range(spec["steps"]):
        t0 = time.perf_counter()
        last_loss = run_step()
        step_s.append(time.perf_counter() - t0)
    after = ops.totals()["steps"] if ops is not None else None
    if spec["strategy"] == "mwms":
        # Leave together: the coordination service reports a worker that
        # exits early as failed.
        _file_barrier(spec["barrier_dir"], "done", spec["task"], REPLICAS, spec["timeout"])

    warnings_ = []
    tracings = step.experimental_get_tracing_count()
    if tracings != 1:
        warnings_.append(f"step traced {tracings} times (expected 1)")
    if ops is not None and after - before != spec["steps"] + 1:
        warnings_.append(f"DeepReduce exchanges grew by {after - before}, expected "
                         f"{spec['steps'] + 1} (one per step)")
    if not (np.isfinite(first_loss) and np.isfinite(last_loss)):
        warnings_.append(f"non-finite loss ({first_loss}, {last_loss})")
    cross_ops = getattr(strategy.extended, "_cross_device_ops", None)
    return {
        "model": spec["model"], "strategy": spec["strategy"], "config": spec["config"],
        "params": spec["params"], "task": spec["task"], "replicas": replicas,
        "local_replicas": local, "batch_per_replica": batch, "image_size": side,
        "trainable_variables": len(variables),
        "trainable_params": int(sum(np.prod(v.shape) for v in variables)),
        "cross_device_ops": type(cross_ops).__name__ if cross_ops is not None else None,
        "graph_nodes": len(graph_def.node), "library_functions": len(library),
        "library_nodes": sum(len(f.node_def) for f in library),
        "trace_s": trace_s, "first_step_s": first_s, "step_ms": [1e3 * s for s in step_s],
        "median_step_ms": 1e3 * statistics.median(step_s) if step_s else None,
        "exchanges": None if ops is None else after - before,
        "tracing_count": tracings, "first_loss": first_loss, "last_loss": last_loss,
        "warnings": warnings_, "tensorflow": tf.__version__,
        "deepreduce_tf": deepreduce_tf.__version__,
        "deepreduce_tf_path": os.path.dirname(os.path.abspath(deepreduce_tf.__file__)),
    }


def child_main(spec):
    result = run_row(spec)
    with open(spec["out"], "w") as f:
        json.dump(result, f)
    for w in result["warnings"]:
        print(f"WARNING: {w}", file=sys.stderr)
    if spec["params"] is not None and not result["exchanges"]:
        print("ERROR: ops.totals()['steps'] did not grow: the step's gradients did not go "
              "through DeepReduce's cross-device ops", file=sys.stderr)
        return EXIT_NOT_DEEPREDUCE
    return 0


# ---------------------------------------------------------------------------
# The launcher: fresh processes per row, always reaped

def _last_line(text):
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    return lines[-1] if lines else ""


def _reap(procs, grace=5.0):
    """SIGTERM, then SIGKILL, each child's process group (started by us)."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def run_row_processes(base_spec, work_dir, timeout):
    """Runs one row in fresh process(es); returns task 0's result (with the
    other worker's in "workers" for mwms).

    Raises:
      RowError: a process exited non-zero, or the row ran past `timeout` s.
    """
    tag = f"{base_spec['model']}-{base_spec['strategy']}-{base_spec['config']}-" \
          f"r{base_spec['repeat']}"
    row_dir = tempfile.mkdtemp(prefix=tag + "-", dir=work_dir)
    n = REPLICAS if base_spec["strategy"] == "mwms" else 1
    hosts = [f"127.0.0.1:{p}" for p in free_ports(n)] if n > 1 else []
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    procs, logs, outs = [], [], []
    t_start = time.monotonic()
    try:
        for task in range(n):
            spec = dict(base_spec, task=task, hosts=hosts, barrier_dir=row_dir, timeout=timeout,
                        out=os.path.join(row_dir, f"result{task}.json"))
            log = os.path.join(row_dir, f"worker{task}.log")
            with open(log, "w") as f:
                procs.append(subprocess.Popen(
                    [sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)],
                    env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True))
            logs.append(log)
            outs.append(spec["out"])
        deadline = t_start + timeout
        while True:
            codes = [p.poll() for p in procs]
            failed = [i for i, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                i = failed[0]
                tail = _tail(logs[i], 30)
                raise RowError(f"worker {i} exited with code {codes[i]}: {_last_line(tail)}",
                               tail)
            if all(c == 0 for c in codes):
                break
            if time.monotonic() > deadline:
                raise RowError(f"still running after --timeout={timeout:g} s; killed",
                               _tail(logs[0], 30))
            time.sleep(0.2)
    finally:
        _reap(procs)
    results = []
    for out in outs:
        with open(out) as f:
            results.append(json.load(f))
    result = results[0]
    result["process_wall_s"] = time.monotonic() - t_start
    if n > 1:
        result["workers"] = results[1:]
        for other in results[1:]:
            result["warnings"] += [f"worker {other['task']}: {w}" for w in other["warnings"]]
    shutil.rmtree(row_dir, ignore_errors=True)
    return result


# ---------------------------------------------------------------------------
# Aggregation and the table

def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def aggregate(rows, runs):
    """One summary per row: medians over its runs, ratios against plain."""
    out = []
    for key in rows:
        model, strategy, config = key
        done = [r for r in runs if (r["model"], r["strategy"], r["config"]) == key]
        ok = [r for r in done if "error" not in r]
        s = {"model": model, "strategy": strategy, "config": config, "params": CONFIGS[config],
             "runs": len(ok), "errors": [r["error"] for r in done if "error" in r]}
        if ok:
            s.update({
                "graph_nodes": ok[0]["graph_nodes"], "library_nodes": ok[0]["library_nodes"],
                "library_functions": ok[0]["library_functions"],
                "cross_device_ops": ok[0]["cross_device_ops"],
                "trace_s": _median([r["trace_s"] for r in ok]),
                "first_step_s": _median([r["first_step_s"] for r in ok]),
                "median_step_ms": _median([r["median_step_ms"] for r in ok]),
                "warnings": sorted({w for r in ok for w in r["warnings"]}),
            })
        out.append(s)
    plain = {(s["model"], s["strategy"]): s for s in out
             if s["config"] == "plain" and s.get("first_step_s")}
    for s in out:
        p = plain.get((s["model"], s["strategy"]))
        for key, ratio in (("first_step_s", "first_step_x"), ("median_step_ms", "median_x"),
                           ("trace_s", "trace_x")):
            s[ratio] = (s[key] / p[key] if p and s.get(key) is not None and p.get(key)
                        else None)
    return out


def _fmt(value, spec, suffix=""):
    return "–" if value is None else format(value, spec) + suffix


def markdown(summaries):
    lines = ["| model | strategy | configuration | graph nodes | library nodes | trace s "
             "| first step s | median step ms | first step × | median × |",
             "|---|---|---|--:|--:|--:|--:|--:|--:|--:|"]
    for s in summaries:
        head = f"| {MODELS[s['model']][0]} | {s['strategy']} | {s['config']} |"
        if not s["runs"]:
            why = "FAILED: " + s["errors"][0].replace("|", "\\|") if s["errors"] else "not run"
            lines.append(f"{head} {why} | | | | | | |")
            continue
        lines.append(f"{head} {s['graph_nodes']:,} | {s['library_nodes']:,} | "
                     f"{_fmt(s['trace_s'], '.2f')} | {_fmt(s['first_step_s'], '.2f')} | "
                     f"{_fmt(s['median_step_ms'], '.0f')} | {_fmt(s['first_step_x'], '.1f', '×')} "
                     f"| {_fmt(s['median_x'], '.2f', '×')} |")
    notes = [f"- {MODELS[s['model']][0]} {s['strategy']} {s['config']}: {w}"
             for s in summaries for w in s.get("warnings", []) + (
                 [f"{len(s['errors'])} failed run(s): {s['errors'][0]}"]
                 if s["runs"] and s["errors"] else [])]
    return "\n".join(lines + ([""] + notes if notes else []))


def _load():
    return "/".join(f"{v:.2f}" for v in os.getloadavg())


def _tf_version():
    from importlib import metadata

    for dist in ("tensorflow", "tensorflow-cpu", "tensorflow-gpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "?"


def _package_path():
    """Where the workers will import deepreduce_tf from (without importing it here)."""
    from importlib import util

    spec = util.find_spec("deepreduce_tf")
    return os.path.dirname(spec.origin) if spec and spec.origin else "?"


def _csv(value, choices, what):
    names = list(choices) if value == "all" else [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in names if v not in choices]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown {what} {', '.join(bad) or value!r}; "
                                         f"choose from {', '.join(choices)} (or all)")
    return names


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="resnet20,resnet50",
                   type=lambda v: _csv(v, MODELS, "model"), help="comma-separated, or all")
    p.add_argument("--strategies", default="mirrored,mwms",
                   type=lambda v: _csv(v, STRATEGIES, "strategy"), help="comma-separated, or all")
    p.add_argument("--configs", default="all", type=lambda v: _csv(v, CONFIGS, "configuration"),
                   help=f"comma-separated from {', '.join(CONFIGS)}, or all")
    p.add_argument("--steps", type=int, default=10, help="timed steps after the first")
    p.add_argument("--repeats", type=int, default=1, help="fresh runs per row (median)")
    p.add_argument("--timeout", type=float, default=1800.0,
                   help="seconds one row's process(es) may run before being killed")
    p.add_argument("--resnet50_image_size", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the rows (and every run) to this file")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child_main(json.loads(args.child))
    if args.steps < 1 or args.repeats < 1 or args.timeout <= 0:
        p.error("--steps and --repeats must be >= 1, --timeout > 0")
    if args.resnet50_image_size < 32:
        p.error("--resnet50_image_size must be >= 32")

    signal.signal(signal.SIGTERM, _raise_interrupt)
    started = time.strftime("%Y-%m-%d %H:%M:%S %z")
    load_start = _load()
    print(f"step_bench: load average {load_start} at start, {os.cpu_count()} CPUs",
          file=sys.stderr, flush=True)
    rows = [(m, s, c) for m in args.models for s in args.strategies for c in args.configs]
    schedule = []
    for model in args.models:
        # Interleave one model's rows: one run of each per round, alternating the order.
        mine = [r for r in rows if r[0] == model]
        for rep in range(args.repeats):
            schedule += [(r, rep) for r in (mine if rep % 2 == 0 else mine[::-1])]
    runs = []
    interrupted = False
    work_dir = tempfile.mkdtemp(prefix="step_bench-")

    def record():
        if not args.json:
            return None
        summaries = aggregate(rows, runs)
        with open(args.json, "w") as f:
            json.dump({"environment": environment(), "settings": settings(),
                       "rows": summaries, "runs": runs}, f, indent=1)
        return summaries

    def settings():
        return {"models": args.models, "strategies": args.strategies, "configs": args.configs,
                "steps": args.steps, "repeats": args.repeats, "timeout_s": args.timeout,
                "replicas": REPLICAS, "seed": args.seed,
                "batch_per_replica": {m: MODELS[m][1] for m in args.models},
                "image_size": {"resnet20": 32, "resnet50": args.resnet50_image_size},
                "optimizer": f"keras SGD lr={LEARNING_RATE} momentum={MOMENTUM}",
                "num_classes": NUM_CLASSES}

    def environment():
        return {"tensorflow": _tf_version(), "deepreduce_tf_path": _package_path(),
                "ops_lib": os.environ.get("DEEPREDUCE_TF_OPS_LIB"), "cpu_count": os.cpu_count(),
                "cpu_affinity": len(os.sched_getaffinity(0)), "started": started,
                "load_start": load_start, "load_end": _load(), "python": sys.version.split()[0]}

    try:
        for n, ((model, strategy, config), rep) in enumerate(schedule, 1):
            spec = {"model": model, "strategy": strategy, "config": config,
                    "params": CONFIGS[config], "repeat": rep, "steps": args.steps,
                    "seed": args.seed, "batch": MODELS[model][1],
                    "image_size": 32 if model == "resnet20" else args.resnet50_image_size}
            label = f"[{n}/{len(schedule)}] {model} {strategy} {config}" + (
                f" (round {rep + 1}/{args.repeats})" if args.repeats > 1 else "")
            print(f"{label} ... (load {_load()})", file=sys.stderr, flush=True)
            try:
                r = run_row_processes(spec, work_dir, args.timeout)
                r["repeat"] = rep
                print(f"{label}: trace {r['trace_s']:.2f} s, first step {r['first_step_s']:.2f} s, "
                      f"median step {r['median_step_ms']:.0f} ms, {r['graph_nodes']:,} + "
                      f"{r['library_nodes']:,} nodes, {r['process_wall_s']:.0f} s in all"
                      + "".join(f"\n  WARNING: {w}" for w in r["warnings"]),
                      file=sys.stderr, flush=True)
            except RowError as e:
                r = {"model": model, "strategy": strategy, "config": config, "repeat": rep,
                     "error": e.summary, "log_tail": str(e)}
                print(f"{label}: FAILED: {e}", file=sys.stderr, flush=True)
            runs.append(r)
            record()
    except KeyboardInterrupt:
        interrupted = True
        print("interrupted; workers reaped, printing the rows done so far", file=sys.stderr)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)

    summaries = aggregate(rows, runs)
    record()
    env = environment()
    print(f"step_bench: TensorFlow {env['tensorflow']}, deepreduce_tf from "
          f"{env['deepreduce_tf_path']}, {env['cpu_count']} CPUs "
          f"({env['cpu_affinity']} usable), {started}, load average (1/5/15 min) "
          f"{load_start} at start, {env['load_end']} at end; {REPLICAS} replicas, "
          f"{args.steps} steps after the first, median of {args.repeats} fresh run(s) per row")
    print()
    print(markdown(summaries))
    if interrupted:
        return 130
    return 1 if any(s["errors"] or not s["runs"] for s in summaries) else 0


if __name__ == "__main__":
    sys.exit(main())
