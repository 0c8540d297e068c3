"""Bytes per step of every `deepreduce-bench --compare` preset over fixed
gradients: the golden record of tests/exchange/test_golden_bytes.py.

    python tests/exchange/golden_bytes.py --write tests/data/golden_bytes.json

Each preset's parameter dict (as deepreduce-bench resolves it) reduces the
same seeded gradients (a small convolutional model's shapes, a different
batch per replica and step) over two logical CPU devices with
DeepReduceCrossDeviceOps, for STEPS steps; every replica's sent, dense and
received bytes of each step come from its ledger. Warm-ups and LGC's phases
are shortened (OVERRIDES) so that the steps cover every phase. The record
was written by the code before the step's redesign (issue 40: commit
7a23893); the test asserts that the code of today sends exactly the same
bytes. It uses only APIs both have. A preset added later (sparse_allreduce,
2026-12-06; max_reduction, 2026-12-07) was recorded by the commit that added
it, every earlier entry unchanged; max_reduction again when its configuration
changed (0.25 % and the schedule, issue 51), alone; sparse_max (issue 62) alone,
and again when it became int8 values at 0.5 % (2026-12-08):

    python tests/exchange/golden_bytes.py --only sparse_max --write tests/data/golden_bytes.json
"""
import argparse
import json
import sys

import numpy as np
import tensorflow as tf

STEPS = 7
SHAPES = [(3, 3, 3, 16), (16,), (3, 3, 16, 32), (32,), (512, 64), (64,), (64, 10), (10,)]
# Short warm-ups and phases, so that STEPS steps cover all of them.
OVERRIDES = {
    "golomb_qsgd_dgc": {"warmup_steps": 3},
    "lgc_ps": {"lgc_warmup_steps": 2, "lgc_train_steps": 2},
    "lgc_rar": {"lgc_warmup_steps": 2, "lgc_train_steps": 2},
    "powersgd": {"start_iter": 2},
    "sparse_allreduce": {"warmup_steps": 3},
    "max_reduction": {"warmup_steps": 3, "schedule_steps": 5},
    "sparse_max": {"warmup_steps": 3, "schedule_steps": 5},
}
SKIP = ("uncompressed", "flags")  # TensorFlow's own all-reduce; the command line's flags
# Beyond the presets: the summable all-reduce (random-k positions from the
# shared seed).
EXTRA = {"randomk_allreduce": {"compressor": "randomk", "compress_ratio": 0.01,
                               "memory": "residual", "communicator": "allreduce"}}


def presets():
    """{name: parameter dict} of the --compare presets, as deepreduce-bench
    resolves them, with OVERRIDES applied."""
    from absl import flags as absl_flags

    from deepreduce_bench import compare
    from deepreduce_bench import flags as bench_flags
    from deepreduce_bench.presets import PRESETS

    out = {}
    for name in PRESETS:
        if name in SKIP:
            continue
        fv = absl_flags.FlagValues()
        bench_flags.define_flags(fv)
        fv(["deepreduce-bench"] + list(compare.preset_args(name, fv)))
        params = dict(bench_flags.resolve(fv).params)
        params.update(OVERRIDES.get(name, {}))
        out[name] = params
    out.update(EXTRA)
    return out


def gradients(step, replica):
    rng = np.random.default_rng(1000 * step + replica)
    return [(rng.standard_normal(s) * (1 + replica)).astype(np.float32) for s in SHAPES]


def measure(params, devices):
    """Per step, per replica: (sent, dense, received) bytes."""
    from deepreduce_tf import distribute as drd

    ops = drd.DeepReduceCrossDeviceOps(params)
    rows = []
    for step in range(STEPS):
        lists = []
        for r, device in enumerate(devices):
            with tf.device(device):
                lists.append([tf.constant(g) for g in gradients(step, r)])
        ops.reduce_tensors(lists)
        mine = []
        for comp in ops.compressors:
            sent, dense = comp.ledger.step_totals()
            received = comp.ledger.received_totals()[0]
            mine.append([int(sent), int(dense), int(received)])
        rows.append(mine)
    return rows


DEVICES = ["/cpu:0", "/cpu:1"]


def record():
    return {name: {"params": params, "bytes": measure(params, DEVICES)}
            for name, params in presets().items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", help="the JSON file to write (default: print)")
    parser.add_argument("--only", help="record this preset alone; --write then keeps the "
                                       "file's other entries as they are")
    args = parser.parse_args(argv)
    tf.config.set_logical_device_configuration(
        tf.config.list_physical_devices("CPU")[0],
        [tf.config.LogicalDeviceConfiguration()] * 2)
    if args.only:
        params = presets()[args.only]
        entries = {}
        if args.write:
            with open(args.write) as f:
                entries = json.load(f)["presets"]
        entries[args.only] = {"params": params, "bytes": measure(params, DEVICES)}
    else:
        entries = record()
    text = json.dumps({"steps": STEPS, "shapes": SHAPES, "presets": entries}, indent=1,
                      sort_keys=True)
    if args.write:
        with open(args.write, "w") as f:
            f.write(text + "\n")
    else:
        sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
