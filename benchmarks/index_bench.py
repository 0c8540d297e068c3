"""Benchmark of the lossless index codecs (deepreduce_tf.index) on uniform
random index sets: bits per index against the information bound
log2 C(n, K) / K, and encode / decode time (median of --repeats eager calls,
after one warm-up call).

    DEEPREDUCE_TF_OPS_LIB=... PYTHONPATH=. python benchmarks/index_bench.py [--json]

Real-gradient (clustered) top-k sets are measured elsewhere; uniform sets are
the worst case for the adaptive golomb codec.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from deepreduce_tf import index  # noqa: E402


def log2_binomial(n, k):
    return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)) / math.log(2)


def median_ms(fn, repeats):
    fn()  # warm-up: kernel instantiation, thread-pool spin-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(times)


def run(sizes, densities, codecs, repeats, seed):
    rng = np.random.default_rng(seed)
    rows = []
    for n in sizes:
        for density in densities:
            idx = np.flatnonzero(rng.random(n) < density).astype(np.int64)
            k = len(idx)
            idx_t = tf.constant(idx)
            bound = log2_binomial(n, k) / k
            for codec in codecs:
                if codec == "bitmap" and n > 10**8:
                    continue
                payload = index.encode(codec, idx_t, n)
                out = index.decode(codec, payload)
                if not np.array_equal(out.numpy(), idx):
                    raise AssertionError(f"{codec} did not round-trip at n={n}, K={k}")
                bits = 8 * int(payload.shape[0]) / k
                rows.append({
                    "codec": codec, "n": n, "density": density, "k": k,
                    "bytes": int(payload.shape[0]), "bits_per_index": bits,
                    "bound_bits_per_index": bound, "ratio": bits / bound,
                    "encode_ms": median_ms(lambda: index.encode(codec, idx_t, n), repeats),
                    "decode_ms": median_ms(lambda: index.decode(codec, payload), repeats),
                })
    return rows


def print_table(rows):
    head = (f"{'codec':<8} {'n':>11} {'density':>8} {'K':>9} {'bits/idx':>9} "
            f"{'bound':>7} {'ratio':>7} {'enc ms':>8} {'dec ms':>8}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['codec']:<8} {r['n']:>11,} {r['density']:>8.3%} {r['k']:>9,} "
              f"{r['bits_per_index']:>9.3f} {r['bound_bits_per_index']:>7.3f} "
              f"{r['ratio']:>7.3f} {r['encode_ms']:>8.2f} {r['decode_ms']:>8.2f}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1000000,25000000",
                   help="comma-separated universe sizes n")
    p.add_argument("--densities", default="0.01,0.001", help="comma-separated K / n")
    p.add_argument("--codecs", default=",".join(index.CODECS))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    a = p.parse_args(argv)
    rows = run([int(float(s)) for s in a.sizes.split(",")],
               [float(d) for d in a.densities.split(",")],
               [index.canonical_codec(c) for c in a.codecs.split(",")], a.repeats, a.seed)
    if a.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
    else:
        print(f"TensorFlow {tf.__version__}, {os.cpu_count()} CPUs, uniform random sets, "
              f"median of {a.repeats}")
        print_table(rows)


if __name__ == "__main__":
    main()
