"""Benchmark of every index codec, value codec and `both` combination on real
ResNet-20 gradients (benchmarks/make_gradients.py), top-k at 1 % and 0.1 %.

    .venv/bin/python benchmarks/codec_bench.py [--grads build/gradients.npz] [--json out.json]

Each variable's gradient is sparsified on its own (k = max(1, ceil(ratio * n))
per variable, as training compresses) and every codec runs per variable;
the table reports the whole model: sum of bits over variables / sum of K (or
of n). The `flat` layout instead takes one top-k of the whole flattened
gradient (one vector of n = 269,722) and so shows the codecs without the
per-variable headers; `--layout` picks one or both (default both, about 3
minutes on 2 cores). If the .npz is absent, make_gradients runs first (about
2 more minutes).

Rows, per ratio:
  index   an index codec, values sent as raw float32;
  value   a value codec, indices sent as raw int32 (in the value codec's
          order for polyfit/dexp, so no permutation is needed);
  both    an index codec and a value codec.
Bloom rows send false-positive-aware values (REFERENCE 1.1): the sender runs
the receiver's decode and sends the true gradient values at the positions
the receiver will decode, so the error comes from true top-k entries that
were displaced by false positives (and, with p0, from extra positions that
carry their own, small, true values). polyfit and dexp sort the values; with
a set-type index codec (golomb, rle, Bloom) the receiver also needs the
permutation from its sorted positions to the value order, counted as a plain
fixed-width permutation: K * ceil(log2 K) bits per variable (column perm; the
information bound log2(K!) is ~1.4 bits/element lower).

Encode and decode each run as one tf.function over all variables (graph
mode, as in training), median of --repeats calls after a warm-up; top-k
selection and scattering into the dense tensor are excluded. Encode of a
Bloom row includes the sender's own decode (query + select) and the gather
of the values; decode includes query + select.
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

from deepreduce_tf import bloom, index, value  # noqa: E402

import make_gradients  # noqa: E402  (benchmarks/ is first on sys.path)

RATIOS = (0.01, 0.001)
# K, m and h as varints: what a Bloom payload needs besides the filter bits.
BLOOM_HEADER_BYTES = 8

# (mode, index spec, value spec). Index specs: ("int32",) raw 4 bytes each;
# ("set", codec); ("bloom", policy, fpr). Value specs: ("fp32",) raw 4 bytes
# each; (codec, params).
FP32 = ("fp32",)
QSGD7 = ("qsgd", {"bits": 7, "bucket_size": 512})
QSGD4 = ("qsgd", {"bits": 4, "bucket_size": 512})
POLYFIT = ("polyfit", {})
DEXP = ("dexp", {})
FP16 = ("fp16", {})
BF16 = ("bf16", {})


def default_rows():
    rows = []
    for codec in ("int32", "bitmap", "rle", "golomb"):
        rows.append(("index", ("set", codec), FP32))
    for fpr in (0.01, 0.001):
        for policy in bloom.POLICIES:
            rows.append(("index", ("bloom", policy, fpr), FP32))
    for v in (FP32, FP16, BF16, QSGD7, QSGD4, ("deflate", {}), POLYFIT, DEXP):
        rows.append(("value", ("int32",), v))
    for v in (FP16, BF16, QSGD7, QSGD4, POLYFIT, DEXP):
        rows.append(("both", ("set", "golomb"), v))
    rows += [
        ("both", ("set", "rle"), QSGD7),
        ("both", ("bloom", "conflict_sets", 0.001), FP16),
        ("both", ("bloom", "conflict_sets", 0.001), QSGD7),
        ("both", ("bloom", "conflict_sets", 0.01), QSGD4),
        ("both", ("bloom", "p0", 0.01), FP16),
        ("both", ("bloom", "p0", 0.001), QSGD7),
        ("both", ("bloom", "conflict_sets", 0.001), POLYFIT),
        ("both", ("bloom", "p0", 0.001), POLYFIT),
    ]
    return rows


def index_label(spec):
    if spec[0] == "int32":
        return "int32"
    if spec[0] == "set":
        return spec[1]
    return f"bloom {spec[1]} fpr={spec[2]:g}"


def value_label(spec):
    if spec[0] == "fp32":
        return "fp32"
    codec, params = spec
    if codec == "qsgd":
        return f"qsgd b={params['bits']}"
    return codec


def log2_binomial(n, k):
    return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)) / math.log(2)


def sparsify(grads, ratio, layout):
    """[(name, dense flat float32, sorted top-k indices int64)] per part."""
    if layout == "flat":
        grads = {"<all>": np.concatenate([g.ravel() for g in grads.values()])}
    parts = []
    for name, g in grads.items():
        flat = np.ascontiguousarray(g.ravel(), dtype=np.float32)
        k = max(1, math.ceil(ratio * flat.size))
        idx = np.sort(np.argpartition(np.abs(flat), flat.size - k)[flat.size - k:])
        parts.append((name, flat, idx.astype(np.int64)))
    return parts


class Row:
    """Builds the encode and decode tf.functions of one codec combination."""

    def __init__(self, mode, index_spec, value_spec, parts, seed=0):
        self.mode, self.ispec, self.vspec = mode, index_spec, value_spec
        self.parts = parts
        self.seed = seed
        self.sorting = value_spec[0] in value.SORTING_CODECS
        self.label_index = index_label(index_spec)
        if self.sorting and index_spec[0] == "int32":
            self.label_index += " (value order)"
        self.label_value = value_label(value_spec)
        self.bloom_sizes = []
        if index_spec[0] == "bloom":
            self.bloom_sizes = [bloom.filter_size(len(idx), index_spec[2])
                                for _, _, idx in parts]

    # --- sender -------------------------------------------------------------
    def _encode_one(self, i, g, idx):
        n = self.parts[i][1].size
        k = self.parts[i][2].size
        kind = self.ispec[0]
        if kind == "bloom":
            m, h = self.bloom_sizes[i]
            f = bloom.insert(idx, n, num_bits=m, num_hashes=h)
            pos = bloom.decode(f, n, k, policy=self.ispec[1])  # what the receiver gets
            ipayload = f.bits
        elif kind == "set":
            ipayload, pos = index.encode(self.ispec[1], idx, n), idx
        else:
            ipayload, pos = None, idx
        vals = tf.gather(g, pos)
        if self.vspec[0] == "fp32":
            vpayload, perm = tf.reshape(tf.bitcast(vals, tf.uint8), [-1]), None
        else:
            params = dict(self.vspec[1])
            if self.vspec[0] == "qsgd":
                params["seed"] = self.seed + i
            vpayload, perm = value.encode(self.vspec[0], vals, **params)
            if not self.sorting:
                perm = None
        if kind == "int32":
            ordered = pos if perm is None else tf.gather(pos, perm)
            ipayload = tf.reshape(tf.bitcast(tf.cast(ordered, tf.int32), tf.uint8), [-1])
            perm = None  # the order travels with the indices
        return ipayload, vpayload, perm, pos

    def encoder(self):
        @tf.function(autograph=False)
        def encode(gs, idxs):
            return [self._encode_one(i, g, idx) for i, (g, idx) in enumerate(zip(gs, idxs))]
        return encode

    # --- receiver -----------------------------------------------------------
    def _decode_one(self, i, ipayload, vpayload, perm):
        n = self.parts[i][1].size
        k = self.parts[i][2].size
        kind = self.ispec[0]
        if kind == "bloom":
            m, h = self.bloom_sizes[i]
            pos = bloom.decode(bloom.BloomFilter(ipayload, m, h), n, k, policy=self.ispec[1])
        elif kind == "set":
            pos = index.decode(self.ispec[1], ipayload)
        else:
            pos = tf.cast(tf.bitcast(tf.reshape(ipayload, [-1, 4]), tf.int32), tf.int64)
        if self.vspec[0] == "fp32":
            vals = tf.bitcast(tf.reshape(vpayload, [-1, 4]), tf.float32)
        else:
            bound = {"max_values": n} if self.vspec[0] in value.SORTING_CODECS else {}
            vals = value.decode(self.vspec[0], vpayload, **bound)
        if perm is not None:
            pos = tf.gather(pos, perm)
        return pos, vals

    def decoder(self):
        @tf.function(autograph=False)
        def decode(ipayloads, vpayloads, perms):
            return [self._decode_one(i, a, b, c)
                    for i, (a, b, c) in enumerate(zip(ipayloads, vpayloads, perms))]
        return decode


def median_s(fn, repeats):
    fn()  # warm-up: tracing, kernel instantiation
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(row, parts, repeats):
    gs = [tf.constant(g) for _, g, _ in parts]
    idxs = [tf.constant(idx) for _, _, idx in parts]
    encode, decode = row.encoder(), row.decoder()
    enc = encode(gs, idxs)
    ipay = [e[0] for e in enc]
    vpay = [e[1] for e in enc]
    perms = [e[2] for e in enc]
    dec = decode(ipay, vpay, perms)

    n_total = sum(g.size for _, g, _ in parts)
    k_total = sum(idx.size for _, _, idx in parts)
    index_bits = value_bits = perm_bits = 0
    values_sent = 0
    err2 = ref2 = 0.0
    for i, ((name, g, idx), e, (pos, vals)) in enumerate(zip(parts, enc, dec)):
        pos, vals = pos.numpy(), vals.numpy()
        sender_pos = e[3].numpy()
        if row.ispec[0] != "bloom" and not np.array_equal(np.sort(pos), idx):
            raise AssertionError(f"{row.label_index}: index set of {name} not recovered")
        if not np.array_equal(np.sort(pos), np.sort(sender_pos)):
            raise AssertionError(f"{row.label_index}: receiver and sender disagree on {name}")
        if len(np.unique(pos)) != len(pos) or len(vals) != len(pos):
            raise AssertionError(f"{row.label_index}/{row.label_value}: bad decode of {name}")
        index_bits += 8 * int(e[0].shape[0])
        if row.ispec[0] == "bloom":
            index_bits += 8 * BLOOM_HEADER_BYTES
        value_bits += 8 * int(e[1].shape[0])
        if e[2] is not None and len(pos) > 1:
            perm_bits += len(pos) * math.ceil(math.log2(len(pos)))
        values_sent += len(vals)
        out = np.zeros(g.size, np.float32)
        out[pos] = vals
        ref = np.zeros(g.size, np.float32)
        ref[idx] = g[idx]
        err2 += float(np.sum((out.astype(np.float64) - ref) ** 2))
        ref2 += float(np.sum(ref.astype(np.float64) ** 2))
    enc_s = median_s(lambda: encode(gs, idxs), repeats)
    dec_s = median_s(lambda: decode(ipay, vpay, perms), repeats)
    total_bits = index_bits + perm_bits + value_bits
    bound = sum(log2_binomial(g.size, idx.size) for _, g, idx in parts)
    return {
        "mode": row.mode, "index": row.label_index, "value": row.label_value,
        "n": n_total, "k": k_total, "parts": len(parts), "values_sent": values_sent,
        "bits_per_index": index_bits / k_total, "perm_bits_per_element": perm_bits / k_total,
        "bits_per_value": value_bits / k_total, "bits_per_element": total_bits / k_total,
        "fraction_of_dense": total_bits / (32.0 * n_total),
        "rel_l2_error": math.sqrt(err2 / ref2) if ref2 > 0 else 0.0,
        "encode_ms": 1e3 * enc_s, "decode_ms": 1e3 * dec_s,
        "encode_melem_per_s": n_total / enc_s / 1e6, "decode_melem_per_s": n_total / dec_s / 1e6,
        "bound_bits_per_index": bound / k_total,
    }


def run(grads, ratios, layout, repeats, rows=None, log=sys.stderr):
    out = []
    for ratio in ratios:
        parts = sparsify(grads, ratio, layout)
        for mode, ispec, vspec in rows or default_rows():
            row = Row(mode, ispec, vspec, parts)
            t0 = time.perf_counter()
            r = measure(row, parts, repeats)
            r["ratio"] = ratio
            r["layout"] = layout
            out.append(r)
            if log is not None:
                print(f"  {ratio:g} {mode:5} {r['index']:<28} {r['value']:<9} "
                      f"{time.perf_counter() - t0:5.1f} s", file=log)
    return out


def print_table(rows, meta, footer=True):
    title = {"variable": "top-k and codecs per variable (59 variables), whole-model sums",
             "flat": "top-k and codecs on the flattened model gradient (one vector)"}
    print(f"### Layout `{rows[0]['layout']}`: {title[rows[0]['layout']]}")
    print()
    print(f"ResNet-20 gradients, step {meta['step']} of {meta['steps']} "
          f"(data: {meta['data_source']}; test accuracy {meta['test_accuracy']:.3f}); "
          f"n = {rows[0]['n']:,} in {rows[0]['parts']} part(s), layout {rows[0]['layout']}; "
          f"TensorFlow {tf.__version__}, {os.cpu_count()} CPUs")
    print()
    head = ("| top-k | mode | index codec | value codec | bits/idx | perm | bits/val | "
            "bits/elem | frac. dense | rel. L2 err | enc ms | dec ms | enc Me/s | dec Me/s | "
            "bound |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for r in rows:
        print(f"| {r['ratio']:.1%} (K={r['k']:,}) | {r['mode']} | {r['index']} | {r['value']} | "
              f"{r['bits_per_index']:.2f} | {r['perm_bits_per_element']:.2f} | "
              f"{r['bits_per_value']:.2f} | {r['bits_per_element']:.2f} | "
              f"{r['fraction_of_dense']:.5f} | {r['rel_l2_error']:.4f} | "
              f"{r['encode_ms']:.2f} | {r['decode_ms']:.2f} | {r['encode_melem_per_s']:.1f} | "
              f"{r['decode_melem_per_s']:.1f} | {r['bound_bits_per_index']:.2f} |")
    if footer:
        print()
        print(FOOTER)


FOOTER = """\
Columns (whole model: sums over variables):
- bits/idx, perm, bits/val: bits of the index payloads, of the value-order permutation
  (set index codec + polyfit/dexp: K*ceil(log2 K) per variable) and of the value payloads,
  each divided by K, the number of top-k elements; headers included (per-variable headers
  are a real cost: 59 variables, the smallest with K = 1). Bloom: filter bits + 8 header bytes.
- bits/elem = their sum; plain top-k (int32 + fp32) is 64 plus headers. frac. dense = total
  bits / (32 n). p0 sends a value for every positive, so its bits/val exceeds 32 with fp32.
- rel. L2 err = ||decoded - topk|| / ||topk||, topk = the top-k tensor (0 = lossless).
  Bloom rows send the true values at the positions the receiver decodes.
- enc/dec ms: one tf.function over all variables, median; Me/s = dense elements (n) per
  second. Top-k selection excluded; Bloom encode includes the sender's own decode.
- bound = log2 C(n, K) / K summed over variables: the information bound of a uniformly
  random index set. Clustered real sets can be coded below it."""


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--grads", default=make_gradients.DEFAULT_OUT,
                   help="gradients .npz from make_gradients.py (made if absent)")
    p.add_argument("--step", type=int, default=None, help="snapshot step (default: last)")
    p.add_argument("--ratios", default=",".join(str(r) for r in RATIOS))
    p.add_argument("--layout", choices=("variable", "flat", "both"), default="both",
                   help="top-k and codecs per variable, on the flattened model, or both")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", metavar="PATH", nargs="?", const="-", default=None,
                   help="write the rows as JSON to PATH (or stdout with no PATH) "
                        "instead of the table")
    a = p.parse_args(argv)
    if not os.path.exists(a.grads):
        print(f"{a.grads} not found: running make_gradients.py first", file=sys.stderr)
        make_gradients.main(["--out", a.grads])
    grads, meta = make_gradients.load(a.grads, a.step)
    if not meta["data_source"].startswith("fashion-mnist"):
        print(f"WARNING: {a.grads} holds gradients of SYNTHETIC data "
              f"({meta['data_source']}), not Fashion-MNIST", file=sys.stderr)
    layouts = ("variable", "flat") if a.layout == "both" else (a.layout,)
    ratios = [float(r) for r in a.ratios.split(",")]
    rows = [r for layout in layouts for r in run(grads, ratios, layout, a.repeats)]
    for r in rows:
        r.update(step=meta["step"], data_source=meta["data_source"],
                 test_accuracy=meta["test_accuracy"])
    if a.json is not None:
        text = json.dumps(rows, indent=1)
        if a.json == "-":
            print(text)
        else:
            with open(a.json, "w") as f:
                f.write(text + "\n")
            print(f"wrote {len(rows)} rows to {a.json}", file=sys.stderr)
    else:
        for i, layout in enumerate(layouts):
            print_table([r for r in rows if r["layout"] == layout], meta,
                        footer=i == len(layouts) - 1)
            print()


if __name__ == "__main__":
    main()
