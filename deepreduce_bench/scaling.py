"""deepreduce-scaling: will gradient compression pay on my cluster?

    deepreduce-scaling --model=resnet50 --workers=16 --gpus_per_worker=8 --link=25gbit \
        --profile=h100
    deepreduce-scaling --parameters=350000000 --compute_ms=200 --workers=8 --link=10gbit
    deepreduce-scaling --shapes=shapes.json --workers=4 --bandwidth_gbit=1 --latency_us=50
    deepreduce-scaling --measure_profile=my_machine.json [--model=resnet20 --steps=10]
    deepreduce-scaling --validate=benchmarks/results         # the docs' validation table
    deepreduce-scaling --grid --plot=benchmarks/results/scaling_grid.png   # the docs' grid

Prints the predicted step time and time to accuracy of TensorFlow's all-reduce,
the recommended configuration (flat and hierarchical), the sparse all-reduce
(flat and hierarchical), LGC-RAR and PowerSGD, from the cost model
deepreduce_tf.cost and a machine profile, and names the fastest
configuration whose measured accuracy is within --tolerance points (default
0.5) of uncompressed, or says that none beats the uncompressed all-reduce;
faster configurations outside the tolerance, or without a measured accuracy
(unverified), are named apart.
docs/cost.md explains the model. A bad argument is one line on stderr and
exit code 1.
"""
import argparse
import dataclasses
import json
import os
import socket
import statistics
import sys
import threading
import time

from deepreduce_bench.scaling_validation import (  # noqa: F401  (re-exported)
    format_validation, validate, validate_powersgd, validate_sittings)
from deepreduce_tf import cost

PROFILE_DEFAULT = "cpu_2core"
POWERSGD_RANKS = (1, 2, 4)  # docs/powersgd.md: the ranks measured; 4 is the confirmed one
GRID_WORKERS = (2, 4, 8, 16, 32, 64, 128, 256)
GRID_LINKS = ("1gbit", "10gbit", "25gbit", "100gbit")
GRID_MODELS = ("resnet50", "gpt1.3b")


class UsageError(Exception):
    pass


# --------------------------------------------------------------------------
# The answer.

def candidates(model, gpus):
    """(label, config, hierarchical) rows the command compares."""
    rec = model.recommended
    rows = [("TF all-reduce (uncompressed)", "uncompressed", False),
            (f"{rec} flat", rec, False)]
    if model.shapes is not None:
        # With one device per worker hierarchical is the flat exchange (same row).
        rows.append((f"{rec} hierarchical", rec, True))
        rows.append(("max_reduction flat", "max_reduction", False))
        rows.append(("max_reduction hierarchical", "max_reduction", True))
        rows.append(("sparse_allreduce flat", "sparse_allreduce", False))
        rows.append(("sparse_allreduce hierarchical", "sparse_allreduce", True))
        rows.append(("sparse_max flat", "sparse_max", False))
        rows.append(("sparse_max hierarchical", "sparse_max", True))
        rows.append(("lgc_rar", "lgc_rar", False))
        rows += [(f"powersgd rank {r}", f"powersgd_r{r}", False) for r in POWERSGD_RANKS]
    return rows


TOLERANCE = 0.5  # points of accuracy below uncompressed the verdict accepts


def answer(profile, model, workers, gpus, link, compute=None, tolerance=TOLERANCE):
    """Rows of (label, config, Step, steps ratio, its source, speed-ups, the
    measured accuracy) and the verdict text: the fastest configuration whose
    measured accuracy is within `tolerance` points of uncompressed."""
    rows = []
    base = None
    for label, config, hier in candidates(model, gpus):
        try:
            step = cost.predict(profile, model, config, workers, link, gpus=gpus,
                                   hierarchical=hier, compute=compute)
        except cost.ScalingError as e:
            rows.append({"label": label, "config": config, "skipped": str(e)})
            continue
        ratio, source = cost.steps_ratio(model, config)
        # the compressing replicas: one per worker when the devices of a worker sum first
        figure = model.accuracy(config, workers if hier else workers * gpus)
        row = {"label": label, "config": config, "hierarchical": hier, "step": step,
               "steps_ratio": ratio, "steps_source": source,
               "accuracy": None if figure is None else figure["points"],
               "accuracy_note": None if figure is None else figure["note"],
               "accuracy_verdict": None if figure is None else figure["verdict"]}
        if config == "uncompressed":
            base = row
        rows.append(row)
    for row in rows:
        if "step" not in row:
            continue
        row["step_speedup"] = base["step"].total / row["step"].total
        row["tta_speedup"] = (None if row["steps_ratio"] is None
                              else row["step_speedup"] / row["steps_ratio"])
    return rows, verdict(rows, tolerance)


def _apart(rows, tolerance):
    """The sentence on the faster configurations the verdict leaves out:
    measured beyond the tolerance, or without a measured accuracy."""
    parts = []
    beyond = [r for r in rows if r["accuracy"] is not None and r["accuracy"] < -tolerance]
    unverified = [r for r in rows if r["accuracy"] is None]
    unconfirmed = [r for r in rows if r["accuracy"] is not None and r not in beyond]
    if unconfirmed:
        parts.append("not shown to hold (within the tolerance on the mean; docs/benchmarks.md"
                     "#when-a-configuration-holds): " + ", ".join(
                         f"{r['label']} ({r['tta_speedup']:.2f}x, {r['accuracy']:+.2f} pts, "
                         f"{r.get('accuracy_verdict')})" for r in unconfirmed))
    if beyond:
        parts.append("outside the accuracy tolerance: " + ", ".join(
            f"{r['label']} ({r['tta_speedup']:.2f}x, {r['accuracy']:+.2f} pts)" for r in beyond))
    if unverified:
        parts.append("unverified (no accuracy measured): " + ", ".join(
            f"{r['label']} ({r['tta_speedup']:.2f}x)" for r in unverified))
    return (" Faster, but " + "; ".join(parts) + ".") if parts else ""


def verdict(rows, tolerance=TOLERANCE):
    base = rows[0]
    rivals = [r for r in rows[1:] if "step" in r and r["tta_speedup"] is not None]
    within = [r for r in rivals
              if r.get("accuracy") is not None and r["accuracy"] >= -tolerance]
    # A configuration that holds (docs/benchmarks.md) comes first; one only
    # within the tolerance on the mean wins where none that holds is faster
    # than TensorFlow, and is said to be unconfirmed.
    held = [r for r in within if r.get("accuracy_verdict") == "holds"]
    best = max(held, key=lambda r: r["tta_speedup"]) if held else None
    if best is None or best["tta_speedup"] <= 1.0:
        best = max(within, key=lambda r: r["tta_speedup"]) if within else None
    if best is not None and best.get("accuracy_verdict") == "holds":
        within = [r for r in within if r.get("accuracy_verdict") == "holds"] + [
            r for r in within if r.get("accuracy_verdict") != "holds"
            and r["tta_speedup"] <= best["tta_speedup"]]
    bar = best["tta_speedup"] if best is not None else 1.0
    faster = sorted((r for r in rivals if r not in within and r["tta_speedup"] > max(bar, 1.0)),
                    key=lambda r: -r["tta_speedup"])
    apart = _apart([dict(r, accuracy=r.get("accuracy")) for r in faster], tolerance)
    if best is None or best["tta_speedup"] <= 1.0:
        if not rivals:
            return "Nothing to compare: no compressed configuration applies to this model."
        if best is None:
            return (f"No compressed configuration has a measured accuracy within {tolerance:g} "
                    f"points of uncompressed here: keep TensorFlow's all-reduce." + apart)
        return (f"Nothing beats TensorFlow's uncompressed all-reduce here within "
                f"{tolerance:g} points of its accuracy: the best, {best['label']}, would "
                f"reach the target {1 / best['tta_speedup']:.2f}x slower (step "
                f"{best['step'].total * 1e3:.1f} ms against {base['step'].total * 1e3:.1f} ms). "
                "Do not compress." + apart)
    how = ("measured steps to target" if best["steps_source"] == "measured"
           else "steps to target assumed equal to uncompressed")
    text = (f"{best['label']} wins: {best['tta_speedup']:.2f}x sooner to the target than "
            f"TensorFlow's all-reduce (step {best['step'].total * 1e3:.1f} ms against "
            f"{base['step'].total * 1e3:.1f} ms, {best['step_speedup']:.2f}x; {how}).")
    if best["step_speedup"] < 1.0:
        text += " Its step is slower; it wins only through fewer steps to the target."
    text += (f" Measured accuracy {best['accuracy']:+.2f} pts against uncompressed "
             f"(tolerance {tolerance:g}; {best.get('accuracy_note') or 'no note'}).")
    if best.get("accuracy_verdict") != "holds":
        text += (" Not shown to hold: no faster configuration that holds exists here; "
                 "confirm it on your model before relying on it.")
    return text + apart


def _ms(seconds):
    return f"{seconds * 1e3:.1f}"


def format_answer(profile, model, workers, gpus, link, rows, text, compute_source):
    out = []
    size = (f"{model.elements:,} parameters" if model.shapes is not None
            else "IndexedSlices; bytes as measured with 2 workers")
    out.append(f"model {model.name} ({size}{'; ' + model.note if model.note else ''})")
    out.append(f"{workers} worker(s) x {gpus} GPU(s); link {link.name}: "
               f"{link.bandwidth / 1e9:g} Gbit/s x {link.efficiency:g}, latency "
               f"{link.latency * 1e6:g} us per message")
    out.append(f"profile {profile.name} ({profile.device}); compute per step "
               f"{_ms(rows[0]['step'].compute)} ms ({compute_source})")
    head = ("configuration", "step ms", "compute", "codec", "exchange", "local",
            "recv B/worker", "step x", "steps x", "time to acc. x", "accuracy pts")
    table = [head]
    for r in rows:
        if "step" not in r:
            table.append((r["label"], "n/a", "", "", "", "", "", "", "", r["skipped"][:40], ""))
            continue
        s = r["step"]
        steps = ("1.00" if r["config"] == "uncompressed" else
                 "not reached" if r["steps_ratio"] is None else
                 f"{r['steps_ratio']:.2f} ({r['steps_source']})")
        tta = "-" if r["tta_speedup"] is None else f"{r['tta_speedup']:.2f}"
        acc = ("-" if r["config"] == "uncompressed" else "unverified"
               if r.get("accuracy") is None else f"{r['accuracy']:+.2f}")
        table.append((r["label"], _ms(s.total), _ms(s.compute), _ms(s.encode + s.decode),
                      _ms(s.exchange), _ms(s.local), f"{s.bytes_received:,.0f}",
                      f"{r['step_speedup']:.2f}", steps, tta, acc))
    widths = [max(len(str(row[i])) for row in table) for i in range(len(head))]
    for i, row in enumerate(table):
        out.append("  ".join(str(c).ljust(widths[j]) if j == 0 else str(c).rjust(widths[j])
                             for j, c in enumerate(row)))
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    out.append("x = speed-up against TF's all-reduce (> 1: faster); steps x = steps to the "
               "target against uncompressed (measured only for ResNet-20, 2 workers; "
               "elsewhere assumed 1.0); accuracy pts = test accuracy against uncompressed, "
               f"{model.accuracy_source}")
    notes = []
    for r in rows:
        note = r.get("accuracy_note")
        if note and "step" in r and r["config"] not in [c for c, _ in notes]:
            notes.append((r["config"], note))
    if notes:
        out.append("accuracy measured by the project:")
        out += [f"  {config}: {note}" for config, note in notes]
    out.append(text)
    return "\n".join(out)


# --------------------------------------------------------------------------
# The grid of docs/cost.md.

def grid(profile, models=GRID_MODELS, workers=GRID_WORKERS, links=GRID_LINKS, gpus=8):
    """Time-to-accuracy speed-up over TF's all-reduce of every candidate, per
    (model, link, W). Returns a list of dicts."""
    out = []
    for name in models:
        model = cost.get_model(name)
        for link_name in links:
            link = profile.link_for(link_name)
            for w in workers:
                rows, _ = answer(profile, model, w, gpus, link)
                entry = {"model": name, "link": link_name, "workers": w, "gpus": gpus,
                         "tf_ms": rows[0]["step"].total * 1e3}
                for r in rows[1:]:
                    if "step" in r:
                        entry[r["label"]] = r["tta_speedup"]
                out.append(entry)
    return out


def format_grid(entries):
    labels = [k for k in entries[0] if k not in ("model", "link", "workers", "gpus", "tf_ms")]
    lines = []
    for model in dict.fromkeys(e["model"] for e in entries):
        lines.append(f"\n{model}, {entries[0]['gpus']} GPUs per machine (speed-up over TF's "
                     "all-reduce; > 1 = compression pays)\n")
        lines.append("| link | W | TF step ms | " + " | ".join(labels) + " |")
        lines.append("|---|--:|--:|" + "--:|" * len(labels))
        for e in entries:
            if e["model"] != model:
                continue
            cells = []
            for lab in labels:
                v = e.get(lab)
                cells.append("-" if v is None else (f"**{v:.2f}**" if v > 1 else f"{v:.2f}"))
            lines.append(f"| {e['link']} | {e['workers']} | {e['tf_ms']:.0f} | "
                         + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_grid(entries, path, title=None):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(e["model"] for e in entries))
    links = list(dict.fromkeys(e["link"] for e in entries))
    labels = [k for k in entries[0] if k not in ("model", "link", "workers", "gpus", "tf_ms")]
    fig, axes = plt.subplots(len(models), len(links), figsize=(4 * len(links), 3.4 * len(models)),
                             sharex=True, squeeze=False)
    for i, model in enumerate(models):
        for j, link in enumerate(links):
            ax = axes[i][j]
            sel = [e for e in entries if e["model"] == model and e["link"] == link]
            ws = [e["workers"] for e in sel]
            for lab in labels:
                ys = [e.get(lab) for e in sel]
                if all(y is None for y in ys):
                    continue
                ax.plot(ws, [float("nan") if y is None else y for y in ys], marker="o",
                        ms=3, label=lab)
            ax.axhline(1.0, color="k", lw=0.8, ls="--")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{model}, {link}", fontsize=9)
            if j == 0:
                ax.set_ylabel("speed-up over TF all-reduce")
            if i == len(models) - 1:
                ax.set_xlabel("machines W (8 GPUs each)")
    axes[0][0].legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# --------------------------------------------------------------------------
# Measuring a profile on this machine.

def _loopback_latency_and_bandwidth(rounds=200, nbytes=8 << 20):
    """One-way latency (half a TCP ping-pong's round trip) and bandwidth of a
    bulk send over 127.0.0.1: the loopback stands in for a link when no
    cluster is at hand (it measures the software path, not a network)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]

    def serve():
        conn, _ = server.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(rounds):
            conn.sendall(conn.recv(1))
        got = 0
        while got < nbytes:
            chunk = conn.recv(1 << 20)
            if not chunk:
                break
            got += len(chunk)
        conn.sendall(b"k")
        conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    c = socket.create_connection(("127.0.0.1", port))
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rtts = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        c.sendall(b"x")
        c.recv(1)
        rtts.append(time.perf_counter() - t0)
    data = b"\0" * (1 << 20)
    t0 = time.perf_counter()
    sent = 0
    while sent < nbytes:
        c.sendall(data)
        sent += len(data)
    c.recv(1)
    elapsed = time.perf_counter() - t0
    c.close()
    t.join(5)
    server.close()
    return statistics.median(rtts) / 2, sent * 8 / elapsed


def measure_profile(path, model_name="resnet20", steps=10, repeats=5, batch=32, name=None,
                    image_size=32):
    """Measures compute, codec and loopback costs on this machine and writes a
    profile JSON (docs/cost.md#measuring-a-profile)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import warnings

    import numpy as np
    import tensorflow as tf
    import keras

    from deepreduce_bench import models, runner

    if model_name not in ("resnet20", "resnet50"):
        raise UsageError(f"--measure_profile times resnet20 or resnet50, not {model_name!r}")
    keras.utils.set_random_seed(0)
    shape = (image_size, image_size, 3)
    model = models.resnet20(shape, 10) if model_name == "resnet20" else models.resnet50(shape, 10)
    optimizer = keras.optimizers.SGD(0.05, momentum=0.9)
    optimizer.build(model.trainable_variables)
    variables = model.trainable_variables
    rng = np.random.default_rng(0)
    x = tf.constant(rng.standard_normal((batch,) + shape).astype(np.float32))
    y = tf.constant(rng.integers(0, 10, (batch,)).astype(np.int32))

    # The replica step of benchmarks/step_bench.py, one replica, no exchange.
    @tf.function
    def step():
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        grads = tape.gradient(loss, variables)
        optimizer.apply_gradients(zip(grads, variables))
        return loss

    step().numpy()
    times = []
    for _ in range(max(1, steps)):
        t0 = time.perf_counter()
        step().numpy()
        times.append(time.perf_counter() - t0)
    compute_ms = statistics.median(times) * 1e3

    # Codec costs: the model's whole gradient (random normal) in one
    # compress_batch / decompress_batch, as one replica's step does.
    elements = sum(int(np.prod(v.shape)) for v in variables)
    configs = {
        "topk": {"compressor": "topk", "compress_ratio": cost.DENSITY, "memory": "none"},
        "golomb_qsgd": {"compressor": "topk", "compress_ratio": cost.DENSITY, "memory": "none",
                        "deepreduce": "both", "index": "golomb", "value": "qsgd"},
    }
    codecs = {}
    for label, params in configs.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            c_ms, d_ms, payload_bytes = runner.time_codecs(params, variables, 1, repeats)
        codecs[label] = {"encode_ns_per_element": c_ms * 1e6 / elements,
                         "decode_ns_per_element": d_ms * 1e6 / elements,
                         "payload_bytes": payload_bytes,
                         "source": f"compress_batch / decompress_batch of {model_name}'s "
                                   f"{elements:,}-element gradient (random normal), median of "
                                   f"{repeats}: {c_ms:.2f} / {d_ms:.2f} ms"}
    codecs["golomb_qsgd_dgc"] = dict(codecs["golomb_qsgd"],
                                     source="as golomb_qsgd (DGC adds one element-wise pass)")
    codecs["max_reduction"] = dict(codecs["golomb_qsgd"],
                                   source="as golomb_qsgd (one selection per bucket instead "
                                          "of one per variable; fewer positions to code)")
    latency, bandwidth = _loopback_latency_and_bandwidth()
    profile = {
        "name": name or os.path.splitext(os.path.basename(path))[0],
        "device": f"{socket.gethostname()}: {os.cpu_count()} CPU(s), TensorFlow {tf.__version__}",
        "note": "measured by deepreduce-scaling --measure_profile; link figures from the "
                "loopback (127.0.0.1), not a network: give --bandwidth_gbit / --latency_us "
                "of the real link when predicting",
        "compute_ms": {model_name: {"value": compute_ms, "batch_per_replica": batch,
                                    "source": f"median of {steps} plain training steps "
                                              f"(one replica, {image_size}x{image_size} images)"}},
        "codecs": codecs,
        "link": {"wire_overhead": 1.06,
                 "wire_overhead_source": "the project's measurement over TCP (docs/benchmarks.md)",
                 "latency_us": latency * 1e6,
                 "latency_source": "half the median round trip of a 1-byte TCP ping-pong "
                                   "on the loopback",
                 "named": {"loopback": {"gbit": bandwidth / 1e9, "efficiency": 1.0,
                                        "burst_bytes": 0,
                                        "source": "one TCP stream over 127.0.0.1"}}},
        "local_link": {"gbit": bandwidth / 1e9, "latency_us": latency * 1e6,
                       "source": "the loopback, standing in for the devices' local link"},
        "overlap": {"value": 0.0, "source": "assumed: exchange after the backward pass"},
        "compute_per_parameter_ns": {"value": compute_ms * 1e6 / elements,
                                     "source": f"{model_name}'s compute / its parameters"},
    }
    cost.Profile.from_dict(profile, where=path)  # what we write must load
    with open(path, "w") as f:
        json.dump(profile, f, indent=2)
        f.write("\n")
    return profile


# --------------------------------------------------------------------------
# Command line.

def _parser():
    p = argparse.ArgumentParser(prog="deepreduce-scaling", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None,
                   help=f"one of {', '.join(sorted(cost.MODELS))}")
    p.add_argument("--parameters", type=float, help="a parameter count instead of --model")
    p.add_argument("--shapes", help="JSON file: a list of variable shapes instead of --model")
    p.add_argument("--workers", type=int, default=2, help="machines W (>= 1)")
    p.add_argument("--gpus_per_worker", type=int, default=1, help="local devices G per machine")
    p.add_argument("--link", help="a named link of the profile or a rate: 1gbit, 10gbit, 100mbit")
    p.add_argument("--bandwidth_gbit", type=float, help="link bandwidth instead of --link")
    p.add_argument("--latency_us", type=float, help="per-message latency (default: the profile's)")
    p.add_argument("--profile", default=PROFILE_DEFAULT,
                   help="a profile JSON or a packaged one (cpu_2core, h100)")
    p.add_argument("--compute_ms", type=float, help="compute per step, overriding the profile")
    p.add_argument("--tolerance", type=float, default=TOLERANCE,
                   help="points of test accuracy below uncompressed a configuration may lose "
                        "and still win (measured figures only; default %(default)s)")
    p.add_argument("--overlap", type=float,
                   help="fraction of the compute under which TF's dense all-reduce hides "
                        "(0..1; default: the profile's)")
    p.add_argument("--measure_profile", metavar="OUT.json",
                   help="measure this machine, write a profile")
    p.add_argument("--steps", type=int, default=10, help="--measure_profile: timed steps")
    p.add_argument("--repeats", type=int, default=5, help="--measure_profile: codec repeats")
    p.add_argument("--batch_size", type=int, default=32, help="--measure_profile: batch")
    p.add_argument("--image_size", type=int, default=32, help="--measure_profile: image side")
    p.add_argument("--validate", metavar="RESULTS_DIR",
                   help="predicted vs measured step of the shaped-link tables")
    p.add_argument("--grid", action="store_true",
                   help="the docs' grid: ResNet-50 and GPT 1.3 B, W = 2..256, 1-100 Gbit/s")
    p.add_argument("--plot", help="--grid: write the plot here (PNG)")
    p.add_argument("--json", help="also write the rows as JSON")
    return p


def _model(args):
    given = [a for a in (args.model, args.parameters, args.shapes) if a is not None]
    if len(given) > 1:
        raise UsageError("give one of --model, --parameters, --shapes")
    if args.shapes:
        try:
            with open(args.shapes) as f:
                shapes = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise UsageError(f"--shapes {args.shapes}: {e}") from None
        return cost.model_from_shapes(os.path.basename(args.shapes), shapes)
    if args.parameters is not None:
        return cost.model_from_parameters(f"{int(args.parameters):,}-parameter model",
                                             args.parameters)
    return cost.get_model(args.model or "resnet20")


def _link(args, profile):
    if args.bandwidth_gbit is not None:
        if args.link:
            raise UsageError("give --link or --bandwidth_gbit, not both")
        if not args.bandwidth_gbit > 0:
            raise UsageError(f"--bandwidth_gbit must be > 0, got {args.bandwidth_gbit}")
        latency = (args.latency_us if args.latency_us is not None
                   else float(profile.link["latency_us"]))
        return cost.Link(f"{args.bandwidth_gbit:g} Gbit/s", args.bandwidth_gbit * 1e9,
                            latency * 1e-6)
    if not args.link:
        raise UsageError("give --link (e.g. 10gbit) or --bandwidth_gbit")
    return profile.link_for(args.link, args.latency_us)


def run(argv=None):
    args = _parser().parse_args(argv)
    if args.latency_us is not None and args.latency_us < 0:
        raise UsageError(f"--latency_us must be >= 0, got {args.latency_us}")
    if args.measure_profile:
        prof = measure_profile(args.measure_profile, args.model or "resnet20", args.steps,
                               args.repeats, args.batch_size, image_size=args.image_size)
        print(f"wrote {args.measure_profile}: compute "
              f"{list(prof['compute_ms'].values())[0]['value']:.1f} ms, golomb_qsgd encode "
              f"{prof['codecs']['golomb_qsgd']['encode_ns_per_element']:.2f} ns/element, "
              f"loopback latency {prof['link']['latency_us']:.1f} us")
        return 0
    profile = cost.load_profile(args.profile)
    if args.overlap is not None:
        if not 0 <= args.overlap <= 1:
            raise UsageError(f"--overlap must be in [0, 1], got {args.overlap}")
        profile = dataclasses.replace(profile, overlap=args.overlap)
    if args.validate:
        rows = validate(profile, args.validate)
        print(format_validation(rows))
        extra = validate_powersgd(profile, args.validate)
        print("\nPowerSGD rank 4, ResNet-20 (another sitting: compute from its "
              "uncompressed rows)\n")
        print(format_validation(extra))
        rows += extra
        sittings = validate_sittings(profile, args.validate)
        if sittings:
            print("\nLater sittings (2026-12-06: the sparse all-reduce; NCF at 1 Gbit/s again), "
                  "each with its own compute and TF fixed cost, fitted on its unshaped rows\n")
            print(format_validation(sittings))
            rows += sittings
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
        return 0
    if args.grid:
        entries = grid(profile)
        print(format_grid(entries))
        if args.plot:
            plot_grid(entries, args.plot,
                      f"deepreduce-scaling --grid, profile {profile.name} ({profile.device}), "
                      f"overlap {profile.overlap:g}: predicted time-to-accuracy speed-up "
                      "(steps to target assumed equal)")
            print(f"\nplot: {args.plot}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(entries, f, indent=1)
        return 0
    if args.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    if args.gpus_per_worker < 1:
        raise UsageError(f"--gpus_per_worker must be >= 1, got {args.gpus_per_worker}")
    if args.compute_ms is not None and not args.compute_ms > 0:
        raise UsageError(f"--compute_ms must be > 0, got {args.compute_ms}")
    model = _model(args)
    link = _link(args, profile)
    compute = None if args.compute_ms is None else args.compute_ms / 1e3
    source = "--compute_ms" if compute is not None else profile.compute_s(model)[1]
    if not args.tolerance >= 0:
        raise UsageError(f"--tolerance must be >= 0 (points), got {args.tolerance}")
    rows, text = answer(profile, model, args.workers, args.gpus_per_worker, link, compute,
                        tolerance=args.tolerance)
    print(format_answer(profile, model, args.workers, args.gpus_per_worker, link, rows, text,
                        source))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{k: (v.__dict__ if k == "step" else v) for k, v in r.items()}
                       for r in rows], f, indent=1)
    return 0


def main(argv=None):
    try:
        return run(argv)
    except (UsageError, cost.ScalingError) as e:
        print(f"deepreduce-scaling: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
