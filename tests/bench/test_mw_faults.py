"""Multi-worker failures name the failed worker; a finished run logs no
heartbeat errors.

Subprocess runs of deepreduce-bench (NCF on synthetic data, a few steps of
batch 64) with two workers: started by the --num_workers launcher, or by hand
with --worker_hosts/--task_index. A worker is killed or frozen at a known step
by the test hook runner.TEST_FAULT_ENV ("task=1,step=3,signal=STOP": worker 1
sends itself SIGSTOP as its step 3 begins). Each run has a bounded timeout;
its process groups are killed if it expires. The launcher's choice of the
failed worker is also checked on plain processes (no TensorFlow).
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from deepreduce_bench import runner
from deepreduce_bench.runner import CHILD_BOOTSTRAP

# Trains models, starts worker processes or runs Flower (minutes):
# `pytest -m "not slow"` leaves it out of a quick loop.
pytestmark = pytest.mark.slow

# 1 warm-up + 6 timed steps; worker 0 still writes the JSON when all goes well.
RUN = ["--model=ncf", "--batch_size=64", "--num_batches=6", "--num_warmup_batches=1",
       "--codec_repeats=1", "--compressor=topk", "--compress_ratio=0.01", "--deepreduce=none"]
TOTAL_STEPS = 7
# Generous: a fault is detected within ~10 s (TensorFlow's heartbeat timeout)
# of the worker's first steps; the rest is starting TensorFlow on a busy machine.
TIMEOUT = 300


def _start(args, cwd, env=None, code=CHILD_BOOTSTRAP):
    """deepreduce-bench `args` in `cwd`, in its own process group. env: extra
    variables; TF_CPP_MIN_LOG_LEVEL is the command's own unless env sets it."""
    full_env = dict(os.environ)
    full_env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    full_env.pop(runner.TEST_FAULT_ENV, None)
    full_env["TMPDIR"] = str(cwd)  # the launcher's worker logs, kept after a failure
    full_env.update(env or {})
    return subprocess.Popen([sys.executable, "-c", code] + list(args), cwd=cwd, env=full_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _finish(procs):
    """(returncode, stdout, stderr) of each of `procs`, all within TIMEOUT."""
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=TIMEOUT)
            results.append((p.returncode, out, err))
    except subprocess.TimeoutExpired:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        tails = [p.communicate()[1][-2000:] for p in procs]
        pytest.fail(f"the workers did not finish in {TIMEOUT} s:\n" + "\n---\n".join(tails))
    return results


def _messages(err):
    """The command's own error lines ("deepreduce-bench: ...") in `err`."""
    return [line for line in err.splitlines() if line.startswith("deepreduce-bench:")]


def _launched_hosts(err):
    match = re.search(r"launching 2 local workers on (\S+), (\S+) \(", err)
    assert match, err[-3000:]
    return match.groups()


def _launch_with_fault(tmp_path, fault):
    proc = _start(RUN + ["--num_workers=2", "--output_json=r.json"], tmp_path,
                  env={runner.TEST_FAULT_ENV: fault})
    ((code, _, err),) = _finish([proc])
    return code, err


def test_launcher_names_a_killed_worker(tmp_path):
    code, err = _launch_with_fault(tmp_path, "task=0,step=3,signal=KILL")
    assert code == 1, err[-3000:]
    hosts = _launched_hosts(err)
    messages = _messages(err)
    assert len(messages) == 1, err[-3000:]
    assert re.fullmatch(
        rf"deepreduce-bench: worker 0 \(pid \d+, {re.escape(hosts[0])}\) was killed by SIGKILL "
        rf"at step 3/{TOTAL_STEPS}; the launcher ended the other workers", messages[0]), messages
    assert "Traceback" not in err
    assert not (tmp_path / "r.json").exists()


def test_launcher_names_the_stopped_worker_not_the_survivor(tmp_path):
    # Worker 0, waiting for it in step 3, would fail too (after TensorFlow's
    # heartbeat timeout): the message must blame worker 1, which froze.
    code, err = _launch_with_fault(tmp_path, "task=1,step=3,signal=STOP")
    assert code == 1, err[-3000:]
    hosts = _launched_hosts(err)
    messages = _messages(err)
    assert len(messages) == 1, err[-3000:]
    assert re.fullmatch(
        rf"deepreduce-bench: worker 1 \(pid \d+, {re.escape(hosts[1])}\) is frozen at step "
        rf"3/{TOTAL_STEPS}: stopped \(SIGSTOP, or held by a debugger\) for \d+ s; the launcher "
        "ended all workers", messages[0]), messages
    assert "Traceback" not in err


def _by_hand(tmp_path, env=None, code=CHILD_BOOTSTRAP, codes=None):
    """Two workers started by hand; returns (hosts, [(returncode, stdout, stderr)])."""
    hosts = [f"127.0.0.1:{p}" for p in runner.free_ports(2)]
    procs = [_start(RUN + [f"--worker_hosts={','.join(hosts)}", f"--task_index={i}",
                           "--output_json=r.json"], tmp_path, env=env,
                    code=(codes or {}).get(i, code))
             for i in range(2)]
    return hosts, _finish(procs)


def test_worker_started_by_hand_names_its_killed_peer(tmp_path):
    hosts, results = _by_hand(tmp_path, env={runner.TEST_FAULT_ENV: "task=1,step=3,signal=KILL"})
    (code0, _, err0), (code1, _, _) = results
    assert code1 == -signal.SIGKILL
    assert code0 == runner.PEER_FAILED_EXIT, err0[-3000:]
    messages = _messages(err0)
    assert len(messages) == 1, err0[-3000:]
    assert messages[0].startswith(
        f"deepreduce-bench: worker 1 ({hosts[1]}) failed or stopped responding at step "
        f"3/{TOTAL_STEPS}; worker 0 stops (TensorFlow: "), messages
    assert "Traceback" not in err0


def test_finished_run_logs_no_heartbeat_errors(tmp_path):
    # Worker 0 takes longer than TensorFlow's heartbeat timeout (10 s) to write
    # its results; worker 1 must not leave meanwhile, or worker 0's
    # coordination service logs it as crashed ("UNAVAILABLE ... stopped
    # sending heartbeats"). TensorFlow's log lines are all shown here.
    slow_chief = ("import sys, time; sys.path.pop(0); "
                  "from deepreduce_bench import report; write = report.write_json; "
                  "report.write_json = lambda *a, **k: (time.sleep(12), write(*a, **k))[1]; "
                  "from deepreduce_bench.cli import main; main()")
    _, results = _by_hand(tmp_path, env={"TF_CPP_MIN_LOG_LEVEL": "0"},
                          codes={0: slow_chief})
    for code, out, err in results:
        assert code == 0, err[-3000:]
        for word in ("heartbeat", "UNAVAILABLE"):
            assert word.lower() not in (out + err).lower(), (out + err)[-3000:]
    assert json.loads((tmp_path / "r.json").read_text())["config"]["total_steps"] == TOTAL_STEPS


# ---------------------------------------------------------------------------
# The launcher's choice, on plain processes

def _plain_workers(tmp_path, scripts):
    """_LocalWorkers of Python processes running `scripts`, with a status dir."""
    status = tmp_path / "status"
    status.mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", s]) for s in scripts]
    hosts = [f"127.0.0.1:{5000 + i}" for i in range(len(scripts))]
    return status, [runner._LocalWorker(i, p, hosts[i], None, str(status))
                    for i, p in enumerate(procs)]


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc")
def test_launcher_waits_before_naming_a_stopped_worker(tmp_path):
    status, workers = _plain_workers(tmp_path, ["import time; time.sleep(60)"] * 2)
    try:
        (status / "worker1.step").write_text("at step 5/9")
        os.kill(workers[1].proc.pid, signal.SIGSTOP)
        now = 1000.0
        for _ in range(500):  # SIGSTOP takes effect asynchronously
            if runner._process_state(workers[1].proc.pid) == "T":
                break
            time.sleep(0.01)
        assert runner._failure(workers, now) is None  # a Ctrl-Z of the whole group passes
        message = runner._failure(workers, now + runner.STOPPED_GRACE_S)
        assert message.startswith(f"worker 1 (pid {workers[1].proc.pid}, 127.0.0.1:5001) is "
                                  "frozen at step 5/9: stopped"), message
        os.kill(workers[1].proc.pid, signal.SIGCONT)
        assert runner._failure(workers, now + 2 * runner.STOPPED_GRACE_S) is None
    finally:
        runner._terminate([w.proc for w in workers])


def test_launcher_names_the_peer_a_worker_reports(tmp_path):
    status, workers = _plain_workers(
        tmp_path, [f"raise SystemExit({runner.PEER_FAILED_EXIT})", "import time; time.sleep(60)"])
    try:
        (status / "worker0.fault").write_text(json.dumps(
            {"peer": 1, "where": "at step 4/9", "reason": "Socket closed"}))
        (status / "worker1.step").write_text("at step 4/9")
        workers[0].proc.wait()
        message = runner._failure(workers, 0.0)
        assert message == (f"worker 1 (pid {workers[1].proc.pid}, 127.0.0.1:5001) stopped "
                           "responding at step 4/9 (worker 0 reports TensorFlow's error: Socket "
                           "closed); the launcher ended all workers")
        # A worker's own error (or a signal) comes first: it is the cause.
        workers[1].proc.kill()
        workers[1].proc.wait()
        assert runner._failure(workers, 0.0).startswith(
            f"worker 1 (pid {workers[1].proc.pid}, 127.0.0.1:5001) was killed by SIGKILL at "
            "step 4/9")
    finally:
        runner._terminate([w.proc for w in workers])


# TensorFlow 2.21's errors in the surviving worker (as they were printed),
# one per kind of failure of its peer.
KILLED = """Graph execution error:

Detected at node adam/CollectiveGatherV2 defined at (most recent call last):
Collective ops is aborted by: recvmsg:Connection reset by peer
Additional GRPC error information from remote target /job:worker/replica:0/task:{peer} while \
calling /tensorflow.WorkerService/RecvBuf:
:UNKNOWN:Error received from peer  {{grpc_status:14, grpc_message:"recvmsg:Connection reset \
by peer"}}
The error could be from a previous operation. Restart your program to reset.
\t [[{{{{node adam/CollectiveGatherV2}}}}]] [Op:__inference_train_step_2936]"""
STOPPED = """Graph execution error:

Detected at node adam/CollectiveGatherV2 defined at (most recent call last):
Collective ops is aborted by: Error reported from /job:worker/task:{peer}: The following tasks \
are unhealthy (stopped sending heartbeats):
/job:worker/replica:0/task:{peer}
The tasks have crashed. Check the task logs for an earlier error, or scheduler events (e.g. \
preemption, eviction) to debug further.
The error could be from a previous operation. Restart your program to reset.
\t [[{{{{node adam/CollectiveGatherV2}}}}]] [Op:__inference_train_step_2936]"""
LEADER_STOPPED = """Graph execution error:

Detected at node adam/CollectiveGatherV2_9 defined at (most recent call last):
Collective ops is aborted by: Deadline Exceeded
RPC: /tensorflow.CoordinationService/Heartbeat
The error could be from a previous operation. Restart your program to reset.
\t [[{{node adam/CollectiveGatherV2_9}}]] [Op:__inference_train_step_2898]"""


class _AtStep3:
    """A runner._Position, as _peer_failure reads it."""

    text = "at step 3/9"


@pytest.mark.parametrize("message, task, peer, reason", [
    (KILLED.format(peer=1), 0, 1, "recvmsg:Connection reset by peer"),
    (KILLED.format(peer=0), 1, 0, "recvmsg:Connection reset by peer"),
    (STOPPED.format(peer=1), 0, 1, "The following tasks are unhealthy (stopped sending "
                                   "heartbeats)"),
    (STOPPED.format(peer=1), 1, 1, "The following tasks are unhealthy (stopped sending "
                                   "heartbeats)"),
    (LEADER_STOPPED, 1, 0, "Deadline Exceeded (RPC: /tensorflow.CoordinationService/Heartbeat)"),
])
def test_tensorflow_errors_name_the_failed_worker(message, task, peer, reason):
    hosts = ["10.0.0.1:2222", "10.0.0.2:2222"]
    failure = runner._peer_failure(ValueError(message), (hosts, task), _AtStep3())
    assert (failure.peer, failure.task, failure.reason) == (peer, task, reason)
    if peer == task:  # the others declared this worker dead (it was frozen)
        assert str(failure).startswith(f"the other workers declared worker {task} "
                                       f"({hosts[task]}) dead at step 3/9")
    else:
        assert str(failure) == (f"worker {peer} ({hosts[peer]}) failed or stopped responding "
                                f"at step 3/9; worker {task} stops (TensorFlow: {reason})")


def test_other_tensorflow_errors_are_not_blamed_on_a_peer():
    error = ValueError("Matrix size-incompatible: In[0]: [4,3], In[1]: [4,3]")
    assert runner._peer_failure(error, (["a:1", "b:2"], 0), _AtStep3()) is None


@pytest.mark.parametrize("spec", ["task=1,step=x,signal=STOP", "task=1,signal=STOP",
                                  "task=1,step=3,signal=NOPE", "garbage"])
def test_bad_test_fault_spec_is_one_clear_error(spec):
    with pytest.raises(ValueError, match=re.escape(runner.TEST_FAULT_ENV) + ".*task=N,step=N"):
        runner._test_fault(spec, 1)


def test_test_fault_applies_to_its_worker_only():
    assert runner._test_fault("task=1,step=3,signal=stop", 1) == (3, signal.SIGSTOP)
    assert runner._test_fault("task=1,step=3,signal=KILL", 0) is None
    assert runner._test_fault("", 0) is None
