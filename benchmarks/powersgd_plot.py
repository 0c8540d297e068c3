"""The plot of docs/powersgd.md: ResNet-20 test accuracy of PowerSGD's ranks
against TensorFlow's all-reduce, from the link_bench JSON files.

    .venv/bin/python benchmarks/powersgd_plot.py [--steps 600|1500] \\
        [--results benchmarks/results] [--out benchmarks/results/powersgd_resnet20_STEPS.png]

Left: test accuracy against training steps, mean over the seeds of each file
(the band: min to max). Right: final accuracy of every seed against the
accounted bytes per step (log scale). The files and their labels are
FILES[steps].
"""
import argparse
import json
import os

import numpy as np

FILES = {
    600: (
        ("powersgd_resnet20_600_uncompressed.json", "TF all-reduce (uncompressed)"),
        ("powersgd_resnet20_600_r1.json", "PowerSGD rank 1"),
        ("powersgd_resnet20_600_r2.json", "PowerSGD rank 2"),
        ("powersgd_resnet20_600_r4.json", "PowerSGD rank 4"),
        ("powersgd_resnet20_600_r2_s60.json", "PowerSGD rank 2, start_iter 60"),
        ("powersgd_resnet20_600_r4_s60.json", "PowerSGD rank 4, start_iter 60"),
    ),
    1500: (
        ("powersgd_resnet20_1500_uncompressed.json", "TF all-reduce (uncompressed)"),
        ("powersgd_resnet20_1500_r1.json", "PowerSGD rank 1"),
        ("powersgd_resnet20_1500_r2.json", "PowerSGD rank 2"),
        ("powersgd_resnet20_1500_r4.json", "PowerSGD rank 4"),
        ("powersgd_resnet20_1500_golomb_qsgd_dgc.json", "golomb_qsgd_dgc (all-gather)"),
    ),
}


def load(results, name):
    with open(os.path.join(results, name), encoding="utf-8") as f:
        rows = [r for r in json.load(f) if r.get("link") == "unshaped"]
    if not rows:
        raise ValueError(f"{name}: no unshaped rows")
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600, choices=sorted(FILES))
    parser.add_argument("--results", default="benchmarks/results")
    parser.add_argument("--out", default=None,
                        help="[benchmarks/results/powersgd_resnet20_STEPS.png]")
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = f"benchmarks/results/powersgd_resnet20_{args.steps}.png"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, label in FILES[args.steps]:
        rows = load(args.results, name)
        steps = [s for _, s, _ in rows[0]["curve"]]
        acc = np.array([[a for _, _, a in r["curve"]][:len(steps)] for r in rows])
        line, = left.plot(steps, acc.mean(0), label=f"{label} ({len(rows)} seeds)")
        left.fill_between(steps, acc.min(0), acc.max(0), color=line.get_color(), alpha=0.15)
        nbytes = [r["accounted_bytes_per_step"] for r in rows]
        right.scatter(nbytes, [r["final"] for r in rows], color=line.get_color(), label=label)
    left.set(xlabel="training step", ylabel="test accuracy (2,000 images)", ylim=(0.6, 0.93),
             title=f"ResNet-20, Fashion-MNIST, 2 workers, {args.steps:,} steps")
    left.grid(alpha=0.3)
    left.legend(fontsize=8, loc="lower right")
    right.set(xscale="log", xlabel="accounted bytes per step (per worker)",
              ylabel="final test accuracy", title="final accuracy per seed against bytes")
    right.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
