"""deepreduce-bench end to end: flag validation, --help, tiny runs, JSON, bytes.

The runs are subprocesses started like the console script (the current
directory is dropped from sys.path, so the installed package is used even
from the repository root), on tiny settings: a few steps of batch 4-64 on
synthetic data, or on a small Fashion-MNIST look-alike (fake_fashion_mnist:
the same files, a few images). Each has a bounded timeout; its whole process group (the
local workers too) is killed if it expires. They run without
TF_CPP_MIN_LOG_LEVEL, so they also check that the command's own quiet
default hides TensorFlow's log lines.
"""
import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from absl import flags as absl_flags

import deepreduce_tf
from deepreduce_bench import data as dr_data
from deepreduce_bench import models
from deepreduce_bench import cli
from deepreduce_bench import flags as bench_flags
from deepreduce_bench import report
from deepreduce_bench.runner import CHILD_BOOTSTRAP
from test_data import write_fake_dataset

# Trains models, starts worker processes or runs Flower (minutes):
# `pytest -m "not slow"` leaves it out of a quick loop.
pytestmark = pytest.mark.slow

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN_TIMEOUT = 600
TINY = ["--num_batches=2", "--num_warmup_batches=1", "--codec_repeats=1", "--display_every=1"]
# Top-k with raw indices and values: the payload size depends only on the shapes.
DETERMINISTIC = ["--compressor=topk", "--compress_ratio=0.01", "--deepreduce=none"]
# What TensorFlow prints unless it is told otherwise (--verbose brings it back).
TF_NOISE = ("oneDNN", "cpu_feature_guard", "Using MirroredStrategy", "absl::InitializeLog",
            "loop_optimizer")
# deepreduce-bench in a process that reports, at exit, whether TensorFlow was imported.
NO_TF_PROBE = ("import atexit, os, sys; sys.path.pop(0); "
               "atexit.register(lambda: open(os.environ['TF_PROBE'], 'w').write("
               "str('tensorflow' in sys.modules))); "
               "from deepreduce_bench.cli import main; main()")
PLOT_BOOTSTRAP = ("import sys; sys.path.pop(0); "
                  "from deepreduce_bench.cli import plot_main; plot_main()")
MAX_HELP_LINES = 150


@pytest.fixture
def fake_fashion_mnist(tmp_path):
    """The environment of a run whose default data is a 64 + 64-image
    Fashion-MNIST look-alike (the files and format of the real one)."""
    directory = tmp_path / "fashion-mnist"
    directory.mkdir()
    write_fake_dataset(directory, n_train=64, n_test=64)
    return {dr_data.ENV_VAR: str(directory)}


def bench(args, cwd, timeout=RUN_TIMEOUT, env=None, code=CHILD_BOOTSTRAP):
    """Runs deepreduce-bench `args` in `cwd`; returns (returncode, stdout, stderr).

    env: extra environment variables. TF_CPP_MIN_LOG_LEVEL is removed: the
    command's own default must keep TensorFlow quiet.
    """
    env = dict(os.environ, **(env or {}))
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    proc = subprocess.Popen([sys.executable, "-c", code] + list(args), cwd=cwd,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"deepreduce-bench {args} did not finish in {timeout} s:\n{err[-3000:]}")
    return proc.returncode, out, err


def resolve(args):
    fv = absl_flags.FlagValues()
    bench_flags.define_flags(fv)
    fv(["deepreduce-bench"] + list(args))
    return bench_flags.resolve(fv)


# ---------------------------------------------------------------------------
# Validation (in process: no subprocess, no model)

@pytest.mark.parametrize("args, message", [
    (["--model=vgg16"], "--model='vgg16' is not valid; valid choices: resnet20, resnet50, ncf"),
    (["--batch_size=-4"], "--batch_size=-4 must be positive"),
    (["--num_batches=0"], "--num_batches=0 must be positive"),
    (["--compress_ratio=0"], "--compress_ratio=0.0 must be in (0, 1]"),
    (["--compress_ratio=1.5"], "--compress_ratio=1.5 must be in (0, 1]"),
    (["--fpr=1.0"], "--fpr=1.0 must be in (0, 1)"),
    (["--index=huffman"], "index='huffman' is not valid"),
    (["--value=zip"], "value='zip' is not valid"),
    (["--policy=p2"], "policy='p2' is not valid"),
    (["--compressor=none", "--deepreduce=both"], "compressor 'none' sends every position"),
    (["--deepreduce=none", "--index=bloom"], "index='bloom' needs deepreduce='index' or 'both'"),
    (["--data_name=imagenet"], "--data_name='imagenet' is not valid"),
    (["--model=ncf", "--data_name=fashion_mnist"], "does not fit --model=ncf"),
    (["--num_workers=2", "--variable_update=replicated"], "several workers need"),
    (["--num_workers=2", "--worker_hosts=a:1,b:2"], "give one of them"),
    (["--worker_hosts=a:1,b:2", "--task_index=2"], "--task_index=2 is out of range"),
    (["--num_workers=2", "--task_index=1"], "--task_index=1 needs --worker_hosts"),
    (["--num_workers=2", "--task_index=0"], "--num_workers starts every local worker itself"),
    (["--task_index=3"], "--task_index=3 needs --worker_hosts"),
    (["--worker_hosts=nohost"], "is not host:port"),
    (["--num_batches=5", "--num_epochs=1"], "not both"),
    (["--optimizer=lamb"], "--optimizer='lamb' is not valid"),
])
def test_bad_flags_rejected(args, message):
    with pytest.raises(bench_flags.ConfigError) as e:
        resolve(args)
    assert message in str(e.value)


def test_missing_real_data_says_how_to_get_it(tmp_path):
    with pytest.raises(bench_flags.ConfigError, match="deepreduce-bench --fetch_data"):
        bench_flags.check_data("ncf", "movielens", str(tmp_path))
    with pytest.raises(bench_flags.ConfigError) as e:
        bench_flags.check_data("resnet20", "fashion_mnist", str(tmp_path))
    for hint in (f"searched: {tmp_path}", "apt-get install -y dataset-fashion-mnist",
                 "deepreduce-bench --fetch_data", "~/.keras", "--data_name=synthetic"):
        assert hint in str(e.value).replace(os.path.expanduser("~"), "~"), hint
    bench_flags.check_data("resnet20", "synthetic", str(tmp_path))  # nothing to find


def test_defaults_are_the_readme_configuration():
    config = resolve([])
    # Fashion-MNIST, installed or not: a run without it stops (test_bench_compare.py).
    assert (config.model, config.data_name, config.variable_update, config.num_gpus) == (
        "resnet20", "fashion_mnist", "replicated", 2)
    assert config.params == {"compressor": "topk", "compress_ratio": 0.01,
                             "communicator": "allgather", "deepreduce": "both",
                             "index": "bloom", "policy": "conflict_sets", "value": "polyfit",
                             "seed": 0}
    baseline = resolve(["--compressor=none"])
    assert baseline.params["deepreduce"] is None and "index" not in baseline.params
    multi = resolve(["--num_workers=2"])
    assert (multi.variable_update, multi.num_gpus) == ("collective_all_reduce", 1)
    assert resolve(["--data_dir=/x", "--model=ncf", "--data_name=synthetic"]).data_name == (
        "synthetic")


def test_task_index_with_worker_hosts_is_accepted():
    config = resolve(["--worker_hosts=a:1,b:2", "--task_index=1"] + DETERMINISTIC)
    assert (config.task_index, config.worker_hosts) == (1, ["a:1", "b:2"])


def test_general_flags_are_checked_without_the_codec_flags():
    fv = absl_flags.FlagValues()
    bench_flags.define_flags(fv, codecs=False)
    assert "model" in fv and "verbose" in fv
    assert not any(name in fv for name in ("index", "value", "fpr", "topk_scope"))
    left = fv(["deepreduce-bench", "--model=ncf", "--fpr=0.01"], known_only=True)
    assert left == ["deepreduce-bench", "--fpr=0.01"]
    checked = bench_flags.check_flags(fv)
    assert (checked["model"], checked["data_name"], checked["update"]) == (
        "ncf", "synthetic", "replicated")
    fv["num_workers"].value = 2
    fv["task_index"].parse("1")
    with pytest.raises(bench_flags.ConfigError, match="needs --worker_hosts"):
        bench_flags.check_flags(fv)
    bench_flags.define_flags(fv)  # the codec flags join later
    assert "index" in fv and "fpr" in fv


@pytest.mark.parametrize("args, message", [
    (["--model=vgg16"], "--model='vgg16' is not valid; valid choices: resnet20, resnet50, ncf"),
    (["--num_workers=2", "--task_index=5"], "--task_index=5 needs --worker_hosts"),
    (["--batch_size=abc"], "--batch_size=abc"),
    (["--compress_ratio=2", "--fpr=0.01"], "--compress_ratio=2.0 must be in (0, 1]"),
    (["--worker_hosts=a:1,b:2", "--task_index=2"], "--task_index=2 is out of range"),
])
def test_bad_flag_is_one_line_before_tensorflow(tmp_path, args, message):
    probe = tmp_path / "tf_imported"
    code, out, err = bench(args, tmp_path, timeout=60, env={"TF_PROBE": str(probe)},
                           code=NO_TF_PROBE)
    assert code == 1
    assert out == ""
    assert err.strip().splitlines() == [err.strip()]  # one line
    assert err.startswith("deepreduce-bench: error: ") and message in err
    assert probe.read_text() == "False"  # TensorFlow was never imported


def test_bad_flag_exits_before_any_work(tmp_path):
    code, out, err = bench(["--index=huffman", "--output_json=r.json"], tmp_path, timeout=120)
    assert code == 1
    assert err.startswith("deepreduce-bench: error: ") and len(err.strip().splitlines()) == 1
    assert "index='huffman' is not valid; valid choices:" in err
    assert "MirroredStrategy" not in err and "train [" not in err
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("workers", [[], ["--num_workers=2"]])
def test_broken_op_library_is_one_error_before_training(tmp_path, workers):
    lib = tmp_path / "_deepreduce_ops.so"
    lib.write_bytes(b"")  # exists, is not a library
    # Its build record names the running TensorFlow, so the loader gets as far as loading it.
    (tmp_path / "_deepreduce_ops.json").write_text(json.dumps({"tf_version": tf.__version__}))
    # The data are missing too: the op library's error still comes first, and alone.
    code, out, err = bench(TINY + DETERMINISTIC + workers + [
        "--output_json=r.json", f"--data_dir={tmp_path / 'no-data'}"], tmp_path,
        timeout=120, env={"DEEPREDUCE_TF_OPS_LIB": str(lib)})
    assert code == 1
    assert "Traceback" not in err and "train [" not in err and "launching" not in err
    assert err.startswith("deepreduce-bench: error: deepreduce_tf could not load its op library")
    assert err.count("could not load its op library") == 1
    assert f"{lib}: load failed" in err
    assert "Fashion-MNIST" not in err
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("flag", ["--helpfull", "-h"])
def test_help_lists_this_commands_flags(tmp_path, flag):
    code, out, err = bench([flag], tmp_path, timeout=120)
    assert code == 0, err[-3000:]
    lines = out.splitlines()
    assert len(lines) <= MAX_HELP_LINES, f"--help prints {len(lines)} lines"
    for name in ("model", "batch_size", "num_batches", "num_epochs", "data_name", "data_dir",
                 "optimizer", "init_learning_rate", "variable_update", "num_gpus",
                 "worker_hosts", "task_index", "train_dir", "eval", "compressor",
                 "compress_ratio", "memory", "communicator", "deepreduce", "index", "value",
                 "num_workers", "fetch_data", "output_json", "plot", "verbose", "compare",
                 "exchange", "warmup", "clip_norm"):
        assert f"--{name}:" in out or f"--[no]{name}:" in out, name
    # Codec and communicator parameters: one line of names and defaults per owner.
    assert "  bloom: --fpr=0.001 --policy=conflict_sets --policy_seed=0" in lines
    assert "  qsgd: --bits --qsgd_rounding=stochastic --quantum_num" in lines
    assert "  qsgd/ternary: --bucket_size=512" in lines  # a parameter two codecs share
    assert "--lgc_warmup_steps=100" in out
    # Only this command's flags: none of TensorFlow's or absl's (TPU, tensor tracer, logging).
    assert "--tpu" not in out and "tensor_tracer" not in out and "--logtostderr" not in out
    # tf_cnn_benchmarks' vocabulary first, DeepReduce's after it; no flag left over.
    titles = [line[:-1] for before, line in zip(lines, lines[1:])
              if not before and line.endswith(":") and not line[0].isspace()]
    assert titles == ["model and data", "training", "replicas and workers",
                      "evaluation, results and output",
                      "gradient exchange and compression (DeepReduce)",
                      cli.CODEC_HELP_TITLE]
    assert out.index("model and data:") < out.index("--model:")
    assert err == ""


def test_docs_list_every_codec_parameter():
    """--help names the codec and communicator parameters; docs/cli.md's table
    says what each is (its range and default too)."""
    fv = absl_flags.FlagValues()
    bench_flags.define_flags(fv)
    with open(os.path.join(REPO_ROOT, "docs", "cli.md"), encoding="utf-8") as f:
        section = f.read().split("## Codec parameters", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("`")[1] for line in section.splitlines() if line.startswith("| `--")}
    params = {f"--{n}" for n in bench_flags.own_flag_names(fv)
              if getattr(fv[n], "deepreduce_owners", None)}
    assert params and rows == params


def test_plot_help_lists_its_flags(tmp_path):
    code, out, err = bench(["--help"], tmp_path, timeout=60, code=PLOT_BOOTSTRAP)
    assert code == 0, err[-3000:]
    assert "--out:" in out and "--title:" in out
    assert "--model" not in out and "--logtostderr" not in out


def test_quiet_environment():
    env = {}
    cli.quiet_environment(env, verbose=False)
    assert env == {"TF_CPP_MIN_LOG_LEVEL": "3"}
    env = {"TF_CPP_MIN_LOG_LEVEL": "1"}  # the user's choice stays
    cli.quiet_environment(env, verbose=False)
    assert env == {"TF_CPP_MIN_LOG_LEVEL": "1"}
    env = {}
    cli.quiet_environment(env, verbose=True)
    assert env == {}


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class _Stream:
    def __init__(self):
        self.lines = []

    def write(self, text):
        self.lines += text.splitlines()

    def flush(self):
        pass


def test_progress_eta_counts_the_steps_after_the_first():
    clock, stream = _Clock(), _Stream()
    bar = report.ProgressBar(20, stream=stream, clock=clock)
    clock.now = 100.0  # the first step traces the graph: 100 s
    bar.update(1)
    assert "eta --:--" in stream.lines[-1] and " 01:40 " in stream.lines[-1]
    clock.now = 102.0  # then 1 s per step: 17 steps left (not 102 / 3 * 17 s)
    bar.update(3)
    assert "eta 00:17" in stream.lines[-1]


# ---------------------------------------------------------------------------
# End to end

def _check_results(results, model, replicas, workers):
    assert results["command"] == "deepreduce-bench"
    for key in report.METRIC_KEYS:
        assert key in results["metrics"], key
    m = results["metrics"]
    for key in ("examples_per_sec", "step_time_ms", "dense_bytes_per_step",
                "sent_bytes_per_step", "reduction", "compress_ms", "decompress_ms",
                "final_loss", "train_accuracy"):
        assert m[key] is not None and np.isfinite(m[key]) and m[key] >= 0, key
    assert m["timed_steps"] == 2
    assert m["reduction"] == pytest.approx(m["dense_bytes_per_step"] / m["sent_bytes_per_step"])
    cfg = results["config"]
    assert cfg["model"] == model and cfg["flags"]["model"] == model
    assert cfg["params"]["compressor"] == "topk"
    assert results["environment"]["replicas"] == replicas
    assert results["environment"]["workers"] == workers
    assert [h["step"] for h in results["history"]] == [1, 2, 3]
    assert results["history"][-1]["sent_bytes"] == m["total_sent_bytes"]


def test_resnet20_two_replicas_bytes_match_the_compressor(tmp_path, fake_fashion_mnist):
    code, out, err = bench(TINY + DETERMINISTIC + [
        "--batch_size=4", "--eval", "--num_eval_examples=40", "--train_dir=run"], tmp_path,
        env=fake_fashion_mnist)
    assert code == 0, err[-3000:]
    assert "deepreduce-bench summary" in out
    for label in ("sent bytes per step per replica", "dense bytes per step per replica",
                  "step time (ms, mean of the timed", "test accuracy (--eval, 40 examples)"):
        assert label in out, label
    assert "train [" in err  # the progress bar
    assert "building the compressed training step" in err
    assert re.search(r"^first step: \d+\.\d s", err, re.M)
    for noise in TF_NOISE:
        assert noise not in out + err, noise
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    _check_results(results, "resnet20", replicas=2, workers=1)
    assert results["data_source"] == f"fashion-mnist:{fake_fashion_mnist[dr_data.ENV_VAR]}"
    # The summary's loss is the mean of the recorded window, and says so.
    window = results["config"]["loss_window"]
    label = "the last step" if window == 1 else f"mean of the last {window} steps"
    assert f"train loss ({label})" in out
    history_losses = [h["loss"] for h in results["history"]]  # display_every=1: every step
    assert results["metrics"]["final_loss"] == pytest.approx(np.mean(history_losses[-window:]))
    assert any(p.name.startswith("events.out.tfevents") for p in (tmp_path / "run" / "logs")
               .iterdir())  # TensorBoard scalars
    assert results["config"]["variable_update"] == "replicated"
    assert 0.0 <= results["metrics"]["accuracy"] <= 1.0
    assert results["eval"]["eval_examples"] == 40

    # The same gradient shapes through a fresh compressor of the same params.
    variables = models.resnet20().trainable_variables
    compressor = deepreduce_tf.from_params(results["config"]["params"])
    grads = [tf.random.normal(tuple(v.shape)) for v in variables]
    payload, ctxs = compressor.compress_batch(grads, [v.path for v in variables])
    m = results["metrics"]
    assert m["sent_bytes_per_step"] == int(payload.shape[0])
    assert m["codec_payload_bytes"] == int(payload.shape[0])
    assert results["last_step_bytes"]["sent_bytes"] == int(payload.shape[0])
    assert m["dense_bytes_per_step"] == sum(4 * int(np.prod(v.shape)) for v in variables)
    assert m["dense_bytes_per_step"] == sum(c.dense_bytes for c in ctxs.contexts)
    assert m["total_sent_bytes"] == 3 * int(payload.shape[0])  # warm-up + 2 timed steps


def test_ncf_two_local_workers(tmp_path):
    args = TINY + DETERMINISTIC + ["--model=ncf", "--batch_size=64", "--num_workers=2",
                                   "--eval", "--output_json=out/ncf.json"]
    try:
        import matplotlib  # noqa: F401

        args.append("--plot=out/ncf.png")
    except ImportError:
        pass
    code, out, err = bench(args, tmp_path)
    assert code == 0, err[-3000:]
    assert "launching 2 local workers" in err
    for noise in TF_NOISE:  # worker 0 writes to this stderr
        assert noise not in out + err, noise
    results = json.loads((tmp_path / "out" / "ncf.json").read_text())
    _check_results(results, "ncf", replicas=2, workers=2)
    assert results["config"]["variable_update"] == "collective_all_reduce"
    assert results["data_source"] == "synthetic"
    assert results["model_metric"] == "hit_rate"
    assert 0.0 <= results["metrics"]["hit_rate"] <= 1.0
    assert results["eval"]["eval_users"] == 943 and results["eval"]["k"] == 10
    if "--plot=out/ncf.png" in args:
        assert (tmp_path / "out" / "ncf.png").stat().st_size > 0
    # Worker logs of a run without --train_dir are removed after success.
    assert not any(p.name.endswith(".log") for p in tmp_path.rglob("*"))
