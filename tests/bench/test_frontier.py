"""benchmarks/frontier.py: the frontier table's paired statistics against numpy."""
import json

import numpy as np

from scripts import load_script

fr = load_script("benchmarks/frontier.py")


def _entry(config, seed, final, sent):
    return {"config": config, "seed": seed, "final": final, "sent_bytes_per_step": sent,
            "dense_bytes_per_step": 1000.0}


def test_rows_pair_each_seed_with_the_baseline(tmp_path, capsys):
    base = {0: 0.88, 1: 0.87, 2: 0.89, 3: 0.86}
    comp = {0: 0.875, 1: 0.874, 2: 0.880, 5: 0.5}  # seed 5: no baseline, not paired
    entries = ([_entry("uncompressed", s, a, 1000.0) for s, a in base.items()]
               + [_entry("c", s, a, 4.0) for s, a in comp.items()])
    table = {r["config"]: r for r in fr.rows(entries, "uncompressed")}
    d = np.array([comp[s] - base[s] for s in (0, 1, 2)])
    r = table["c"]
    assert r["seeds"] == [0, 1, 2, 5] and r["reduction"] == 250.0
    np.testing.assert_allclose(r["delta_mean"], d.mean())
    np.testing.assert_allclose(r["delta_se"], d.std(ddof=1) / np.sqrt(3))
    np.testing.assert_allclose(r["delta_worst"], d.min())
    np.testing.assert_allclose(r["delta_spread"], d.max() - d.min())
    assert r["within_0.3"] == 1  # -0.5, +0.4, -1.0 points: one at or above -0.3
    assert table["uncompressed"]["delta_mean"] is None
    assert table["uncompressed"]["delta_se"] is None
    row = fr.markdown([r]).splitlines()[-1]
    assert f"| {100 * d.mean():+.2f} ± {100 * r['delta_se']:.2f} |" in row
    path = tmp_path / "record.json"
    path.write_text(json.dumps(entries))
    assert fr.main(["--record", str(path), "--seeds", "0,1"]) == 0
    out = capsys.readouterr().out
    assert "| c | 4 | 250.0× |" in out and " ± " in out  # two seeds: a standard error
