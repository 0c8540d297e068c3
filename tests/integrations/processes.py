"""The processes the Flower integration tests start (test_federated.py's
deployment, test_flower_quickstart.py's example app), written once: their
environment, free ports, waiting until one answers, and stopping every
process they started, and every process under those (Flower starts its
SuperExec, ServerApp and simulation in sessions of their own), without
touching anyone else's. Linux: read from /proc."""
import os
import signal
import sys
import time
import urllib.request

import pytest

from deepreduce_bench.runner import free_ports  # noqa: F401 (one home for the tests)

BIN_DIR = os.path.dirname(sys.executable)


def flower_tool(name):
    """The path of a Flower command next to this Python; skips the test when
    the federated extra is not installed."""
    path = os.path.join(BIN_DIR, name)
    if not os.path.exists(path):
        pytest.skip(f"{name} is not installed next to this Python (the federated extra)")
    return path


def flower_env(flwr_home, **extra):
    """The environment of a Flower process of a test: this venv's commands
    first on PATH (Flower starts flower-superexec, flwr-serverapp ... by
    name), its own FLWR_HOME, nothing sent or installed from the network."""
    return dict(os.environ, PATH=BIN_DIR + os.pathsep + os.environ.get("PATH", ""),
                FLWR_HOME=str(flwr_home), FLWR_TELEMETRY_ENABLED="0",
                FLWR_DISABLE_UPDATE_CHECK="1", FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1",
                PYTHONUNBUFFERED="1", **extra)


def _stat(pid):
    """(state, parent pid) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[0], int(fields[1])
    except (OSError, IndexError, ValueError):
        return None


def _pids():
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def alive(pid):
    """Whether `pid` runs (a zombie does not)."""
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def descendants(pids):
    """`pids` and every process under them (from the process table now)."""
    children = {}
    for pid in _pids():
        stat = _stat(pid)
        if stat is not None:
            children.setdefault(stat[1], []).append(pid)
    out, todo = [], list(pids)
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.append(pid)
            todo.extend(children.get(pid, []))
    return out


def running_in(directory):
    """The processes whose working directory is `directory` or below it
    (a test's own folder: what it started, wherever Flower detached it)."""
    root = os.path.realpath(directory)
    out = []
    for pid in _pids():
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if (cwd == root or cwd.startswith(root + os.sep)) and alive(pid):
            out.append(pid)
    return out


def stop(pids, procs=(), grace_s=10):
    """TERM `pids`, the processes of `procs` (subprocess.Popen) and every
    process under them; KILL what is left after grace_s; reap `procs`.
    Returns the pids signalled."""
    pids = descendants(list(pids) + [p.pid for p in procs])
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        end = time.monotonic() + grace_s
        while time.monotonic() < end and any(alive(p) for p in pids):
            time.sleep(0.2)
    for p in procs:
        p.wait(timeout=grace_s)
    return pids


def wait_healthy(port, deadline, proc, name, describe=lambda: ""):
    """Waits until http://127.0.0.1:port/health answers (Flower's SuperLink
    and SuperNodes), until time.monotonic() reaches `deadline`; fails the
    test, with describe()'s text (the logs), if `proc` exits first or time
    runs out."""
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read()
            return
        except OSError:
            assert proc.poll() is None, f"{name} exited\n{describe()}"
            time.sleep(0.5)
    pytest.fail(f"{name} not healthy in time\n{describe()}")
