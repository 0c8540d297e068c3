"""What a deepreduce-bench run shows and keeps: progress bar, table, JSON, plot.

The results JSON (write_json) holds:
  "config"   every deepreduce-bench flag's value ("flags"), the resolved run
             settings and the from_params dict ("params")
  "metrics"  METRIC_KEYS below (None where not measured, e.g. accuracy
             without --eval on ncf)
  "eval"     the evaluation settings and results (or null without --eval)
  "history"  [{"step", "time_s", "wall_s", "sent_bytes", "dense_bytes",
             "loss", "accuracy"}] every --display_every steps: time_s sums the
             timed steps (warm-up and tracing excluded), wall_s every step;
             bytes are per replica, cumulative since the first step; loss and
             accuracy are training means over the last display_every steps
  "eval_history"  [{"step", "time_s", "wall_s", "sent_bytes", "dense_bytes",
             "accuracy" | "hit_rate", "ndcg"}] with --eval: the test metric
             before training (step 0), every --eval_every steps and at the end
  "environment"  TensorFlow / deepreduce_tf versions, replicas, workers, devices
A comparison (--compare) writes one combined JSON (comparison_record) beside
the runs' own files, prints compare_table() and draws plot_comparison().
This module does not import TensorFlow (plot_main runs without it).
"""
import json
import math
import os
import sys
import time

SCHEMA_VERSION = 1
METRIC_KEYS = (
    "examples_per_sec", "step_time_ms", "dense_bytes_per_step", "sent_bytes_per_step",
    "reduction", "compress_ms", "decompress_ms", "final_loss", "train_accuracy", "accuracy",
    "hit_rate", "ndcg", "codec_payload_bytes", "total_sent_bytes", "total_dense_bytes",
    "train_time_s", "timed_steps", "step_time_median_ms", "received_bytes_per_step",
    "support_mean", "support_min")
# A compressed run whose test accuracy trails the baseline's by more than this
# many points (or twice the subset's standard error, if larger) gets a note.
ACCURACY_GAP_POINTS = 1.0
METRIC_LABELS = {"accuracy": "test accuracy", "hit_rate": "HR@10"}


class ProgressBar:
    """A one-line progress bar on a stream (\\r-redrawn on a terminal).

    On a non-terminal stream (a log file, a CI console) it prints a line at
    every 10 % instead, so logs stay short. The eta comes from the steps after
    the first update (the first training step traces the graph and can take
    longer than many others): unknown ("--:--") until the second update.
    """

    def __init__(self, total, stream=sys.stderr, width=30, label="train",
                 clock=time.perf_counter):
        self.total = max(int(total), 1)
        self.stream = stream
        self.width = width
        self.label = label
        self.clock = clock
        self.start = clock()
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self._last_decile = -1
        self._first = None  # (done, time) of the first update

    def update(self, done, **fields):
        """Redraws for `done` steps completed; fields are shown as name=value."""
        if self.stream is None:
            return
        frac = min(done / self.total, 1.0)
        now = self.clock()
        elapsed = now - self.start
        if self._first is None:
            self._first = (done, now)
        first_done, first_time = self._first
        eta = float("nan")
        if done > first_done:
            eta = (now - first_time) / (done - first_done) * (self.total - done)
        filled = int(round(frac * self.width))
        extra = " ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                         for k, v in fields.items())
        line = (f"{self.label} [{'#' * filled}{'.' * (self.width - filled)}] "
                f"{done}/{self.total} {_duration(elapsed)} eta {_duration(eta)} {extra}")
        if self.tty:
            self.stream.write("\r" + line.ljust(100))
            if done >= self.total:
                self.stream.write("\n")
        else:
            decile = int(frac * 10)
            if decile == self._last_decile and done < self.total:
                return
            self._last_decile = decile
            self.stream.write(line + "\n")
        self.stream.flush()


def _duration(seconds):
    if seconds is None or not math.isfinite(seconds):
        return "--:--"
    seconds = int(round(seconds))
    return f"{seconds // 60:02d}:{seconds % 60:02d}"


def duration(seconds):
    """mm:ss of a number of seconds ('--:--' when unknown)."""
    return _duration(seconds)


def _fmt(value, spec):
    if value is None:
        return "n/a"
    return format(value, spec)


def summary_table(results):
    """The end-of-run table (a string) of a results dict."""
    m = results["metrics"]
    c = results["config"]
    env = results["environment"]
    p = c["params"]
    mode = p.get("deepreduce") or "none"
    codecs = []
    if mode in ("index", "both"):
        codecs.append(f"index={p.get('index')}" +
                      (f"/{p.get('policy')}" if p.get("index") == "bloom" else ""))
    if mode in ("value", "both"):
        codecs.append(f"value={p.get('value')}")
    comp = p.get("compressor")
    if comp in ("topk", "randomk"):
        comp += f" {p.get('compress_ratio'):g}"
    compression = f"{comp}, deepreduce={mode}" + (f" ({', '.join(codecs)})" if codecs else "")
    communicator = p.get("communicator") or "allgather"
    if communicator != "allgather":
        compression += f", communicator={communicator}"
    if c.get("exchange") == "tf":
        compression = "none: TensorFlow's own all-reduce (dense)"
    window = c.get("loss_window")
    last = ("the last step" if window == 1 else
            f"mean of the last {window} steps" if window else "mean of the last steps")
    codec_na = "n/a (--codec_repeats=0)" if c.get("codec_repeats") == 0 else "n/a"
    rows = [
        ("model on data", f"{c['model']} on {results['data_source']}"),
        ("replicas", f"{env['replicas']} ({c['variable_update']}, {env['workers']} worker(s), "
                     f"batch {c['batch_size']}/replica)"),
        ("compression", compression),
        ("timed steps", f"{m['timed_steps']} (after {c['num_warmup_batches']} warm-up "
                        "step(s), not timed)"),
        ("throughput (examples/s, all replicas)", _fmt(m["examples_per_sec"], ",.1f")),
        ("step time (ms, mean of the timed steps)", _fmt(m["step_time_ms"], ",.1f")),
    ]
    if "step_time_median_ms" in m:
        rows.append(("step time (ms, median of the timed steps)",
                     _fmt(m["step_time_median_ms"], ",.1f")))
    rows += [
        ("dense bytes per step per replica", _fmt(m["dense_bytes_per_step"], ",.0f")),
        ("sent bytes per step per replica (mean of the timed steps)",
         _fmt(m["sent_bytes_per_step"], ",.0f")),
        ("reduction (dense / sent bytes)", f"{_fmt(m['reduction'], ',.2f')}x"),
    ]
    if m.get("received_bytes_per_step") is not None:
        rows.append(("received bytes per step per replica (from the others)",
                     _fmt(m["received_bytes_per_step"], ",.0f")))
    if m.get("support_mean") is not None:
        rows.append(("support |U| / k (sparse all-reduce: mean of the timed steps, min)",
                     f"{m['support_mean']:.3f}, {_fmt(m.get('support_min'), '.3f')}"))
    rows += [
        ("compress (ms per step, codec only)",
         codec_na if m["compress_ms"] is None else _fmt(m["compress_ms"], ",.1f")),
        (f"decompress (ms per step, codec only, {env['replicas']} payloads)",
         codec_na if m["decompress_ms"] is None else _fmt(m["decompress_ms"], ",.1f")),
        (f"train loss ({last})", _fmt(m["final_loss"], ".4f")),
        (f"train accuracy ({last})", _fmt(m["train_accuracy"], ".4f")),
    ]
    ev = results.get("eval") or {}
    if results["model_metric"] == "hit_rate":
        if ev:
            rows.append(("HR@10 (--eval, every test user)", _fmt(m["hit_rate"], ".4f")))
            rows.append(("NDCG@10 (--eval, every test user)", _fmt(m["ndcg"], ".4f")))
        else:
            rows.append(("HR@10 (test split)", "n/a (add --eval)"))
    elif ev:
        n = ev.get("eval_examples")
        rows.append((f"test accuracy (--eval, {n:,} examples)" if n else
                     "test accuracy (--eval)", _fmt(m["accuracy"], ".4f")))
    else:
        rows.append(("test accuracy", "n/a (add --eval)"))
    width = max(len(k) for k, _ in rows)
    line = "-" * (width + 3 + max(len(v) for _, v in rows))
    body = "\n".join(f"{k:<{width}} | {v}" for k, v in rows)
    return f"{line}\ndeepreduce-bench summary\n{line}\n{body}\n{line}"


def write_json(results, path):
    """Writes the results dict to `path` (creating its directory); returns the path."""
    path = os.path.abspath(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(results, f, indent=2, sort_keys=True, default=_json_default)
        f.write("\n")
    os.replace(tmp, path)
    return path


def _json_default(value):
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def load_results(path):
    """Reads a results JSON, checking that it is one."""
    with open(path) as f:
        results = json.load(f)
    if not isinstance(results, dict) or "metrics" not in results or "history" not in results:
        raise ValueError(f"{path} is not a deepreduce-bench results file (no metrics/history)")
    return results


def run_label(results):
    """A short legend label: model, compression."""
    if results["config"].get("exchange") == "tf":
        return f"{results['config']['model']}: uncompressed (TensorFlow all-reduce)"
    p = results["config"]["params"]
    mode = p.get("deepreduce") or "none"
    comp = p.get("compressor")
    if comp == "none" and mode == "none":
        return f"{results['config']['model']}: uncompressed"
    label = comp + (f" {p['compress_ratio']:g}" if "compress_ratio" in p else "")
    if mode in ("index", "both"):
        label += f" + {p.get('index')}" + (f" {p.get('policy')}" if p.get("index") == "bloom"
                                           else "")
    if mode in ("value", "both"):
        label += f" + {p.get('value')}" + (f"{p['bits']}b" if p.get("bits") else "")
    return f"{results['config']['model']}: {label}"


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError("plotting needs matplotlib: pip install 'deepreduce_tf[plot]' "
                          "(matplotlib==3.11.2)") from e
    return plt


def _save(fig, plt, out):
    out = os.path.abspath(out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _metric(results):
    return results.get("model_metric") or "accuracy"


def _metric_label(metric):
    return METRIC_LABELS.get(metric, metric)


def plot_runs(paths, out, title=None):
    """Draws accuracy against bytes sent and against time for several runs.

    Each run is a solid curve of its training accuracy (history points, every
    --display_every steps; per-replica cumulative bytes) and, when it was
    evaluated with --eval, a dashed curve of its test metric (eval_history:
    before training, every --eval_every steps, at the end). Runs written
    before eval_history existed get a star at their final evaluation.

    Args:
      paths: results JSON files.
      out: PNG path.
      title: figure title (default: the models and data of the runs).

    Returns:
      out.

    Raises:
      ImportError: matplotlib is missing (the message says how to install it).
      ValueError: a file is not a results file, or no file was given.
    """
    if not paths:
        raise ValueError("no results files to plot")
    plt = _pyplot()
    runs = [(p, load_results(p)) for p in paths]
    fig, (ax_b, ax_t) = plt.subplots(1, 2, figsize=(12, 4.8))
    for path, r in runs:
        hist = r["history"]
        label = run_label(r)
        metric = _metric(r)
        line, = ax_b.plot([h["sent_bytes"] / 2 ** 20 for h in hist],
                          [h["accuracy"] for h in hist], "-", label=f"{label} (train)")
        color = line.get_color()
        ax_t.plot([h["time_s"] for h in hist], [h["accuracy"] for h in hist], "-", color=color)
        evals = [h for h in r.get("eval_history") or [] if h.get(metric) is not None]
        if evals:
            ys = [h[metric] for h in evals]
            ax_b.plot([h["sent_bytes"] / 2 ** 20 for h in evals], ys, "o--", color=color,
                      label=f"{label} ({_metric_label(metric)})")
            ax_t.plot([h["time_s"] for h in evals], ys, "o--", color=color)
        elif r.get("eval") and r["metrics"].get(metric) is not None and hist:
            final = r["metrics"][metric]
            ax_b.plot([hist[-1]["sent_bytes"] / 2 ** 20], [final], "*", color=color,
                      markersize=12, label=f"{label} ({_metric_label(metric)})")
            ax_t.plot([hist[-1]["time_s"]], [final], "*", color=color, markersize=12)
    ax_b.set_xlabel("data sent per replica, cumulative (MiB)")
    ax_t.set_xlabel("training time, timed steps (s; warm-up and evaluation excluded)")
    for ax in (ax_b, ax_t):
        ax.set_ylabel("accuracy (fraction; train: solid, test: dashed)")
        ax.grid(True, alpha=0.3)
    ax_b.legend(fontsize=7, loc="lower right")
    if title is None:
        models = sorted({r["config"]["model"] for _, r in runs})
        data = sorted({r.get("data_source", "?").split(":")[0] for _, r in runs})
        title = (f"{', '.join(models)} on {', '.join(data)}: accuracy against data sent "
                 "and training time")
    fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, plt, out)


# ---------------------------------------------------------------------------
# Comparisons (--compare)

def run_outcome(results):
    """One line of a finished run: test metric, bytes, median step time."""
    m = results["metrics"]
    metric = _metric(results)
    support = ("" if m.get("support_mean") is None else
               f", support |U|/k {m['support_mean']:.3f} (min {_fmt(m.get('support_min'), '.3f')})")
    return (f"{_metric_label(metric)} {_fmt(m.get(metric), '.4f')}, "
            f"{_fmt(m['sent_bytes_per_step'], ',.0f')} B/step per replica, "
            f"median step {_fmt(m.get('step_time_median_ms'), ',.1f')} ms{support}")


def _baseline(runs, baseline=None):
    names = [n for n, _ in runs]
    if baseline is not None and baseline not in names:
        raise ValueError(f"baseline {baseline!r} is not one of the runs {names}")
    return baseline or ("uncompressed" if "uncompressed" in names else names[0])


def _ratio(a, b):
    return a / b if a is not None and b else None


def comparison_rows(runs, baseline=None):
    """The numbers of a comparison, one dict per run (in run order).

    Each: preset, exchange, sent_bytes_per_step, dense_bytes_per_step,
    reduction (baseline bytes / the run's), step_time_median_ms,
    step_time_ratio (the run's / the baseline's), final_loss, the metric
    (accuracy or hit_rate), metric_delta_points (100 * (run - baseline)),
    eval_examples, and gap_points: the difference below which two test
    accuracies are not told apart (max of ACCURACY_GAP_POINTS and two
    standard errors of the baseline's accuracy on eval_examples images).
    """
    base_name = _baseline(runs, baseline)
    base = dict(runs)[base_name]["metrics"]
    rows = []
    for name, r in runs:
        m = r["metrics"]
        metric = _metric(r)
        value, ref = m.get(metric), base.get(metric)
        n = (r.get("eval") or {}).get("eval_examples") or (r.get("eval") or {}).get("eval_users")
        gap = ACCURACY_GAP_POINTS
        if ref is not None and n:
            gap = max(gap, 200.0 * math.sqrt(max(ref * (1 - ref), 0.0) / n))
        rows.append({
            "preset": name, "baseline": name == base_name,
            "exchange": r["config"].get("exchange", "deepreduce"),
            "params": r["config"]["params"],
            "sent_bytes_per_step": m["sent_bytes_per_step"],
            "dense_bytes_per_step": m["dense_bytes_per_step"],
            "reduction": _ratio(base["sent_bytes_per_step"], m["sent_bytes_per_step"]),
            "step_time_median_ms": m.get("step_time_median_ms"),
            "step_time_ratio": _ratio(m.get("step_time_median_ms"),
                                      base.get("step_time_median_ms")),
            "final_loss": m["final_loss"], "metric": metric, metric: value,
            "metric_delta_points": (None if value is None or ref is None
                                    else 100.0 * (value - ref)),
            "eval_examples": n, "gap_points": gap,
            "timed_steps": m["timed_steps"],
        })
    return rows


def compare_table(runs, baseline=None, descriptions=None):
    """The table of a comparison (a string): settings, one row per run, notes.

    Args:
      runs: [(preset name, results dict)] in run order, same data and steps.
      baseline: the run that reductions, ratios and differences refer to
        (default 'uncompressed' when present, else the first).
      descriptions: {preset: one-line description} listed below the table.
    """
    rows = comparison_rows(runs, baseline)
    base_name = _baseline(runs, baseline)
    first = runs[0][1]
    c, env = first["config"], first["environment"]
    metric = rows[0]["metric"]
    mlabel = _metric_label(metric)
    header = ("configuration", "sent B/step", "reduction", "median step", "step time",
              "train loss", mlabel, f"vs {base_name}")
    table = [header]
    for row in rows:
        tf_exchange = row["exchange"] == "tf"
        delta = row["metric_delta_points"]
        table.append((
            row["preset"],
            _fmt(row["sent_bytes_per_step"], ",.0f") + ("*" if tf_exchange else ""),
            _fmt(row["reduction"], ",.1f") + "x",
            _fmt(row["step_time_median_ms"], ",.1f") + " ms",
            _fmt(row["step_time_ratio"], ".2f") + "x",
            _fmt(row["final_loss"], ".4f"),
            _fmt(row[metric], ".4f"),
            "-" if row["baseline"] else (_fmt(delta, "+.1f") + " pts"),
        ))
    widths = [max(len(str(t[i])) for t in table) for i in range(len(header))]

    def fmt_row(t):
        cells = [str(v).ljust(w) if i == 0 else str(v).rjust(w)
                 for i, (v, w) in enumerate(zip(t, widths))]
        return " | ".join(cells)

    body = [fmt_row(table[0]), "-+-".join("-" * w for w in widths)]
    body += [fmt_row(t) for t in table[1:]]
    rule = "=" * len(body[0])
    steps = rows[0]["timed_steps"]
    n_eval = rows[0]["eval_examples"]
    lines = [
        rule,
        f"deepreduce-bench comparison: {c['model']} on {first['data_source']}",
        f"{env['replicas']} replicas ({c['variable_update']}, {env['workers']} worker(s)), "
        f"batch {c['batch_size']}/replica, {steps} timed steps (+{c['num_warmup_batches']} "
        f"warm-up), {c['optimizer']} lr {c['init_learning_rate']:g}"
        + (" cosine-decayed to 0" if c.get("lr_schedule") == "cosine" else "")
        + f", seed {c['seed']} "
        "(same initial weights and data order in every run)",
        rule] + body + [rule]
    notes = []
    if any(r["exchange"] == "tf" for r in rows):
        notes.append("* TensorFlow's own all-reduce: the uncompressed gradient bytes per replica, "
                     "computed from their shapes (embedding gradients as values + indices), "
                     "not metered.")
    notes += [
        "sent B/step: per replica, mean over the timed steps; reduction: "
        f"{base_name}'s bytes / the row's.",
        "median step: wall time of one timed step, exchange and codecs included; step time: "
        f"the row's / {base_name}'s (other work on the machine slows every run).",
        f"train loss: {first.get('notes', {}).get('final_loss', 'training loss at the end')}; "
        f"{mlabel}: "
        + (f"the first {n_eval:,} test examples" if metric == "accuracy" and n_eval
           else "the test split") + " after the last step.",
    ]
    for row in rows:
        delta = row["metric_delta_points"]
        if row["baseline"] or delta is None:
            continue
        gap = row["gap_points"]
        if delta < -gap:
            notes.append(f"NOTE: {row['preset']} ends {-delta:.1f} points of {mlabel} below "
                         f"{base_name} after {steps} steps: at this step count, compression "
                         "costs accuracy.")
        elif delta > gap:
            notes.append(f"{row['preset']} ends {delta:.1f} points of {mlabel} above "
                         f"{base_name} after {steps} steps (one seed: repeat with other --seed "
                         "values before reading it as a gain).")
        else:
            notes.append(f"{row['preset']} ends within {gap:.1f} points of {base_name}'s "
                         f"{mlabel}, two standard errors of {n_eval:,} test examples: no loss "
                         f"of accuracy shown at {steps} steps (one seed; training noise comes "
                         "on top: see the plot's curves).")
    for name, r in runs:
        m = r["metrics"]
        if m.get("support_mean") is not None:
            notes.append(f"{name}: support |U| / k {m['support_mean']:.3f} on the mean of the "
                         f"timed steps, {_fmt(m.get('support_min'), '.3f')} at the least (the "
                         "union of the workers' top-(k/W) positions against k)")
    if descriptions:
        notes += [f"{name}: {descriptions[name]}" for name, _ in runs if name in descriptions]
    return "\n".join(lines + notes)


def comparison_record(runs, table, plot=None, baseline=None, runs_meta=None):
    """The combined JSON of a comparison.

    {"kind": "comparison", "baseline", "metric", "data_source",
     "settings": what every run shares, "runs": [comparison_rows() row +
     eval_history + runs_meta entry (paths, args, description)], "table", "plot"}.
    """
    rows = comparison_rows(runs, baseline)
    first = runs[0][1]
    c = first["config"]
    settings = {k: c.get(k) for k in (
        "model", "data_name", "image_size", "batch_size", "global_batch_size",
        "num_warmup_batches", "total_steps", "optimizer", "init_learning_rate", "seed",
        "variable_update", "num_eval_examples")}
    settings.update(timed_steps=first["metrics"]["timed_steps"],
                    replicas=first["environment"]["replicas"],
                    workers=first["environment"]["workers"])
    out_runs = []
    for i, (row, (_, r)) in enumerate(zip(rows, runs)):
        entry = dict(row, eval_history=r.get("eval_history") or [])
        if runs_meta:
            entry.update(runs_meta[i])
        out_runs.append(entry)
    return {"schema_version": SCHEMA_VERSION, "command": "deepreduce-bench",
            "kind": "comparison", "baseline": _baseline(runs, baseline),
            "metric": rows[0]["metric"], "data_source": first["data_source"],
            "settings": settings, "runs": out_runs,
            "table": table, "plot": plot,
            "environment": first["environment"]}


def plot_comparison(runs, out, title=None, baseline=None):
    """Draws the test metric of each run against the cumulative bytes it sent
    (log scale) and against the training step, one line per run.

    Args:
      runs: [(preset name, results dict)] with eval_history.
      out: PNG path.
      title: figure title (default: model, data, replicas, batch, steps).

    Returns:
      the absolute path of the PNG.

    Raises:
      ImportError: matplotlib is missing.
      ValueError: no run has an eval_history.
    """
    if not any(r.get("eval_history") for _, r in runs):
        raise ValueError("no run has test evaluations (eval_history) to plot; run with --eval")
    plt = _pyplot()
    rows = {row["preset"]: row for row in comparison_rows(runs, baseline)}
    first = runs[0][1]
    metric = _metric(first)
    mlabel = _metric_label(metric)
    fig, (ax_b, ax_s) = plt.subplots(1, 2, figsize=(12, 4.8))
    for name, r in runs:
        evals = [h for h in r.get("eval_history") or [] if h.get(metric) is not None]
        if not evals:
            continue
        red = rows[name]["reduction"]
        label = f"{name} ({_fmt(rows[name]['sent_bytes_per_step'], ',.0f')} B/step"
        label += ")" if rows[name]["baseline"] else f", {_fmt(red, ',.1f')}x less)"
        sent = [h for h in evals if h["sent_bytes"] > 0]  # a log axis has no 0
        line, = ax_b.plot([h["sent_bytes"] / 2 ** 20 for h in sent], [h[metric] for h in sent],
                          "o-", label=label)
        ax_s.plot([h["step"] for h in evals], [h[metric] for h in evals], "o-",
                  color=line.get_color(), label=name)
    n = (first.get("eval") or {}).get("eval_examples")
    ylabel = f"{mlabel} (fraction" + (f", {n:,} test examples)" if n else ")")
    ax_b.set_xscale("log")
    ax_b.set_xlabel("data sent per replica, cumulative (MiB, log scale)")
    ax_s.set_xlabel("training step (warm-up included; step 0: before training)")
    for ax in (ax_b, ax_s):
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    ax_b.legend(fontsize=8, loc="lower right")
    ax_s.legend(fontsize=8, loc="lower right")
    if title is None:
        c = first["config"]
        title = (f"{c['model']} on {first['data_source'].split(':')[0]}: {mlabel} against data "
                 f"sent ({first['environment']['replicas']} replicas, batch "
                 f"{c['batch_size']}/replica, {first['metrics']['timed_steps']} steps)")
    fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, plt, out)
