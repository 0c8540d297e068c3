"""The real tf_cnn_benchmarks, TensorFlow's replicated mode against DeepReduce's.

    .venv/bin/python benchmarks/tf_cnn_benchmarks_bench.py --benchmarks_dir=PATH \\
        [--models resnet20,resnet50] [--configs replicated,none,topk,golomb_qsgd7,both] \\
        [--num_batches 40] [--repeats 1] [--workers N] [-- <more tf_cnn_benchmarks flags>]

Runs `deepreduce-tf-cnn-benchmarks` (the script's `replicated` rows run the
untouched script's own mode through the same command) once per model,
configuration and repeat, in fresh processes, one after the other, and prints a
Markdown table: images/sec (the script's "total images/sec"), bytes each device
sent per step and the dense gradient's bytes (DeepReduce's ledger; TensorFlow's
replicated mode sends the dense gradient). PATH: a checkout of
github.com/tensorflow/benchmarks.

--workers N (N >= 2) runs N worker processes on localhost, one CPU device each
(--job_name=worker): the `replicated` rows are then the script's own
collective_all_reduce mode, the others DeepReduce's exchange through it;
images/sec is the sum over the workers.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

from deepreduce_bench.runner import free_ports

CONFIGS = {
    "replicated": ["--variable_update=replicated"],
    "none": ["--variable_update=deepreduce", "--compressor=none"],
    "topk": ["--variable_update=deepreduce", "--compressor=topk", "--compress_ratio=0.01",
             "--deepreduce=none"],
    "golomb_qsgd7": ["--variable_update=deepreduce", "--compressor=topk",
                     "--compress_ratio=0.01", "--deepreduce=both", "--index=golomb",
                     "--value=qsgd", "--bits=7"],
    "both": ["--variable_update=deepreduce", "--compressor=topk", "--compress_ratio=0.01",
             "--deepreduce=both", "--index=bloom", "--policy=p0", "--value=polyfit"],
}
MODELS = {
    "resnet20": ["--model=resnet20", "--data_name=cifar10", "--batch_size=32"],
    "resnet50": ["--model=resnet50", "--data_name=imagenet", "--batch_size=4"],
}
COMMON = ["--device=cpu", "--num_gpus=2", "--local_parameter_device=cpu", "--data_format=NHWC"]


def run_one(bench_dir, model, config, num_batches, extra, timeout, workers=1):
    cmd = [sys.executable, "-m", "deepreduce_tf.integrations.tf_cnn_benchmarks",
           f"--benchmarks_dir={bench_dir}", *MODELS[model], *COMMON, *CONFIGS[config],
           f"--num_batches={num_batches}", f"--display_every={num_batches}", *extra]
    if workers > 1:
        hosts = ",".join(f"127.0.0.1:{p}" for p in free_ports(workers))
        cmd = [a for a in cmd if a != "--num_gpus=2"] + [
            "--num_gpus=1", f"--worker_hosts={hosts}", "--job_name=worker"]
        if config == "replicated":
            cmd = [a for a in cmd if a != "--variable_update=replicated"] + [
                "--variable_update=collective_all_reduce", "--all_reduce_spec=collective"]
    with tempfile.TemporaryDirectory() as cwd:  # the installed package, not this tree
        procs = [subprocess.Popen(cmd + ([f"--task_index={i}"] if workers > 1 else []),
                                  cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True) for i in range(workers)]
        try:
            outs = [p.communicate(timeout=timeout)[0] for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    ips, sent, dense = 0.0, None, None
    for p, out in zip(procs, outs):
        if p.returncode != 0:
            raise SystemExit(f"{model} {config} failed (exit {p.returncode}):\n{out[-3000:]}")
        ips += float(re.search(r"total images/sec: ([0-9.]+)", out).group(1))
        m = re.findall(r"DeepReduce: ([0-9,]+) B sent per device \(dense ([0-9,]+) B", out)
        if m:
            sent, dense = (int(x.replace(",", "")) for x in m[-1])
    return ips, sent, dense


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--benchmarks_dir", required=True)
    ap.add_argument("--models", default="resnet20,resnet50")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--num_batches", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("extra", nargs="*", help="more tf_cnn_benchmarks flags (after --)")
    args = ap.parse_args()
    models = [m for m in args.models.split(",") if m]
    configs = [c for c in args.configs.split(",") if c]
    for name, table in (("model", MODELS), ("config", CONFIGS)):
        for x in (models if name == "model" else configs):
            if x not in table:
                raise SystemExit(f"unknown {name} {x!r}; valid: {', '.join(table)}")
    rows = []
    for model in models:
        base = None
        for config in configs:
            runs = [run_one(args.benchmarks_dir, model, config, args.num_batches, args.extra,
                            args.timeout, args.workers) for _ in range(args.repeats)]
            ips = statistics.median(r[0] for r in runs)
            sent, dense = runs[-1][1], runs[-1][2]
            if config == "replicated":
                base = ips
            rows.append((model, config, ips, base, sent, dense))
            print(f"{model} {config}: {ips:.1f} images/sec", file=sys.stderr, flush=True)
    print("| model | configuration | images/sec | × replicated | sent B/step/device | "
          "dense B/step | dense ÷ sent |")
    print("|---|---|--:|--:|--:|--:|--:|")
    for model, config, ips, base, sent, dense in rows:
        rel = f"{ips / base:.2f}×" if base else "–"
        sent_s = f"{sent:,}" if sent is not None else "dense"
        dense_s = f"{dense:,}" if dense is not None else "–"
        ratio = f"{dense / sent:.1f}×" if sent else "1.0×"
        print(f"| {model} | {config} | {ips:.1f} | {rel} | {sent_s} | {dense_s} | {ratio} |")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main())
