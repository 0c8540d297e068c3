"""deepreduce-tf-cnn-benchmarks: the real tf_cnn_benchmarks with --variable_update=deepreduce.

    deepreduce-tf-cnn-benchmarks --benchmarks_dir=PATH <tf_cnn_benchmarks flags> \\
        --variable_update=deepreduce --compressor=topk --compress_ratio=0.01 ...

PATH is the user's checkout of github.com/tensorflow/benchmarks (or its
scripts/tf_cnn_benchmarks folder). Nothing of the script is copied here: this
module imports the user's copy and plugs DeepReduce in where the script itself
chooses an all-reduce algorithm.

  * --variable_update=deepreduce is the script's `replicated` mode (one
    process, one variable copy per device: --num_gpus=N GPUs, or N CPU devices
    with --device=cpu) whose batch all-reduce (batch_allreduce.
    BatchAllReduceAlgorithm, picked by algorithm_from_params) is DeepReduce's:
    every device compresses its gradients with its own compressor (its own
    residual memory), the payloads are exchanged, the process decodes each once
    and sums them in device order, and every device gets the same bits
    (DeepReduceCrossDeviceOps.reduce_tensors). The script's packing options
    (--gradient_repacking, --compact_gradient_transfer, --variable_consistency)
    apply around it as around any algorithm.
  * DeepReduce's flags are deepreduce-bench's (deepreduce_tf.flags):
    --compressor --compress_ratio --memory --deepreduce --index --value --fpr
    --policy --bits ... (every codec parameter of the registry); --momentum is
    the script's own.
  * The script's log gains, after each images/sec line, the bytes a device
    sent in that step against the dense gradient, and at the end the totals.

  * With --job_name=worker (one process per worker, one device each) it is the
    script's collective_all_reduce mode whose gradient reduction is DeepReduce's:
    payloads all-gathered through the script's collective group
    (transport.GraphCollectiveLauncher), decoded once per worker.

The script's other multi-worker modes are refused (docs/tf_cnn_benchmarks.md
says why), as is any DeepReduce flag without --variable_update=deepreduce.
"""
import importlib.util
import inspect
import os
import sys
import types

from absl import app
from absl import flags as absl_flags

from deepreduce_tf import flags as dr_flags

# TensorFlow, and the modules of this library that import it, are imported
# inside the functions below, never here: the script needs
# TF_USE_LEGACY_KERAS=1 set before TensorFlow starts (_prepare_environment),
# and the script's own modules are importable only once the user's checkout
# is on sys.path.

USAGE = ("usage: deepreduce-tf-cnn-benchmarks --benchmarks_dir=PATH <tf_cnn_benchmarks flags> "
         "--variable_update=deepreduce [DeepReduce flags]; PATH: a checkout of "
         "https://github.com/tensorflow/benchmarks (or its scripts/tf_cnn_benchmarks folder)")
VARIABLE_UPDATE = "deepreduce"
# The script's modules this adapter patches or reads.
SCRIPT_MODULES = ("benchmark_cnn", "batch_allreduce", "flags")


class AdapterError(ValueError):
    """A command line the adapter cannot run; the message says what to change."""


def find_script_dir(path):
    """The folder holding tf_cnn_benchmarks.py, from a checkout root or the folder itself."""
    if not path:
        raise AdapterError(f"--benchmarks_dir is required. {USAGE}")
    path = os.path.abspath(os.path.expanduser(path))
    for cand in (path, os.path.join(path, "scripts", "tf_cnn_benchmarks")):
        if all(os.path.isfile(os.path.join(cand, f + ".py"))
               for f in ("tf_cnn_benchmarks",) + SCRIPT_MODULES):
            return cand
    raise AdapterError(
        f"--benchmarks_dir={path}: no tf_cnn_benchmarks.py (with benchmark_cnn.py, "
        "batch_allreduce.py, flags.py) there or in its scripts/tf_cnn_benchmarks; clone "
        "https://github.com/tensorflow/benchmarks and pass the clone's path")


def split_benchmarks_dir(argv):
    """(benchmarks_dir, the other arguments) of a command line."""
    rest, found = [], None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--benchmarks_dir="):
            found = arg.split("=", 1)[1]
        elif arg == "--benchmarks_dir":
            if i + 1 >= len(argv):
                raise AdapterError(f"--benchmarks_dir needs a value. {USAGE}")
            found = argv[i + 1]
            i += 1
        else:
            rest.append(arg)
        i += 1
    return found, rest


# ------------------------------------------------------------ the algorithm
class _DeepReduceBatchAllReduce:
    """tf_cnn_benchmarks' BatchAllReduceAlgorithm interface, DeepReduce's
    exchange: _do_batch_all_reduce gets all_device_tensors[device][tensor]
    (after the script's optional packing) and returns their sums in the same
    structure, a bit-identical copy on every device."""

    def __init__(self, ops, average=False):
        self.ops = ops
        self.average = average
        self.byte_tensors = None  # ops.byte_tensors(), made with the reduction

    def _do_batch_all_reduce(self, all_device_tensors):
        reduced = self.ops.reduce_tensors(all_device_tensors, average=self.average)
        self.byte_tensors = self.ops.byte_tensors()
        return reduced


def algorithm_class(base):
    """A subclass of `base` (the script's batch_allreduce.BatchAllReduceAlgorithm,
    or any class with its interface) doing DeepReduce's exchange. Instances:
    cls(DeepReduceCrossDeviceOps(params))."""
    return types.new_class("DeepReduceAlgorithm", (_DeepReduceBatchAllReduce, base))


# ------------------------------------------------------------ the adapter
class Adapter:
    """Patches the user's tf_cnn_benchmarks modules (imported from sys.path)
    so that --variable_update=deepreduce runs DeepReduce's exchange."""

    def __init__(self, absl_flags, log_fn=None):
        import allreduce  # pylint: disable=import-error
        import benchmark_cnn  # pylint: disable=import-error
        import batch_allreduce  # pylint: disable=import-error
        import flags as script_flags  # pylint: disable=import-error
        import variable_mgr  # pylint: disable=import-error

        self.allreduce = allreduce
        self.benchmark_cnn = benchmark_cnn
        self.batch_allreduce = batch_allreduce
        self.variable_mgr = variable_mgr
        self.script_flags = script_flags
        self.FLAGS = absl_flags
        self.log_fn = log_fn or benchmark_cnn.log_fn
        self.params = None  # the from_params dict while a DeepReduce run is set up
        self.algorithm = None
        self.byte_tensors = None  # the counters of the exchange being run
        self.last_bytes = None

    # -- flags
    def extend_flags(self):
        """Adds 'deepreduce' to the script's --variable_update choices (before
        the script defines its flags) and defines DeepReduce's flags."""
        from absl import flags

        specs = self.script_flags.param_specs
        spec = specs["variable_update"]
        values = tuple(spec.kwargs["enum_values"])
        if VARIABLE_UPDATE not in values:
            kwargs = dict(spec.kwargs, enum_values=values + (VARIABLE_UPDATE,))
            specs["variable_update"] = spec._replace(
                kwargs=kwargs, description=spec.description + ", deepreduce (replicated, with "
                "DeepReduce's compressed exchange: deepreduce-tf-cnn-benchmarks)")
        ours = flags.FlagValues()
        dr_flags.define_flags(ours)
        for name in dr_flags.compression_flag_names() + ("seed",):
            if name in ours and name not in self.FLAGS:
                self.FLAGS[name] = ours[name]

    def compression_params(self):
        return dr_flags.compression_params(self.FLAGS)

    def given_flags(self):
        return dr_flags.given_compression_flags(self.FLAGS)

    # -- checks
    def check(self, params):
        """Raises AdapterError for script parameters DeepReduce cannot run with."""
        if params.variable_update != VARIABLE_UPDATE:
            given = self.given_flags()
            if given:
                raise AdapterError(
                    f"--{' --'.join(given)} configure DeepReduce's exchange, which runs with "
                    f"--variable_update=deepreduce only (got --variable_update="
                    f"{params.variable_update})")
            return
        problems = []
        if params.job_name not in ("", "worker"):
            problems.append(f"--job_name={params.job_name}: DeepReduce's multi-worker mode runs "
                            "workers only (--job_name=worker, no parameter server or controller)")
        if params.job_name and params.num_gpus != 1:
            problems.append(f"--num_gpus={params.num_gpus} with --job_name: one device per worker "
                            "process (start one worker per device)")
        elif not params.job_name and params.num_gpus < 2:
            problems.append(f"--num_gpus={params.num_gpus}: DeepReduce exchanges between two or "
                            "more devices (on a CPU-only machine: --device=cpu --num_gpus=2)")
        if params.job_name and not params.cross_replica_sync:
            problems.append("--cross_replica_sync=false: DeepReduce's exchange is synchronous")
        if params.all_reduce_spec:
            problems.append("--all_reduce_spec chooses another all-reduce algorithm")
        if params.hierarchical_copy:
            problems.append("--hierarchical_copy chooses another all-reduce algorithm")
        if params.staged_vars:
            problems.append("--staged_vars works with parameter_server only")
        flags_given = self.FLAGS
        if "memory" in flags_given and flags_given.memory == "dgc" and params.optimizer != "sgd":
            problems.append(f"--memory=dgc applies --momentum in the compressor: use "
                            f"--optimizer=sgd (got --optimizer={params.optimizer})")
        if problems:
            raise AdapterError("--variable_update=deepreduce: " + "; ".join(problems))

    # -- patches
    def install(self):
        bc, ba = self.benchmark_cnn, self.batch_allreduce
        adapter = self
        original_init = bc.BenchmarkCNN.__init__
        original_print_info = bc.BenchmarkCNN.print_info
        original_from_params = ba.algorithm_from_params
        original_one_step = bc.benchmark_one_step

        def __init__(self, params, *args, **kwargs):  # pylint: disable=invalid-name
            adapter.check(params)
            if params.variable_update == VARIABLE_UPDATE:
                from deepreduce_tf.distribute import DeepReduceCrossDeviceOps

                adapter.params = adapter.compression_params()
                # Fails here, before any graph is built, on a bad configuration.
                adapter.description = repr(DeepReduceCrossDeviceOps(adapter.params))
                if params.job_name:  # the script's collective mode carries the payloads
                    params = params._replace(variable_update="collective_all_reduce",
                                             all_reduce_spec="collective")
                else:
                    params = params._replace(variable_update="replicated")
            else:
                adapter.params = None
            original_init(self, params, *args, **kwargs)

        def print_info(self):
            original_print_info(self)
            if adapter.params is not None:
                mode = "collective_all_reduce" if self.params.job_name else "replicated"
                adapter.log_fn("DeepReduce:  %s (--variable_update=deepreduce: the %s mode with "
                               "this exchange)" % (adapter.description, mode))

        def algorithm_from_params(params):
            if adapter.params is None:
                return original_from_params(params)
            from deepreduce_tf.distribute import DeepReduceCrossDeviceOps

            adapter.algorithm = algorithm_class(ba.BatchAllReduceAlgorithm)(
                DeepReduceCrossDeviceOps(adapter.params))
            return adapter.algorithm

        collective_mgr = self.variable_mgr.VariableMgrCollectiveAllReduce
        original_collective = collective_mgr.preprocess_device_grads

        def preprocess_device_grads(self, device_grads):
            if adapter.params is None:
                return original_collective(self, device_grads)
            return adapter.collective_reduce(self, device_grads)

        def benchmark_one_step(*args, **kwargs):
            out = original_one_step(*args, **kwargs)
            adapter.after_step(args, kwargs)
            return out

        self.signature = _signature(original_one_step)
        bc.BenchmarkCNN.__init__ = __init__
        bc.BenchmarkCNN.print_info = print_info
        ba.algorithm_from_params = algorithm_from_params
        bc.benchmark_one_step = benchmark_one_step
        collective_mgr.preprocess_device_grads = preprocess_device_grads

    def collective_reduce(self, manager, device_grads):
        """VariableMgrCollectiveAllReduce.preprocess_device_grads with
        DeepReduce's exchange: this worker's one device compresses, the
        payloads are all-gathered through the script's collective group (its
        group key, fresh instance keys from its counter), every worker decodes
        each payload once and sums them in worker order."""
        from deepreduce_tf.distribute import DeepReduceCrossDeviceOps
        from deepreduce_tf.transport import GraphCollectiveLauncher

        grads = [[g for g, _ in dg] for dg in device_grads]
        devices = [g[0].device for g in grads]
        launcher = GraphCollectiveLauncher(
            devices[0], manager._num_workers * len(devices),  # pylint: disable=protected-access
            self.allreduce.collective_group_key(devices),
            self.allreduce.new_collective_instance_key)
        ops = DeepReduceCrossDeviceOps(self.params)
        reduced = ops.reduce_tensors(grads, collective=launcher)
        self.byte_tensors = ops.byte_tensors()
        return devices, [[[g, v] for g, (_, v) in zip(r, dg)]
                         for r, dg in zip(reduced, device_grads)]

    def after_step(self, args, kwargs):
        """Reads the byte counters after a step; logs them on the script's
        display steps, beside its images/sec line."""
        if self.algorithm is not None and self.algorithm.byte_tensors is not None:
            self.byte_tensors = self.algorithm.byte_tensors
        if self.byte_tensors is None:
            return
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        sess, step, params = a["sess"], a["step"], a["params"]
        self.last_bytes = sess.run(self.byte_tensors)
        if (a["show_images_per_sec"] and step >= 0
                and (step == 0 or (step + 1) % params.display_every == 0)):
            b = self.last_bytes
            self.log_fn("%i\tDeepReduce: %s B sent per device (dense %s B, %.1fx smaller)"
                        % (step + 1, f"{b['sent_bytes']:,.0f}", f"{b['dense_bytes']:,.0f}",
                           b["dense_bytes"] / max(b["sent_bytes"], 1.0)))

    def summary(self):
        """The closing line: totals over every exchange (warm-up steps included)."""
        b = self.last_bytes
        if b is None:
            return None
        return ("DeepReduce total: %s B sent per device in %d exchanges, dense %s B: %.1fx "
                "smaller; last step %s B" % (
                    f"{b['total_sent_bytes']:,.0f}", int(b["steps"]),
                    f"{b['total_dense_bytes']:,.0f}",
                    b["total_dense_bytes"] / max(b["total_sent_bytes"], 1.0),
                    f"{b['sent_bytes']:,.0f}"))


def _signature(fn):
    return inspect.signature(fn)


def _prepare_environment():
    """The script needs Keras 2's tf.layers: tf_keras with TF_USE_LEGACY_KERAS=1,
    set before TensorFlow is imported."""
    if importlib.util.find_spec("tf_keras") is None:
        raise AdapterError(
            "tf_cnn_benchmarks builds its models with tf.layers, which needs Keras 2: "
            "pip install --no-deps tf_keras==2.21.0 (bash build_deps/dev.sh setup installs it)")
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    if os.environ["TF_USE_LEGACY_KERAS"] not in ("1", "true", "True"):
        raise AdapterError(f"TF_USE_LEGACY_KERAS={os.environ['TF_USE_LEGACY_KERAS']}: "
                           "tf_cnn_benchmarks needs Keras 2 (unset it, or set it to 1)")
    if "tensorflow" in sys.modules and "keras" in sys.modules and not \
            sys.modules["keras"].__version__.startswith("2."):
        raise AdapterError("Keras 3 was imported before the adapter set TF_USE_LEGACY_KERAS=1; "
                           "run deepreduce-tf-cnn-benchmarks in a fresh process")


def main(argv=None):
    """Console script deepreduce-tf-cnn-benchmarks."""
    argv = list(sys.argv if argv is None else argv)
    try:
        bench_dir, rest = split_benchmarks_dir(argv[1:])
        script_dir = find_script_dir(bench_dir)
        _prepare_environment()
    except AdapterError as e:
        print(f"deepreduce-tf-cnn-benchmarks: {e}", file=sys.stderr)
        return 2
    sys.path.insert(0, script_dir)

    adapter = Adapter(absl_flags.FLAGS)
    adapter.extend_flags()
    adapter.install()
    import tf_cnn_benchmarks  # pylint: disable=import-error  (defines the script's flags)
    import tensorflow.compat.v1 as tf1

    def run(positional):
        try:
            tf_cnn_benchmarks.main(positional)
        except AdapterError as e:
            print(f"deepreduce-tf-cnn-benchmarks: {e}", file=sys.stderr)
            return 2
        line = adapter.summary()
        if line:
            adapter.log_fn(line)
        return 0

    tf1.disable_v2_behavior()
    # app.run exits with run's return value.
    app.run(run, argv=[argv[0]] + rest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
