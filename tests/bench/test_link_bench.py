"""benchmarks/link_bench.py: workers in network namespaces over shaped links.
Runs where this process is root and may create namespaces (CI), else skips."""
import json
import os
import subprocess

import pytest

from scripts import load_script

# Trains models, starts worker processes or runs Flower (minutes):
# `pytest -m "not slow"` leaves it out of a quick loop.
pytestmark = pytest.mark.slow

TINY = ["--", "--model=resnet20", "--data_name=synthetic", "--batch_size=8",
        "--num_warmup_batches=1"]


lb = load_script("benchmarks/link_bench.py")


def _namespaces_of_this_process():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    mine = f"{lb.PREFIX}-{os.getpid()}-"
    return [line.split()[0] for line in out.splitlines() if line.startswith(mine)]


def _usable():
    try:
        lb.preflight()
    except lb.HarnessError as e:
        return str(e)
    return None


needs_netns = pytest.mark.skipif(_usable() is not None,
                                 reason=f"link harness unavailable here: {_usable()}")


def test_without_root_it_stops_with_one_line(monkeypatch, capsys):
    monkeypatch.setattr(lb.os, "geteuid", lambda: 1000)
    assert lb.main(["--links", "100mbit"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["link_bench: needs root (network namespaces, veth pairs and tc); run it "
                   "with sudo or as root"]


@pytest.mark.parametrize("args,message", [
    (["--links", "10mbit"], "unknown link '10mbit'"),
    (["--configs", "fastest"], "unknown configuration 'fastest'"),
    (["--workers", "1"], "--workers must be >= 2"),
])
def test_bad_arguments_are_one_line(args, message, capsys):
    assert lb.main(args) == 2
    assert message in capsys.readouterr().err


@needs_netns
def test_wire_bytes_match_the_accounted_bytes_and_nothing_is_left(tmp_path, capsys):
    out = tmp_path / "rows.json"
    rc = lb.main(["--links", "100mbit", "--configs", "golomb_qsgd", "--steps", "3",
                  "--out_dir", str(tmp_path / "runs"), "--json", str(out)] + TINY)
    assert rc == 0, capsys.readouterr().err[-3000:]
    (row,) = json.loads(out.read_text())
    assert row["link"] == "100mbit" and row["workers"] == 2
    # The payload plus the lengths, TCP/IP and Ethernet headers: 2-8 % over
    # it measured, and nowhere near the dense gradient's 70x. Over a window
    # of 3 steps the two runs' own startup traffic (connection attempts,
    # heartbeats) differs by a few hundred bytes per step either way, hence
    # the margin below 1; the benchmarks' 50-600-step windows make it < 0.1 %.
    assert 0.9 < row["wire_per_accounted"] < 2.0, row
    assert row["wire_bytes_per_step"] == row["wire_bytes_per_worker"][0]
    assert all(w > 0 for w in row["wire_bytes_per_worker"])
    assert row["beyond_headers"] == pytest.approx(
        (row["wire_bytes_per_step"] - 66 * row["wire_frames_per_step"])
        / row["accounted_bytes_per_step"])
    assert "| 100mbit | golomb_qsgd |" in capsys.readouterr().out
    assert _namespaces_of_this_process() == []


@needs_netns
def test_a_failed_worker_stops_the_run_and_removes_the_namespaces(tmp_path, capsys):
    rc = lb.main(["--links", "20mbit", "--configs", "topk", "--steps", "2",
                  "--out_dir", str(tmp_path), "--", "--model=resnet20",
                  "--data_name=synthetic", "--index=nonsense"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "link_bench: worker" in err and "exited with code" in err
    assert _namespaces_of_this_process() == []


def test_wire_is_task_0s_difference_per_step_against_its_accounted_bytes():
    # (bytes, frames) per worker after the short and the long run, 2 steps apart.
    row = lb._wire([(1000, 10), (900, 9)], [(5000, 50), (4000, 40)], 2, 1500.0)
    assert row["wire_bytes_per_worker"] == [2000.0, 1550.0]
    assert row["wire_bytes_per_step"] == 2000.0 and row["wire_frames_per_step"] == 20.0
    assert row["wire_per_accounted"] == pytest.approx(2000 / 1500)
    assert row["beyond_headers"] == pytest.approx((2000 - 66 * 20) / 1500)
    assert lb._wire([(0, 0), (0, 0)], [(10, 1), (10, 1)], 1, 0)["wire_per_accounted"] is None


def test_time_to_target_is_the_first_evaluation_at_or_above_it():
    curve = [(0.0, 0, 0.1), (5.0, 10, 0.84), (9.5, 20, 0.85), (14.0, 30, 0.83), (20.0, 40, 0.9)]
    assert lb.time_to_target(curve, 0.85) == 9.5
    assert lb.time_to_target(curve, 0.1) == 0.0
    assert lb.time_to_target(curve, 0.95) is None


def test_seed_summary_is_mean_and_sample_sd():
    rows = [{"link": "unshaped", "config": "topk", "final": f,
             "curve": [(0.0, 0, 0.1), (t, 10, f)]} for f, t in ((0.80, 3.0), (0.86, 5.0),
                                                                 (0.90, 7.0))]
    line = lb.seeds_table(rows, 0.85).splitlines()[-1]
    cells = [c.strip() for c in line.strip("|").split("|")]
    # numpy: mean 0.8533, sd (ddof=1) 0.0503; reached by two seeds, at 5 and 7 s.
    assert cells == ["unshaped", "topk", "3", "0.8000, 0.8600, 0.9000", "0.8533 ± 0.0503",
                     "6.0", "2/3"]


@needs_netns
def test_time_to_accuracy_mode_trains_evaluates_and_cleans_up(tmp_path, capsys):
    out, png = tmp_path / "rows.json", tmp_path / "tta.png"
    rc = lb.main(["--links", "100mbit", "--configs", "golomb_qsgd", "--steps", "2",
                  "--train_steps", "6", "--eval_every", "3", "--target", "0.0",
                  "--out_dir", str(tmp_path / "runs"), "--json", str(out), "--plot", str(png)]
                 + TINY + ["--num_eval_examples=32"])
    assert rc == 0, capsys.readouterr().err[-3000:]
    (row,) = json.loads(out.read_text())
    assert row["metric"] == "accuracy" and row["seed"] == 0
    # Every 3 steps and at the end (6 steps + TINY's 1 warm-up batch).
    assert [step for _, step, _ in row["curve"]] == [0, 3, 6, 7]
    assert row["final"] == row["curve"][-1][2] and 0.0 <= row["final"] <= 1.0
    assert 0.9 < row["wire_per_accounted"] < 2.0, row  # margin: see the test above
    table = capsys.readouterr().out
    assert "| 100mbit | golomb_qsgd | 0 |" in table and "| 0.0 |" in table  # reached at step 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert _namespaces_of_this_process() == []
