"""The configurations of benchmarks/federated_bench.py: what each one
compresses (CONFIGS, and SERVER_CONFIGS where the server's downlink differs),
under which Flower server optimizer (SERVERS, "<compression>@<server>"), the
names of the page's headline (ALIASES), which uncompressed run each one is
compared with (reference_of) and its one-line description (DESCRIPTIONS).
Plain data and pure functions: no TensorFlow, Flower only in make_strategy."""

CONFIGS = {
    "fedavg": None,
    "topk": {"compressor": "topk", "compress_ratio": 0.1},
    "bloom_p0": {"compressor": "topk", "compress_ratio": 0.1, "deepreduce": "index",
                 "index": "bloom", "policy": "p0"},
    "bloom_p0_polyfit": {"compressor": "topk", "compress_ratio": 0.1, "deepreduce": "both",
                         "index": "bloom", "policy": "p0", "value": "polyfit"},
    "qsgd_bloom_p0": {"compressor": "topk", "compress_ratio": 0.1, "deepreduce": "both",
                      "index": "bloom", "policy": "p0", "value": "qsgd"},
    "golomb_qsgd": {"compressor": "topk", "compress_ratio": 0.1, "deepreduce": "both",
                    "index": "golomb", "value": "qsgd"},
    "golomb_qsgd4_r15": {"compressor": "topk", "compress_ratio": 0.15, "deepreduce": "both",
                         "index": "golomb", "value": "qsgd", "bits": 4},
    "golomb_qsgd3_r20": {"compressor": "topk", "compress_ratio": 0.2, "deepreduce": "both",
                         "index": "golomb", "value": "qsgd", "bits": 3},
    "golomb_qsgd3_r18": {"compressor": "topk", "compress_ratio": 0.18, "deepreduce": "both",
                         "index": "golomb", "value": "qsgd", "bits": 3},
    "golomb_qsgd2_r22": {"compressor": "topk", "compress_ratio": 0.22, "deepreduce": "both",
                         "index": "golomb", "value": "qsgd", "bits": 2},
    # golomb_qsgd2_r22 (the previous recommendation)'s family at other volumes: 0.021,
    # 0.066 and 0.096 of FedAvg's volume on random updates of the CNN.
    "golomb_qsgd2_r7": {"compressor": "topk", "compress_ratio": 0.07, "deepreduce": "both",
                        "index": "golomb", "value": "qsgd", "bits": 2},
    "golomb_qsgd2_r35": {"compressor": "topk", "compress_ratio": 0.35, "deepreduce": "both",
                         "index": "golomb", "value": "qsgd", "bits": 2},
    "golomb_qsgd2_r65": {"compressor": "topk", "compress_ratio": 0.65, "deepreduce": "both",
                         "index": "golomb", "value": "qsgd", "bits": 2},
    # golomb_qsgd2_r22 with deterministic levels (nearest, not stochastic).
    "golomb_qsgd2n_r22": {"compressor": "topk", "compress_ratio": 0.22, "deepreduce": "both",
                          "index": "golomb", "value": "qsgd", "bits": 2,
                          "qsgd_rounding": "nearest"},
    # golomb_qsgd2_r22 with its positions chosen over the whole model (one
    # top-r over the fusion bucket) instead of per tensor; at 35 %, the
    # recommendation.
    "golomb_qsgd2_r22_bucket": {"compressor": "topk", "compress_ratio": 0.22,
                                "deepreduce": "both", "index": "golomb", "value": "qsgd",
                                "bits": 2, "topk_scope": "bucket"},
    # Its family at other volumes (0.02, 0.07, 0.1 of FedAvg's: the frontier).
    "golomb_qsgd2_r7_bucket": {"compressor": "topk", "compress_ratio": 0.07,
                               "deepreduce": "both", "index": "golomb", "value": "qsgd",
                               "bits": 2, "topk_scope": "bucket"},
    "golomb_qsgd2_r35_bucket": {"compressor": "topk", "compress_ratio": 0.35,
                                "deepreduce": "both", "index": "golomb", "value": "qsgd",
                                "bits": 2, "topk_scope": "bucket"},
    "golomb_qsgd2_r65_bucket": {"compressor": "topk", "compress_ratio": 0.65,
                                "deepreduce": "both", "index": "golomb", "value": "qsgd",
                                "bits": 2, "topk_scope": "bucket"},
    # Between the 0.0475 and 0.065 of FedAvg's volume of r22 and r35 (bucket).
    "golomb_qsgd2_r28_bucket": {"compressor": "topk", "compress_ratio": 0.28,
                                "deepreduce": "both", "index": "golomb", "value": "qsgd",
                                "bits": 2, "topk_scope": "bucket"},
    # Clients without residuals (memory none: FetchSGD's stateless clients),
    # at the recommendation's volume and at r22's (for the server of
    # SERVERS["topk22"], which keeps the error instead).
    "golomb_qsgd2_r35_bucket_noef": {"compressor": "topk", "compress_ratio": 0.35,
                                     "deepreduce": "both", "index": "golomb", "value": "qsgd",
                                     "bits": 2, "topk_scope": "bucket", "memory": "none"},
    "golomb_qsgd2_r22_bucket_noef": {"compressor": "topk", "compress_ratio": 0.22,
                                     "deepreduce": "both", "index": "golomb", "value": "qsgd",
                                     "bits": 2, "topk_scope": "bucket", "memory": "none"},
    # golomb_qsgd2_r22 without the clients' residuals (memory none): each
    # message sends top-r of that round's update alone.
    "golomb_qsgd2_r22_noef": {"compressor": "topk", "compress_ratio": 0.22, "deepreduce": "both",
                              "index": "golomb", "value": "qsgd", "bits": 2, "memory": "none"},
    "golomb_qsgd1_r29": {"compressor": "topk", "compress_ratio": 0.29, "deepreduce": "both",
                         "index": "golomb", "value": "qsgd", "bits": 1},
    "golomb_stc_r40": {"compressor": "topk", "compress_ratio": 0.40, "deepreduce": "both",
                       "index": "golomb", "value": "ternary"},
    "golomb_qsgd3_d25_u12": {"compressor": "topk", "compress_ratio": 0.12, "deepreduce": "both",
                             "index": "golomb", "value": "qsgd", "bits": 3},
    "golomb_qsgd3_d12_u25": {"compressor": "topk", "compress_ratio": 0.25, "deepreduce": "both",
                             "index": "golomb", "value": "qsgd", "bits": 3},
}
# Names for the configurations the page's headline is about: `recommended` is
# the configuration docs/federated.md recommends, `baseline` its uncompressed
# counterpart (the same server optimizer, dense both ways). The runs record
# the real configuration (a result's "config", its "alias" beside it).
ALIASES = {
    "baseline": "fedavg",
    "recommended": "golomb_qsgd2_r28_bucket",
}
# Server optimizers: a configuration "<compression>@<server>" runs the
# compression of CONFIGS under the Flower strategy named here (FedAvg when no
# "@" is given). The uncompressed run of a server optimizer is
# "fedavg@<server>": the dense exchange, that server's update rule; it is the
# reference its compressed runs are compared with (never plain FedAvg).
SERVERS = {
    "fedavg": ("FedAvg", {}),
    # Hsu, Qi, Brown 2019: server momentum 0.9 (Flower's FedAvgM baseline:
    # server learning rate 1.0); and the same momentum at an effective
    # learning rate of 1 (lr / (1 - momentum)).
    "fedavgm": ("FedAvgM", {"server_momentum": 0.9, "server_learning_rate": 1.0}),
    "fedavgm_eff1": ("FedAvgM", {"server_momentum": 0.9, "server_learning_rate": 0.1}),
    # FetchSGD's server (Rothchild et al. 2020) without sketches: the model
    # moves by the top 22 % of the server's accumulated update
    # (deepreduce_tf.federated.FedAvgTopK): momentum 0.9 at a step of 0.1 (with
    # the momentum masked where the model moved, a tenth of FedAvg's step) and
    # of 1, and error accumulation alone (no momentum, step 1).
    "topk22": ("FedAvgTopK", {"density": 0.22, "server_momentum": 0.9,
                              "server_learning_rate": 0.1}),
    "topk22_m9_lr1": ("FedAvgTopK", {"density": 0.22, "server_momentum": 0.9,
                                     "server_learning_rate": 1.0}),
    "topk22_ef": ("FedAvgTopK", {"density": 0.22, "server_momentum": 0.0,
                                 "server_learning_rate": 1.0}),
    # Reddi et al. 2021 (adaptive federated optimization): server Adam.
    "fedadam": ("FedAdam", {"eta": 0.01, "eta_l": 0.05, "beta_1": 0.9, "beta_2": 0.99,
                            "tau": 1e-3}),
}
UNCOMPRESSED = "fedavg"  # CONFIGS' dense entry


def split_name(name):
    """A configuration's (compression, server) names: "golomb_qsgd@fedavgm"
    -> ("golomb_qsgd", "fedavgm"); without "@" the server is FedAvg."""
    compression, _, server = name.partition("@")
    return compression, server or "fedavg"


# Servers whose update is itself compressed (FedAvgTopK): their runs are
# compared with plain FedAvg, the uncompressed exchange.
SPARSE_SERVERS = {"topk22", "topk22_m9_lr1", "topk22_ef"}


def reference_of(name):
    """The uncompressed run a configuration is compared with: the dense
    exchange under the same server optimizer (plain FedAvg for a server of
    SPARSE_SERVERS)."""
    server = split_name(name)[1]
    if server == "fedavg" or server in SPARSE_SERVERS:
        return UNCOMPRESSED
    return f"{UNCOMPRESSED}@{server}"


def known(name):
    """Whether a (resolved) configuration name is one of CONFIGS under one
    of SERVERS."""
    compression, server = split_name(name)
    return compression in CONFIGS and server in SERVERS and name.count("@") <= 1 and (
        "@" not in name or server != "fedavg")


def make_strategy(server, **kwargs):
    """The Flower strategy of SERVERS[server] with the sampling kwargs."""
    from flwr.serverapp import strategy as strategies

    cls, extra = SERVERS[server]
    if cls == "FedAvgTopK":
        from deepreduce_tf.federated import FedAvgTopK

        return FedAvgTopK(**kwargs, **extra)
    return getattr(strategies, cls)(**kwargs, **extra)


def resolve(name):
    """A configuration's name ("<CONFIGS entry>[@<SERVERS entry>]"): an
    alias's configuration, or the name itself."""
    return ALIASES.get(name, name)


# Configurations whose downlink (the server's) differs from the uplink; the
# others compress both directions alike.
SERVER_CONFIGS = {  # the uplink's dict with the downlink's own ratio
    "golomb_qsgd3_d25_u12": dict(CONFIGS["golomb_qsgd3_d25_u12"], compress_ratio=0.25),
    "golomb_qsgd3_d12_u25": dict(CONFIGS["golomb_qsgd3_d12_u25"], compress_ratio=0.12),
}
DESCRIPTIONS = {
    "fedavg": "FedAvg, dense both ways",
    "topk": "top-r 10 % + residual, raw int32 indices, fp32 values",
    "bloom_p0": "top-r 10 %, Bloom-P0 indices, fp32 values",
    "bloom_p0_polyfit": "top-r 10 %, Bloom-P0 indices, polyfit values",
    "qsgd_bloom_p0": "top-r 10 %, Bloom-P0 indices, QSGD 8-bit values",
    "golomb_qsgd": "top-r 10 %, golomb indices (lossless), QSGD 8-bit values",
    "golomb_qsgd4_r15": "top-r 15 %, golomb indices (lossless), QSGD 4-bit values",
    "golomb_qsgd3_r20": "top-r 20 %, golomb indices (lossless), QSGD 3-bit values",
    "golomb_qsgd3_r18": "top-r 18 %, golomb indices (lossless), QSGD 3-bit values",
    "golomb_qsgd2_r22": "top-r 22 %, golomb indices (lossless), QSGD 2-bit values",
    "golomb_qsgd2_r7": "top-r 7 %, golomb indices (lossless), QSGD 2-bit values",
    "golomb_qsgd2_r35": "top-r 35 %, golomb indices (lossless), QSGD 2-bit values",
    "golomb_qsgd2_r65": "top-r 65 %, golomb indices (lossless), QSGD 2-bit values",
    "golomb_qsgd2n_r22": "top-r 22 %, golomb indices (lossless), QSGD 2-bit values rounded "
                         "to nearest",
    "golomb_qsgd2_r22_bucket": "top-r 22 % over the whole model (not per tensor), golomb "
                               "indices, QSGD 2-bit values",
    "golomb_qsgd2_r7_bucket": "top-r 7 % over the whole model, golomb indices, QSGD 2-bit "
                              "values",
    "golomb_qsgd2_r35_bucket": "top-r 35 % over the whole model, golomb indices, QSGD 2-bit "
                               "values",
    "golomb_qsgd2_r65_bucket": "top-r 65 % over the whole model, golomb indices, QSGD 2-bit "
                               "values",
    "golomb_qsgd2_r28_bucket": "top-r 28 % over the whole model, golomb indices, QSGD 2-bit "
                               "values",
    "golomb_qsgd2_r35_bucket_noef": "top-r 35 % over the whole model, golomb indices, QSGD "
                                    "2-bit values; no client residual",
    "golomb_qsgd2_r22_bucket_noef": "top-r 22 % over the whole model, golomb indices, QSGD "
                                    "2-bit values; no client residual",
    "golomb_qsgd2_r22_noef": "top-r 22 %, golomb indices, QSGD 2-bit values; no client "
                             "residual",
    "golomb_qsgd1_r29": "top-r 29 %, golomb indices (lossless), QSGD 1-bit values (ternary)",
    "golomb_stc_r40": "top-r 40 %, golomb indices (lossless), sparse ternary values (STC)",
    "golomb_qsgd3_d25_u12": "golomb indices, QSGD 3-bit values; top-r 25 % down, 12 % up",
    "golomb_qsgd3_d12_u25": "golomb indices, QSGD 3-bit values; top-r 12 % down, 25 % up",
}
