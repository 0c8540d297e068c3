"""Benchmark of the value codecs: size, accuracy and speed per codec.

Values: the top 1 % by magnitude of a Laplace (or normal) vector of 100 K
values, in random order, i.e. what a top-k sparsifier hands to a value codec.
For each codec and K: payload bytes, bits per value, relative L2 error of the
decoded values against the values in decoded order (values[perm]), and the
median encode / decode wall time of a few eager calls (ms).

    DEEPREDUCE_TF_OPS_LIB=... PYTHONPATH=. python benchmarks/value_bench.py [--json]
"""
import argparse
import json
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from deepreduce_tf.ops import value  # noqa: E402

CONFIGS = [
    ("polyfit", {"segmentation": "greedy"}),
    ("polyfit", {"segmentation": "geometric"}),
    ("dexp", {}),
    ("qsgd", {"bits": 7, "bucket_size": 512}),
    ("qsgd", {"bits": 4, "bucket_size": 512}),
    ("qsgd", {"bits": 2, "bucket_size": 128}),
    ("fp16", {}),
    ("bf16", {}),
    ("deflate", {"level": 6}),
    ("deflate", {"level": 1}),
]


def top_values(k, dist, seed):
    rng = np.random.default_rng(seed)
    v = rng.laplace(size=100 * k) if dist == "laplace" else rng.normal(size=100 * k)
    idx = np.argpartition(-np.abs(v), k)[:k]
    return rng.permutation(v[idx]).astype(np.float32)


def median_ms(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def bench(codec, params, values, repeats):
    t = tf.constant(values)
    payload, perm = value.encode(codec, t, **params)  # warm-up
    bound = {"max_values": values.size} if codec in value.SORTING_CODECS else {}
    dec = value.decode(codec, payload, **bound)
    enc_ms = median_ms(lambda: value.encode(codec, t, **params).payload.numpy(), repeats)
    dec_ms = median_ms(lambda: value.decode(codec, payload, **bound).numpy(), repeats)
    target = values[perm.numpy()].astype(np.float64)
    err = np.linalg.norm(dec.numpy() - target) / np.linalg.norm(target)
    nbytes = int(payload.shape[0])
    return {"codec": codec, "params": params, "k": int(values.size), "bytes": nbytes,
            "bits_per_value": 8.0 * nbytes / values.size, "rel_l2_error": float(err),
            "encode_ms": enc_ms, "decode_ms": dec_ms}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ap.add_argument("--k", type=int, nargs="+", default=[10000, 250000])
    ap.add_argument("--dist", choices=["laplace", "normal"], default="laplace")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    rows = []
    for k in args.k:
        values = top_values(k, args.dist, seed=k)
        for codec, params in CONFIGS:
            rows.append(bench(codec, params, values, args.repeats))
    if args.json:
        print(json.dumps({"dist": args.dist, "threads": os.cpu_count(), "rows": rows}, indent=1))
        return
    print(f"values: top 1 % by magnitude of {args.dist} samples; {os.cpu_count()} CPU cores; "
          f"median of {args.repeats}")
    print(f"{'codec':<10} {'params':<26} {'K':>7} {'bytes':>9} {'bits/val':>9} "
          f"{'rel.err':>9} {'enc ms':>8} {'dec ms':>8}")
    for r in rows:
        params = ",".join(f"{k}={v}" for k, v in r["params"].items())
        print(f"{r['codec']:<10} {params:<26} {r['k']:>7} {r['bytes']:>9} "
              f"{r['bits_per_value']:>9.3f} {r['rel_l2_error']:>9.2e} "
              f"{r['encode_ms']:>8.2f} {r['decode_ms']:>8.2f}")


if __name__ == "__main__":
    main()
