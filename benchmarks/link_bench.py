"""Training over shaped links: N MultiWorkerMirroredStrategy workers, each in
its own network namespace, joined by a bridge, every link rate-shaped.

    sudo .venv/bin/python benchmarks/link_bench.py --links 100mbit,unshaped \\
        --configs uncompressed,golomb_qsgd [--workers 2] [--steps 30] \\
        [-- extra deepreduce-bench flags, e.g. --model=resnet20 --data_name=synthetic]

Topology (created by this command, removed by it on exit, Ctrl-C, a failed
worker or a timeout): a namespace holding a Linux bridge, and per worker i a
namespace with one end of a veth pair (10.231.0.(i+1)/24) whose other end is a
bridge port. With a rate, both ends of every pair get a `tbf` qdisc (rate,
burst, latency 100 ms), so each worker's traffic is shaped on the way out
and on the way in. Delay/loss emulation (`netem`) is used where the kernel
has it (`--delay_ms`); this machine's kernel has no netem, and the command
says so when a delay is asked for.

Each (link, configuration) runs deepreduce-bench twice in the namespaces,
with --num_batches=S and 2S (no evaluation, no codec timing): the bytes that
crossed every worker's interface in the second run minus the first, divided
by S, are the wire bytes of one training step (model broadcast, connection
setup and shutdown cancel out). The table prints per step, for task 0 (whose
accounted bytes the results report; the JSON has every worker's bytes):
  wire B/step        bytes task 0's interface transmitted (Ethernet frames)
  accounted B/step   what the library accounts as sent (payload bytes; for TF's
                     own all-reduce, the dense gradient bytes)
  wire / accounted   framing, lengths exchange and TCP/IP overhead
  frames/step        Ethernet frames the interface transmitted (ACKs included)
  (wire - headers) / accounted
                     the same without 66 B of Ethernet/IP/TCP headers per frame:
                     what travels besides the payload and the packets' headers
                     (gRPC framing, frame margins and padding)
  median step ms     of the longer run (task 0)

Time to accuracy (--train_steps=N): each (link, configuration, seed) then
runs S steps without evaluation and N steps evaluating every --eval_every
steps (cosine learning rate over the N steps). Wire bytes per step are the
difference of the two runs' interface bytes over N - S steps (broadcast and
setup cancel out again). The table adds the training time until the first
evaluation at or above --target (task 0's summed step times: graph tracing
included, evaluation excluded), the final test metric (accuracy; HR@10 for
ncf), and, with several --seeds, a summary of mean +- sd per configuration;
--plot draws the test metric against training time, one panel per link.

Needs root and network namespaces; without them it stops with one line and
exit code 2. Configurations are deepreduce-bench --compare presets
(deepreduce_bench.presets.PRESETS).
"""
import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

# rate, tbf burst (REFERENCE: 1 Gbit/s needs a 1 mbit burst to get close; 2 Mbit/s a
# burst of about one MTU, so that no payload of a step passes at line rate).
LINKS = {"unshaped": None, "1gbit": ("1gbit", "1mbit"), "100mbit": ("100mbit", "256kbit"),
         "20mbit": ("20mbit", "256kbit"), "2mbit": ("2mbit", "16kbit")}
PREFIX = "drlb"
SUBNET = "10.231.0"
PORT = 29400


class HarnessError(RuntimeError):
    """A precondition or a worker failed: one line for the user."""


def _ip(*args, check=True):
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise HarnessError(f"'ip {' '.join(args)}' failed: {proc.stderr.strip()}")
    return proc


def _tc(ns, *args):
    proc = subprocess.run(["ip", "netns", "exec", ns, "tc", *args], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise HarnessError(f"'tc {' '.join(args)}' in {ns} failed: {proc.stderr.strip()}")


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale():
    """Namespaces of this harness left by a run that died without cleaning
    up (its pid, in the name, no longer exists)."""
    out = _ip("netns", "list", check=False).stdout
    for line in out.splitlines():
        name = line.split()[0] if line.split() else ""
        parts = name.split("-")
        if len(parts) >= 3 and parts[0] == PREFIX and parts[1].isdigit():
            if not _pid_alive(int(parts[1])):
                _ip("netns", "del", name, check=False)


def preflight():
    """Root, ip/tc, namespaces: HarnessError with the reason if missing."""
    if os.geteuid() != 0:
        raise HarnessError("needs root (network namespaces, veth pairs and tc); run it with "
                           "sudo or as root")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise HarnessError(f"'{tool}' not found (Debian: apt-get install iproute2)")
    probe = f"{PREFIX}-{os.getpid()}-probe"
    proc = _ip("netns", "add", probe, check=False)
    if proc.returncode != 0:
        raise HarnessError(f"cannot create a network namespace: {proc.stderr.strip()}")
    _ip("netns", "del", probe, check=False)


def netem_available():
    ns = f"{PREFIX}-{os.getpid()}-netem"
    _ip("netns", "add", ns)
    try:
        proc = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo",
                               "root", "netem", "delay", "1ms"], capture_output=True)
        return proc.returncode == 0
    finally:
        _ip("netns", "del", ns, check=False)


class Network:
    """The bridge and N worker namespaces; remove() deletes all of it (and is
    safe to call twice)."""

    def __init__(self, workers, link, delay_ms=0):
        self.tag = f"{PREFIX}-{os.getpid()}"
        self.bridge_ns = f"{self.tag}-br"
        self.worker_ns = [f"{self.tag}-w{i}" for i in range(workers)]
        self.addresses = [f"{SUBNET}.{i + 1}" for i in range(workers)]
        self.device = "eth0"
        self._created = []
        try:
            self._build(link, delay_ms)
        except BaseException:
            self.remove()
            raise

    def _add_ns(self, name):
        _ip("netns", "add", name)
        self._created.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def _build(self, link, delay_ms):
        self._add_ns(self.bridge_ns)
        _ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.bridge_ns, "link", "set", "br0", "up")
        for i, (ns, addr) in enumerate(zip(self.worker_ns, self.addresses)):
            self._add_ns(ns)
            port = f"p{i}"
            _ip("link", "add", self.device, "netns", ns, "type", "veth", "peer", "name", port,
                "netns", self.bridge_ns)
            _ip("-n", self.bridge_ns, "link", "set", port, "master", "br0")
            _ip("-n", self.bridge_ns, "link", "set", port, "up")
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", self.device)
            _ip("-n", ns, "link", "set", self.device, "up")
            if link is not None:
                rate, burst = link
                for where, dev in ((ns, self.device), (self.bridge_ns, port)):
                    if delay_ms:
                        _tc(where, "qdisc", "add", "dev", dev, "root", "handle", "1:", "netem",
                            "delay", f"{delay_ms}ms")
                        _tc(where, "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:",
                            "tbf", "rate", rate, "burst", burst, "latency", "100ms")
                    else:
                        _tc(where, "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate,
                            "burst", burst, "latency", "100ms")

    def tx_counts(self, what="bytes"):
        """What each worker's interface has transmitted so far: 'bytes' or
        'packets' (Ethernet frames)."""
        out = []
        for ns in self.worker_ns:
            proc = subprocess.run(["ip", "netns", "exec", ns, "cat",
                                   f"/sys/class/net/{self.device}/statistics/tx_{what}"],
                                  capture_output=True, text=True, check=True)
            out.append(int(proc.stdout))
        return out

    def remove(self):
        while self._created:
            _ip("netns", "del", self._created.pop(), check=False)


def _kill(procs):
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
    for p in procs:
        with contextlib.suppress(Exception):
            p.wait(timeout=10)


def run_workers(net, bench_args, steps, out_dir, timeout, python=sys.executable):
    """One deepreduce-bench run on every worker namespace. Returns (task 0's
    results dict, tx bytes per worker during the run)."""
    hosts = ",".join(f"{a}:{PORT}" for a in net.addresses)
    os.makedirs(out_dir, exist_ok=True)
    before = list(zip(net.tx_counts("bytes"), net.tx_counts("packets")))
    procs, logs = [], []
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    try:
        for i, ns in enumerate(net.worker_ns):
            log = open(os.path.join(out_dir, f"worker{i}.log"), "w")
            logs.append(log)
            cmd = ["ip", "netns", "exec", ns, python, "-m", "deepreduce_bench",
                   f"--worker_hosts={hosts}", f"--task_index={i}",
                   "--variable_update=collective_all_reduce", f"--num_batches={steps}",
                   "--codec_repeats=0", f"--output_json={os.path.join(out_dir, 'results.json')}",
                   *bench_args]
            # cwd outside the repository: `python -m` would import the source
            # tree (no compiled library) instead of the installed package.
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                          cwd=out_dir, start_new_session=True))
        deadline = time.monotonic() + timeout
        while any(p.poll() is None for p in procs):
            failed = [i for i, p in enumerate(procs) if p.poll() not in (None, 0)]
            if failed:
                raise HarnessError(f"worker {failed[0]} exited with code "
                                   f"{procs[failed[0]].returncode}; log: "
                                   f"{os.path.join(out_dir, f'worker{failed[0]}.log')}")
            if time.monotonic() > deadline:
                raise HarnessError(f"the workers did not finish in {timeout} s; logs in {out_dir}")
            time.sleep(0.2)
        bad = [i for i, p in enumerate(procs) if p.returncode != 0]
        if bad:
            raise HarnessError(f"worker {bad[0]} exited with code {procs[bad[0]].returncode}; "
                               f"log: {os.path.join(out_dir, f'worker{bad[0]}.log')}")
    finally:
        _kill(procs)
        for log in logs:
            log.close()
    after = list(zip(net.tx_counts("bytes"), net.tx_counts("packets")))
    with open(os.path.join(out_dir, "results.json")) as f:
        results = json.load(f)
    return results, [(a[0] - b[0], a[1] - b[1]) for a, b in zip(after, before)]


# Ethernet (14) + IPv4 (20) + TCP with timestamps (32) header bytes per frame.
FRAME_HEADERS = 66


def _wire(tx_short, tx_long, steps, accounted):
    """Per step: bytes and frames on the interfaces (the longer run minus the
    shorter over their `steps` difference), against the accounted bytes.
    The accounted bytes are task 0's (the chief writes the results), so the
    wire columns are task 0's interface too: the workers' payloads differ
    (each compresses its own gradient), and over a few steps the mean of the
    workers can fall below task 0's payload. 'beyond_headers' = (wire - 66 B
    per frame) / accounted, i.e. what is sent beyond the payload besides the
    packets' own headers."""
    per_worker = [(b[0] - a[0]) / steps for a, b in zip(tx_short, tx_long)]
    wire = per_worker[0]
    frames = (tx_long[0][1] - tx_short[0][1]) / steps
    return {"wire_bytes_per_step": wire, "wire_bytes_per_worker": per_worker,
            "wire_frames_per_step": frames, "accounted_bytes_per_step": accounted,
            "wire_per_accounted": wire / accounted if accounted else None,
            "beyond_headers": (wire - FRAME_HEADERS * frames) / accounted if accounted else None}


def measure(net, preset_flags, steps, out_dir, timeout, extra=()):
    """Wire and accounted bytes per step and worker, and the step time."""
    args = list(preset_flags) + ["--eval=false"] + list(extra)
    short, tx_short = run_workers(net, args, steps, os.path.join(out_dir, "short"), timeout)
    long, tx_long = run_workers(net, args, 2 * steps, os.path.join(out_dir, "long"), timeout)
    metrics = long["metrics"]
    accounted = metrics["sent_bytes_per_step"]
    if not accounted:  # TF's own all-reduce: the dense gradient
        accounted = metrics["dense_bytes_per_step"]
    return dict(_wire(tx_short, tx_long, steps, accounted),
                step_time_median_ms=metrics["step_time_median_ms"], short_steps=steps,
                long_steps=2 * steps)


def train(net, preset_flags, steps, train_steps, eval_every, seed, out_dir, timeout,
          extra=()):
    """One training run with evaluation over the network, and its wire bytes:
    a run of `steps` steps without evaluation, then one of `train_steps`
    steps; the difference of their interface bytes over train_steps - steps
    is the traffic of one training step."""
    common = list(preset_flags) + [f"--seed={seed}"]
    short, tx_short = run_workers(net, common + ["--eval=false"] + list(extra), steps,
                                  os.path.join(out_dir, "short"), timeout)
    args = common + ["--eval", f"--eval_every={eval_every}", "--lr_schedule=cosine"]
    results, tx_long = run_workers(net, args + list(extra), train_steps,
                                   os.path.join(out_dir, "train"), timeout)
    metrics = results["metrics"]
    # The same window of steps as the wire bytes (a warm-up's larger first
    # steps are in both runs and cancel out).
    accounted = (metrics["total_sent_bytes"] - short["metrics"]["total_sent_bytes"]) / (
        train_steps - steps)
    metric = results["model_metric"]
    curve = [(e["wall_s"], e["step"], e[metric]) for e in results["eval_history"]]
    return dict(_wire(tx_short, tx_long, train_steps - steps, accounted),
                step_time_median_ms=metrics["step_time_median_ms"], seed=seed, metric=metric,
                final=curve[-1][2], train_s=curve[-1][0], curve=curve, short_steps=steps,
                long_steps=train_steps)


def time_to_target(curve, target):
    """Training seconds at the first evaluation at or above target (None:
    never reached)."""
    for wall_s, _, value in curve:
        if value >= target:
            return wall_s
    return None


def train_table(rows, target):
    head = ("link", "configuration", "seed", "median step ms", f"time to {target:g} s",
            "train s", "final", "wire B/step", "accounted B/step", "wire / accounted")
    lines = ["| " + " | ".join(head) + " |", "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        reached = time_to_target(r["curve"], target)
        lines.append(f"| {r['link']} | {r['config']} | {r['seed']} | "
                     f"{r['step_time_median_ms']:.0f} | "
                     f"{'not reached' if reached is None else f'{reached:.1f}'} | "
                     f"{r['train_s']:.1f} | {r['final']:.4f} | "
                     f"{r['wire_bytes_per_step']:,.0f} | {r['accounted_bytes_per_step']:,.0f} | "
                     f"{r['wire_per_accounted']:.3f} |")
    return "\n".join(lines)


def seeds_table(rows, target):
    """Mean +- sd of the final metric and the time to target per (link,
    configuration) over its seeds."""
    import statistics

    groups = {}
    for r in rows:
        groups.setdefault((r["link"], r["config"]), []).append(r)
    lines = ["| link | configuration | seeds | final (each seed) | final mean ± sd | "
             f"time to {target:g} s (mean of reached) | reached |",
             "|---|---|--:|---|--:|--:|--:|"]
    for (link, config), rs in groups.items():
        finals = [r["final"] for r in rs]
        sd = statistics.stdev(finals) if len(finals) > 1 else 0.0
        times = [t for t in (time_to_target(r["curve"], target) for r in rs) if t is not None]
        mean_t = f"{sum(times) / len(times):.1f}" if times else "–"
        lines.append(f"| {link} | {config} | {len(rs)} | "
                     f"{', '.join(f'{f:.4f}' for f in finals)} | "
                     f"{statistics.fmean(finals):.4f} ± {sd:.4f} | {mean_t} | "
                     f"{len(times)}/{len(rs)} |")
    return "\n".join(lines)


def plot(rows, target, path):
    """Test metric against training seconds, one panel per link, one colour
    per configuration (every seed drawn)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    links = list(dict.fromkeys(r["link"] for r in rows))
    configs = list(dict.fromkeys(r["config"] for r in rows))
    colours = {c: f"C{i}" for i, c in enumerate(configs)}
    fig, axes = plt.subplots(1, len(links), figsize=(4.2 * len(links), 3.6), squeeze=False,
                             sharey=True)
    for ax, link in zip(axes[0], links):
        seen = set()
        for r in rows:
            if r["link"] != link:
                continue
            xs = [c[0] for c in r["curve"]]
            ys = [c[2] for c in r["curve"]]
            label = None if r["config"] in seen else r["config"]
            seen.add(r["config"])
            ax.plot(xs, ys, color=colours[r["config"]], marker=".", linewidth=1.2,
                    alpha=0.9, label=label)
        ax.axhline(target, color="grey", linestyle="--", linewidth=0.8)
        ax.set_title(link)
        ax.set_xlabel("training time (s)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"test {rows[0]['metric']}")
    axes[0][0].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _preset_flags(name):
    from deepreduce_bench.presets import PRESETS as presets

    if name not in presets or name == "flags":
        raise HarnessError(f"unknown configuration {name!r}; valid: "
                           f"{', '.join(n for n in presets if n != 'flags')}")
    return list(presets[name].args)


def table(rows):
    head = ("link", "configuration", "median step ms", "wire B/step", "accounted B/step",
            "wire / accounted", "frames/step", "(wire - headers) / accounted")
    lines = ["| " + " | ".join(head) + " |", "|---|---|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        lines.append(f"| {r['link']} | {r['config']} | {r['step_time_median_ms']:.0f} | "
                     f"{r['wire_bytes_per_step']:,.0f} | {r['accounted_bytes_per_step']:,.0f} | "
                     f"{r['wire_per_accounted']:.3f} | {r['wire_frames_per_step']:.1f} | "
                     f"{r['beyond_headers']:.3f} |")
    return "\n".join(lines)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--links", default="100mbit", help=f"comma list of {', '.join(LINKS)}")
    p.add_argument("--configs", default="uncompressed,golomb_qsgd",
                   help="comma list of deepreduce-bench --compare presets")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--steps", type=int, default=20, help="S: runs of S and 2S steps")
    p.add_argument("--delay_ms", type=int, default=0, help="one-way delay per link (netem)")
    p.add_argument("--timeout", type=int, default=900, help="seconds per deepreduce-bench run")
    p.add_argument("--out_dir", default=None, help="logs and results (default: a temp dir)")
    p.add_argument("--json", default=None, help="write the rows as JSON here")
    p.add_argument("--train_steps", type=int, default=0,
                   help="time-to-accuracy mode: train this many steps with evaluation")
    p.add_argument("--eval_every", type=int, default=50, help="with --train_steps")
    p.add_argument("--target", type=float, default=0.85,
                   help="with --train_steps: the test metric whose first crossing is timed")
    p.add_argument("--seeds", default="0", help="with --train_steps: comma list of seeds")
    p.add_argument("--plot", default=None, help="with --train_steps: PNG of metric vs time")
    args = p.parse_args(argv)
    try:
        links = [l for l in args.links.split(",") if l]
        for link in links:
            if link not in LINKS:
                raise HarnessError(f"unknown link {link!r}; valid: {', '.join(LINKS)}")
        if args.workers < 2 or args.steps < 1:
            raise HarnessError("--workers must be >= 2 and --steps >= 1")
        try:
            seeds = [int(x) for x in args.seeds.split(",") if x]
        except ValueError:
            raise HarnessError(f"--seeds must be integers, got {args.seeds!r}") from None
        if args.train_steps and (args.train_steps <= args.steps or args.eval_every < 1
                                 or not seeds):
            raise HarnessError("--train_steps must exceed --steps, --eval_every be >= 1 and "
                               "--seeds name at least one seed")
        configs = [(c, _preset_flags(c)) for c in args.configs.split(",") if c]
        preflight()
        remove_stale()
        if args.delay_ms and not netem_available():
            raise HarnessError(f"--delay_ms={args.delay_ms}: this kernel has no netem qdisc "
                               "(rate shaping with tbf works; delay emulation does not)")
        out_dir = os.path.abspath(args.out_dir or tempfile.mkdtemp(prefix="link_bench."))
        rows = []
        if args.train_steps:
            for link in links:
                for name, flags in configs:
                    for seed in seeds:
                        print(f"[{link} / {name} / seed {seed}] {args.workers} workers, "
                              f"{args.steps} steps, then {args.train_steps} with evaluation "
                              "...", file=sys.stderr, flush=True)
                        net = Network(args.workers, LINKS[link], args.delay_ms)
                        try:
                            row = train(net, flags, args.steps, args.train_steps,
                                        args.eval_every, seed,
                                        os.path.join(out_dir, link, name, f"seed{seed}"),
                                        args.timeout, extra)
                        finally:
                            net.remove()
                        row.update(link=link, config=name, workers=args.workers)
                        rows.append(row)
                        print(train_table([row], args.target).splitlines()[-1],
                              file=sys.stderr, flush=True)
                        if args.json:  # what is done so far survives a later failure
                            with open(args.json, "w") as f:
                                json.dump(rows, f, indent=1)
            print(train_table(rows, args.target))
            if len(seeds) > 1:
                print()
                print(seeds_table(rows, args.target))
            if args.plot:
                plot(rows, args.target, args.plot)
            return 0
        for link in links:
            for name, flags in configs:
                print(f"[{link} / {name}] {args.workers} workers, {args.steps} and "
                      f"{2 * args.steps} steps ...", file=sys.stderr, flush=True)
                net = Network(args.workers, LINKS[link], args.delay_ms)
                try:
                    row = measure(net, flags, args.steps, os.path.join(out_dir, link, name),
                                  args.timeout, extra)
                finally:
                    net.remove()
                row.update(link=link, config=name, workers=args.workers)
                rows.append(row)
                print(table([row]).splitlines()[-1], file=sys.stderr, flush=True)
    except HarnessError as e:
        print(f"link_bench: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("link_bench: interrupted; namespaces removed", file=sys.stderr)
        return 130
    print(table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


def _terminated(signum, frame):
    raise KeyboardInterrupt  # the same cleanup as Ctrl-C


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _terminated)
    sys.exit(main())
