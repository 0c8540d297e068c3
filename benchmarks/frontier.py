"""The main job's frontier: test accuracy against bytes per step, per seed.

    .venv/bin/python benchmarks/frontier.py \\
        --runs 'b300=/runs/b300_s*/flags/results.json' \\
        --record benchmarks/results/sparse_allreduce_resnet20_600.json \\
        --baseline uncompressed --json benchmarks/results/max_reduction_resnet20_600.json \\
        --plot benchmarks/results/max_reduction_frontier.png

Each --runs LABEL=GLOB names deepreduce-bench results (one run per seed, the
main job's defaults: --compare=... trains 600 steps); --record adds the
entries of earlier result files of the same form as --json writes (a list of
{config, seed, final, sent_bytes_per_step, dense_bytes_per_step}). Prints one
markdown row per configuration: bytes per step as the accounting counts them
(warm-up included), the reduction against TensorFlow's dense all-reduce, the
accuracy of every seed, the mean, and against --baseline on the same seeds the
mean difference with its standard error (the sample standard deviation of the
per-seed differences over the square root of their number; two or more
seeds), the worst seed's and the spread (max - min of the differences); then
the plot, one point per seed.
"""
import argparse
import glob
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from deepreduce_bench import claims  # noqa: E402 (the protocol's paired statistics)


def load_runs(spec):
    label, _, pattern = spec.partition("=")
    if not label or not pattern:
        raise SystemExit(f"--runs takes LABEL=GLOB, got {spec!r}")
    out = []
    for path in sorted(glob.glob(pattern)):
        with open(path) as f:
            r = json.load(f)
        out.append({"config": label, "seed": int(r["config"]["seed"]),
                    "final": float(r["metrics"]["accuracy"]),
                    "sent_bytes_per_step": float(r["metrics"]["sent_bytes_per_step"]),
                    "dense_bytes_per_step": float(r["metrics"]["dense_bytes_per_step"]),
                    "params": r["config"].get("params"), "results": path})
    if not out:
        raise SystemExit(f"--runs {spec!r}: no file matches")
    return out


def rows(entries, baseline, seeds=None):
    by = {}
    for e in entries:
        if seeds is None or e["seed"] in seeds:
            by.setdefault(e["config"], {})[e["seed"]] = e
    base = by.get(baseline, {})
    table = []
    for config, runs in by.items():
        ss = sorted(runs)
        acc = [runs[s]["final"] for s in ss]
        sent = float(np.mean([runs[s]["sent_bytes_per_step"] for s in ss]))
        dense = runs[ss[0]]["dense_bytes_per_step"]
        # claims.paired_summary in points; this table's deltas are fractions.
        p = claims.paired_summary({s: runs[s]["final"] for s in ss},
                                  {s: e["final"] for s, e in base.items()})
        mine = config != baseline and p["n"] > 0

        def frac(v, ok=mine):
            return v / 100.0 if ok and v is not None else None

        table.append({"config": config, "seeds": ss, "accuracy": acc, "mean": float(np.mean(acc)),
                      "sent_bytes_per_step": sent, "reduction": dense / sent,
                      "delta_mean": frac(p["mean"]), "delta_se": frac(p["se"]),
                      "delta_worst": frac(p["worst"]),
                      "delta_spread": frac(max(p["deltas"]) - min(p["deltas"]) if mine else None),
                      "within_0.3": p["within"]["0.3"] if config != baseline else None})
    return sorted(table, key=lambda r: r["sent_bytes_per_step"], reverse=True)


def markdown(table):
    lines = ["| configuration | B/step | reduction | accuracy per seed | mean | Δ mean ± SE | worst Δ "
             "| spread of Δ | seeds within 0.3 |", "|---|--:|--:|---|--:|--:|--:|--:|--:|"]

    def pts(v, sign=True):
        return "–" if v is None else (f"{100 * v:+.2f}" if sign else f"{100 * v:.2f}")

    for r in table:
        per_seed = ", ".join(f"{a:.4f} (s{s})" for s, a in zip(r["seeds"], r["accuracy"]))
        within = "–" if r["within_0.3"] is None else f"{r['within_0.3']} of {len(r['seeds'])}"
        lines.append(f"| {r['config']} | {r['sent_bytes_per_step']:,.0f} | "
                     f"{r['reduction']:.1f}× | {per_seed} | {r['mean']:.4f} | "
                     f"{pts(r['delta_mean'])}"
                     f"{'' if r.get('delta_se') is None else ' ± ' + pts(r['delta_se'], False)} | "
                     f"{pts(r['delta_worst'])} | "
                     f"{pts(r['delta_spread'], sign=False)} | {within} |")
    return "\n".join(lines)


def plot(entries, baseline, path, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    configs = list(dict.fromkeys(e["config"] for e in entries))
    for i, c in enumerate(configs):
        es = [e for e in entries if e["config"] == c]
        ax.scatter([e["sent_bytes_per_step"] for e in es], [e["final"] for e in es],
                   label=c, marker="os^vDP*Xh<>"[i % 11], alpha=0.8)
    base = [e["final"] for e in entries if e["config"] == baseline]
    if base:
        ax.axhline(np.mean(base), color="grey", lw=0.8, ls="--", label=f"{baseline} (mean)")
        ax.axhspan(np.mean(base) - 0.003, np.mean(base) + 0.003, color="grey", alpha=0.12,
                   label="± 0.3 points")
    ax.set_xscale("log")
    ax.set_xlabel("bytes sent per step and worker (warm-up included; log scale)")
    ax.set_ylabel("test accuracy after 600 steps")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", action="append", default=[], help="LABEL=GLOB of results.json")
    p.add_argument("--record", action="append", default=[],
                   help="a JSON list of entries (earlier runs)")
    p.add_argument("--configs", default="", help="keep only these configurations (comma list)")
    p.add_argument("--baseline", default="uncompressed")
    p.add_argument("--seeds", default="", help="only these seeds (comma list)")
    p.add_argument("--json", help="write every entry here")
    p.add_argument("--plot", help="PNG: accuracy against bytes per step, one point per seed")
    p.add_argument("--title", default="ResNet-20 / Fashion-MNIST, 2 workers, 600 steps")
    args = p.parse_args(argv)
    entries = []
    for path in args.record:
        with open(path) as f:
            entries += json.load(f)
    for spec in args.runs:
        entries += load_runs(spec)
    if args.configs:
        keep = args.configs.split(",")
        entries = [e for e in entries if e["config"] in keep]
    seeds = {int(s) for s in args.seeds.split(",")} if args.seeds else None
    if seeds is not None:
        entries = [e for e in entries if e["seed"] in seeds]
    print(markdown(rows(entries, args.baseline)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(entries, f, indent=1)
    if args.plot:
        plot(entries, args.baseline, args.plot, args.title)
    return 0


if __name__ == "__main__":
    sys.exit(main())
