"""benchmarks/link_bench.py: workers in network namespaces over shaped links.
Runs where this process is root and may create namespaces (CI), else skips."""
import importlib.util
import json
import os
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.path.dirname(HERE), "benchmarks", "link_bench.py")
TINY = ["--", "--model=resnet20", "--data_name=synthetic", "--batch_size=8",
        "--num_warmup_batches=1"]


def _load():
    spec = importlib.util.spec_from_file_location("link_bench", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


lb = _load()


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
    # The payload plus the lengths all-gather, TCP/IP and Ethernet headers
    # (and whatever heartbeat traffic falls into the longer run): 5-15 %
    # measured; never less than the payload, and nowhere near the dense
    # gradient's 70x.
    assert 1.0 < row["wire_per_accounted"] < 2.0, row
    assert all(w > 0 for w in row["wire_bytes_per_worker"])
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
