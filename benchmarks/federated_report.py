"""What benchmarks/federated_bench.py prints and draws from its records: the
table of one run (figures, table), the seeds table of runs on several seeds
(seed_summaries, seeds_table) after checking they are runs of one setup
(setup_of, check_same_setup; as_of_round reads a longer run as a shorter one),
the volume/accuracy frontier (frontier_points, frontier_table, frontier_plot)
and the accuracy-against-bytes plot (plot)."""
import math

import numpy as np

from federated_configs import UNCOMPRESSED, reference_of, split_name

LAST = 3  # evaluations averaged in the seeds table (one evaluation is noisy)


def figures(r):
    """One run's bytes per direction relative to FedAvg's for the same
    messages, a version's payload relative to the dense model (None: no
    versions), and the final test metric."""
    rounds = r["rounds"]
    down = sum(x["down_bytes"] for x in rounds)
    up = sum(x["up_bytes"] for x in rounds)
    fed_down = r["dense_bytes"] * sum(x["down_messages"] for x in rounds)
    fed_up = r["dense_bytes"] * sum(x["up_messages"] for x in rounds)
    versions = sum(x.get("versions", 0) for x in rounds)
    version = (sum(x.get("version_bytes", 0) for x in rounds) / (versions * r["dense_bytes"])
               if versions else (1.0 if split_name(r["config"])[0] == UNCOMPRESSED else None))
    metric = r.get("metric", "accuracy")
    last = [c[metric] for c in r["curve"][-LAST:]]
    return {"down_round": down / len(rounds), "up_round": up / len(rounds),
            "down": down / fed_down, "up": up / fed_up, "version": version,
            "total": (down + up) / (fed_down + fed_up),
            "final": last[-1] if last else math.nan,
            "last": float(np.mean(last)) if last else math.nan}


def _metric_name(results):
    return "HR@10" if results and results[0].get("metric") == "hit_rate" else "test acc."


def table(results):
    bases = {r["config"]: r for r in results if r["config"] == reference_of(r["config"])}
    lines = [f"{'configuration':<18} | {'down B/round':>12} | {'up B/round':>11} | "
             f"{'down vs FedAvg':>14} | {'version':>7} | {'up vs FedAvg':>12} | "
             f"{'total':>6} | {_metric_name(results):>9} | {'vs FedAvg':>9}"]
    for r in results:
        f = figures(r)
        version = "-" if f["version"] is None else f"{f['version']:.4f}"
        base = bases.get(reference_of(r["config"]))
        delta = (f"{100 * (f['final'] - figures(base)['final']):+.2f} pts"
                 if base and base["curve"] else "-")
        lines.append(f"{r['config']:<18} | {f['down_round']:>12,.0f} | "
                     f"{f['up_round']:>11,.0f} | {f['down']:>14.4f} | "
                     f"{version:>7} | {f['up']:>12.4f} | {f['total']:>6.4f} | "
                     f"{f['final']:>9.4f} | {delta:>9}")
    return "\n".join(lines)


# The settings that make runs comparable: --summarize refuses records that
# differ in any of them (the seed is what differs between them).
SETUP_KEYS = ("task", "rounds", "clients", "per_round", "alpha", "epochs", "batch_size", "lr",
              "lr_schedule", "lr_min_ratio", "eval_every", "downlink", "initial_on_clients",
              "min_size", "local_training")
# How clients train: `LocalSGD` since 2026-11-29; records without the key
# trained with Keras' `fit`, which shuffles with TensorFlow's generator, so
# the same seed trains on other minibatches: pair such records only with
# each other.
LOCAL_TRAINING = "local_sgd"


def setup_of(settings):
    """The settings of SETUP_KEYS of a record. Records written before the
    learning-rate schedule existed ran the constant one; the last round's share
    matters only with the cosine schedule."""
    setup = {k: settings.get(k) for k in SETUP_KEYS}
    setup["lr_schedule"] = setup["lr_schedule"] or "constant"
    setup["local_training"] = setup["local_training"] or "keras_fit"
    if setup["lr_schedule"] == "constant":
        setup["lr_min_ratio"] = None
    return setup


def as_of_round(record, upto, path):
    """The record of a longer run read as the `upto`-round run it contains:
    its rounds and evaluations up to round `upto`. With the constant learning
    rate nothing in rounds 1..upto depends on the number of rounds (sampling,
    local seeds and the server's updates are per round), so these are the
    figures an `upto`-round run measures; a cosine schedule decays over the
    whole run, and its runs are refused. Raises ValueError, naming the file."""
    settings = record["settings"]
    rounds = settings["rounds"]
    if not 1 <= upto <= rounds:
        raise ValueError(f"{path} ran {rounds} rounds: --at_round must be in [1, {rounds}], "
                         f"got {upto}")
    if upto < rounds and setup_of(settings)["lr_schedule"] != "constant":
        raise ValueError(f"{path} ran the {settings['lr_schedule']} schedule, which decays over "
                         f"all {rounds} rounds: its round {upto} is not an {upto}-round run")
    results = []
    for r in record["results"]:
        curve = [c for c in r["curve"] if c["round"] <= upto]
        if not curve or curve[-1]["round"] != upto:
            raise ValueError(f"{path}: {r['config']} has no evaluation at round {upto} "
                             f"(evaluated every {settings.get('eval_every')} rounds)")
        results.append(dict(r, curve=curve, rounds=[x for x in r["rounds"] if x["round"] <= upto]))
    return dict(record, settings=dict(settings, rounds=upto), results=results)


def check_same_setup(records, paths):
    """Raises ValueError naming the first setting in which two records
    differ, or a configuration run twice on one seed: a seeds table pairs
    runs of one setup only, one run per configuration and seed."""
    seen = {}
    for rec, path in zip(records, paths):
        for r in rec["results"]:
            key = (r["config"], rec["settings"]["seed"])
            if key in seen:
                raise ValueError(f"{r['config']} ran on seed {key[1]} in both {seen[key]} and "
                                 f"{path}: summarize one run per configuration and seed")
            seen[key] = path
    first = setup_of(records[0]["settings"])
    for rec, path in zip(records[1:], paths[1:]):
        setup = setup_of(rec["settings"])
        for key in SETUP_KEYS:
            if setup[key] != first[key]:
                def said(value):
                    return (f"local training {value}" if key == "local_training"
                            else f"--{key}={value}")

                raise ValueError(
                    f"{path} ran with {said(setup[key])}, {paths[0]} with {said(first[key])}: "
                    f"a seeds table compares runs of one setup; summarize them separately")


def seed_summaries(records):
    """records: the JSON records of runs of the same settings with different
    seeds. Per configuration, in order of appearance, a dict: its label
    (with the aliases it ran under: "golomb_qsgd2_r35_bucket (recommended)"), its
    reference (reference_of), its seeds, the bytes relative to the dense
    model per direction (`ratio`: mean over seeds; the same for every server
    optimizer), the final metric per seed, and `paired`: for "final" and
    "last" (the mean of the last LAST evaluations), {seed: the difference to
    the reference's run of the same seed (same sampled clients), in points}
    (empty for the reference itself)."""
    runs, aliases = {}, {}
    for rec in records:
        seed = rec["settings"]["seed"]
        for r in rec["results"]:
            runs.setdefault(r["config"], {})[seed] = figures(r)
            if r.get("alias"):
                aliases.setdefault(r["config"], set()).add(r["alias"])
    out = []
    for config, by_seed in runs.items():
        reference = reference_of(config)
        base = runs.get(reference, {}) if config != reference else {}
        seeds = sorted(by_seed)
        out.append({
            "config": config, "reference": reference,
            "label": config + (f" ({', '.join(sorted(aliases[config]))})"
                               if config in aliases else ""),
            "seeds": seeds, "finals": [by_seed[s]["final"] for s in seeds],
            "ratio": {k: float(np.mean([by_seed[s][k] for s in seeds]))
                      for k in ("down", "up", "total")},
            "paired": {key: {s: 100 * (by_seed[s][key] - base[s][key])
                             for s in seeds if s in base} for key in ("final", "last")}})
    return out


def _mean_sd(values):
    values = np.asarray(values, np.float64)
    sd = values.std(ddof=1) if len(values) > 1 else math.nan
    return values.mean(), sd


def seeds_table(records):
    """The seeds table of seed_summaries(records): per configuration its
    seeds, the bytes relative to FedAvg per direction, the final metric per
    seed and its mean ± sd (ddof 1), the difference to the reference of the
    same seed in points, mean ± sd, of the final metric and of the mean of
    the last LAST evaluations, and the worst seed of the latter."""
    rows = seed_summaries(records)
    name = _metric_name([r for rec in records for r in rec["results"]])
    lines = [f"| configuration | seeds | down vs FedAvg | up vs FedAvg | total | {name} per seed "
             f"| mean ± sd | vs uncompressed (same seed), pts "
             f"| last {LAST} evaluations vs uncompressed, pts | worst seed, last {LAST}, pts |",
             "|---|--:|--:|--:|--:|---|--:|--:|--:|--:|"]
    for row in rows:
        m, sd = _mean_sd(row["finals"])
        vs = []
        for key in ("final", "last"):
            paired = list(row["paired"][key].values())
            if not paired:
                vs.append("–")
            else:
                pm, psd = _mean_sd(paired)
                vs.append(f"{pm:+.2f}" + ("" if math.isnan(psd) else f" ± {psd:.2f}"))
        last = row["paired"]["last"]
        worst = min(last, key=lambda s: (last[s], s)) if last else None
        ratio = row["ratio"]
        lines.append(f"| {row['label']} | {len(row['seeds'])} | {ratio['down']:.4f} | "
                     f"{ratio['up']:.4f} | {ratio['total']:.4f} | "
                     f"{', '.join(f'{v:.4f}' for v in row['finals'])} | "
                     f"{m:.4f}" + ("" if math.isnan(sd) else f" ± {sd:.4f}")
                     + f" | {vs[0]} | {vs[1]} | "
                     + ("–" if worst is None else f"{last[worst]:+.2f} (seed {worst})") + " |")
    return "\n".join(lines)


def frontier_points(records):
    """The volume/accuracy frontier of seed_summaries(records): per
    compressed configuration with a paired reference, (label, total volume
    relative to FedAvg, mean, worst and best over seeds of the difference
    to the reference over the last LAST evaluations in points, the seeds,
    each seed's difference), by volume."""
    points = []
    for row in seed_summaries(records):
        last = row["paired"]["last"]
        if last:
            seeds = sorted(last)
            gaps = [last[s] for s in seeds]
            points.append((row["label"], row["ratio"]["total"], float(np.mean(gaps)),
                           min(gaps), max(gaps), seeds, gaps))
    return sorted(points, key=lambda p: p[1])


def frontier_table(points, goal=-0.5):
    """The table of frontier_points: per configuration, by volume, the mean,
    the worst and the best seed of the difference over the last LAST
    evaluations, the spread between them, and how many seeds meet the goal
    (no more than -goal points below the reference)."""
    lines = [f"| configuration | total vs FedAvg | seeds | mean, last {LAST}, pts "
             f"| worst seed, pts | best seed, pts | spread, pts | seeds within {-goal:g} |",
             "|---|--:|--:|--:|--:|--:|--:|--:|"]
    for label, volume, mean, worst, best, seeds, gaps in points:
        worst_seed = min(zip(gaps, seeds))[1]
        best_seed = max(zip(gaps, seeds))[1]
        within = sum(g >= goal for g in gaps)
        lines.append(f"| {label} | {volume:.4f} | {', '.join(map(str, seeds))} | {mean:+.2f} | "
                     f"{worst:+.2f} (seed {worst_seed}) | {best:+.2f} (seed {best_seed}) | "
                     f"{best - worst:.2f} | {within} of {len(seeds)} |")
    return "\n".join(lines)


def frontier_plot(points, path, goal=-0.5):
    """Draws frontier_points: the mean gap per configuration against its
    volume (log scale), a bar from the worst seed to the best, each seed a
    dot, and the goal as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from matplotlib.ticker import FixedLocator, NullLocator

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, volume, mean, worst, best, seeds, gaps in points:
        bar = ax.errorbar([volume], [mean], yerr=[[mean - worst], [best - mean]], fmt="o",
                          capsize=4, label=f"{label}: {mean:+.2f} (worst {worst:+.2f}, "
                                           f"{len(seeds)} seeds)")
        ax.plot([volume] * len(gaps), gaps, "_", ms=10, color=bar[0].get_color(), alpha=0.6)
    ax.axhline(goal, color="grey", linestyle="--", linewidth=1)
    low, high = ax.get_ylim()
    ax.set_ylim(min(low, goal - 0.25), max(high, 0.25))  # the goal and zero in view
    ax.set_xscale("log")
    volumes = [p[1] for p in points] or [0.05]
    ax.set_xlim(min(volumes) / 1.4, max(volumes) * 1.4)
    ticks = [t for t in (0.005, 0.01, 0.02, 0.03, 0.05, 0.07, 0.1, 0.2, 0.3, 0.5, 1.0)
             if min(volumes) / 1.4 <= t <= max(volumes) * 1.4]
    ax.xaxis.set_major_locator(FixedLocator(ticks or [volumes[0]]))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([f"{t:g}" for t in ticks or [volumes[0]]])
    ax.set_xlabel("volume, both directions, relative to FedAvg (log scale)")
    ax.set_ylabel(f"last {LAST} evaluations vs uncompressed, points")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in results:
        points = [c for c in r["curve"] if c["bytes"] > 0]  # round 0: nothing sent yet
        ax.plot([c["bytes"] / 2 ** 20 for c in points],
                [c[r.get("metric", "accuracy")] for c in points],
                marker="o", ms=3, label=r["config"])
    ax.set_xscale("log")
    ax.set_xlabel("bytes sent, both directions, cumulative (MiB, log scale)")
    ax.set_ylabel("test HR@10 (MovieLens-100K, 943 users)"
                  if results[0].get("metric") == "hit_rate"
                  else "test accuracy (Fashion-MNIST, 10,000 images)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
