"""deepreduce-bench's worker processes: --num_workers N launches N local
workers (launch_local_workers), each with its TF_CONFIG on free ports; when
one is killed, crashes or freezes, the launcher and the other workers say
which one and why (PeerFailure, one line) instead of a collective's stack
trace. deepreduce_bench.runner (the training loop) uses it and re-exports
every name.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time


# Children re-enter the command without the current directory on sys.path, so a
# repository checkout in the cwd does not shadow the installed package.
CHILD_BOOTSTRAP = ("import sys; sys.path.pop(0); "
                   "from deepreduce_bench.cli import main; main()")


class WorkerError(RuntimeError):
    """A local worker process failed or timed out (the message holds its log tail)."""


# ---------------------------------------------------------------------------
# Worker failures
#
# A worker killed, crashed or frozen (SIGSTOP) aborts the collectives of the
# others: at once when its connection closes, otherwise once TensorFlow's
# coordination service misses its heartbeats (10 s, TensorFlow's default).
# Each of the others then raises PeerFailure naming it (run), one line and
# PEER_FAILED_EXIT. Under the --num_workers launcher the workers report to it
# instead (STATUS_DIR_ENV), and it prints the one message: it also sees which
# of its processes died (exit status) or is stopped (/proc state "T").

# Exit code of a worker that stops because another worker of its cluster failed.
PEER_FAILED_EXIT = 3
# Set by launch_local_workers for its workers: a directory where each worker
# keeps its position (worker<i>.step) and writes its PeerFailure
# (worker<i>.fault), for the launcher's message.
STATUS_DIR_ENV = "DEEPREDUCE_BENCH_STATUS_DIR"
# Test hook, not a setting (tests/bench/test_mw_faults.py): "task=1,step=3,signal=STOP"
# makes worker 1 send itself SIGSTOP as its step 3 (counted from 1) begins.
TEST_FAULT_ENV = "DEEPREDUCE_TF_TEST_FAULT"
# The launcher reports a worker that stays stopped this long (SIGSTOP, a debugger).
STOPPED_GRACE_S = 5.0
# A task of the cluster in TensorFlow's error messages.
_TASK = r"/job:worker/(?:replica:\d+/)?task:(\d+)"


class PeerFailure(WorkerError):
    """Another worker of this cluster failed (killed, crashed or frozen): it
    aborted this worker's collective or coordination-service call.

    peer: its task index, None when TensorFlow's error does not say (or this
    worker's own index: the cluster declared this worker dead); hosts: the
    cluster's host:port; task: this worker; where: this worker's position
    ("at step 3/9"); reason: TensorFlow's cause, one line; detail: its whole
    error."""

    def __init__(self, peer, hosts, task, where, reason, detail=""):
        self.peer, self.hosts, self.task, self.where = peer, list(hosts), task, where
        self.reason, self.detail = reason, detail
        if peer == task:
            text = (f"the other workers declared worker {task} ({hosts[task]}) dead {where}: it "
                    "did not answer their heartbeats in time (was it stopped, or starved of "
                    f"CPU?) (TensorFlow: {reason})")
        else:
            who = (f"worker {peer} ({hosts[peer]})" if peer is not None
                   else "another worker (TensorFlow's error does not say which)")
            text = (f"{who} failed or stopped responding {where}; worker {task} stops "
                    f"(TensorFlow: {reason})")
        super().__init__(text)

    def announce(self, stream=sys.stderr, verbose=False):
        """Reports the failure once and returns the exit code (PEER_FAILED_EXIT):
        to the --num_workers launcher (STATUS_DIR_ENV), which prints it with
        what it knows of its processes, or else as one line on `stream`.
        TensorFlow's whole error too if `verbose`."""
        if verbose and self.detail:
            print(self.detail, file=stream)
        status_dir = os.environ.get(STATUS_DIR_ENV)
        if status_dir:  # the launcher prints the message
            _write_replace(os.path.join(status_dir, f"worker{self.task}.fault"), json.dumps(
                {"peer": self.peer, "where": self.where, "reason": self.reason}))
        else:
            _end_progress_line(stream)
            print(f"deepreduce-bench: {self}", file=stream, flush=True)
        return PEER_FAILED_EXIT


def _end_progress_line(stream):
    """Ends a progress bar's line on a terminal (ProgressBar redraws it with
    \r), so that a message after it starts a line."""
    if getattr(stream, "isatty", lambda: False)():
        stream.write("\n")


def _write_replace(path, text):
    """Writes `text` to `path` whole: readers see the old or the new text."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _cluster(strategy):
    """(worker host:port list, this worker's index) of a multi-worker
    strategy, or None (one process)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or resolver.task_type != "worker":
        return None
    hosts = resolver.cluster_spec().as_dict().get("worker", [])
    if not isinstance(hosts, list) or len(hosts) < 2:
        return None
    return hosts, int(resolver.task_id)


class _Position:
    """Where this worker is, for failure messages ("at step 3/9"); under the
    launcher also in its status file, read when this worker fails. Also
    applies TEST_FAULT_ENV."""

    def __init__(self, task):
        self.task = task
        self.text = "before training (connecting, building the model)"
        status_dir = os.environ.get(STATUS_DIR_ENV)
        self._path = os.path.join(status_dir, f"worker{task}.step") if status_dir else None
        self._fault = _test_fault(os.environ.get(TEST_FAULT_ENV), task)
        self.set(self.text)

    def set(self, text):
        self.text = text
        if self._path:
            _write_replace(self._path, text)

    def step(self, step, total):
        """Step `step` of `total` (counted from 1) begins."""
        self.set(f"at step {step}/{total}")
        if self._fault and self._fault[0] == step:
            os.kill(os.getpid(), self._fault[1])


def _test_fault(spec, task):
    """(step, signal) of TEST_FAULT_ENV's `spec` for worker `task`, or None."""
    if not spec:
        return None
    try:
        fields = dict(part.split("=", 1) for part in spec.split(","))
        target, step = int(fields["task"]), int(fields["step"])
        signum = signal.Signals["SIG" + fields["signal"].upper()]
    except (KeyError, ValueError) as e:
        raise ValueError(f"{TEST_FAULT_ENV}={spec!r}: expected task=N,step=N,signal=STOP "
                         "(or KILL, ...); it is a test hook, unset it") from e
    return (step, signum) if target == task else None


def _peer_failure(error, cluster, position):
    """The PeerFailure of TensorFlow error `error` in worker cluster[1], or None
    when the error does not come from another worker."""
    message = getattr(error, "message", None) or str(error)
    hosts, task = cluster
    unhealthy = _unhealthy_tasks(message)
    remote = re.search(r"remote target " + _TASK, message)
    if unhealthy:
        others = [t for t in unhealthy if t != task]
        peer = others[0] if others else task
    elif remote:
        peer = int(remote.group(1))
    elif "CoordinationService/" in message:
        peer = 0  # its leader: worker 0 runs the coordination service
    elif "Collective ops is aborted by" in message:
        peer = None
    else:
        return None
    if peer is not None and not 0 <= peer < len(hosts):
        peer = None
    return PeerFailure(peer, hosts, task, position.text, _reason(message), message)


def _unhealthy_tasks(message):
    """Task indices TensorFlow's coordination service lists as unhealthy (one a
    line after "... unhealthy (stopped sending heartbeats):")."""
    start = message.find("unhealthy")
    if start < 0:
        return []
    tasks = []
    for line in message[start:].splitlines()[1:]:
        match = re.fullmatch(_TASK, line.strip())
        if not match:
            break
        tasks.append(int(match.group(1)))
    return tasks


def _reason(message):
    """TensorFlow's cause in an aborted collective's `message`, one short line."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if "aborted by:" in line:
            text = line.split("aborted by:", 1)[1].strip()
            text = re.sub(r"^Error reported from /job:\S+: ", "", text).rstrip(":")
            if i + 1 < len(lines) and lines[i + 1].startswith("RPC:"):
                text += f" ({lines[i + 1]})"
            return text[:200]
    return lines[0][:200] if lines else "no message"


# ---------------------------------------------------------------------------
# Local multi-worker trial

def free_ports(count):
    """`count` distinct free TCP ports on 127.0.0.1."""
    socks, ports = [], []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


_PROCESS_CACHE = {}


def process_cache(key):
    """A dict that lives as long as this process, one per key. A function
    shipped to worker processes by value (Flower's simulation pickles the
    ClientApp, closures included, into its Ray actors with every message)
    finds here what it built in an earlier call: a closure's own dict would
    be a fresh copy each time."""
    return _PROCESS_CACHE.setdefault(key, {})


def _tail(path, lines=40):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return "(no log)"


def _terminate(procs):
    """Kills the workers still running and reaps them all. SIGKILL: a worker of
    a MultiWorkerMirroredStrategy goes on after SIGTERM (TensorFlow catches it
    as a preemption notice), and SIGKILL also ends a stopped one."""
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait()


def _process_state(pid):
    """The state letter of process `pid` in /proc ("T": stopped, "t": stopped
    by a debugger), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


class _LocalWorker:
    """One process of launch_local_workers, as its failure messages name it."""

    def __init__(self, index, proc, host, log, status_dir):
        self.index, self.proc, self.host, self.log = index, proc, host, log
        self.status_dir = status_dir
        self.stopped_since = None

    def name(self):
        return f"worker {self.index} (pid {self.proc.pid}, {self.host})"

    def where(self):
        """Its position as it last wrote it ("at step 3/9")."""
        try:
            with open(os.path.join(self.status_dir, f"worker{self.index}.step")) as f:
                return f.read().strip() or "before training"
        except OSError:
            return "while starting"

    def fault_report(self):
        """Its PeerFailure ({"peer", "where", "reason"}), or None."""
        try:
            with open(os.path.join(self.status_dir, f"worker{self.index}.fault")) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def stopped_for(self, now):
        """Seconds it has been seen stopped (0 if running)."""
        if self.proc.poll() is None and _process_state(self.proc.pid) in ("T", "t"):
            if self.stopped_since is None:
                self.stopped_since = now
            return now - self.stopped_since
        self.stopped_since = None
        return 0.0


def _failure(workers, now):
    """What failed, as the launcher's message, or None while all is well: a
    worker that exited with an error or was killed, else one stopped for
    STOPPED_GRACE_S, else the peer that a worker stopping with
    PEER_FAILED_EXIT names."""
    codes = [w.proc.poll() for w in workers]
    stopped = [w.stopped_for(now) for w in workers]
    for w, code in zip(workers, codes):
        if code is not None and code < 0:
            return (f"{w.name()} was killed by {_signal_name(-code)} {w.where()}; the launcher "
                    "ended the other workers")
        if code not in (None, 0, PEER_FAILED_EXIT):
            detail = f"; its log ({w.log}):\n{_tail(w.log)}" if w.log else ""
            return (f"{w.name()} exited with code {code} {w.where()}; the launcher ended the "
                    f"other workers{detail}")
    for w, seconds in zip(workers, stopped):
        if seconds >= STOPPED_GRACE_S:
            return (f"{w.name()} is frozen {w.where()}: stopped (SIGSTOP, or held by a "
                    f"debugger) for {seconds:.0f} s; the launcher ended all workers")
    for w, code in zip(workers, codes):
        if code == PEER_FAILED_EXIT:
            return _reported_failure(workers, w)
    return None


def _reported_failure(workers, reporter):
    """The launcher's message when `reporter` stopped because of a peer."""
    report = reporter.fault_report() or {}
    reason = report.get("reason", "no report")
    peer = report.get("peer")
    if isinstance(peer, int) and 0 <= peer < len(workers) and peer != reporter.index:
        w = workers[peer]
        return (f"{w.name()} stopped responding {w.where()} (worker {reporter.index} reports "
                f"TensorFlow's error: {reason}); the launcher ended all workers")
    return (f"{reporter.name()} stopped {report.get('where', reporter.where())} because "
            f"another worker failed (TensorFlow: {reason}); the launcher ended all workers")


def _signal_name(signum):
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def launch_local_workers(config, child_args, stream=sys.stderr):
    """Runs config.num_workers worker processes on 127.0.0.1 and waits for them.

    Each child runs this command with `child_args` plus --worker_hosts (free
    ports), --task_index and --output_json. Task 0 (the chief) inherits this
    process's stdout/stderr; the others log to files (kept in --train_dir, or
    a temporary directory deleted on success). Every worker keeps its
    position in a status directory (STATUS_DIR_ENV, temporary). A failing
    worker stops the others at once (collectives would wait for it forever):
    one that exits with an error or is killed, one stopped (SIGSTOP) for
    STOPPED_GRACE_S, or one that the others report failed or frozen
    (PEER_FAILED_EXIT); so do the --worker_timeout and KeyboardInterrupt.
    Children are always reaped.

    Returns:
      0 on success.

    Raises:
      WorkerError: a worker failed (the message names it, its pid and
        host:port, and its step) or the timeout expired.
    """
    n = config.num_workers
    hosts = [f"127.0.0.1:{p}" for p in free_ports(n)]
    log_dir = config.train_dir or tempfile.mkdtemp(prefix="deepreduce-bench-workers-")
    os.makedirs(log_dir, exist_ok=True)
    status_dir = tempfile.mkdtemp(prefix="deepreduce-bench-status-")
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    env[STATUS_DIR_ENV] = status_dir
    procs, logs, files = [], [], []
    if stream:
        print(f"launching {n} local workers on {', '.join(hosts)} (logs of workers 1..{n - 1} "
              f"in {log_dir})", file=stream, flush=True)
    try:
        for i in range(n):
            args = list(child_args) + [f"--worker_hosts={','.join(hosts)}", f"--task_index={i}",
                                       "--num_workers=1",
                                       f"--output_json={os.path.abspath(config.output_json)}"]
            if i == 0:
                out = None
                logs.append(None)
            else:
                path = os.path.join(log_dir, f"worker{i}.log")
                out = open(path, "w")
                files.append(out)
                logs.append(path)
            procs.append(subprocess.Popen(
                [sys.executable, "-c", CHILD_BOOTSTRAP] + args, env=env,
                stdout=out, stderr=subprocess.STDOUT if out else None))
        workers = [_LocalWorker(i, p, hosts[i], logs[i], status_dir)
                   for i, p in enumerate(procs)]
        deadline = time.monotonic() + config.worker_timeout
        while True:
            now = time.monotonic()
            failure = _failure(workers, now)
            if failure:
                _end_progress_line(stream)  # worker 0's, on this terminal
                raise WorkerError(failure)
            if all(p.poll() == 0 for p in procs):
                break
            if now > deadline:
                raise WorkerError(f"workers still running after --worker_timeout="
                                  f"{config.worker_timeout} s; killed them")
            time.sleep(0.2)
    finally:
        _terminate(procs)
        for f in files:
            f.close()
        shutil.rmtree(status_dir, ignore_errors=True)
    if not config.train_dir:
        for path in logs:
            if path:
                os.remove(path)
        os.rmdir(log_dir)
    return 0
