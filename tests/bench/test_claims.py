"""The accuracy-claim protocol (deepreduce_bench.claims) and --seeds
(deepreduce_bench.seeds): seeds parsing, Student's t against numpy, the paired
statistics against numpy on fixed numbers, the verdict's boundaries, and the
resume of a --seeds record (in process, with a child that writes results).
"""
import json
import os

import numpy as np
import pytest
from absl import flags as absl_flags

from deepreduce_bench import claims, compare, seeds
from deepreduce_bench import flags as bench_flags


# ---------------------------------------------------------------------------
# --seeds values

@pytest.mark.parametrize("text,first,expected", [
    ("3", 0, (0, 1, 2)), ("2", 40, (40, 41)), ("21-25", 0, (21, 22, 23, 24, 25)),
    ("3,7", 0, (3, 7)), ("21-23,40", 0, (21, 22, 23, 40)), (" 5 ", 10, tuple(range(10, 15))),
    ("7-7", 0, (7,))])
def test_parse_seeds(text, first, expected):
    assert claims.parse_seeds(text, first) == expected


@pytest.mark.parametrize("text,words", [
    ("", "empty"), ("0", "at least 1; for seed 0 alone write --seeds=0-0"), ("5-3", "empty"), ("a", "neither"), ("1,,2", "neither"),
    ("-3", "neither"), ("2,2", "more than once"), ("1-3,3", "more than once")])
def test_bad_seeds_say_what_is_wrong(text, words):
    with pytest.raises(claims.SeedsError, match=words):
        claims.parse_seeds(text)


# ---------------------------------------------------------------------------
# Student's t

@pytest.mark.parametrize("df,expected", [(1, 6.3138), (2, 2.9200), (4, 2.1318), (7, 1.8946),
                                         (9, 1.8331), (30, 1.6973)])
def test_t_quantile_matches_the_printed_tables(df, expected):
    # One-sided 95 % critical values of Student's t (any statistics table).
    assert claims.t_quantile(0.95, df) == pytest.approx(expected, abs=5e-4)


@pytest.mark.parametrize("df", [3, 4, 9])
@pytest.mark.parametrize("p", [0.9, 0.95, 0.975])
def test_t_quantile_matches_numpy_samples(df, p):
    samples = np.random.default_rng(df).standard_t(df, 2_000_000)
    assert claims.t_quantile(p, df) == pytest.approx(np.quantile(samples, p), rel=0.01)
    assert claims.t_cdf(np.quantile(samples, p), df) == pytest.approx(p, abs=0.002)
    assert claims.t_quantile(1 - p, df) == pytest.approx(-claims.t_quantile(p, df))


def test_t_rejects_nonsense():
    with pytest.raises(ValueError):
        claims.t_quantile(1.0, 4)
    with pytest.raises(ValueError):
        claims.t_cdf(1.0, 0)


# ---------------------------------------------------------------------------
# Paired statistics

BASE = {101: 0.9247, 102: 0.9210, 103: 0.9188, 104: 0.9301, 105: 0.9233}


def test_paired_summary_against_numpy():
    acc = {101: 0.9200, 102: 0.9221, 103: 0.9150, 104: 0.9280, 105: 0.9240, 106: 0.5}
    s = claims.paired_summary(acc, BASE)  # seed 106 has no baseline: left out
    seeds_ = [101, 102, 103, 104, 105]
    d = 100 * (np.array([acc[k] for k in seeds_]) - np.array([BASE[k] for k in seeds_]))
    assert s["seeds"] == seeds_ and s["n"] == 5
    np.testing.assert_allclose(s["deltas"], d, atol=1e-4)
    assert s["mean"] == pytest.approx(d.mean())
    assert s["se"] == pytest.approx(d.std(ddof=1) / np.sqrt(5))
    assert s["lower_bound"] == pytest.approx(d.mean() - 2.1318 * d.std(ddof=1) / np.sqrt(5),
                                             abs=1e-3)
    assert s["worst"] == pytest.approx(d.min()) and s["worst_seed"] == 101
    assert s["within"] == {"0.3": int((d >= -0.3).sum()), "0.5": int((d >= -0.5).sum())}
    assert s["verdict"] == "holds"  # mean -0.18, lower bound -0.47


def _with_deltas(points):
    return {s: BASE[s] + p / 100 for s, p in zip(sorted(BASE), points)}


@pytest.mark.parametrize("points,verdict", [
    ([0.0, 0.1, -0.1, 0.05, -0.05], "holds"),
    ([-0.25, -0.25, -0.25, -0.25, -0.24], "does not hold"),   # tight, but the mean < -0.2
    ([0.9, -1.2, 0.6, -0.9, 0.3], "does not hold"),            # mean -0.06, bound -0.84
    ([0.1, -0.1, 0.0, 0.1], "undecided"),                      # 4 seeds decide nothing
])
def test_verdict(points, verdict):
    assert claims.paired_summary(_with_deltas(points), BASE)["verdict"] == verdict


def test_one_seed_has_no_standard_error():
    s = claims.paired_summary({101: 0.92}, BASE)
    assert s["n"] == 1 and s["se"] is None and s["lower_bound"] is None
    assert s["verdict"] == "undecided"


# ---------------------------------------------------------------------------
# --seeds: the record and its resume (in process; the child writes results)

def _config(tmp_path, args):
    fv = absl_flags.FlagValues()
    bench_flags.define_flags(fv)
    fv(["deepreduce-bench", "--data_name=synthetic", f"--train_dir={tmp_path / 'runs'}"]
       + list(args))
    return bench_flags.resolve(fv), fv


def _fake_child(calls, fail_on=None):
    """A compare._run_child that writes a results.json whose accuracy is a
    function of the seed and the configuration, and records its calls."""

    def run(args, log_path, label, stream):
        flags = dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)
        seed, exchange = int(flags["seed"]), flags["exchange"]
        calls.append((seed, exchange, flags.get("compress_ratio")))
        if fail_on == (seed, exchange):
            raise compare.CompareError(f"{label} exited with code 1")
        acc = 0.9 + seed / 1000 - (0.002 if exchange == "deepreduce" else 0.0)
        sent = 1000.0 if exchange == "tf" else 20.0
        metrics = {k: None for k in seeds.KEPT_METRICS}
        metrics.update(accuracy=acc, sent_bytes_per_step=sent, dense_bytes_per_step=1000.0,
                       step_time_median_ms=10.0, final_loss=0.3, timed_steps=5)
        with open(flags["output_json"], "w") as f:
            json.dump({"metrics": metrics, "history": [], "eval": {"eval_examples": 10000},
                       "config": {"exchange": exchange, "params": {}},
                       "model_metric": "accuracy"}, f)
        return 1.5

    return run


def test_seeds_adds_the_baseline_and_the_whole_test_split(tmp_path):
    config, _ = _config(tmp_path, ["--compare=topk", "--seeds=21-22"])
    assert config.compare == ("uncompressed", "topk") and config.seeds == (21, 22)
    assert config.num_eval_examples == 0 and config.eval_every == 0
    config, _ = _config(tmp_path, ["--compare=topk", "--seeds=2", "--seed=7"])
    assert config.seeds == (7, 8)
    with pytest.raises(bench_flags.ConfigError, match="--seeds repeats a comparison"):
        _config(tmp_path, ["--compressor=topk", "--seeds=2"])
    with pytest.raises(bench_flags.ConfigError, match="more than once"):
        _config(tmp_path, ["--compare=topk", "--seeds=1,1"])


def test_schedule_spans_the_epochs_of_the_run(tmp_path):
    # 3 epochs of the 10,000 synthetic images at 2 x 32: ceil(468.75) = 469 steps + 2.
    config, _ = _config(tmp_path, ["--compressor=topk", "--schedule=cosine",
                                   "--num_epochs=3"])
    assert config.params["schedule_steps"] == 2 + 469
    config, _ = _config(tmp_path, ["--compare=max_reduction", "--num_epochs=3",
                                   "--batch_size=16"])
    assert config.num_epochs == 3  # the preset's schedule is resolved by each child


def test_resume_runs_only_what_is_missing(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(compare, "_run_child", _fake_child(calls, fail_on=(2, "deepreduce")))
    config, fv = _config(tmp_path, ["--compare=topk", "--seeds=3", "--num_batches=5"])
    with pytest.raises(compare.CompareError):
        seeds.run_seeds(config, fv, stream=None, out=None)
    assert calls == [(0, "tf", None), (0, "deepreduce", "0.01"), (1, "tf", None),
                     (1, "deepreduce", "0.01"), (2, "tf", None), (2, "deepreduce", "0.01")]
    record = json.load(open(config.output_json))
    assert [(r["seed"], r["preset"]) for r in record["runs"]] == [
        (0, "topk"), (0, "uncompressed"), (1, "topk"), (1, "uncompressed"), (2, "uncompressed")]
    first = {(r["seed"], r["preset"]): r["finished"] for r in record["runs"]}

    # Started again: only the failed run is repeated; the table has every seed.
    calls.clear()
    monkeypatch.setattr(compare, "_run_child", _fake_child(calls))
    summary = seeds.run_seeds(config, fv, stream=None, out=None)
    assert calls == [(2, "deepreduce", "0.01")]
    record = json.load(open(config.output_json))
    assert {(r["seed"], r["preset"]): r["finished"] for r in record["runs"]
            if (r["seed"], r["preset"]) != (2, "topk")} == first
    p = summary["topk"]["paired"]
    assert p["seeds"] == [0, 1, 2] and p["deltas"] == [-0.2, -0.2, -0.2]
    assert summary["topk"]["reduction"] == pytest.approx(50.0)
    assert "topk" in record["table"] and record["summary"]["topk"]["paired"]["n"] == 3

    # More seeds continue the same record; a run whose flags changed is redone.
    calls.clear()
    config4, fv4 = _config(tmp_path, ["--compare=topk", "--seeds=4", "--num_batches=5"])
    seeds.run_seeds(config4, fv4, stream=None, out=None)
    assert calls == [(3, "tf", None), (3, "deepreduce", "0.01")]


def test_a_record_of_another_job_is_refused(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(compare, "_run_child", _fake_child(calls))
    config, fv = _config(tmp_path, ["--compare=topk", "--seeds=1", "--num_batches=5"])
    seeds.run_seeds(config, fv, stream=None, out=None)
    other, fv_other = _config(tmp_path, ["--compare=topk", "--seeds=1", "--num_batches=6"])
    with pytest.raises(compare.CompareError, match="another job.*--num_batches=6"):
        seeds.run_seeds(other, fv_other, stream=None, out=None)
    os.makedirs(tmp_path / "x")
    (tmp_path / "x" / "compare.json").write_text('{"kind": "comparison"}')
    other, fv_other = _config(tmp_path, ["--compare=topk", "--seeds=1",
                                         f"--output_json={tmp_path / 'x' / 'compare.json'}"])
    with pytest.raises(compare.CompareError, match="not a --seeds record"):
        seeds.run_seeds(other, fv_other, stream=None, out=None)


def test_the_default_comparison_without_the_accuracy_table(monkeypatch):
    """A package built without its data (profiles/accuracy.json) still has a
    default comparison: golomb_qsgd_dgc, the fallback."""
    from deepreduce_bench import presets
    from deepreduce_tf.cost import measured

    def missing(*args, **kwargs):
        raise FileNotFoundError("profiles/accuracy.json")

    monkeypatch.setattr(measured, "accuracy_figure", missing)
    assert presets.default_presets("momentum") == ("uncompressed", presets.FALLBACK)
