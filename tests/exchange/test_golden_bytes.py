"""Bytes per step are those of the code before the step's redesign: every
--compare preset (and the summable all-reduce) over fixed gradients, every
replica's sent, dense and received bytes of every step, against the record
that commit 7a23893 wrote (tests/exchange/golden_bytes.py)."""
import json
import pathlib

import pytest

import golden_bytes

RECORD = pathlib.Path(__file__).parent.parent / "data" / "golden_bytes.json"
GOLDEN = json.loads(RECORD.read_text())


def test_the_record_covers_every_preset():
    assert GOLDEN["steps"] == golden_bytes.STEPS
    assert [list(s) for s in golden_bytes.SHAPES] == GOLDEN["shapes"]
    assert sorted(golden_bytes.presets()) == sorted(GOLDEN["presets"])


@pytest.mark.parametrize("name", sorted(GOLDEN["presets"]))
def test_bytes_per_step_are_unchanged(name):
    want = GOLDEN["presets"][name]
    params = golden_bytes.presets()[name]
    assert params == want["params"], "the preset's parameters changed"
    got = golden_bytes.measure(params, golden_bytes.DEVICES)
    assert got == want["bytes"]
