"""End-to-end benchmark of the compressor framework on a real ResNet-20 step.

    .venv/bin/python benchmarks/compressor_bench.py [--grads build/gradients.npz]
        [--ratio 0.01] [--repeats 5] [--json out.json]

One row per configuration (from_params dicts as users write them): the whole
model's gradient (59 variables, 269,722 float32) is compressed with
compress_batch() into ONE payload, as one step of training sends it, and
decoded with decompress_batch(). Everything runs as tf.functions (graph mode,
as in training), median of --repeats calls after a warm-up; compress includes
the memory update and the sender-side Bloom decode. Columns:

  bytes/step   payload bytes of the whole step (headers, CRCs, dense small
               tensors included);
  x dense      dense bytes / payload bytes;
  x topk       payload bytes of plain top-k (int32 + float32) / payload bytes;
  bits/elem    payload bits per transmitted position (K summed over
               variables; tensors below min_size count their n);
  err vs topk  ||decoded - topk(g)|| / ||topk(g)||: what the codecs add to
               plain top-k's own error (which error feedback carries to later
               steps); Bloom rows lose displaced true entries (p0 instead
               ADDS the true values of its false positives, which counts here
               as a difference but is not an error w.r.t. g), lossy value
               codecs add their quantization/fit error;
  comp/decomp  ms per step.

If the .npz is absent, benchmarks/make_gradients.py runs first (~2-4 min).
"""
import argparse
import json
import os
import statistics
import sys
import time
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import deepreduce_tf as dr  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_gradients  # noqa: E402

CONFIGS = [
    ("dense (compressor none)", {"compressor": "none"}),
    ("top-k", {"compressor": "topk"}),
    ("top-k + bloom p0", {"deepreduce": "index", "index": "bloom", "policy": "p0"}),
    ("top-k + bloom conflict_sets", {"deepreduce": "index", "index": "bloom"}),
    ("top-k + golomb", {"deepreduce": "index", "index": "golomb"}),
    ("top-k + polyfit", {"deepreduce": "value", "value": "polyfit"}),
    ("both: bloom p0 + polyfit", {"deepreduce": "both", "index": "bloom", "policy": "p0",
                                  "value": "polyfit"}),
    ("both: bloom conflict_sets + qsgd 7b", {"deepreduce": "both", "index": "bloom",
                                            "value": "qsgd"}),
    ("both: golomb + polyfit", {"deepreduce": "both", "index": "golomb", "value": "polyfit"}),
    ("both: golomb + qsgd 7b", {"deepreduce": "both", "index": "golomb", "value": "qsgd"}),
    ("both: golomb + qsgd 4b", {"deepreduce": "both", "index": "golomb", "value": "qsgd",
                                "bits": 4}),
    ("both: golomb + fp16", {"deepreduce": "both", "index": "golomb", "value": "fp16"}),
]


def timed(fn, repeats):
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        tf.nest.map_structure(lambda t: t.numpy(), out)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3, out


def run(grads, ratio, repeats):
    names = sorted(grads)
    tensors = [tf.constant(grads[k]) for k in names]
    dense_bytes = sum(4 * g.size for g in grads.values())
    k_total = sum(max(1, int(np.ceil(ratio * g.size))) if g.size >= 1024 else g.size
                  for g in grads.values())
    rows, topk_bytes, topk_out = [], None, None
    for label, params in CONFIGS:
        params = dict(params)
        if params.get("compressor") != "none":
            params.setdefault("compress_ratio", ratio)
        params.setdefault("memory", "none")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            comp = dr.from_params(params)
        state = {}

        @tf.function
        def compress():
            payload, ctxs = comp.compress_batch(tensors, names)
            state["ctxs"] = ctxs
            return payload

        payload = compress()  # trace once so ctxs exist for decompress's trace
        ctxs = state["ctxs"]

        @tf.function
        def decompress(p):
            return comp.decompress_batch(p, ctxs)

        c_ms, payload = timed(compress, repeats)
        d_ms, decoded = timed(lambda: decompress(payload), repeats)
        nbytes = int(payload.shape[0])
        decoded = [d.numpy().astype(np.float64) for d in decoded]
        if label == "top-k":
            topk_bytes, topk_out = nbytes, decoded
        ref = topk_out if topk_out is not None else [grads[k] for k in names]
        err = np.sqrt(sum(float(np.sum((d - r) ** 2)) for d, r in zip(decoded, ref))) / \
            np.sqrt(sum(float(np.sum(r.astype(np.float64) ** 2)) for r in ref))
        rows.append({"config": label, "bytes": nbytes, "x_dense": dense_bytes / nbytes,
                     "x_topk": (topk_bytes / nbytes) if topk_bytes else None,
                     "bits_per_elem": 8 * nbytes / k_total, "rel_err": err,
                     "compress_ms": c_ms, "decompress_ms": d_ms})
    return rows, dense_bytes, k_total


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--grads", default=os.path.join("build", "gradients.npz"))
    p.add_argument("--ratio", type=float, default=0.01)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json")
    args = p.parse_args(argv)
    if not os.path.exists(args.grads):
        snaps, meta = make_gradients.train(log=sys.stderr)
        make_gradients.save(args.grads, snaps, meta)
    grads, meta = make_gradients.load(args.grads)
    rows, dense_bytes, k_total = run(grads, args.ratio, args.repeats)
    print(f"ResNet-20 gradient, step {meta['step']} ({meta['num_params']:,} params, "
          f"{len(grads)} variables), top-k ratio {args.ratio}, K = {k_total:,} positions "
          f"(tensors < 1024 elements dense), dense {dense_bytes:,} bytes; "
          f"median of {args.repeats}, graph mode, {os.cpu_count()} CPUs")
    print()
    print("| configuration | bytes/step | x dense | x topk | bits/elem | err vs topk "
          "| compress ms | decompress ms |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|")
    for r in rows:
        xt = f"{r['x_topk']:.2f}" if r["x_topk"] else "-"
        print(f"| {r['config']} | {r['bytes']:,} | {r['x_dense']:.1f} | {xt} | "
              f"{r['bits_per_elem']:.2f} | {r['rel_err']:.3f} | {r['compress_ms']:.1f} | "
              f"{r['decompress_ms']:.1f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ratio": args.ratio, "dense_bytes": dense_bytes, "k_total": k_total,
                       "rows": rows, "gradients": meta}, f, indent=1)


if __name__ == "__main__":
    main()
