"""The one accuracy table (benchmarks/results/accuracy.json): it is what
benchmarks/accuracy_table.py computes from the runs, its packaged copy and its
section of docs/benchmarks.md are the same, deepreduce-scaling reads it, and
every paired figure "mean ± SE" that the README or docs/ give a configuration
of the table is one of that configuration's rows.
"""
import json
import os
import re

import pytest

from deepreduce_bench import claims
from scripts import load_script

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


TABLE = load_script("benchmarks/accuracy_table.py")


def _committed(path):
    with open(os.path.join(ROOT, path)) as f:
        return json.load(f)


def test_the_table_is_what_the_runs_say():
    assert _committed(TABLE.TABLE) == json.loads(json.dumps(TABLE.build(ROOT))), (
        "benchmarks/results/accuracy.json differs from the runs: run "
        ".venv/bin/python benchmarks/accuracy_table.py --write")


def test_the_packaged_copy_is_the_table():
    with open(os.path.join(ROOT, TABLE.TABLE)) as a, open(os.path.join(ROOT, TABLE.PACKAGED)) as b:
        assert a.read() == b.read()


def test_the_docs_section_is_the_table():
    with open(os.path.join(ROOT, TABLE.DOC)) as f:
        doc = f.read()
    section = doc.split(TABLE.BEGIN, 1)[1].split(TABLE.END, 1)[0].strip()
    assert section == TABLE.markdown(_committed(TABLE.TABLE)).strip()


def test_row_statistics_follow_the_criterion():
    for row in _committed(TABLE.TABLE)["rows"]:
        deltas = {int(s): d for s, d in row["deltas"].items()}
        again = claims.paired_summary({s: 0.5 + d / 100 for s, d in deltas.items()},
                                      {s: 0.5 for s in deltas})
        assert row["n"] == len(deltas) and row["verdict"] == again["verdict"]
        if row["n"]:
            assert row["mean"] == pytest.approx(again["mean"], abs=1e-3)
        assert not set(row["deltas"]) & set(map(str, row["choosing_seeds"])), (
            f"{row['configuration']}: a seed that chose it confirms it")


# Where the project states accuracy figures for a user (CHANGES.md is history;
# federated.md has its own protocol and baseline, FedAvg).
CLAIM_FILES = ["README.md"] + [os.path.join("docs", f) for f in sorted(os.listdir(
    os.path.join(ROOT, "docs"))) if f.endswith(".md") and f not in ("CHANGES.md", "federated.md")]
FIGURE = re.compile(r"([+−-]\d+\.\d\d) ± (\d+\.\d\d)")


def _figures():
    """(file, line number, configuration, mean, se) of every 'm ± s' figure on
    a line that names exactly one configuration of the table (outside the
    generated section and outside markdown tables of other configurations)."""
    configs = {r["configuration"] for r in _committed(TABLE.TABLE)["rows"]}
    names = re.compile(r"`?\b(" + "|".join(sorted(configs, key=len, reverse=True)) + r")\b`?")
    out = []
    for path in CLAIM_FILES:
        with open(os.path.join(ROOT, path)) as f:
            text = f.read()
        if TABLE.BEGIN in text:
            head, rest = text.split(TABLE.BEGIN, 1)
            text = head + "\n" * rest.split(TABLE.END, 1)[0].count("\n") + rest.split(
                TABLE.END, 1)[1]
        for number, line in enumerate(text.splitlines(), 1):
            named = set(names.findall(line))
            if len(named) != 1:
                continue
            for mean, se in FIGURE.findall(line):
                out.append((path, number, named.pop() if len(named) == 1 else None,
                            float(mean.replace("−", "-")), float(se)))
                named = set(names.findall(line))
    return out


def test_figures_in_the_docs_are_rows_of_the_table():
    rows = _committed(TABLE.TABLE)["rows"]
    known = {}
    for r in rows:
        for part in (r, r["choosing"]):  # the fresh seeds' figure, the choosing seeds'
            if part["mean"] is not None and part["se"] is not None:
                known.setdefault(r["configuration"], set()).add((round(part["mean"], 2),
                                                                 round(part["se"], 2)))
    wrong = [f"{path}:{n}: {config} {mean:+.2f} ± {se:.2f} is no row of the table "
             f"(rows: {sorted(known.get(config, ()))})"
             for path, n, config, mean, se in _figures()
             if (round(mean, 2), round(se, 2)) not in known.get(config, set())]
    assert not wrong, "\n".join(wrong)
