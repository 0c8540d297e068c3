"""examples/flower_quickstart: the Flower App runs as its README says
(`bash run_local.sh`: `flwr run .` on Flower's local simulation engine,
offline, on a SuperLink the script starts and stops), compressed both ways,
and says so in Flower's log; keras_initial_weights, which lets both sides
build the same initial model, against its own contract."""
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
APP_DIR = os.path.join(REPO_ROOT, "examples", "flower_quickstart")


def _small_model():
    import keras

    return keras.Sequential([keras.Input((6,)), keras.layers.Dense(5, activation="relu"),
                             keras.layers.Dropout(0.5), keras.layers.Dense(3)])


def test_keras_initial_weights_are_the_same_and_leave_the_global_generators_alone():
    from deepreduce_tf.federated import keras_initial_weights

    random.seed(99)
    np.random.seed(99)
    python_state, numpy_state = random.getstate(), np.random.get_state()[1].copy()
    first = keras_initial_weights(_small_model)
    assert random.getstate() == python_state  # restored: nothing seeded for the caller
    np.testing.assert_array_equal(np.random.get_state()[1], numpy_state)
    random.random()  # whatever the global state is now, the next build is the same
    again = keras_initial_weights(_small_model)
    assert [w.shape for w in first] == [(6, 5), (5,), (5, 3), (3,)]
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    other = keras_initial_weights(_small_model, seed=1)
    assert not np.array_equal(first[0], other[0])
    # Without it, two builds differ: the seeding is what makes them agree.
    plain = [_small_model().get_weights()[0] for _ in range(2)]
    assert not np.array_equal(plain[0], plain[1])


def test_keras_initial_weights_in_another_process_are_the_same():
    from deepreduce_tf.federated import keras_initial_weights

    code = ("import sys, numpy as np; sys.path.insert(0, sys.argv[1]); "
            "import test_flower_quickstart as t; "
            "from deepreduce_tf.federated import keras_initial_weights; "
            "import random; random.seed(12345); "
            "np.savez(sys.argv[2], *keras_initial_weights(t._small_model, seed=7))")
    out = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"kiw_{os.getpid()}.npz")
    try:
        subprocess.run([sys.executable, "-c", code, os.path.dirname(__file__), out],
                       check=True, timeout=300, capture_output=True)
        with np.load(out) as got:
            theirs = [got[f"arr_{i}"] for i in range(len(got.files))]
    finally:
        if os.path.exists(out):
            os.remove(out)
    for a, b in zip(keras_initial_weights(_small_model, seed=7), theirs):
        np.testing.assert_array_equal(a, b)


def test_keras_initial_weights_bad_arguments_say_what_to_pass():
    from deepreduce_tf.federated import keras_initial_weights

    with pytest.raises(TypeError, match="function that builds the model"):
        keras_initial_weights(_small_model())
    with pytest.raises(TypeError, match="seed must be an int"):
        keras_initial_weights(_small_model, seed="0")
    state = random.getstate()
    with pytest.raises(RuntimeError, match="boom"):
        keras_initial_weights(lambda: (_ for _ in ()).throw(RuntimeError("boom")))
    assert random.getstate() == state


@pytest.mark.slow
def test_flwr_run_of_the_example_app_is_compressed_and_says_so(tmp_path):
    """The README's command, `bash run_local.sh` (its own local SuperLink,
    `flwr run . --stream`): the run is compressed both ways, and when the
    script returns, the SuperLink it started and everything under it are
    gone (the script kills its PID; nothing else is touched)."""
    import processes

    processes.flower_tool("flwr")
    processes.flower_tool("flower-superlink")
    from deepreduce_bench.data import find_fashion_mnist

    if find_fashion_mnist() is None:
        pytest.skip("Fashion-MNIST is not on this machine (bash build_deps/dev.sh setup gets it)")
    app = tmp_path / "flower_quickstart"
    shutil.copytree(APP_DIR, app, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "flwr_home").mkdir()
    env = processes.flower_env(tmp_path / "flwr_home", PYTHON=sys.executable)
    env.pop("FLWR_LOCAL_SUPERLINK_HTTP_API_PORT", None)  # the script picks a free port
    out_dir = tmp_path / "out"
    started, left = [], []
    try:
        run = subprocess.run(
            ["bash", "run_local.sh", "--federation-config", "num-supernodes=2",
             "--run-config", f'num-server-rounds=2 fraction-train=1.0 examples-per-node=2000 '
                             f'out-dir="{out_dir}"'],
            cwd=app, env=env, capture_output=True, text=True, timeout=480)
        log = run.stdout + run.stderr
        started = [int(pid) for pid in re.findall(r"local SuperLink pid (\d+) on", log)]
        end = time.monotonic() + 15  # a SuperExec ends within a second or so of its SuperLink
        while processes.running_in(app) and time.monotonic() < end:
            time.sleep(0.5)
        left = processes.running_in(app)  # what the script left behind, if anything
    finally:
        processes.stop(processes.running_in(app))  # never leave any (all run in the app's folder)
    superlink_logs = sorted((tmp_path / "flwr_home" / "local-superlink").glob("*.log"))
    assert run.returncode == 0, log[-4000:] + "".join(p.read_text()[-4000:]
                                                      for p in superlink_logs)
    # It ran on the script's own SuperLink (flwr did not start one), which
    # the script stopped with all under it.
    assert len(started) == 1 and "Starting local SuperLink" not in log, log[-2000:]
    assert left == [] and not processes.alive(started[0])
    with open(out_dir / "deepreduce_bytes.json") as f:
        saved = json.load(f)
    totals = saved["totals"]
    assert totals["rejected"] == 0 and saved["rejected"] == []
    # Both rounds: 2 train + 2 evaluate messages down, 2 updates up; none dense
    # (the nodes build the initial model), every one a fraction of FedAvg's.
    assert [r["round"] for r in saved["rounds"]] == [1, 2]
    assert [(r["down_messages"], r["up_messages"]) for r in saved["rounds"]] == [(4, 2)] * 2
    dense = saved["rounds"][0]["dense_bytes"]
    assert totals["fedavg_down_bytes"] == 8 * dense and totals["fedavg_up_bytes"] == 4 * dense
    assert 0 < totals["down_ratio"] < 0.25 and 0 < totals["up_ratio"] < 0.25
    # Flower's own log shows it: a line per round and the totals at the end,
    # with the numbers of the accounting the ServerApp saved.
    for r in saved["rounds"]:
        assert (f"DeepReduce: round {r['round']}: sent {r['down_bytes']:,} B in "
                f"{r['down_messages']} messages") in log, log[-4000:]
    assert (f"DeepReduce, 2 rounds: sent {totals['down_bytes']:,} B "
            f"({totals['down_ratio']:.3f} of FedAvg's)") in log, log[-4000:]
    assert "Saved the final model" in log
    # The saved model is the server's aggregate, which it evaluated each round.
    import keras

    model = keras.models.load_model(out_dir / "final_model.keras")
    assert [w.shape for w in model.get_weights()][0] == (3, 3, 1, 16)
    assert set(saved["server_accuracy"]) == {"0", "1", "2"}
    assert saved["server_accuracy"]["2"] > 0.3  # 2 rounds on 2 shards: far above chance
