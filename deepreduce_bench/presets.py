"""The presets of --compare: every configuration a comparison can name, declared once.

    deepreduce-bench --compare=uncompressed,topk,golomb_qsgd,bloom_polyfit

A preset is a name, a one-line description and the compression flags it
stands for ('flags' stands for the compression flags of the command line).
flags.py checks --compare against PRESETS and picks default_presets() (from
the accuracy table, deepreduce_tf.cost.measured); compare.py runs them.
Plain data: this module imports nothing of deepreduce-bench.
"""
import collections

Preset = collections.namedtuple("Preset", ["name", "description", "args"])
Preset.__doc__ = """A configuration of --compare: args are its flags (None: the command line's)."""

_TOPK = ("--exchange=deepreduce", "--compressor=topk", "--compress_ratio=0.01",
         "--topk_scope=variable", "--memory=residual")
PRESETS = collections.OrderedDict((p.name, p) for p in (
    Preset("uncompressed", "dense gradients through TensorFlow's own all-reduce (the "
           "strategy's default cross-device ops): the baseline", ("--exchange=tf",)),
    Preset("topk", "top-k 1 % per variable + residual error feedback; raw int32 indices, "
           "float32 values", _TOPK + ("--deepreduce=none",)),
    Preset("golomb_qsgd", "the default without momentum SGD: top-k 1 % per variable + residual "
           "error feedback, golomb indices (lossless), QSGD 7-bit values",
           _TOPK + ("--deepreduce=both", "--index=golomb", "--value=qsgd", "--bits=7")),
    Preset("golomb_qsgd_dgc", "golomb_qsgd with DGC's recipe (docs/compressor.md): momentum "
           "correction and factor masking (the optimizer's momentum moves into the "
           "compressor: momentum-SGD models only) and a 60-step exponential warm-up of the "
           "top-k density from 25 %",
           _TOPK[:-1] + ("--memory=dgc", "--warmup_steps=60", "--warmup=exponential",
                         "--deepreduce=both", "--index=golomb", "--value=qsgd", "--bits=7")),
    Preset("max_reduction", "the largest reduction that holds dense accuracy (the accuracy "
           "table, docs/benchmarks.md): one top-k of 0.25 % over the whole bucket, the small tensors "
           "(biases, batch-norm) in it, DGC's recipe with its 60-step exponential warm-up, the "
           "learning-rate schedule applied before error feedback (--schedule=cosine), golomb "
           "indices, QSGD 7-bit values",
           ("--exchange=deepreduce", "--compressor=topk", "--compress_ratio=0.0025",
            "--topk_scope=bucket", "--min_size=1", "--memory=dgc", "--warmup_steps=60",
            "--warmup=exponential", "--schedule=cosine", "--deepreduce=both", "--index=golomb",
            "--value=qsgd", "--bits=7")),
    Preset("bloom_polyfit", "DeepReduce's paper setting: top-k 1 % + residual, Bloom filter "
           "indices (fpr 0.001, conflict_sets policy) + polyfit values",
           _TOPK + ("--deepreduce=both", "--index=bloom", "--fpr=0.001",
                    "--policy=conflict_sets", "--value=polyfit")),
    Preset("lgc_ps", "Learned Gradient Compression, parameter-server variant (docs/lgc.md): "
           "top-k 1 % + residual, golomb positions of the leader, fp16 values and latents; "
           "100 warm-up and 200 autoencoder-training exchanges, then compressed",
           _TOPK + ("--communicator=lgc_ps", "--deepreduce=both", "--index=golomb",
                    "--value=fp16", "--lgc_warmup_steps=100", "--lgc_train_steps=200")),
    Preset("lgc_rar", "Learned Gradient Compression, ring-allreduce variant: as lgc_ps, "
           "the latents summed by an all-reduce through a linear autoencoder",
           _TOPK + ("--communicator=lgc_rar", "--deepreduce=both", "--index=golomb",
                    "--value=fp16", "--lgc_warmup_steps=100", "--lgc_train_steps=200")),
    Preset("sparse_allreduce", "top-k 1 % per variable with DGC's recipe, summed by a sparse "
           "all-reduce (docs/sparse_allreduce.md): every worker's top-(k/W) golomb positions "
           "all-gathered, the fp16 values at their union all-reduced (bytes per worker flat in "
           "the number of workers)",
           _TOPK[:-1] + ("--memory=dgc", "--warmup_steps=60", "--warmup=exponential",
                         "--communicator=sparse_allreduce", "--deepreduce=both",
                         "--index=golomb", "--value=fp16")),
    Preset("sparse_max", "the largest reduction that scales (docs/sparse_allreduce.md): "
           "max_reduction's recipe (one top-k over the whole bucket with the small tensors, "
           "DGC's momentum correction, a 30-step exponential warm-up, the schedule in the "
           "exchange) at 0.5 %, summed by the sparse all-reduce: every worker's top-(k/W) "
           "golomb positions all-gathered, the values at their union summed as 8-bit "
           "integers on a scale the workers share (bytes per worker flat in the number of "
           "workers); its accuracy: the accuracy table",
           ("--exchange=deepreduce", "--compressor=topk", "--compress_ratio=0.005",
            "--topk_scope=bucket", "--min_size=1", "--memory=dgc", "--warmup_steps=30",
            "--warmup=exponential", "--schedule=cosine", "--communicator=sparse_allreduce",
            "--deepreduce=both", "--index=golomb", "--value=int8")),
    Preset("powersgd", "PowerSGD (docs/powersgd.md): rank-2 factors P and Q of every "
           "gradient matrix, all-reduced (bytes per worker flat in the number of workers), "
           "error feedback, warm-started Q; vectors and small tensors all-reduced uncompressed",
           ("--exchange=deepreduce", "--compressor=powersgd", "--rank=2")),
    Preset("flags", "the configuration of this command line's compression flags "
           "(--compressor, --index, --value, ...)", None),
))
# Without flags, a comparison runs uncompressed against the preset of the
# largest reduction that holds (docs/benchmarks.md#when-a-configuration-holds)
# on ResNet-20 in the project's accuracy table (its decided rows, the claims
# job first); FALLBACK where none holds. Optimizers other than momentum SGD
# (ncf's Adam) take golomb_qsgd: DGC's momentum correction does not apply.
FALLBACK = "golomb_qsgd_dgc"
RECOMMENDED_WITHOUT_MOMENTUM = "golomb_qsgd"


def largest_that_holds(model="resnet20", workers=2):
    """(preset, its accuracy-table row) of the largest reduction among the
    presets that hold on `model` at `workers`, or (None, None)."""
    from deepreduce_tf.cost.measured import accuracy_figure  # the table; no TensorFlow

    best = (None, None)
    for name in PRESETS:
        try:
            figure = accuracy_figure(model, name, workers)
        except OSError:  # a build without the package data (profiles/accuracy.json)
            return None, None
        if figure is None or figure["verdict"] != "holds":
            continue
        row = figure["row"]
        if best[1] is None or (row["reduction"] or 0) > (best[1]["reduction"] or 0):
            best = (name, row)
    return best


def default_presets(optimizer):
    """The comparison deepreduce-bench runs without flags: uncompressed against
    the largest reduction that holds (momentum SGD), else golomb_qsgd."""
    if optimizer != "momentum":
        return ("uncompressed", RECOMMENDED_WITHOUT_MOMENTUM)
    return ("uncompressed", largest_that_holds()[0] or FALLBACK)


VARIANT = "+"  # "powersgd+rank=4": a preset with some of its flags changed


def lookup(name, flag_names=None):
    """The Preset a --compare name stands for: a preset of PRESETS, or a
    variant of one, "<preset>+<flag>=<value>[+...]" (its flags with each
    named one replaced or added: "golomb_qsgd_dgc+schedule=cosine",
    "powersgd+rank=4"), which runs and is recorded under that name.

    Raises:
      ValueError: an unknown preset, a change not written flag=value, a flag
        not in `flag_names` (when given), or a variant of 'flags'.
    """
    base, *changes = name.split(VARIANT)
    if base not in PRESETS:
        raise ValueError(f"unknown preset {base!r}; valid presets: {names_text()}")
    preset = PRESETS[base]
    if not changes:
        return preset
    if preset.args is None:
        raise ValueError(f"{name!r}: 'flags' takes this command line's flags; give them there "
                         "instead of after '+'")
    args = list(preset.args)
    for change in changes:
        flag, eq, value = change.partition("=")
        flag = flag.strip().lstrip("-")
        if not eq or not flag or not value.strip():
            raise ValueError(f"{name!r}: {change!r} is not flag=value; a variant reads "
                             f"<preset>+<flag>=<value>, e.g. powersgd+rank=4")
        if flag_names is not None and flag not in flag_names:
            raise ValueError(f"{name!r}: --{flag} is not a compression flag; a variant changes "
                             "a preset's compression flags (deepreduce-bench --help lists them)")
        args = [a for a in args if not a.startswith(f"--{flag}=")] + [f"--{flag}={value.strip()}"]
    return Preset(name, f"{base} with " + ", ".join(f"--{c.strip().lstrip('-')}"
                                                    for c in changes), tuple(args))


def names_text():
    """The preset names, comma-separated (for messages)."""
    return ", ".join(PRESETS)
