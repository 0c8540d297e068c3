"""The protocol of an accuracy claim: seeds, paired differences, non-inferiority.

    deepreduce-bench --compare=uncompressed,max_reduction --num_epochs=3 --seeds=101-105

A configuration *holds* on a job when, on at least MIN_SEEDS seeds that were
not used to choose it, the mean of its paired differences against the
baseline (the same seed, data and steps) is at least MEAN_FLOOR_POINTS and
the one-sided 95 % lower confidence bound of that mean (Student's t) is at
least -MARGIN_POINTS: non-inferiority at a half-point margin
(docs/benchmarks.md#when-a-configuration-holds). Fewer seeds than MIN_SEEDS
decide nothing ("undecided"); where five cannot decide, more seeds do.

Plain Python and numpy: no TensorFlow, no SciPy (the t quantile is computed
here from the regularised incomplete beta function).
"""
import math

import numpy as np

MIN_SEEDS = 5
MEAN_FLOOR_POINTS = -0.2
MARGIN_POINTS = 0.5
CONFIDENCE = 0.95
WITHIN_POINTS = (0.3, 0.5)  # the table counts the seeds within these of the baseline


class SeedsError(ValueError):
    """A --seeds value that is not a count or a list of seeds."""


def parse_seeds(text, first=0):
    """The seeds of --seeds: a count N (seeds first .. first + N - 1) or a list
    of seeds and ranges ("21-25", "3,7,11", "21-23,40").

    Raises:
      SeedsError: empty, negative, malformed, or a seed named twice.
    """
    text = (text or "").strip()
    if not text:
        raise SeedsError("--seeds is empty; give a count (--seeds=5) or seeds (--seeds=21-25)")
    parts = [p.strip() for p in text.split(",")]
    if len(parts) == 1 and parts[0].isdigit():
        count = int(parts[0])
        if count < 1:
            raise SeedsError(f"--seeds={text}: a number alone is a count of seeds from --seed, "
                             "at least 1; for seed 0 alone write --seeds=0-0 (or --seed=0 "
                             "--seeds=1)")
        return tuple(range(first, first + count))
    seeds = []
    for part in parts:
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise SeedsError(f"--seeds={text}: {part!r} is neither a seed nor a range a-b "
                             "(non-negative integers; a count alone means that many seeds "
                             "from --seed)")
        lo, hi = int(lo), int(hi) if sep else int(lo)
        if hi < lo:
            raise SeedsError(f"--seeds={text}: the range {part!r} is empty")
        seeds.extend(range(lo, hi + 1))
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise SeedsError(f"--seeds={text} names seed(s) {repeated} more than once")
    return tuple(seeds)


def _betacf(a, b, x):
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betainc(a, b, x):
    """The regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t, df):
    """P(T <= t) for Student's t with df degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p, df):
    """The p-quantile of Student's t with df degrees of freedom (bisection on t_cdf)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def paired_summary(accuracy, baseline):
    """The protocol's figures of one configuration against the baseline.

    Args:
      accuracy: {seed: test accuracy (fraction)} of the configuration.
      baseline: {seed: test accuracy} of the baseline on the same job.

    Returns:
      a dict: "seeds" (those both have, sorted), "deltas" (points, per seed),
      "mean", "se" (sample SD / sqrt(n); None below 2 seeds), "lower_bound"
      (one-sided CONFIDENCE bound, mean - t * se; None below 2 seeds),
      "worst" (the lowest delta) and "worst_seed", "within" ({"0.3": count,
      "0.5": count}), "n" and "verdict" (holds / does not hold / undecided).
    """
    seeds = sorted(set(accuracy) & set(baseline))
    deltas = [100.0 * (float(accuracy[s]) - float(baseline[s])) for s in seeds]
    n = len(deltas)
    out = {"seeds": seeds, "deltas": [round(d, 4) for d in deltas], "n": n, "mean": None,
           "se": None, "lower_bound": None, "t": None, "worst": None, "worst_seed": None,
           "within": {f"{w:g}": sum(d >= -w - 1e-9 for d in deltas) for w in WITHIN_POINTS}}
    if n:
        arr = np.asarray(deltas, dtype=np.float64)
        out["mean"] = float(arr.mean())
        worst = int(np.argmin(arr))
        out["worst"], out["worst_seed"] = float(arr[worst]), seeds[worst]
    if n >= 2:
        arr = np.asarray(deltas, dtype=np.float64)
        out["se"] = float(arr.std(ddof=1) / math.sqrt(n))
        out["t"] = t_quantile(CONFIDENCE, n - 1)
        out["lower_bound"] = out["mean"] - out["t"] * out["se"]
    out["verdict"] = verdict(out)
    return out


def verdict(summary):
    """'holds', 'does not hold' or 'undecided' (fewer than MIN_SEEDS seeds)."""
    if summary["n"] < MIN_SEEDS:
        return "undecided"
    holds = (summary["mean"] >= MEAN_FLOOR_POINTS - 1e-9
             and summary["lower_bound"] >= -MARGIN_POINTS - 1e-9)
    return "holds" if holds else "does not hold"


def criterion_text():
    """The criterion in one sentence (printed under the table)."""
    return (f"holds: on >= {MIN_SEEDS} seeds not used to choose it, mean paired difference "
            f">= {MEAN_FLOOR_POINTS:+.1f} pts and one-sided {CONFIDENCE:.0%} lower bound "
            f"(t distribution) >= {-MARGIN_POINTS:+.1f} pts (docs/benchmarks.md)")
