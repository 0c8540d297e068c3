"""deepreduce-bench comparisons: the default run (uncompressed vs the recommended
compressed configuration), --compare presets, --exchange=tf, missing data (one
error before training; synthetic images only when asked for), the comparison
table and plot.

End-to-end runs are subprocesses started like the console script, on tiny
settings (batch 4, 1 + 2 steps, 20 test images); the rest runs in process.
"""
import json
import os
import struct

import numpy as np
import pytest
from absl import flags as absl_flags

from deepreduce_bench import data, models
from deepreduce_bench import compare
from deepreduce_bench import flags as bench_flags
from deepreduce_bench import report
from deepreduce_bench.presets import PRESETS
from test_bench_cli import bench, fake_fashion_mnist  # noqa: F401 (a fixture)

# Trains models, starts worker processes or runs Flower (minutes):
# `pytest -m "not slow"` leaves it out of a quick loop.
pytestmark = pytest.mark.slow

TINY = ["--num_batches=2", "--num_warmup_batches=1", "--batch_size=4", "--num_eval_examples=20",
        "--eval_every=1", "--display_every=1"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def resolve(args):
    fv = absl_flags.FlagValues()
    bench_flags.define_flags(fv)
    fv(["deepreduce-bench"] + list(args))
    return bench_flags.resolve(fv)


def resnet20_dense_bytes():
    """Bytes of one replica's dense gradients: the trainable variables of the
    model definition, float32."""
    return sum(4 * int(np.prod(v.shape)) for v in models.resnet20((32, 32, 3), 10)
               .trainable_variables)


def png_size(path):
    """(width, height) from a PNG's IHDR chunk; fails if the file is no PNG."""
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    assert head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


# ---------------------------------------------------------------------------
# Which runs a command line asks for (in process)

def _largest_that_holds():
    """The accuracy table read independently: per preset its decided rows
    (5 fresh seeds or more) of ResNet-20, the claims job's first; of the
    presets whose row holds, the one of the largest reduction."""
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "results",
                           "accuracy.json")) as f:
        table = json.load(f)
    order = ["claims", "main_600", "main_600_2k"]
    best = None
    for name in PRESETS:
        rows = sorted((r for r in table["rows"] if r["configuration"] == name
                       and r["model"] == "resnet20" and r["n"] >= 5 and r["job"] in order),
                      key=lambda r: (order.index(r["job"]), abs(r["workers"] - 2)))
        if rows and rows[0]["verdict"] == "holds" and (
                best is None or rows[0]["reduction"] > best[1]):
            best = (name, rows[0]["reduction"])
    return best[0] if best else "golomb_qsgd_dgc"


DEFAULT = _largest_that_holds()


def test_no_compression_flag_is_the_default_comparison():
    config = resolve([])
    assert config.compare == ("uncompressed", DEFAULT)  # resnet20: momentum SGD
    assert config.eval and config.num_batches == bench_flags.COMPARE_STEPS
    assert config.lr_schedule == "cosine"
    assert config.train_dir == "deepreduce_bench_runs"
    assert config.output_json == os.path.join("deepreduce_bench_runs", "compare.json")
    assert config.plot == os.path.join("deepreduce_bench_runs", "compare.png")
    assert config.data_name == "fashion_mnist"  # installed or not (missing: it stops)
    # Settings that are not compression flags keep the comparison.
    assert resolve(["--seed=3", "--num_batches=7"]).compare == config.compare
    # Without momentum SGD (ncf's Adam, or asked for) DGC's momentum correction does not
    # apply: the recommended configuration is golomb_qsgd, and a dgc preset is refused.
    assert resolve(["--optimizer=adam"]).compare == ("uncompressed", "golomb_qsgd")
    with pytest.raises(bench_flags.ConfigError, match="preset 'golomb_qsgd_dgc' applies DGC's "
                       "momentum correction, which needs --optimizer=momentum, not sgd; use "
                       "'golomb_qsgd' instead"):
        resolve(["--compare=uncompressed,golomb_qsgd_dgc", "--optimizer=sgd"])


def test_outputs_never_go_into_a_package_directory(tmp_path, monkeypatch):
    """In a checkout, ./deepreduce_bench is the package: no output lands there
    (a comparison's default is ./deepreduce_bench_runs)."""
    package = tmp_path / "deepreduce_bench"
    package.mkdir()
    (package / "__init__.py").write_text("")
    monkeypatch.chdir(tmp_path)
    assert resolve([]).train_dir == "deepreduce_bench_runs"
    for args, flag in ((["--train_dir=deepreduce_bench"], "train_dir"),
                       (["--train_dir=deepreduce_bench/x/y"], "train_dir"),
                       (["--compressor=topk", "--output_json=deepreduce_bench/r.json"],
                        "output_json"),
                       (["--compressor=topk", "--plot=./deepreduce_bench/p.png"], "plot")):
        with pytest.raises(bench_flags.ConfigError, match=f"--{flag}=.* is inside the Python "
                           f"package {package}"):
            resolve(args)
    # A directory of that name that is not a package is an ordinary directory.
    assert resolve(["--train_dir=runs/deepreduce_bench"]).train_dir == "runs/deepreduce_bench"


@pytest.mark.parametrize("args", [["--compressor=topk"], ["--index=golomb"], ["--bits=7"],
                                  ["--exchange=tf"], ["--deepreduce=none"]])
def test_compression_flags_without_compare_are_one_run(args):
    config = resolve(args)
    assert config.compare == () and config.lr_schedule == "constant"
    assert config.output_json == "deepreduce_bench_results.json"


def test_exchange_tf_takes_no_compression():
    config = resolve(["--exchange=tf"])
    assert config.exchange == "tf"
    assert config.params == {"compressor": "none", "deepreduce": None, "seed": 0}
    with pytest.raises(bench_flags.ConfigError, match="--exchange=tf .* got --index=bloom"):
        resolve(["--exchange=tf", "--index=bloom"])
    with pytest.raises(bench_flags.ConfigError, match="valid choices: deepreduce, tf"):
        resolve(["--exchange=nccl"])


def test_compare_presets_and_their_checks():
    assert resolve(["--compare=topk,bloom_polyfit"]).compare == ("topk", "bloom_polyfit")
    assert resolve(["--compare=uncompressed,flags", "--bits=7", "--value=qsgd"]).compare == (
        "uncompressed", "flags")
    with pytest.raises(bench_flags.ConfigError, match="--bits configure the 'flags' preset"):
        resolve(["--compare=uncompressed,topk", "--bits=7"])
    with pytest.raises(bench_flags.ConfigError, match="names topk more than once"):
        resolve(["--compare=topk,topk"])
    with pytest.raises(bench_flags.ConfigError, match="--worker_hosts"):
        resolve(["--compare=topk", "--worker_hosts=a:1,b:2"])
    with pytest.raises(bench_flags.ConfigError, match="--plot_compare"):
        resolve(["--plot_compare=a.json"])


def test_a_variant_changes_only_the_flags_it_names():
    """"<preset>+<flag>=<value>": the preset's flags with that one replaced (or
    added), resolved as a single run; bad variants are one usage error."""
    fv = absl_flags.FlagValues()
    bench_flags.define_flags(fv)
    fv(["deepreduce-bench"])
    names = ("golomb_qsgd_dgc+schedule=cosine", "powersgd+rank=4",
             "golomb_qsgd_dgc+warmup_steps=30+bits=5")
    assert resolve(["--compare=" + ",".join(names)]).compare == names
    base = resolve(compare.preset_args("golomb_qsgd_dgc", fv)).params
    cosine = resolve(compare.preset_args(names[0], fv)).params
    assert cosine["schedule"] == "cosine" and base.get("schedule") != "cosine"
    assert {k: v for k, v in cosine.items() if k not in ("schedule", "schedule_steps")} == {
        k: v for k, v in base.items() if k not in ("schedule", "schedule_steps")}
    assert resolve(compare.preset_args("powersgd", fv)).params["rank"] == 2
    assert resolve(compare.preset_args(names[1], fv)).params["rank"] == 4
    two = resolve(compare.preset_args(names[2], fv)).params
    assert (two["warmup_steps"], two["bits"]) == (30, 5)
    assert {k: v for k, v in two.items() if k not in ("warmup_steps", "bits")} == {
        k: v for k, v in base.items() if k not in ("warmup_steps", "bits")}
    for bad, why in (("zip+rank=4", "unknown preset 'zip'"),
                     ("powersgd+rank", "is not flag=value"),
                     ("powersgd+num_batches=3", "--num_batches is not a compression flag"),
                     ("flags+rank=4", "'flags' takes this command line's flags")):
        with pytest.raises(bench_flags.ConfigError, match=why):
            resolve([f"--compare={bad}"])


def test_every_preset_is_a_valid_single_run():
    """Each preset's flags, parsed as a command line, resolve to one run of
    the configuration its description names."""
    fv = absl_flags.FlagValues()
    bench_flags.define_flags(fv)
    fv(["deepreduce-bench"])
    expected = {
        "uncompressed": {"compressor": "none", "deepreduce": None},
        "topk": {"compressor": "topk", "compress_ratio": 0.01, "memory": "residual",
                 "deepreduce": None},
        "golomb_qsgd": {"compressor": "topk", "compress_ratio": 0.01, "memory": "residual",
                        "deepreduce": "both", "index": "golomb", "value": "qsgd", "bits": 7},
        "golomb_qsgd_dgc": {"compressor": "topk", "compress_ratio": 0.01, "memory": "dgc",
                            "momentum": 0.9, "warmup_steps": 60, "warmup": "exponential",
                            "deepreduce": "both", "index": "golomb", "value": "qsgd",
                            "bits": 7},
        "bloom_polyfit": {"compressor": "topk", "memory": "residual", "deepreduce": "both",
                          "index": "bloom", "fpr": 0.001, "policy": "conflict_sets",
                          "value": "polyfit"},
        "lgc_ps": {"compressor": "topk", "communicator": "lgc_ps", "index": "golomb",
                   "value": "fp16", "lgc_warmup_steps": 100, "lgc_train_steps": 200},
        "lgc_rar": {"compressor": "topk", "communicator": "lgc_rar", "index": "golomb",
                    "value": "fp16", "lgc_warmup_steps": 100, "lgc_train_steps": 200},
    }
    for name, want in expected.items():
        config = resolve(compare.preset_args(name, fv))
        assert config.compare == (), name
        assert {k: config.params.get(k) for k in want} == want, name
    assert resolve(compare.preset_args("uncompressed", fv)).exchange == "tf"


def test_synthetic_images_only_when_asked_for(tmp_path):
    config = resolve([f"--data_dir={tmp_path}"])  # an empty directory
    assert config.data_name == "fashion_mnist"
    with pytest.raises(bench_flags.ConfigError, match="dataset-fashion-mnist"):
        bench_flags.check_data(config.model, config.data_name, config.data_dir)
    assert resolve(["--data_name=synthetic"]).data_name == "synthetic"


# ---------------------------------------------------------------------------
# End to end

def test_unknown_preset_is_one_usage_line(tmp_path):
    code, out, err = bench(["--compare=uncompressed,zip"], tmp_path, timeout=120)
    assert code == 1
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines == ["deepreduce-bench: error: --compare: unknown preset 'zip'; valid presets: "
                     "uncompressed, topk, golomb_qsgd, golomb_qsgd_dgc, max_reduction, "
                     "bloom_polyfit, lgc_ps, lgc_rar, sparse_allreduce, sparse_max, powersgd, "
                     "flags"]
    assert not (tmp_path / "deepreduce_bench_runs").exists()


def test_default_comparison_end_to_end(tmp_path, fake_fashion_mnist):
    code, out, err = bench(TINY, tmp_path, env=fake_fashion_mnist)
    assert code == 0, err[-3000:]
    out_dir = tmp_path / "deepreduce_bench_runs"
    combined = json.loads((out_dir / "compare.json").read_text())
    assert combined["kind"] == "comparison" and combined["baseline"] == "uncompressed"
    assert [r["preset"] for r in combined["runs"]] == ["uncompressed", DEFAULT]
    assert combined["settings"]["timed_steps"] == 2 and combined["settings"]["seed"] == 0
    assert combined["table"] in out
    assert "[1/2] uncompressed:" in err and f"[2/2] {DEFAULT}:" in err
    assert combined["data_source"] == f"fashion-mnist:{fake_fashion_mnist[data.ENV_VAR]}"

    runs = {}
    for entry in combined["runs"]:
        results = json.loads(open(entry["results_json"]).read())
        runs[entry["preset"]] = results
        assert os.path.dirname(entry["results_json"]) == str(out_dir / entry["preset"])
        assert any(p.startswith("events.out.tfevents") for p in os.listdir(entry["tensorboard"]))
        assert os.path.getsize(entry["log"]) > 0
        # Evaluations before training and after every step, with cumulative bytes.
        assert [h["step"] for h in entry["eval_history"]] == [0, 1, 2, 3]
        assert entry["eval_history"][0]["sent_bytes"] == 0
        assert entry["eval_history"][-1]["sent_bytes"] == results["metrics"]["total_sent_bytes"]
        assert entry["eval_history"][-1]["accuracy"] == results["metrics"]["accuracy"]
        assert results["eval"]["eval_examples"] == 20
        assert [h["step"] for h in results["history"]] == [1, 2, 3]  # every step
    base, comp = runs["uncompressed"], runs[DEFAULT]
    assert base["config"]["exchange"] == "tf" and comp["config"]["exchange"] == "deepreduce"
    assert base["environment"]["strategy"] == comp["environment"]["strategy"] == (
        "MirroredStrategy")
    assert comp["config"]["params"]["index"] == "golomb"
    assert comp["config"]["params"]["memory"] == "dgc"
    assert comp["metrics"]["compress_ms"] is None  # no codec-only timing unless asked for

    # TensorFlow's all-reduce: the dense gradient bytes of the model definition.
    dense = resnet20_dense_bytes()
    assert base["metrics"]["sent_bytes_per_step"] == dense
    assert base["metrics"]["total_sent_bytes"] == 3 * dense
    assert comp["metrics"]["dense_bytes_per_step"] == dense
    assert 0 < comp["metrics"]["sent_bytes_per_step"] < dense
    row = combined["runs"][1]
    assert row["reduction"] == pytest.approx(dense / comp["metrics"]["sent_bytes_per_step"])

    # Same seed, same data order: same initial weights (same test accuracy
    # before training) and the same first batch (same first-step loss).
    assert (base["eval_history"][0]["accuracy"] == comp["eval_history"][0]["accuracy"])
    assert base["history"][0]["loss"] == pytest.approx(comp["history"][0]["loss"], rel=1e-5)

    width, height = png_size(combined["plot"])
    assert combined["plot"] == str(out_dir / "compare.png") and width > 400 and height > 200


@pytest.mark.parametrize("mode", [[], ["--compressor=topk"], ["--compressor=topk",
                                                                  "--num_workers=2"]],
                         ids=["comparison", "one-run", "two-workers"])
def test_missing_data_is_one_error_before_training(tmp_path, mode):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, err = bench(TINY + mode + [f"--data_dir={empty}", "--output_json=r.json"],
                           tmp_path, timeout=120)
    assert code == 1 and out == ""
    assert err.startswith(f"deepreduce-bench: error: Fashion-MNIST was not found (searched: "
                          f"{empty}). Get it with `apt-get install -y dataset-fashion-mnist`")
    assert len(err.strip().splitlines()) == 1 and "--data_name=synthetic" in err
    assert "train [" not in err and "launching" not in err and "comparing" not in err
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "deepreduce_bench_runs").exists()


# ---------------------------------------------------------------------------
# Table and plot (in process, on results of known numbers)

def _results(exchange, sent, step_ms, accuracy, n_eval=2000, dense=1000):
    history = [{"step": s, "time_s": s * step_ms / 1000, "wall_s": s, "sent_bytes": s * sent,
                "dense_bytes": s * dense, "loss": 1.0, "accuracy": 0.5} for s in (1, 2)]
    evals = [dict(h, accuracy=accuracy) for h in history]
    return {
        "model_metric": "accuracy", "data_source": "fashion-mnist:/data",
        "config": {"model": "resnet20", "exchange": exchange, "variable_update": "replicated",
                   "batch_size": 32, "num_warmup_batches": 2, "optimizer": "momentum",
                   "init_learning_rate": 0.05, "seed": 0,
                   "params": {"compressor": "topk" if sent < dense else "none"}},
        "environment": {"replicas": 2, "workers": 1},
        "metrics": {"sent_bytes_per_step": sent, "dense_bytes_per_step": dense,
                    "step_time_median_ms": step_ms, "final_loss": 0.5, "accuracy": accuracy,
                    "timed_steps": 600},
        "eval": {"eval_examples": n_eval}, "history": history, "eval_history": evals,
    }


def test_compare_table_ratios_and_accuracy_notes():
    runs = [("uncompressed", _results("tf", 1000, 100.0, 0.85)),
            ("topk", _results("deepreduce", 40, 150.0, 0.80)),
            ("golomb_qsgd", _results("deepreduce", 20, 120.0, 0.845))]
    rows = report.comparison_rows(runs)
    assert [r["reduction"] for r in rows] == [1.0, 25.0, 50.0]
    assert [r["step_time_ratio"] for r in rows] == [1.0, 1.5, 1.2]
    assert [round(r["metric_delta_points"], 6) for r in rows] == [0.0, -5.0, -0.5]
    # Two standard errors of 0.85 on 2,000 images: 1.6 points.
    assert rows[1]["gap_points"] == pytest.approx(200 * (0.85 * 0.15 / 2000) ** 0.5)
    table = report.compare_table(runs)
    assert "1,000*" in table and "25.0x" in table and "50.0x" in table and "1.50x" in table
    assert "-5.0 pts" in table and "-0.5 pts" in table
    assert "NOTE: topk ends 5.0 points of test accuracy below uncompressed" in table
    assert "golomb_qsgd ends within 1.6 points of uncompressed" in table
    assert "SYNTHETIC" not in table


def test_plots_are_pngs_with_points(tmp_path):
    pytest.importorskip("matplotlib")
    runs = [("uncompressed", _results("tf", 1000, 100.0, 0.85)),
            ("golomb_qsgd", _results("deepreduce", 20, 120.0, 0.84))]
    assert png_size(report.plot_comparison(runs, str(tmp_path / "c.png")))[0] > 400
    paths = []
    for name, r in runs:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(r))
        paths.append(str(path))
    assert png_size(report.plot_runs(paths, str(tmp_path / "runs.png")))[0] > 400
    with pytest.raises(ValueError, match="eval_history"):
        report.plot_comparison([(n, dict(r, eval_history=[])) for n, r in runs],
                               str(tmp_path / "none.png"))


def test_tf_exchange_counts_embedding_gradients_as_slices():
    """--exchange=tf's bytes: dense gradients whole, IndexedSlices as values +
    indices, from the gradients of a real NeuMF step."""
    import tensorflow as tf

    from deepreduce_bench import runner

    model = models.neumf(50, 80, mf_dim=4, mlp_layers=(8, 4))
    users = tf.constant([1, 2, 3, 2, 7], tf.int32)
    items = tf.constant([5, 6, 7, 8, 9], tf.int32)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model([users, items]))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer = tf.keras.optimizers.SGD(0.1)
    exchange = runner.DenseExchange(model.trainable_variables, optimizer, replicas=1)
    variable_bytes = sum(4 * int(np.prod(v.shape)) for v in model.trainable_variables)
    assert exchange.step_bytes()["sent_bytes"] == variable_bytes
    exchange.observe(grads)
    expected = 0
    for g, v in zip(grads, model.trainable_variables):
        if isinstance(g, tf.IndexedSlices):  # 5 looked-up rows of the table's width
            expected += 5 * int(v.shape[1]) * 4 + 5 * g.indices.dtype.size
        else:
            expected += 4 * int(np.prod(v.shape))
    assert sum(isinstance(g, tf.IndexedSlices) for g in grads) == 4  # the embedding tables
    assert exchange.step_bytes()["sent_bytes"] == expected < variable_bytes
    assert exchange.totals() == {"dense_bytes": 0, "sent_bytes": 0, "received_bytes": 0,
                                 "steps": 0}


@pytest.mark.parametrize("size", [32, 56, 64])
def test_training_images_equal_the_numpy_conversion(size):
    """The input pipeline's TensorFlow conversion gives the training images
    bit for bit as data.to_resnet_input() (after integer upsampling)."""
    import tensorflow as tf

    from deepreduce_bench import workloads

    config = resolve(["--data_name=synthetic", f"--image_size={size}", "--compressor=topk"])
    workload = workloads.ImageWorkload(config)
    images, labels = workload.train_images[:6], workload.train_labels[:6]
    x, y = workload._convert(tf.constant(images), tf.constant(labels))
    factor = size // 28
    upsampled = images.repeat(factor, axis=1).repeat(factor, axis=2)
    expected = data.to_resnet_input(upsampled, size=size, channels=3)
    assert x.dtype == tf.float32 and x.shape == (6, size, size, 3)
    np.testing.assert_array_equal(x.numpy(), expected)
    np.testing.assert_array_equal(y.numpy(), labels.astype(np.int32))


def test_cosine_learning_rate_schedule():
    """--lr_schedule=cosine: lr(t) = lr0 * (1 + cos(pi * t / T)) / 2 over the
    run's T steps; constant stays lr0."""
    import math

    from deepreduce_bench import runner

    config = resolve(["--lr_schedule=cosine", "--init_learning_rate=0.08", "--compressor=topk"])
    optimizer = runner.make_optimizer(config, total_steps=100)
    for t in (0, 25, 50, 99, 100):
        optimizer.iterations.assign(t)  # the learning rate the t-th step applies
        want = 0.08 * (1 + math.cos(math.pi * t / 100)) / 2
        assert float(optimizer.learning_rate) == pytest.approx(want, abs=1e-7), t
    constant = runner.make_optimizer(resolve(["--compressor=topk"]), total_steps=100)
    assert float(constant.learning_rate) == pytest.approx(0.05)
    with pytest.raises(bench_flags.ConfigError, match="valid choices: constant, cosine"):
        resolve(["--lr_schedule=step"])
