"""deepreduce-scaling --validate: the cost model's predicted step against the
shaped-link measurements of benchmarks/results (docs/cost.md#validation).

Three sets, each printed as one table: the two time-to-accuracy tables of
docs/benchmarks.md (validate: the profile's own fit), PowerSGD rank 4 of
another sitting (validate_powersgd), and the later sittings, each with its
own compute and TensorFlow fixed cost fitted on its unshaped rows
(validate_sittings). Pure Python: no TensorFlow.
"""
import dataclasses
import json
import os
import statistics

from deepreduce_tf import cost


VALIDATION_FILES = (("resnet20", "link_tta_resnet20.json"), ("ncf", "link_tta_ncf.json"))
LINK_ORDER = ("unshaped", "1gbit", "100mbit", "20mbit")
# Rows whose measurements set a parameter of the cpu_2core profile.
FIT_ROWS = {("resnet20", "unshaped", "uncompressed"), ("ncf", "unshaped", "uncompressed"),
            ("ncf", "unshaped", "topk"), ("ncf", "unshaped", "golomb_qsgd")}


def validate(profile, results_dir):
    """Predicted against measured median step of every seed-0 row of the two
    shaped-link tables (2 workers). Returns a list of dicts."""
    out = []
    for model_name, fname in VALIDATION_FILES:
        path = os.path.join(results_dir, fname)
        with open(path) as f:
            rows = json.load(f)
        model = cost.get_model(model_name)
        for r in rows:
            if r.get("seed", 0) != 0:
                continue
            link = profile.named_link(r["link"])
            if link is None:
                raise cost.ScalingError(f"profile {profile.name!r} has no link {r['link']!r}")
            step = cost.predict(profile, model, r["config"], r.get("workers", 2), link,
                                   nbytes=r["accounted_bytes_per_step"])
            measured = r["step_time_median_ms"]
            out.append({"model": model_name, "link": r["link"], "config": r["config"],
                        "measured_ms": measured, "predicted_ms": step.total * 1e3,
                        "exchange_ms": step.exchange * 1e3,
                        "error": (step.total * 1e3 - measured) / measured,
                        "fit": (model_name, r["link"], r["config"]) in FIT_ROWS})
    out.sort(key=lambda d: (d["model"] != "resnet20", LINK_ORDER.index(d["link"])))
    return out


# PowerSGD rank 4 was measured on another day (2026-11-27), when the same
# machine ran TensorFlow's all-reduce unshaped in 91.0-91.6 ms (149 ms on the
# day of the tables above): its rows are predicted with that sitting's compute.
POWERSGD_FILES = ("powersgd_resnet20_600_uncompressed.json", "powersgd_resnet20_600_r4.json",
                  "powersgd_resnet20_600_r4_links.json")


def validate_powersgd(profile, results_dir):
    """Predicted against measured median step of PowerSGD rank 4 (ResNet-20,
    2 workers): the unshaped seeds (which set the profile's PowerSGD cost) and
    the 100 and 20 Mbit/s rows."""
    rows = []
    for fname in POWERSGD_FILES:
        with open(os.path.join(results_dir, fname)) as f:
            rows += json.load(f)
    model = cost.get_model("resnet20")
    base = [r for r in rows if r["config"] == "uncompressed"]
    unshaped = profile.named_link("unshaped")
    dense_s = cost.predict(profile, model, "uncompressed", 2, unshaped, compute=0.0).exchange
    compute = statistics.mean(r["step_time_median_ms"] for r in base) / 1e3 - dense_s
    out = []
    for r in rows:
        config = "uncompressed" if r["config"] == "uncompressed" else "powersgd_r4"
        step = cost.predict(profile, model, config, r.get("workers", 2),
                               profile.named_link(r["link"]), nbytes=r["accounted_bytes_per_step"],
                               compute=compute)
        measured = r["step_time_median_ms"]
        out.append({"model": "resnet20", "link": r["link"],
                    "config": f"{config} seed {r.get('seed', 0)}",
                    "measured_ms": measured, "predicted_ms": step.total * 1e3,
                    "exchange_ms": step.exchange * 1e3,
                    "error": (step.total * 1e3 - measured) / measured,
                    "fit": r["link"] == "unshaped"})
    return out


# Sittings of the shaped-link bench run after the profile was fitted. The
# 2-core machine's speed differs from day to day, and so does the cost of
# TensorFlow's own all-reduce beyond its bytes: each sitting's unshaped rows
# of the configurations the profile already knew set its compute (the
# compressed rows: measured minus predicted codec and exchange, averaged) and
# TensorFlow's fixed per-step cost (the uncompressed row minus that compute
# and its transfer, as tf_exchange_fixed_ms); every other row is held out.
SITTINGS = (("resnet20", "link_sparse_allreduce_20261206.json"),
            ("ncf", "link_ncf_1gbit_20261206.json"))
FIT_CONFIGS = ("uncompressed", "topk", "golomb_qsgd", "golomb_qsgd_dgc")


def validate_sittings(profile, results_dir):
    """Predicted against measured median step of every row of SITTINGS, with
    each sitting's own compute and TF fixed cost (fitted on its unshaped rows
    of FIT_CONFIGS, marked fit). Files not present are skipped. Bytes: the
    wire's per step (the longer run minus the shorter: the steady state past
    a warm-up) over the profile's wire overhead (the accounted mean of these
    short runs holds the warm-up's steps)."""
    out = []
    overhead = float(profile.link["wire_overhead"])
    for model_name, fname in SITTINGS:
        path = os.path.join(results_dir, fname)
        if not os.path.exists(path):
            continue
        with open(path) as f:
            rows = json.load(f)
        model = cost.get_model(model_name)

        def predict(r, prof, compute):
            return cost.predict(prof, model, r["config"], r.get("workers", 2),
                                   prof.named_link(r["link"]),
                                   nbytes=r["wire_bytes_per_step"] / overhead, compute=compute)

        fit = [r for r in rows if r["link"] == "unshaped" and r["config"] in FIT_CONFIGS]
        compressed = [r for r in fit if r["config"] != "uncompressed"]
        dense = [r for r in fit if r["config"] == "uncompressed"]
        if not compressed or not dense:
            raise cost.ScalingError(f"{fname}: needs unshaped rows of uncompressed and of a "
                                       f"compressed configuration of {FIT_CONFIGS} (the fit)")
        free = dataclasses.replace(profile, tf_exchange_fixed_ms={})
        compute = statistics.mean(r["step_time_median_ms"] / 1e3 - (predict(r, free, 0.0).total)
                                  for r in compressed)
        moved = predict(dense[0], free, 0.0).exchange
        fixed = max(0.0, dense[0]["step_time_median_ms"] / 1e3 - compute - moved)
        sitting = dataclasses.replace(profile, tf_exchange_fixed_ms={model_name: fixed * 1e3})
        for r in rows:
            step = predict(r, sitting, compute)
            measured = r["step_time_median_ms"]
            out.append({"model": model_name, "link": r["link"], "config": r["config"],
                        "measured_ms": measured, "predicted_ms": step.total * 1e3,
                        "exchange_ms": step.exchange * 1e3,
                        "error": (step.total * 1e3 - measured) / measured,
                        "fit": r in fit, "compute_ms": compute * 1e3,
                        "tf_fixed_ms": fixed * 1e3})
    return out


def format_validation(rows):
    lines = ["| model | link | configuration | measured ms | predicted ms | of which exchange ms "
             "| error |", "|---|---|---|--:|--:|--:|--:|"]
    for d in rows:
        mark = " (fit)" if d["fit"] else ""
        lines.append(f"| {d['model']} | {d['link']} | {d['config']}{mark} | "
                     f"{d['measured_ms']:.1f} | {d['predicted_ms']:.1f} | {d['exchange_ms']:.1f} | "
                     f"{100 * d['error']:+.1f} % |")
    held = [abs(d["error"]) for d in rows if not d["fit"]]
    lines.append("")
    lines.append(f"{len(rows)} rows, {len(rows) - len(held)} used to fit; held-out rows: "
                 f"mean |error| {100 * statistics.mean(held):.1f} %, max {100 * max(held):.1f} %; "
                 f"rows over 15 %: {sum(1 for e in held if e > 0.15)}")
    return "\n".join(lines)
