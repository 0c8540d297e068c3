"""Runs one deepreduce-bench configuration: strategy, training loop, measurements.

    results = run(config)                     # in this process (one worker)
    returncode = launch_local_workers(config, argv)   # --num_workers=N

The gradients of every step go through deepreduce_tf.distribute: a
MirroredStrategy over --num_gpus local devices whose cross-device ops are
DeepReduceCrossDeviceOps (variable_update=replicated), or a
MultiWorkerMirroredStrategy whose collective ops are DeepReduce's
(collective_all_reduce). --compressor=none sends dense gradients through
the same ops, so bytes are counted the same way for every run. The
uncompressed baseline of a comparison is --exchange=tf instead: the same
strategies with TensorFlow's own cross-device ops (DenseExchange stands in for
the ops' counters: the dense gradient bytes of the trainable variables per
replica and step).

Training is a custom loop (tf.function around strategy.run): the loss is
averaged over the global batch and Keras 3's optimizer.apply_gradients
all-reduces the gradients (a SUM) through the strategy. Per-step wall time
is measured after --num_warmup_batches steps, synchronised by reading the
step's loss. Bytes come from the ops' own counters: the mean over the timed
steps of the per-replica payload bytes (sent) and uncompressed gradient bytes
(dense).

With --eval, the model is evaluated on the fixed test subset before training,
every --eval_every steps and at the end (eval_history: step, cumulative
bytes, time, metric); evaluation time is not training time.

With several workers (MultiWorkerMirroredStrategy), a worker that is
killed, crashes or freezes is named in one line, with the step: each of the
others stops with PeerFailure (exit code PEER_FAILED_EXIT) once TensorFlow
aborts its collective, at once when the failed worker's connection closes,
otherwise after the coordination service's heartbeat timeout (10 s); the
--num_workers launcher prints the one message itself (see "Worker
failures"). A finished run's workers leave together, at exit.

Codec time is measured apart from training, after it: a fresh Compressor of
the same parameters compresses random normal tensors of the model's
trainable-variable shapes with compress_batch() in one tf.function, and
decodes as many payloads as there are replicas with decompress_batch() in
another; the medians of --codec_repeats calls are compress_ms and
decompress_ms.
"""
import atexit
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import deepreduce_tf
from deepreduce_bench import flags as bench_flags
from deepreduce_bench import report

# Children re-enter the command without the current directory on sys.path, so a
# repository checkout in the cwd does not shadow the installed package.
CHILD_BOOTSTRAP = ("import sys; sys.path.pop(0); "
                   "from deepreduce_bench.cli import main; main()")


class WorkerError(RuntimeError):
    """A local worker process failed or timed out (the message holds its log tail)."""


# ---------------------------------------------------------------------------
# Devices and strategies

def tf_config_for(hosts, task_index):
    """The TF_CONFIG of worker `task_index` of a cluster of `hosts`."""
    return json.dumps({"cluster": {"worker": list(hosts)},
                       "task": {"type": "worker", "index": int(task_index)}})


def make_strategy(config):
    """The strategy of config.variable_update (call before any other TF work).

    replicated: MirroredStrategy over num_gpus GPUs, or, without GPUs, over
    num_gpus logical CPU devices carved out of the one physical CPU.
    collective_all_reduce: MultiWorkerMirroredStrategy (TF_CONFIG from
    --worker_hosts/--task_index unless already set).

    The op library is loaded once the devices are set up (its first op starts
    TensorFlow's runtime): before the MirroredStrategy exists, right after the
    MultiWorkerMirroredStrategy (whose collectives need a runtime not started).

    Raises:
      RuntimeError: the requested devices do not exist.
      deepreduce_tf.OpLibraryError: the op library is missing or broken.
    """
    import tensorflow as tf

    from deepreduce_tf import distribute as drd

    params = dict(config.params)
    gpus = tf.config.list_physical_devices("GPU")
    if config.variable_update == "replicated":
        if gpus:
            if len(gpus) < config.num_gpus:
                raise RuntimeError(f"--num_gpus={config.num_gpus} but only {len(gpus)} GPU(s) "
                                   "are visible")
            devices = [f"/gpu:{i}" for i in range(config.num_gpus)]
        else:
            cpus = tf.config.list_physical_devices("CPU")
            tf.config.set_logical_device_configuration(
                cpus[0], [tf.config.LogicalDeviceConfiguration()] * config.num_gpus)
            devices = [f"/cpu:{i}" for i in range(config.num_gpus)]
        check_op_library()
        if config.exchange == "tf":
            return tf.distribute.MirroredStrategy(devices)
        ops = drd.DeepReduceCrossDeviceOps(params)
        return tf.distribute.MirroredStrategy(devices, cross_device_ops=ops)
    if config.worker_hosts and "TF_CONFIG" not in os.environ:
        os.environ["TF_CONFIG"] = tf_config_for(config.worker_hosts, config.task_index)
    if not gpus and config.num_gpus != 1:
        raise RuntimeError(f"--num_gpus={config.num_gpus} with collective_all_reduce needs "
                           "GPUs; on CPUs every worker runs one replica (--num_gpus=1)")
    if gpus:
        tf.config.set_visible_devices(gpus[:config.num_gpus], "GPU")
    # Collective ops must be configured before TensorFlow's runtime starts, so
    # here the op library loads once the strategy exists (still before training;
    # the --num_workers launcher has loaded it before starting the workers).
    if config.exchange == "tf":
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    else:
        strategy = drd.multi_worker_strategy(params)
    check_op_library()
    return strategy


class DenseExchange:
    """The byte counters of --exchange=tf (TensorFlow's all-reduce has none):
    every step, each replica exchanges its uncompressed gradients. A dense
    gradient's bytes are its variable's size; an embedding's IndexedSlices
    travel as they are, values + indices (as the DeepReduce ops count their
    dense bytes). Same methods as the DeepReduce ops' totals() and
    step_bytes(); steps are the optimizer's iterations."""

    def __init__(self, variables, optimizer, replicas):
        self.variables = list(variables)
        self.dense_bytes = sum(_nbytes(v.shape, v.dtype) for v in self.variables)
        self.optimizer = optimizer
        self.replicas = replicas

    def observe(self, grads):
        """Takes the gradients' bytes from their static shapes (called while
        the step is traced; the shapes are those of every step)."""
        import tensorflow as tf

        total = 0
        for g, v in zip(grads, self.variables):
            if isinstance(g, tf.IndexedSlices) and g.values.shape.is_fully_defined():
                total += (_nbytes(g.values.shape, g.values.dtype)
                          + _nbytes(g.indices.shape, g.indices.dtype))
            elif g is not None:
                total += _nbytes(v.shape, v.dtype)
        self.dense_bytes = total

    def _received(self, nbytes):
        from deepreduce_tf.accounting import ring_received  # TensorFlow's all-reduce: a ring

        return ring_received(nbytes, self.replicas)

    def totals(self):
        steps = int(self.optimizer.iterations.numpy())
        total = steps * self.dense_bytes
        return {"dense_bytes": total, "sent_bytes": total,
                "received_bytes": steps * self._received(self.dense_bytes), "steps": steps}

    def step_bytes(self):
        return {"dense_bytes": self.dense_bytes, "sent_bytes": self.dense_bytes,
                "received_bytes": self._received(self.dense_bytes), "ratio": 1.0,
                "replicas": self.replicas}


def check_op_library():
    """Loads the op library now: a missing or broken one is one
    deepreduce_tf.OpLibraryError before any training (not a traceback from
    inside the first step). Its BuildInfo op starts TensorFlow's runtime, so a
    training process calls it after configuring its devices (make_strategy)."""
    deepreduce_tf.build_info()


def _nbytes(shape, dtype):
    import numpy as np
    import tensorflow as tf

    return int(np.prod(tuple(shape), dtype=np.int64)) * tf.as_dtype(dtype).size


def make_optimizer(config, total_steps=None):
    """The Keras 3 optimizer of --optimizer at --init_learning_rate: constant,
    or (--lr_schedule=cosine) decayed to 0 along a cosine over total_steps."""
    import keras

    lr = config.init_learning_rate
    if config.lr_schedule == "cosine":
        lr = keras.optimizers.schedules.CosineDecay(lr, decay_steps=max(int(total_steps), 1))
    if config.optimizer == "sgd":
        return keras.optimizers.SGD(lr)
    if config.optimizer == "momentum":
        if (config.params or {}).get("memory") == "dgc":
            # DGC's momentum correction applies --momentum in the compressor.
            return keras.optimizers.SGD(lr)
        return keras.optimizers.SGD(lr, momentum=config.momentum)
    if config.optimizer == "adam":
        return keras.optimizers.Adam(lr)
    return keras.optimizers.RMSprop(lr)


def is_chief(strategy):
    """True in the process that reports (task 0, or the only process)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return True
    return resolver.task_type in (None, "chief") or (
        resolver.task_type == "worker" and resolver.task_id == 0)


# ---------------------------------------------------------------------------
# Codec timing

def time_codecs(params, variables, num_payloads, repeats, seed=0):
    """Codec-only cost of one step: (compress_ms, decompress_ms, payload_bytes).

    A fresh Compressor (from_params(params)) compresses random normal tensors
    of the variables' shapes and dtypes in one payload (compress_batch), and
    decodes `num_payloads` copies of it (decompress_batch) - what one replica
    does per step. Medians of `repeats` calls after one tracing call.
    """
    import numpy as np
    import tensorflow as tf

    compressor = deepreduce_tf.from_params(dict(params))
    rng = np.random.default_rng(seed)
    grads = [tf.constant(rng.standard_normal(tuple(v.shape)).astype(tf.as_dtype(v.dtype)
                                                                    .as_numpy_dtype))
             for v in variables]
    names = [_var_name(v) for v in variables]
    payload, ctxs = compressor.compress_batch(grads, names)
    payload_bytes = int(payload.shape[0]) * payload.dtype.size

    encode = tf.function(lambda: compressor.compress_batch(grads, names)[0])
    decode = tf.function(lambda p: [compressor.decompress_batch(p, ctxs)
                                    for _ in range(num_payloads)])

    def timed(fn, *args):
        fn(*args)  # trace
        times = []
        for _ in range(max(repeats, 1)):
            t0 = time.perf_counter()
            out = fn(*args)
            tf.nest.map_structure(lambda t: t.numpy(), out)
            times.append(time.perf_counter() - t0)
        return 1000.0 * float(np.median(times))

    return timed(encode), timed(decode, payload), payload_bytes


def _var_name(v):
    return getattr(v, "path", None) or v.name


# ---------------------------------------------------------------------------
# One process

EVAL_METRICS = ("accuracy", "hit_rate", "ndcg")


def _data_options():
    """tf.data options of the training input: no autotuning. The pipelines
    are fixed (sequential map, prefetch 2); an autotuned iterator's model
    thread sleeps up to a minute between rounds, and deleting the iterator
    after training waited for it: 20-60 s of nothing at the end of a run."""
    import tensorflow as tf

    options = tf.data.Options()
    options.autotune.enabled = False
    return options


def _input_options(tf, strategy):
    """How the strategy feeds its replicas. As tf.distribute does by default
    (one pipeline per worker, batches prefetched to the devices), except for
    MirroredStrategy over CPU devices: one pipeline per replica, read where
    it is made. The default's multi-device iterator has autotuned per-device
    iterators of its own (see _data_options) and buys nothing in one host's
    memory. (MultiWorkerMirroredStrategy has no per-replica pipelines.)"""
    if (tf.config.list_logical_devices("GPU")
            or not isinstance(strategy, tf.distribute.MirroredStrategy)):
        return tf.distribute.InputOptions()
    return tf.distribute.InputOptions(
        experimental_fetch_to_device=False,
        experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA)


def eval_interval(config, total_steps):
    """Steps between test evaluations (0: none during training): --eval_every,
    else about EVAL_POINTS per run; 0 without --eval."""
    if not config.eval:
        return 0
    if config.eval_every is None:
        return max(1, math.ceil(total_steps / bench_flags.EVAL_POINTS))
    return config.eval_every


def run(config, stream=sys.stderr):
    """Trains config in this process (one worker) and returns the results dict.

    Only the chief writes the JSON and prints; other workers return None.
    Several workers leave together, at exit (_leave_together).

    Raises:
      deepreduce_tf.OpLibraryError: the op library is missing or broken.
      ConfigError: the data are missing (checked once the op library loaded,
        before any training; the message says how to get them).
      PeerFailure: another worker of the cluster failed or stopped responding
        (TensorFlow aborted this worker's collective or coordination call).
    """
    import tensorflow as tf

    strategy = make_strategy(config)
    bench_flags.check_data(config.model, config.data_name, config.data_dir)
    cluster = _cluster(strategy)
    position = _Position(cluster[1] if cluster else 0)
    try:
        return _train(config, strategy, cluster, position, stream)
    except tf.errors.OpError as e:
        failure = _peer_failure(e, cluster, position) if cluster else None
        if failure is None:
            raise
        raise failure from e


def _train(config, strategy, cluster, position, stream):
    """run() once the strategy exists; `position` follows the steps."""
    import numpy as np
    import tensorflow as tf

    from deepreduce_bench import workloads  # imports TensorFlow
    from deepreduce_tf import distribute as drd

    chief = is_chief(strategy)
    ops = drd.get_ops(strategy) if config.exchange == "deepreduce" else None
    log = stream if chief else None
    tf.keras.utils.set_random_seed(config.seed)

    workload = workloads.make_workload(config)
    replicas = strategy.num_replicas_in_sync
    global_batch = config.batch_size * replicas
    if config.num_batches is not None:
        timed_steps = config.num_batches
    else:
        timed_steps = max(1, math.ceil(config.num_epochs * workload.num_train_examples /
                                       global_batch))
    total_steps = config.num_warmup_batches + timed_steps
    dist_ds = strategy.distribute_datasets_from_function(
        lambda ctx: workload.train_dataset(ctx, global_batch, total_steps).with_options(
            _data_options()),
        options=_input_options(tf, strategy))

    with strategy.scope():
        model = workload.build_model()
        optimizer = make_optimizer(config, total_steps)
        # Its slots now, not on the first apply_gradients inside the traced step
        # (TensorFlow's own cross-device ops fail on variables created there).
        optimizer.build(model.trainable_variables)
    variables = model.trainable_variables
    if ops is None:
        ops = DenseExchange(variables, optimizer, replicas)
    display_every = config.display_every or max(
        1, math.ceil(total_steps / bench_flags.HISTORY_POINTS))
    eval_every = eval_interval(config, total_steps)

    def step_fn(inputs):
        x, y = inputs
        with tf.GradientTape() as tape:
            outputs = model(x, training=True)
            per_example = workload.loss(y, outputs)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            if model.losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
        grads = tape.gradient(loss, variables)
        if isinstance(ops, DenseExchange):
            ops.observe(grads)
        optimizer.apply_gradients(zip(grads, variables))
        return tf.reduce_mean(per_example), tf.reduce_mean(workload.correct(y, outputs))

    @tf.function
    def train_step(iterator):
        return strategy.run(step_fn, args=(next(iterator),))

    def local_mean(per_replica):
        # Averaged over this process's replicas only: strategy.reduce would add
        # a cross-worker collective (and traffic) to every step.
        return float(np.mean([t.numpy() for t in strategy.experimental_local_results(
            per_replica)]))

    writer = None
    if config.train_dir and chief:
        # TensorBoard scalars per step (drd.write_scalar needs no tensorboard package).
        writer = tf.summary.create_file_writer(os.path.join(config.train_dir, "logs"))
    iterator = iter(dist_ds)
    bar = report.ProgressBar(total_steps, stream=log)
    history, step_times = [], []
    losses, accs = [], []
    base = None
    train_time = timed_time = 0.0
    eval_history = []

    def record_eval(step):
        totals = ops.totals()
        result = workload.evaluate(model)
        eval_history.append(dict(
            {"step": step, "time_s": round(timed_time, 4), "wall_s": round(train_time, 4),
             "sent_bytes": int(totals["sent_bytes"]), "dense_bytes": int(totals["dense_bytes"])},
            **{k: result[k] for k in EVAL_METRICS if k in result}))
        if writer is not None:
            with writer.as_default():
                drd.write_scalar(f"eval/{workload.metric}", result[workload.metric], step)
        if log:
            print(f"eval step {step}/{total_steps}: {workload.metric} "
                  f"{result[workload.metric]:.4f}", file=log, flush=True)
        return result

    last_eval = None
    if eval_every and chief:
        last_eval = record_eval(0)
    if log:
        compressed = config.params.get("compressor") not in (None, "none")
        print(f"building the {'compressed ' if compressed else ''}training step (the first "
              "step traces and compiles the graph) ...", file=log, flush=True)
    for step in range(total_steps):
        position.step(step + 1, total_steps)
        t0 = time.perf_counter()
        loss, acc = train_step(iterator)
        loss, acc = local_mean(loss), local_mean(acc)
        dt = time.perf_counter() - t0
        train_time += dt
        if step == 0 and log:
            print(f"first step: {dt:.1f} s (graph tracing included)", file=log, flush=True)
        if not math.isfinite(loss):
            raise FloatingPointError(f"step {step}: loss is {loss}; lower "
                                     "--init_learning_rate or check the configuration")
        totals = ops.totals()
        if step + 1 == config.num_warmup_batches:
            base = totals
        if step >= config.num_warmup_batches:
            step_times.append(dt)
            timed_time += dt
        losses.append(loss)
        accs.append(acc)
        if (step + 1) % display_every == 0 or step + 1 == total_steps:
            history.append({"step": step + 1, "time_s": round(timed_time, 4),
                            "wall_s": round(train_time, 4),
                            "sent_bytes": int(totals["sent_bytes"]),
                            "dense_bytes": int(totals["dense_bytes"]),
                            "received_bytes": int(totals.get("received_bytes", 0)),
                            "loss": float(np.mean(losses[-display_every:])),
                            "accuracy": float(np.mean(accs[-display_every:]))})
        sb = ops.step_bytes()
        if writer is not None:
            with writer.as_default():
                for name, value in (("loss", loss), ("accuracy", acc),
                                    ("deepreduce/sent_bytes", sb["sent_bytes"]),
                                    ("deepreduce/dense_bytes", sb["dense_bytes"]),
                                    ("deepreduce/reduction", sb["ratio"])):
                    drd.write_scalar(name, value, step + 1)
        fields = {"loss": loss, "acc": acc,
                  "red": round(sb["dense_bytes"] / max(sb["sent_bytes"], 1), 1)}
        if eval_every and chief and ((step + 1) % eval_every == 0 or step + 1 == total_steps):
            last_eval = record_eval(step + 1)
        if eval_history:
            fields["test"] = eval_history[-1][workload.metric]
        bar.update(step + 1, **fields)

    position.set("after training")
    _leave_together(strategy, cluster, position, (config.flags or {}).get("verbose", False))
    end = ops.totals()
    base = base or {"dense_bytes": 0, "sent_bytes": 0, "steps": 0}
    counted = max(timed_steps, 1)
    sent = (end["sent_bytes"] - base["sent_bytes"]) / counted
    received = (end.get("received_bytes", 0) - base.get("received_bytes", 0)) / counted
    dense = (end["dense_bytes"] - base["dense_bytes"]) / counted
    step_time = float(np.mean(step_times)) if step_times else float("nan")
    window = max(1, min(max(display_every, math.ceil(total_steps / 10)), len(losses)))

    eval_results = None
    if config.eval and chief:
        if not eval_history or eval_history[-1]["step"] != total_steps:
            if log:
                print("evaluating on the test split ...", file=log, flush=True)
            last_eval = record_eval(total_steps)
        eval_results = last_eval
    if writer is not None:
        writer.close()

    compress_ms = decompress_ms = codec_bytes = None
    if config.codec_repeats and chief and config.exchange == "deepreduce":
        compress_ms, decompress_ms, codec_bytes = time_codecs(
            config.params, variables, replicas, config.codec_repeats, seed=config.seed)

    if not chief:
        return None
    metrics = dict.fromkeys(report.METRIC_KEYS)
    metrics.update({
        "examples_per_sec": global_batch / step_time if step_times else None,
        "step_time_ms": 1000.0 * step_time if step_times else None,
        "step_time_median_ms": 1000.0 * float(np.median(step_times)) if step_times else None,
        "dense_bytes_per_step": dense, "sent_bytes_per_step": sent,
        "received_bytes_per_step": received,
        "reduction": dense / sent if sent else None,
        "compress_ms": compress_ms, "decompress_ms": decompress_ms,
        "codec_payload_bytes": codec_bytes,
        "final_loss": float(np.mean(losses[-window:])),
        "train_accuracy": float(np.mean(accs[-window:])),
        "total_sent_bytes": int(end["sent_bytes"]), "total_dense_bytes": int(end["dense_bytes"]),
        "train_time_s": train_time, "timed_steps": timed_steps,
    })
    if eval_results:
        for key in ("accuracy", "hit_rate", "ndcg"):
            if key in eval_results:
                metrics[key] = eval_results[key]
    cfg = config._asdict()
    cfg.pop("flags")
    workers = len(config.worker_hosts) or 1
    results = {
        "schema_version": report.SCHEMA_VERSION,
        "command": "deepreduce-bench",
        "model_metric": workload.metric,
        "data_source": workload.source,
        "config": dict(cfg, flags=config.flags, global_batch_size=global_batch,
                       total_steps=total_steps, loss_window=window),
        "metrics": metrics,
        "last_step_bytes": ops.step_bytes(),
        "eval": eval_results,
        "history": history,
        "eval_history": eval_history,
        "environment": {
            "tensorflow": tf.__version__, "deepreduce_tf": deepreduce_tf.__version__,
            "replicas": replicas, "workers": workers,
            "replicas_per_worker": replicas // workers,
            "strategy": type(strategy).__name__,
            "devices": list(getattr(strategy.extended, "worker_devices", ())),
            "cpu_count": os.cpu_count(), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        },
        "notes": {
            "bytes": ("per replica and per step, mean over the timed steps, from the "
                      "DeepReduce cross-device ops' counters" if config.exchange == "deepreduce"
                      else "uncompressed gradient bytes per replica and step, computed from "
                      "the gradients' shapes: dense gradients whole, embedding IndexedSlices "
                      "as values + indices (TensorFlow's all-reduce, --exchange=tf, keeps no "
                      "counters; what its algorithm puts on the wire is not measured)"),
            "codec_time": "codec only, after training: a fresh compressor on random "
                          "tensors of the model's variable shapes; decompress decodes one "
                          "payload per replica",
            "final_loss": f"mean training loss of the last {window} steps (this worker)",
        },
    }
    return results


def _leave_together(strategy, cluster, position, verbose=False):
    """Several workers leave together: at exit, after everything it prints
    or writes, each worker waits for the others in one tiny collective. No
    worker then exits while the chief still evaluates, times the codecs or
    writes its results (the coordination service, in the chief, would report
    a worker gone for longer than its heartbeat timeout: "stopped sending
    heartbeats"). If another worker fails meanwhile, this one reports it
    (PeerFailure.announce) and exits with PEER_FAILED_EXIT."""
    import tensorflow as tf

    if cluster is None or not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return

    @tf.function
    def barrier():
        return strategy.run(lambda: tf.distribute.get_replica_context().all_reduce(
            tf.distribute.ReduceOp.SUM, tf.ones([])))

    def leave():
        position.set("at the end of the run (waiting for the other workers)")
        try:
            barrier()
        except tf.errors.OpError as e:
            failure = _peer_failure(e, cluster, position)
            if failure is None:
                print(f"deepreduce-bench: the workers' final barrier failed: {e}",
                      file=sys.stderr)
                code = 1
            else:
                code = failure.announce(sys.stderr, verbose)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)  # an exit status from an atexit function

    atexit.register(leave)


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
