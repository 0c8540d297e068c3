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
import sys
import time

import deepreduce_tf
from deepreduce_bench import flags as bench_flags
from deepreduce_bench import report
from deepreduce_bench.workers import (  # noqa: F401 (named here as before)
    CHILD_BOOTSTRAP, PEER_FAILED_EXIT, STATUS_DIR_ENV, STOPPED_GRACE_S, TEST_FAULT_ENV, PeerFailure,
    WorkerError, _cluster, _failure, _LocalWorker, _peer_failure, _Position, _process_state,
    _reason, _reported_failure, _signal_name, _tail, _terminate, _test_fault, _unhealthy_tasks,
    _write_replace, free_ports, launch_local_workers)


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
    or (--lr_schedule=cosine) decayed to 0 along a cosine over total_steps;
    constant where the exchange applies the schedule (--schedule)."""
    import keras

    lr = config.init_learning_rate
    if (config.params or {}).get("schedule") not in (None, "none", "constant"):
        pass  # --schedule: the exchange applies the schedule, the optimizer keeps lr
    elif config.lr_schedule == "cosine":
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
    support = None
    if "support_picks" in end:  # a sparse all-reduce: |U| / k over the timed steps
        picks = end["support_picks"] - base.get("support_picks", 0)
        support = (end["support_union"] - base.get("support_union", 0)) / picks if picks else None
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
        "support_mean": support, "support_min": end.get("support_min"),
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
