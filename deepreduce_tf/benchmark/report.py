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
  "environment"  TensorFlow / deepreduce_tf versions, replicas, workers, devices
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
    "train_time_s", "timed_steps")


class ProgressBar:
    """A one-line progress bar on a stream (\\r-redrawn on a terminal).

    On a non-terminal stream (a log file, a CI console) it prints a line at
    every 10 % instead, so logs stay short.
    """

    def __init__(self, total, stream=sys.stderr, width=30, label="train"):
        self.total = max(int(total), 1)
        self.stream = stream
        self.width = width
        self.label = label
        self.start = time.perf_counter()
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self._last_decile = -1

    def update(self, done, **fields):
        """Redraws for `done` steps completed; fields are shown as name=value."""
        if self.stream is None:
            return
        frac = min(done / self.total, 1.0)
        elapsed = time.perf_counter() - self.start
        eta = elapsed / done * (self.total - done) if done else float("nan")
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
    rows = [
        ("model", f"{c['model']} on {results['data_source']}"),
        ("replicas", f"{env['replicas']} ({c['variable_update']}, {env['workers']} worker(s), "
                     f"batch {c['batch_size']}/replica)"),
        ("compression", f"{comp}, deepreduce={mode}" + (f" ({', '.join(codecs)})" if codecs
                                                         else "")),
        ("timed steps", f"{m['timed_steps']} (+{c['num_warmup_batches']} warm-up)"),
        ("throughput", f"{_fmt(m['examples_per_sec'], ',.1f')} examples/s"),
        ("step time", f"{_fmt(m['step_time_ms'], ',.1f')} ms"),
        ("dense bytes/step", f"{_fmt(m['dense_bytes_per_step'], ',.0f')} per replica"),
        ("sent bytes/step", f"{_fmt(m['sent_bytes_per_step'], ',.0f')} per replica"),
        ("reduction", f"{_fmt(m['reduction'], ',.2f')}x"),
        ("compress", f"{_fmt(m['compress_ms'], ',.1f')} ms/step (codec only)"),
        ("decompress", f"{_fmt(m['decompress_ms'], ',.1f')} ms/step "
                       f"({env['replicas']} payloads)"),
        ("final loss", _fmt(m["final_loss"], ".4f")),
        ("train accuracy", _fmt(m["train_accuracy"], ".4f")),
    ]
    if results["model_metric"] == "hit_rate":
        if results["eval"]:
            rows.append(("HR@10 (eval)", _fmt(m["hit_rate"], ".4f")))
            rows.append(("NDCG@10 (eval)", _fmt(m["ndcg"], ".4f")))
        else:
            rows.append(("HR@10 (eval)", "n/a (add --eval)"))
    else:
        rows.append(("accuracy (eval)", _fmt(m["accuracy"], ".4f") if results["eval"]
                     else "n/a (add --eval)"))
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


def plot_runs(paths, out, title=None):
    """Draws accuracy against bytes sent and against time for several runs.

    Each run is a curve of its training accuracy (history points; per-replica
    cumulative bytes), and, when it was evaluated, a marker at its final
    evaluation accuracy / hit rate.

    Args:
      paths: results JSON files.
      out: PNG path.
      title: figure title (default: none).

    Returns:
      out.

    Raises:
      ImportError: matplotlib is missing (the message says how to install it).
      ValueError: a file is not a results file, or no file was given.
    """
    if not paths:
        raise ValueError("no results files to plot")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError("plotting needs matplotlib: pip install 'deepreduce_tf[plot]' "
                          "(matplotlib==3.11.2)") from e
    runs = [(p, load_results(p)) for p in paths]
    fig, (ax_b, ax_t) = plt.subplots(1, 2, figsize=(12, 4.5))
    for path, r in runs:
        hist = r["history"]
        label = run_label(r)
        xs_b = [h["sent_bytes"] / 2 ** 20 for h in hist]
        xs_t = [h["time_s"] for h in hist]
        ys = [h["accuracy"] for h in hist]
        line, = ax_b.plot(xs_b, ys, ".-", label=label)
        ax_t.plot(xs_t, ys, ".-", color=line.get_color(), label=label)
        metric = r.get("model_metric", "accuracy")
        final = r["metrics"].get(metric)
        if r.get("eval") and final is not None and hist:
            ax_b.plot([xs_b[-1]], [final], "*", color=line.get_color(), markersize=12)
            ax_t.plot([xs_t[-1]], [final], "*", color=line.get_color(), markersize=12)
    ax_b.set_xlabel("MiB sent per replica (cumulative)")
    ax_t.set_xlabel("training time (s, timed steps; warm-up excluded)")
    for ax in (ax_b, ax_t):
        ax.set_ylabel("training accuracy (lines), eval accuracy / HR@10 (stars)")
        ax.grid(True, alpha=0.3)
    ax_b.legend(fontsize=8, loc="lower right")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out = os.path.abspath(out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
