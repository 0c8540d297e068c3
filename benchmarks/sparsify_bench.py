"""Sparsifiers: DeepReduce top-k vs tf.math.top_k(tf.abs(x)), and threshold
and random-k, on CPU.

For every size n and density K/n, x is a float32 tensor of n gradient-like
values (normal, with per-element scales spread over three decades, seeded).
In the same process and interleaved run by run, it times

  ours        deepreduce_tf.sparsify.top_k(x, K)   (indices ascending + values)
  tf.top_k    tf.math.top_k(tf.abs(x), K)          (sorted by magnitude; what
              GRACE-style TF top-k compressors call)
  threshold   sparsify.threshold(x, t) with t = the K-th largest |x|
  random-k    sparsify.random_k(x, K, seed)

and checks that ours selects the same positions as tf.math.top_k (x has no
ties). Times are medians of --repeats runs after one warm-up, wall clock of
an eager call including fetching the indices. Prints a markdown table and,
with --json, the rows as JSON.

    python benchmarks/sparsify_bench.py                       # 1e6 and 25e6, 1 % and 0.1 %
    python benchmarks/sparsify_bench.py --sizes 1e6 --json -
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

COLUMNS = [
    ("n", "n", "{:,}"),
    ("k", "K", "{:,}"),
    ("density", "K/n", "{:.1%}"),
    ("ours_ms", "ours top-k ms", "{:.1f}"),
    ("tf_top_k_ms", "tf.math.top_k ms", "{:.1f}"),
    ("speedup", "speed-up", "{:.1f}x"),
    ("threshold_ms", "threshold ms", "{:.1f}"),
    ("random_k_ms", "random-k ms", "{:.1f}"),
]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="1e6,25e6", help="comma-separated n values")
    p.add_argument("--densities", default="0.01,0.001", help="comma-separated K/n")
    p.add_argument("--repeats", type=int, default=7, help="timed runs per op (median)")
    p.add_argument("--threads", type=int, default=2,
                   help="TensorFlow intra-op threads (0 = TensorFlow's default)")
    p.add_argument("--seed", type=int, default=0, help="seed of the input data")
    p.add_argument("--json", metavar="PATH", help="also write the rows as JSON ('-': stdout)")
    return p.parse_args(argv)


def timed_interleaved(fns, repeats):
    """Median wall time (ms) of each fn, running them in turn each round."""
    for fn in fns.values():
        fn()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - t0) * 1e3)
    return {name: statistics.median(ts) for name, ts in times.items()}


def gradient_like(n, seed):
    rng = np.random.default_rng(seed)
    scale = 10.0 ** rng.uniform(-3.0, 0.0, n)
    return (rng.standard_normal(n) * scale).astype(np.float32)


def bench(n, density, args, tf, sparsify):
    k = max(1, int(round(density * n)))
    xn = gradient_like(n, args.seed)
    x = tf.constant(xn)
    t = float(np.sort(np.abs(xn))[n - k])  # the K-th largest |x|
    ours_idx = sparsify.top_k(x, k)[0].numpy()
    tf_idx = np.sort(tf.math.top_k(tf.abs(x), k).indices.numpy())
    if not np.array_equal(ours_idx, tf_idx.astype(np.int64)):
        raise SystemExit(f"n={n} K={k}: top_k disagrees with tf.math.top_k")
    ms = timed_interleaved({
        "ours": lambda: sparsify.top_k(x, k)[0].numpy(),
        "tf": lambda: tf.math.top_k(tf.abs(x), k).indices.numpy(),
        "threshold": lambda: sparsify.threshold(x, t)[0].numpy(),
        "random_k": lambda: sparsify.random_k(x, k, 1)[0].numpy(),
    }, args.repeats)
    return {"n": n, "k": k, "density": density, "ours_ms": ms["ours"],
            "tf_top_k_ms": ms["tf"], "speedup": ms["tf"] / ms["ours"],
            "threshold_ms": ms["threshold"], "random_k_ms": ms["random_k"]}


def format_table(rows):
    head = [h for _, h, _ in COLUMNS]
    body = [[fmt.format(r[key]) for key, _, fmt in COLUMNS] for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    line = lambda vals: "| " + " | ".join(v.rjust(w) for v, w in zip(vals, widths)) + " |"
    out = [line(head), "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|"]
    return "\n".join(out + [line(b) for b in body])


def main(argv=None):
    args = parse_args(argv)
    import tensorflow as tf

    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    from deepreduce_tf import sparsify

    rows = []
    for n in [int(float(s)) for s in args.sizes.split(",") if s.strip()]:
        for d in [float(s) for s in args.densities.split(",") if s.strip()]:
            rows.append(bench(n, d, args, tf, sparsify))
            print(f"  done n={n:,} K/n={d:g}", file=sys.stderr)
    print(format_table(rows))
    print(f"\nTensorFlow {tf.__version__}, intra-op threads "
          f"{args.threads or 'default'}, {os.cpu_count()} CPUs, float32, median of "
          f"{args.repeats} interleaved runs.")
    if args.json:
        text = json.dumps(rows, indent=1)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")


if __name__ == "__main__":
    main()
