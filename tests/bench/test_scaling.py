"""The step cost model (deepreduce_tf.cost) and deepreduce-cost.

Hand-computed arithmetic, the library's byte accounting, monotonicity, the
command's answers on a fixed profile, refusals, the validation against the
recorded shaped-link runs, and a seconds-long --measure_profile."""
import copy
import json
import math
import os
import subprocess
import sys

import pytest

from deepreduce_bench import scaling as cli
from deepreduce_tf import cost

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "benchmarks", "results")

# A fixed profile: round numbers, so every figure can be computed by hand.
FIXED = {
    "name": "fixed", "device": "test",
    "compute_ms": {"resnet20": {"value": 10.0}, "resnet50": 100.0},
    "codecs": {
        "golomb_qsgd_dgc": {"encode_ns_per_element": 20.0, "decode_ns_per_element": 10.0},
        "powersgd": {"encode_ns_per_element": 1.0, "decode_ns_per_element": 0.0,
                     "ns_per_element_per_rank": 1.0},
        "lgc_rar": {"encode_ns_per_element": 30.0, "decode_ns_per_element": 10.0},
    },
    "link": {"wire_overhead": 1.0, "latency_us": 0.0},
    "local_link": {"gbit": 800.0, "latency_us": 0.0},
}


@pytest.fixture
def fixed():
    return cost.Profile.from_dict(copy.deepcopy(FIXED))


def gbit(value, latency_us=0.0):
    return cost.Link(f"{value}gbit", value * 1e9, latency_us * 1e-6)


# ---------------------------------------------------------------- layouts, bytes

@pytest.mark.parametrize("shapes, tensors, elements", [
    (cost.resnet20_shapes(), 59, 269_722),
    (cost.resnet50_shapes(), 161, 25_557_032),
    (cost.gpt_shapes(), 292, 1_315_723_264),
])
def test_layouts(shapes, tensors, elements):
    assert len(shapes) == tensors
    assert sum(cost._numel(s) for s in shapes) == elements


def test_ring_received_is_the_accountings():
    from deepreduce_tf import accounting

    for nbytes in (0, 1, 1_078_888, 94_114_088):
        for w in (1, 2, 3, 4, 8, 256):
            assert cost.ring_received(nbytes, w) == accounting.ring_received(nbytes, w)
            assert cost.ring_received(nbytes, w) == 2 * (w - 1) * nbytes // w


def test_bytes_against_the_recorded_runs():
    r20, r50 = cost.resnet20_shapes(), cost.resnet50_shapes()
    # PowerSGD: bytes_by_replicas_20261127.json and docs/powersgd.md, exact.
    assert [cost.powersgd_bytes(r20, r) for r in (1, 2, 4)] == [31_168, 56_788, 108_028]
    r50_10 = cost.resnet50_shapes(num_classes=10)
    assert [cost.powersgd_bytes(r50_10, r) for r in (1, 2)] == [538_528, 864_532]
    # K and the dense section of ResNet-50's default buckets, as the GPU run
    # counted them (cuda_step_throughput_h100_20261127.txt).
    assert cost.split_sections(r50)[:2] == (255_374, 23_400)
    # Golomb + QSGD 7 bit: the expected Rice code length and QSGD's bits per
    # value against the measured 8.120 and 8.063 bits, and whole payloads.
    assert cost.golomb_bits_per_index(0.01) == pytest.approx(8.120, rel=0.003)
    assert cost.qsgd_bits_per_value() == pytest.approx(8.063, rel=0.001)
    assert cost.golomb_qsgd_payload(r20) == pytest.approx(15_350, rel=0.01)
    assert cost.golomb_qsgd_payload(r50) == pytest.approx(610_550, rel=0.005)
    assert cost.golomb_qsgd_payload(cost.gpt_shapes()) == pytest.approx(26_624_144, rel=0.005)
    assert cost.topk_payload(r20) == pytest.approx(31_364, abs=8)
    assert cost.lgc_rar_bytes(r20) == pytest.approx(12_564, abs=8)
    # max_reduction's steady state: one top-k of 0.25 % over ResNet-20's single
    # bucket, the last step of the main job's runs (1,616-1,618 B on seeds 0-2;
    # benchmarks/results/max_reduction_schedule_resnet20_600_test10k.json); the
    # model says 1,580 (its golomb bits are those of uniform gaps). At 0.3 %
    # (the preset before 2026-12-07): 1,860 B on seed 0, the model 1,861.
    assert cost.golomb_bits_per_index(0.003) == pytest.approx(9.864, rel=0.001)
    assert cost.max_reduction_payload(r20, density=0.003) == pytest.approx(1_860, rel=0.01)
    assert cost.max_reduction_payload(r20) == pytest.approx(1_616, rel=0.025)


# ---------------------------------------------------------------- the step, by hand

def test_ring_allreduce_by_hand(fixed):
    model = cost.get_model("resnet50")
    link = gbit(10, latency_us=50)
    for w in (1, 2, 4, 8, 256):
        step = cost.predict(fixed, model, "uncompressed", w, link)
        d = 4 * 25_557_032
        assert step.bytes_received == 2 * (w - 1) * d // w
        expected = (2 * (w - 1) * d // w) / (10e9 / 8) + 2 * (w - 1) * 50e-6
        assert step.exchange == pytest.approx(expected)
        assert step.total == pytest.approx(0.100 + expected)


def test_allgather_by_hand(fixed):
    model = cost.get_model("resnet20")
    payload = 16_691  # measured, the model's bytes for golomb_qsgd_dgc
    link = gbit(1, latency_us=20)
    for w in (1, 2, 8, 64):
        step = cost.predict(fixed, model, "golomb_qsgd_dgc", w, link)
        assert step.bytes_received == (w - 1) * payload
        assert step.exchange == pytest.approx((w - 1) * payload / 1.25e8 + (w - 1) * 20e-6)
        assert step.payloads == w
        assert step.encode == pytest.approx(20e-9 * 269_722)
        assert step.decode == pytest.approx(w * 10e-9 * 269_722)


def test_hierarchical_divides_the_payloads_by_g(fixed):
    model = cost.get_model("resnet50")
    payload, _ = cost.config_bytes(model, "golomb_qsgd_dgc")
    link = gbit(10)
    for w, g in ((2, 2), (4, 8), (16, 8)):
        flat = cost.predict(fixed, model, "golomb_qsgd_dgc", w, link, gpus=g)
        hier = cost.predict(fixed, model, "golomb_qsgd_dgc", w, link, gpus=g, hierarchical=True)
        assert flat.payloads == w * g and hier.payloads == w
        assert flat.bytes_received == (w * g - 1) * payload
        assert hier.bytes_received == (w - 1) * payload
        d = 4 * model.elements
        local = (2 * (g - 1) * d // g) / (800e9 / 8) + d / (800e9 / 8)
        assert hier.local == pytest.approx(local)
    one = cost.predict(fixed, model, "golomb_qsgd_dgc", 4, link, gpus=1, hierarchical=True)
    assert one.total == cost.predict(fixed, model, "golomb_qsgd_dgc", 4, link).total


def test_powersgd_and_lgc_by_hand(fixed):
    model = cost.get_model("resnet50")
    link = gbit(10, latency_us=10)
    p = cost.powersgd_bytes(model.shapes, 2)
    step = cost.predict(fixed, model, "powersgd_r2", 8, link)
    assert step.bytes_received == 2 * 7 * p // 8
    assert step.exchange == pytest.approx((2 * 7 * p // 8) / 1.25e9 + 3 * 2 * 7 * 10e-6)
    assert step.encode == pytest.approx((1.0 * 2 + 1.0) * model.elements * 1e-9)
    lat = cost.lgc_rar_bytes(model.shapes)
    step = cost.predict(fixed, model, "lgc_rar", 8, link)
    assert step.exchange == pytest.approx((2 * 7 * lat // 8) / 1.25e9 + 2 * 7 * 10e-6)


def test_token_bucket_credit():
    link = cost.Link("shaped", 8e6, burst=1000)  # 1 MB/s
    assert link.transfer(5000, idle=0.0) == pytest.approx(5e-3)
    assert link.transfer(5000, idle=0.0005) == pytest.approx(4.5e-3)  # 500 B refilled
    assert link.transfer(5000, idle=1.0) == pytest.approx(4e-3)        # capped at the burst
    assert link.transfer(500, idle=1.0) == 0.0


@pytest.mark.parametrize("config, hier", [("uncompressed", False), ("golomb_qsgd_dgc", False),
                                          ("golomb_qsgd_dgc", True), ("lgc_rar", False),
                                          ("powersgd_r1", False), ("powersgd_r4", False)])
@pytest.mark.parametrize("model", ["resnet20", "resnet50"])
def test_more_bandwidth_never_slower(fixed, model, config, hier):
    spec = cost.get_model(model)
    for w, g in ((1, 1), (2, 1), (8, 8), (256, 8)):
        times = [cost.predict(fixed, spec, config, w, gbit(b, lat), gpus=g,
                                 hierarchical=hier).total
                 for b in (0.02, 0.1, 1, 10, 25, 100, 400) for lat in (50,)]
        assert times == sorted(times, reverse=True)
        lat_times = [cost.predict(fixed, spec, config, w, gbit(10, lat), gpus=g,
                                     hierarchical=hier).total for lat in (0, 5, 50, 500)]
        assert lat_times == sorted(lat_times)


# ---------------------------------------------------------------- the command

def _run(argv, capsys):
    rc = cli.main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture
def fixed_file(tmp_path):
    path = tmp_path / "fixed.json"
    path.write_text(json.dumps(FIXED))
    return str(path)


def test_winner_at_20mbit_and_100gbit(fixed_file, capsys):
    rc, out, _ = _run(["--model=resnet20", "--workers=2", "--link=20mbit",
                       f"--profile={fixed_file}"], capsys)
    assert rc == 0
    # This profile has codec costs of golomb_qsgd_dgc alone: it wins where the
    # accuracy table says it holds, else TF is kept and the verdict says why.
    figure = cost.get_model("resnet20").accuracy("golomb_qsgd_dgc", 2)
    if figure["verdict"] == "holds":
        assert "golomb_qsgd_dgc flat wins" in out
    else:
        assert "No compressed configuration has a measured accuracy within 0.5" in out
    # By hand: TF 10 ms + 1,078,888 B at 2.5 MB/s = 441.6 ms; golomb_qsgd_dgc
    # 10 + 20 ns x 269,722 + 2 x 10 ns x 269,722 + 16,691 B / 2.5 MB/s = 27.5 ms.
    assert "441.6" in out and "27.5" in out
    rc, out, _ = _run(["--model=resnet20", "--workers=2", "--link=100gbit",
                       f"--profile={fixed_file}"], capsys)
    assert rc == 0
    assert "keep TensorFlow's all-reduce" in out or "Do not compress." in out


def test_packaged_cpu_profile_answers(capsys):
    rc, out, _ = _run(["--model=resnet20", "--workers=2", "--link=20mbit"], capsys)
    # the fastest of the configurations that hold (the accuracy table) wins
    assert rc == 0 and any(f"{c} flat wins" in out for c in ("golomb_qsgd_dgc", "max_reduction"))
    assert "holds; job" in out.split(" wins")[1]
    assert "0.85 (measured)" in out and "not reached" in out
    rc, out, _ = _run(["--model=resnet50", "--workers=16", "--gpus_per_worker=8",
                       "--link=10gbit", "--profile=h100"], capsys)
    assert rc == 0
    assert "golomb_qsgd_dgc hierarchical" in out and "powersgd rank 4" in out
    assert "assumed" in out


def test_parameters_and_shapes(tmp_path, fixed_file, capsys):
    rc, out, _ = _run(["--parameters=1e6", "--compute_ms=5", "--workers=4", "--link=1gbit",
                       f"--profile={fixed_file}"], capsys)
    assert rc == 0 and "1,000,000 parameters" in out
    shapes = tmp_path / "shapes.json"
    shapes.write_text(json.dumps([[3, 3, 64, 64], [64], [1000, 10]]))
    rc, out, _ = _run([f"--shapes={shapes}", "--compute_ms=5", "--workers=4",
                       "--bandwidth_gbit=1", "--latency_us=30", f"--profile={fixed_file}"], capsys)
    assert rc == 0 and "46,928 parameters" in out and "latency 30 us" in out


@pytest.mark.parametrize("argv, message", [
    (["--model=vgg99", "--link=1gbit"], "unknown model 'vgg99'"),
    (["--model=resnet20", "--workers=0", "--link=1gbit"], "--workers must be >= 1, got 0"),
    (["--model=resnet20", "--gpus_per_worker=0", "--link=1gbit"], "--gpus_per_worker must be >= 1"),
    (["--model=resnet20", "--bandwidth_gbit=-1"], "--bandwidth_gbit must be > 0, got -1.0"),
    (["--model=resnet20", "--link=-5gbit"], "bandwidth must be > 0"),
    (["--model=resnet20", "--link=fast"], "expected a rate such as 1gbit"),
    (["--model=resnet20", "--link=1gbit", "--latency_us=-3"], "--latency_us must be >= 0"),
    (["--model=resnet20"], "give --link"),
    (["--model=gpt1.3b", "--link=1gbit", "--profile=FIXED"], "no compute time for model 'gpt1.3b'"),
    (["--model=resnet20", "--link=1gbit", "--profile=nope"], "profile 'nope': no such file"),
])
def test_bad_input_is_refused(argv, message, fixed_file, capsys):
    argv = [a.replace("FIXED", fixed_file) for a in argv]
    rc, out, err = _run(argv, capsys)
    assert rc == 1 and out == ""
    assert err.startswith("deepreduce-scaling: error: ") and message in err
    assert "Traceback" not in err


@pytest.mark.parametrize("drop, message", [
    (("codecs",), "missing key 'codecs'"),
    (("link", "wire_overhead"), "missing key 'wire_overhead'"),
    (("local_link", "gbit"), "missing key 'gbit'"),
    (("codecs", "lgc_rar", "decode_ns_per_element"), "missing key 'decode_ns_per_element'"),
])
def test_malformed_profile_names_the_key(tmp_path, drop, message, capsys):
    d = copy.deepcopy(FIXED)
    node = d
    for key in drop[:-1]:
        node = node[key]
    del node[drop[-1]]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(d))
    rc, _, err = _run(["--model=resnet20", "--link=1gbit", f"--profile={path}"], capsys)
    assert rc == 1 and message in err and str(path) in err


def test_profile_values_checked(tmp_path, capsys):
    d = copy.deepcopy(FIXED)
    d["compute_ms"]["resnet20"] = {"value": -1}
    path = tmp_path / "neg.json"
    path.write_text(json.dumps(d))
    rc, _, err = _run(["--model=resnet20", "--link=1gbit", f"--profile={path}"], capsys)
    assert rc == 1 and "compute_ms.resnet20" in err and "positive" in err
    path.write_text("{not json")
    rc, _, err = _run(["--model=resnet20", "--link=1gbit", f"--profile={path}"], capsys)
    assert rc == 1 and "not valid JSON" in err


def test_api_refuses_bad_counts(fixed):
    model = cost.get_model("resnet20")
    with pytest.raises(cost.ScalingError, match="workers must be an integer >= 1"):
        cost.predict(fixed, model, "uncompressed", 0, gbit(1))
    with pytest.raises(cost.ScalingError, match="bandwidth must be > 0"):
        cost.Link("x", -1.0)


def test_packaged_profiles_load():
    for name in ("cpu_2core", "h100"):
        p = cost.load_profile(name)
        assert p.name == name and p.compute_ms


def test_importable_without_tensorflow():
    code = ("import sys; import deepreduce_tf.cost, deepreduce_bench.scaling; "
            "assert 'tensorflow' not in sys.modules, 'tensorflow imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# ---------------------------------------------------------------- validation

def test_validation_against_the_shaped_link_tables():
    rows = cli.validate(cost.load_profile("cpu_2core"), RESULTS)
    assert len(rows) == 13 + 12
    by_key = {(r["model"], r["link"], r["config"]): r for r in rows}
    for key, row in by_key.items():
        if key == ("ncf", "1gbit", "golomb_qsgd"):
            # docs/cost.md: the same bytes as the unshaped row (7.99 ms) over a
            # link that carries them in 0.24 ms; the 2 ms are this machine's noise.
            assert row["error"] < 0 and abs(row["error"]) < 0.25
            continue
        assert abs(row["error"]) <= 0.15, (key, row)


# ---------------------------------------------------------------- measuring a profile

def test_measure_profile_tiny(tmp_path):
    out = tmp_path / "mine.json"
    proc = subprocess.run(
        [sys.executable, "-m", "deepreduce_bench.scaling", f"--measure_profile={out}",
         "--model=resnet20", "--steps=1", "--repeats=1", "--batch_size=2", "--image_size=8"],
        capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    d = json.loads(out.read_text())
    for key in cost.PROFILE_KEYS:
        assert key in d
    assert d["compute_ms"]["resnet20"]["value"] > 0
    for config in ("topk", "golomb_qsgd", "golomb_qsgd_dgc"):
        assert d["codecs"][config]["encode_ns_per_element"] > 0
        assert d["codecs"][config]["decode_ns_per_element"] > 0
    assert d["link"]["latency_us"] > 0 and d["link"]["named"]["loopback"]["gbit"] > 0
    p = cost.Profile.from_dict(d)
    step = cost.predict(p, cost.get_model("resnet20"), "golomb_qsgd_dgc", 4, gbit(1))
    assert step.total > 0


def test_overlap_hides_only_tfs_dense_allreduce(fixed, capsys):
    import dataclasses

    model = cost.get_model("resnet50")
    link = gbit(10)
    hidden = dataclasses.replace(fixed, overlap=0.5)
    plain = cost.predict(fixed, model, "uncompressed", 4, link)
    half = cost.predict(hidden, model, "uncompressed", 4, link)
    assert half.exchange == pytest.approx(max(0.0, plain.exchange - 0.5 * 0.100))
    for config in ("golomb_qsgd_dgc", "powersgd_r2"):
        assert cost.predict(hidden, model, config, 4, link).total == \
            cost.predict(fixed, model, config, 4, link).total
    rc, _, err = _run(["--model=resnet20", "--link=1gbit", "--overlap=1.5"], capsys)
    assert rc == 1 and "--overlap must be in [0, 1]" in err


def test_powersgd_validation_rows():
    rows = cli.validate_powersgd(cost.load_profile("cpu_2core"), RESULTS)
    held = [r for r in rows if not r["fit"]]
    assert [r["link"] for r in held] == ["100mbit", "20mbit"]
    assert all(abs(r["error"]) <= 0.15 for r in rows)


# ---------------------------------------------------------------- the sparse all-reduce

def test_sparse_allreduce_by_hand_and_against_the_accounting(fixed):
    """Its positions all-gathered and its values all-reduced, by hand; and
    the bytes a worker receives at W = 2, 4, 8 against the library's exact
    accounting of the same shapes (benchmarks/bytes_by_replicas.py)."""
    prof = cost.Profile.from_dict(dict(copy.deepcopy(FIXED), codecs=dict(
        FIXED["codecs"], sparse_allreduce={"encode_ns_per_element": 20.0,
                                           "decode_ns_per_element": 10.0})))
    model = cost.get_model("resnet20")
    link = gbit(10, latency_us=10)
    q, v = cost.sparse_allreduce_parts(model.shapes, 8)
    step = cost.predict(prof, model, "sparse_allreduce", 8, link)
    assert step.bytes_received == 7 * q + 2 * 7 * v // 8
    assert step.exchange == pytest.approx(step.bytes_received / 1.25e9 + 3 * 7 * 10e-6)
    assert step.encode + step.decode == pytest.approx(30.0 * model.elements * 1e-9)
    hier = cost.predict(prof, model, "sparse_allreduce", 4, link, gpus=2, hierarchical=True)
    q4, v4 = cost.sparse_allreduce_parts(model.shapes, 4)
    assert hier.bytes_received == 3 * q4 + 2 * 3 * v4 // 4 and hier.local > 0
    with open(os.path.join(RESULTS, "bytes_by_replicas_sparse_allreduce_20261206.json")) as f:
        rows = [r for r in json.load(f)
                if r["model"] == "resnet20" and r["config"] == "sparse_allreduce"]
    assert len(rows) == 3
    for r in rows:
        got = cost.predict(prof, model, "sparse_allreduce", r["replicas"], link)
        assert got.bytes_received == pytest.approx(r["received_bytes"], rel=0.01), r
        assert got.bytes_sent == pytest.approx(r["sent_bytes"], rel=0.01), r


@pytest.mark.parametrize("tolerance", [0.5, 5.0])
def test_the_verdict_keeps_to_the_accuracy_tolerance(tolerance):
    """ResNet-50, 32 machines of 8 H100s, 25 Gbit/s: the winner is the
    fastest configuration whose MEASURED accuracy is within the tolerance;
    every faster one is named apart (outside the tolerance, or unverified)."""
    profile = cost.load_profile("h100")
    model = cost.get_model("resnet50")
    rows, text = cli.answer(profile, model, 32, 8, profile.link_for("25gbit"),
                            tolerance=tolerance)
    rivals = [r for r in rows[1:] if "step" in r and r["tta_speedup"] is not None]
    within = [r for r in rivals if r["accuracy"] is not None and r["accuracy"] >= -tolerance]
    held = [r for r in within if r["accuracy_verdict"] == "holds"]
    best = max(held or within, key=lambda r: r["tta_speedup"])
    assert text.startswith(f"{best['label']} wins")
    for r in rivals:
        if r not in within and r["tta_speedup"] > best["tta_speedup"]:
            assert r["label"] in text.split("Faster, but")[1], r["label"]
    if tolerance == 0.5:  # PowerSGD (-1.27 and below) never wins; one that holds does
        assert best["accuracy_verdict"] == "holds", text


def test_a_negative_tolerance_is_refused(capsys):
    rc, _, err = _run(["--model=resnet20", "--link=20mbit", "--tolerance=-1"], capsys)
    assert rc == 1 and "--tolerance must be >= 0" in err


def test_later_sittings_validate_the_sparse_allreduce():
    """The 2026-12-06 sitting: every sparse_allreduce row (held out of the
    fit) within 15 %; the fit rows reproduce their own sitting; NCF's rerun
    shows its 1 Gbit/s golomb_qsgd row within the rows' own spread (the same
    configuration faster on the slower link)."""
    rows = cli.validate_sittings(cost.load_profile("cpu_2core"), RESULTS)
    sparse = [r for r in rows if r["config"] == "sparse_allreduce"]
    assert [r["link"] for r in sparse] == ["unshaped", "100mbit", "20mbit"]
    assert all(not r["fit"] and abs(r["error"]) <= 0.15 for r in sparse)
    assert all(abs(r["error"]) <= 0.15 for r in rows if r["fit"])
    ncf = {(r["link"], r["config"]): r for r in rows if r["model"] == "ncf"}
    assert ncf[("1gbit", "golomb_qsgd")]["measured_ms"] < ncf[("unshaped", "golomb_qsgd")][
        "measured_ms"]


def test_a_faster_configuration_outside_the_tolerance_is_named_apart(fixed):
    """On the fixed profile (no sparse all-reduce costs: its rows are
    skipped) at 64 machines of 8 over 1 Gbit/s the fastest configuration is
    one measured far below uncompressed (PowerSGD or LGC-RAR): the verdict
    names the fastest within 0.5 points and shows it apart; with a 10-point
    tolerance it wins."""
    model = cost.get_model("resnet50")
    rows, text = cli.answer(fixed, model, 64, 8, gbit(1))
    timed = [r for r in rows[1:] if "step" in r]
    fastest = max(timed, key=lambda r: r["tta_speedup"])
    assert fastest["accuracy"] < -0.5
    # Here nothing within 0.5 points beats TF's all-reduce: keep it, and say
    # what would be faster at what accuracy.
    assert text.startswith(("Nothing beats TensorFlow's uncompressed all-reduce here within 0.5",
                            "No compressed configuration has a measured accuracy within 0.5"))
    assert f"outside the accuracy tolerance: {fastest['label']} (" in text
    _, loose = cli.answer(fixed, model, 64, 8, gbit(1), tolerance=10.0)
    assert loose.startswith(f"{fastest['label']} wins")


def test_sparse_max_bytes_stay_flat_in_the_number_of_workers():
    """sparse_max in the cost model: one top-k of 0.5 % over all of
    ResNet-20's 269,722 elements (1,349 int8 codes of one byte summed), each
    of W workers' top-(k/W) positions Golomb-coded; what a worker receives at
    W = 8 is less than twice W = 2's (the all-gather's grows 7-fold)."""
    shapes = cost.get_model("resnet20").shapes
    assert cost.SPARSE_ALLREDUCE["sparse_max"] == (0.005, True, 1)
    received = {}
    for W in (2, 8):
        q, v = cost.sparse_allreduce_parts(shapes, W, 0.005, whole_bucket=True,
                                              value_bytes=1)
        assert v == 1349
        share = math.ceil(0.005 / W * 269_722)
        assert q == (math.ceil(share * cost.golomb_bits_per_index(0.005 / W) / 8)
                     + cost.HEADER_BYTES_PER_BUCKET * cost.buckets(shapes))
        received[W] = cost.allgather_received(q, W) + cost.ring_received(v, W)
    assert received[8] < 2 * received[2]
    assert cost.config_bytes(cost.get_model("resnet20"), "sparse_max")[0] == sum(
        cost.sparse_allreduce_parts(shapes, 2, 0.005, whole_bucket=True, value_bytes=1))
