"""--seeds: a comparison repeated over seeds, and whether each configuration holds.

    deepreduce-bench --compare=max_reduction --num_epochs=3 --seeds=101-105

Every preset of --compare (and uncompressed, the paired baseline, always) is
trained on every seed, one process per run as in compare.py: the same seed
gives every preset the same initial weights, data order and test split. The
runs go to <train_dir>/s<seed>/<preset>/ and the combined record to
--output_json (default <train_dir>/compare.json), rewritten after every run:
started again with the same flags, the command skips the runs already in it
(a run whose flags changed, e.g. an edited preset, is run again and
replaced), so a long job spans sittings. A record made for another job
(other steps, model, batch, ...) is refused, not mixed in.

The table gives per configuration: the reduction and step time against the
baseline, the accuracy and paired difference per seed, their mean +- standard
error, the one-sided 95 % lower bound, the worst seed, the seeds within 0.3
and 0.5 points and the verdict of claims.verdict(). Which seeds chose a
configuration and which confirm it is the caller's to say (the accuracy
table, benchmarks/accuracy_table.py, names them).

This module does not import TensorFlow.
"""
import datetime
import json
import os
import sys
import time

from deepreduce_bench import claims, compare, report

KIND = "seeds"
BASELINE = "uncompressed"
# The metrics a record keeps of each run (the run's own results.json has the rest).
KEPT_METRICS = ("accuracy", "hit_rate", "sent_bytes_per_step", "dense_bytes_per_step",
                "received_bytes_per_step", "step_time_median_ms", "final_loss", "timed_steps",
                "support_mean", "support_min")
# Arguments that name where a run writes (not what it computes).
_PATH_FLAGS = ("--train_dir=", "--output_json=")


def _job_args(args):
    """A run's arguments without its seed and output paths: what every run of
    the job shares."""
    return [a for a in args if not a.startswith(_PATH_FLAGS + ("--seed=",))]


def _key_args(args):
    """A run's arguments without its output paths (what decides its numbers)."""
    return [a for a in args if not a.startswith(_PATH_FLAGS)]


def load_record(path, job):
    """The entries of an earlier record at `path` made for `job` ([] if none).

    Raises:
      compare.CompareError: the file is not a --seeds record, or one of another job.
    """
    if not os.path.exists(path):
        return []
    try:
        with open(path) as f:
            record = json.load(f)
    except (OSError, ValueError) as e:
        raise compare.CompareError(f"{path} exists but cannot be read as a --seeds record "
                                   f"({e}); move it away or give another --output_json")
    if not isinstance(record, dict) or record.get("kind") != KIND:
        raise compare.CompareError(f"{path} exists and is not a --seeds record (kind "
                                   f"{record.get('kind') if isinstance(record, dict) else None!r}"
                                   "); give another --train_dir or --output_json")
    if record.get("job") != job:
        old, new = set(record.get("job") or []), set(job)
        raise compare.CompareError(
            f"{path} holds runs of another job (its flags {sorted(old - new)}, this command's "
            f"{sorted(new - old)}); give another --train_dir or --output_json to start a new "
            "one, or the same flags to continue it")
    return list(record.get("runs") or [])


def _entry(seed, preset, args, results, results_path, wall, base_dir):
    m = results["metrics"]
    return {
        "seed": seed, "preset": preset, "args": _key_args(args),
        "exchange": results["config"].get("exchange", "deepreduce"),
        "params": results["config"]["params"],
        "metric": results.get("model_metric") or "accuracy",
        "metrics": {k: m.get(k) for k in KEPT_METRICS},
        "eval_examples": (results.get("eval") or {}).get("eval_examples"),
        "results_json": os.path.relpath(results_path, base_dir),
        "wall_s": wall,
        "finished": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def _eta(todo, done_walls, by_preset):
    """Seconds left for the runs `todo` [(seed, preset)]: each at the mean wall
    time of its preset's finished runs, else of all finished runs (None if none)."""
    if not done_walls:
        return None
    overall = sum(done_walls) / len(done_walls)
    total = 0.0
    for _, preset in todo:
        walls = by_preset.get(preset)
        total += sum(walls) / len(walls) if walls else overall
    return total


def summarize(entries, presets, baseline=BASELINE):
    """{preset: claims.paired_summary + reduction, step-time ratio, accuracy per
    seed, mean bytes} of the record's entries, for `presets` in order."""
    by = {}
    for e in entries:
        by.setdefault(e["preset"], {})[e["seed"]] = e
    base = by.get(baseline, {})
    metric = next((e["metric"] for e in entries), "accuracy")
    out = {}
    for preset in presets:
        runs = by.get(preset, {})
        if not runs:
            continue
        acc = {s: e["metrics"][metric] for s, e in runs.items()
               if e["metrics"].get(metric) is not None}
        base_acc = {s: e["metrics"][metric] for s, e in base.items()
                    if e["metrics"].get(metric) is not None}
        summary = claims.paired_summary(acc, base_acc) if preset != baseline else None
        sent = [e["metrics"]["sent_bytes_per_step"] for e in runs.values()]
        base_sent = [e["metrics"]["sent_bytes_per_step"] for e in base.values()]
        ratios = [runs[s]["metrics"]["step_time_median_ms"] / base[s]["metrics"][
            "step_time_median_ms"] for s in runs if s in base
            and runs[s]["metrics"].get("step_time_median_ms")
            and base[s]["metrics"].get("step_time_median_ms")]
        mean_sent = sum(sent) / len(sent)
        out[preset] = {
            "seeds": sorted(runs), "metric": metric,
            "accuracy": {str(s): acc[s] for s in sorted(acc)},
            "sent_bytes_per_step": mean_sent,
            "reduction": (sum(base_sent) / len(base_sent)) / mean_sent if base_sent else None,
            "step_time_ratio": sorted(ratios)[len(ratios) // 2] if ratios else None,
            "paired": summary,
        }
    return out


def _pts(v, sign=True, digits=2):
    if v is None:
        return "–"
    return f"{v:+.{digits}f}" if sign else f"{v:.{digits}f}"


def seeds_table(summary, job_text, baseline=BASELINE):
    """The table of a --seeds comparison (a string)."""
    header = ("configuration", "reduction", "step time", "seeds", "accuracy per seed",
              "Δ per seed (pts)", "mean ± SE", "95% LB", "worst (seed)", "≤0.3/≤0.5", "verdict")
    rows = [header]
    for preset, s in summary.items():
        p = s["paired"]
        acc = " ".join(f"{a:.4f}" for a in s["accuracy"].values())
        if p is None:
            rows.append((preset, "1.0x" if preset == baseline else "–",
                         "1.00x", str(len(s["seeds"])), acc, "–", "–", "–", "–", "–",
                         "baseline"))
            continue
        worst = "–" if p["worst"] is None else f"{p['worst']:+.2f} (s{p['worst_seed']})"
        rows.append((
            preset, "–" if s["reduction"] is None else f"{s['reduction']:,.1f}x",
            "–" if s["step_time_ratio"] is None else f"{s['step_time_ratio']:.2f}x",
            str(p["n"]), acc, " ".join(f"{d:+.2f}" for d in p["deltas"]),
            f"{_pts(p['mean'])} ± {_pts(p['se'], sign=False)}", _pts(p["lower_bound"]), worst,
            f"{p['within']['0.3']}/{p['within']['0.5']} of {p['n']}", p["verdict"]))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]

    def fmt(r):
        return " | ".join(v.ljust(w) if i in (0, 4, 5, 10) else v.rjust(w)
                          for i, (v, w) in enumerate(zip(r, widths)))

    body = [fmt(rows[0]), "-+-".join("-" * w for w in widths)] + [fmt(r) for r in rows[1:]]
    rule = "=" * len(body[0])
    notes = [
        f"Δ: test accuracy minus {baseline}'s on the same seed, points; SE: sample SD of Δ / "
        "sqrt(seeds); 95% LB: mean - t(0.95, seeds-1) * SE; reduction: "
        f"{baseline}'s bytes per step / the row's (mean over seeds); step time: median over "
        f"seeds of the row's / {baseline}'s median step.",
        claims.criterion_text() + ".",
        "A seed that chose a configuration never confirms it: confirm on seeds not used to "
        "choose it.",
    ]
    return "\n".join([rule, f"deepreduce-bench --seeds: {job_text}", rule] + body
                     + [rule] + notes)


def _job_text(config, seeds):
    steps = (f"{config.num_batches} steps" if config.num_epochs is None
             else f"{config.num_epochs:g} epoch(s)")
    n_eval = "the whole test split" if not config.num_eval_examples else \
        f"the first {config.num_eval_examples:,} test examples"
    replicas = config.num_gpus * max(config.num_workers, 1)
    return (f"{config.model} / {config.data_name}, {replicas} replicas, batch "
            f"{config.batch_size}/replica, {steps}, evaluated on {n_eval}; seeds "
            f"{', '.join(map(str, seeds))}")


def write_record(path, job, entries, presets, seeds, job_text, table):
    record = {"schema_version": report.SCHEMA_VERSION, "command": "deepreduce-bench",
              "kind": KIND, "job": job, "job_text": job_text, "baseline": BASELINE,
              "presets": list(presets), "seeds": list(seeds),
              "criterion": claims.criterion_text(),
              "summary": summarize([e for e in entries if e["seed"] in seeds], presets),
              "table": table,
              "runs": sorted(entries, key=lambda e: (e["seed"], e["preset"]))}
    return report.write_json(record, path)


def run_seeds(config, fv, stream=sys.stderr, out=sys.stdout):
    """Trains every preset of config.compare on every seed of config.seeds
    (skipping the runs already in config.output_json); prints the table.

    Returns:
      the summary (summarize()).

    Raises:
      compare.CompareError: a run failed (the runs before it are kept in the
        record), or the record belongs to another job.
    """
    out_dir = os.path.abspath(config.train_dir)
    record_path = os.path.abspath(config.output_json)
    base_dir = os.path.dirname(record_path)
    os.makedirs(out_dir, exist_ok=True)
    presets = list(config.compare)
    job = _job_args(compare.shared_args(config, fv))
    entries = load_record(record_path, job)
    planned = []
    for seed in config.seeds:
        common = compare.shared_args(config._replace(seed=seed), fv)
        for preset in presets:
            run_dir = os.path.join(out_dir, f"s{seed}", preset)
            results_path = os.path.join(run_dir, "results.json")
            args = common + compare.preset_args(preset, fv) + [
                f"--train_dir={run_dir}", f"--output_json={results_path}"]
            planned.append((seed, preset, args, run_dir, results_path))
    done = {(e["seed"], e["preset"]): e for e in entries}
    todo = [p for p in planned if (p[0], p[1]) not in done
            or done[(p[0], p[1])]["args"] != _key_args(p[2])]
    job_text = _job_text(config, config.seeds)
    walls = {}
    for e in entries:
        if e.get("wall_s"):
            walls.setdefault(e["preset"], []).append(e["wall_s"])
    if stream is not None:
        print(f"--seeds: {len(planned)} runs ({len(presets)} configurations x "
              f"{len(config.seeds)} seeds: {job_text}); {len(planned) - len(todo)} already in "
              f"{record_path}, {len(todo)} to run; outputs in {out_dir}", file=stream, flush=True)
    for i, (seed, preset, args, run_dir, results_path) in enumerate(todo):
        os.makedirs(run_dir, exist_ok=True)
        if os.path.exists(results_path):
            os.remove(results_path)  # never report an earlier run's numbers
        left = _eta([(s, p) for s, p, *_ in todo[i:]],
                    [w for ws in walls.values() for w in ws], walls)
        label = f"[run {len(planned) - len(todo) + i + 1}/{len(planned)}, seed {seed}] {preset}:"
        if stream is not None:
            print(f"{label} starting; about {report.duration(left)} left for "
                  f"{len(todo) - i} run(s)" if left is not None else f"{label} starting",
                  file=stream, flush=True)
        wall = compare._run_child(args, os.path.join(run_dir, "log.txt"), label, stream)
        results = report.load_results(results_path)
        entry = _entry(seed, preset, args, results, results_path, wall, base_dir)
        entries = [e for e in entries if (e["seed"], e["preset"]) != (seed, preset)] + [entry]
        walls.setdefault(preset, []).append(wall)
        write_record(record_path, job, entries, presets, config.seeds, job_text, None)
        if stream is not None:
            print(f"{label} done in {report.duration(wall)}: {report.run_outcome(results)}",
                  file=stream, flush=True)
    summary = summarize([e for e in entries if e["seed"] in config.seeds], presets)
    table = seeds_table(summary, job_text)
    path = write_record(record_path, job, entries, presets, config.seeds, job_text, table)
    if out is not None:
        print(table, file=out)
        print(f"record: {path} (started again with the same flags, the command continues it)",
              file=out)
        out.flush()
    return summary
