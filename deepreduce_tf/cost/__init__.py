"""A cost model of one data-parallel training step, and the profiles it reads.

    step = compute + encode + payloads decoded x decode + exchange

Pure Python (standard library only): importing it does not import TensorFlow, so
the command that answers "will compression pay on my cluster?" runs anywhere.
docs/scaling.md gives the equations, where every parameter comes from, and the
validation against the project's shaped-link measurements.

Units inside the module: seconds, bytes, bits per second. Profiles (JSON) store
milliseconds and nanoseconds per element, the units the benchmarks print.

The exchanges (N = W x G replicas, W machines of G local devices, one network
link per machine of bandwidth B and per-message latency alpha):

  tf_allreduce   TensorFlow's ring all-reduce of the dense gradient D over all N
                 replicas: 2 (N-1)/N D / B + 2 (N-1) alpha (the ring crosses
                 each machine's link once each way);
  allgather      flat: every replica compresses and joins a ring all-gather of
                 payloads p: (N-1) p / B + (N-1) alpha; every replica decodes N
                 payloads (its own included, as the library does);
  hierarchical   dense ring all-reduce of the G local gradients over the local
                 link (2 (G-1)/G D / B_local + 2 (G-1) alpha_local), ONE
                 compression per machine, ring all-gather over the W machines
                 ((W-1) p / B + (W-1) alpha), W payloads decoded, the result
                 broadcast to the local devices (D / B_local + alpha_local);
  powersgd       ring all-reduce of the P and Q factors and the uncompressed
                 tensors (three collectives): 2 (N-1)/N bytes / B + 3 x 2 (N-1)
                 alpha, plus the factor arithmetic (ns per element per rank);
  lgc_rar        ring all-reduce of the latent (k/4 floats) and the small tensors
                 (one collective), plus top-k and the autoencoder;
  sparse_allreduce
                 every party's top-(k/P) positions, Golomb-coded, in a ring
                 all-gather ((P-1) q / B + (P-1) alpha), then a ring all-reduce
                 of the fp16 values at their union (|U| <= k; counted as k) and
                 the small tensors (2 (P-1)/P v / B + 2 (P-1) alpha); P = N
                 parties flat, W hierarchical (then the local sum and
                 broadcast of the all-gather's hierarchical exchange).

Communication does not overlap computation (the library exchanges one fused
bucket after the backward pass; the measured TensorFlow rows on the 2-core
machine add up, docs/scaling.md); a profile's `overlap` (fraction of the
compute under which the dense all-reduce hides) can say otherwise.
"""
import dataclasses
import json
import math
import os

# What the project measured (accuracy, steps to the target): the predictions read it.
from deepreduce_tf.cost.measured import RESNET20_STEPS_RATIO, accuracy_figure
# The variable shapes of the benchmark models (re-exported).
from deepreduce_tf.cost.shapes import gpt_shapes, resnet20_shapes, resnet50_shapes  # noqa: F401

# Tensors with fewer elements travel dense in the bucket's dense section
# (the compressor's min_size default, deepreduce_tf/compressor.py).
MIN_SIZE = 1024
BUCKET_CAP_BYTES = 25 * 1024 * 1024
# Container header + CRC per bucket: 43 B for ResNet-50 as one bucket, 226 B for
# its 5 default buckets (benchmarks/results/cuda_step_throughput_h100_20261127.txt).
HEADER_BYTES_PER_BUCKET = 45
DENSITY = 0.01  # the recommended configuration's top-k ratio

PROFILE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "profiles")


class ScalingError(ValueError):
    """A model, profile, link or count the cost model cannot use; the message
    says which and why."""


def _numel(shape):
    n = 1
    for d in shape:
        n *= int(d)
    return n


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """What the model needs of a network: its variable shapes (None when its
    gradients are not dense tensors), the bytes one worker sends per
    configuration where the project measured them, and the steps to the
    target accuracy relative to the uncompressed run where measured."""
    name: str
    shapes: tuple = None
    parameters: int = 0
    measured_bytes: dict = dataclasses.field(default_factory=dict)
    steps_ratio: dict = dataclasses.field(default_factory=dict)
    accuracy_model: str = "resnet20"  # whose rows of profiles/accuracy.json speak for it
    accuracy_source: str = ("ResNet-20 / Fashion-MNIST (the project's "
                            "accuracy table, benchmarks/results/accuracy.json)")
    tf_exchange: str = "allreduce"   # or "allgather" (IndexedSlices)
    recommended: str = "golomb_qsgd_dgc"
    note: str = ""

    def accuracy(self, config, workers=2):  # what the accuracy table says of config
        return accuracy_figure(self.accuracy_model, config, workers)

    @property
    def elements(self):
        return self.parameters if self.shapes is None else sum(_numel(s) for s in self.shapes)


def _spec(name, shapes, **kw):
    return ModelSpec(name=name, shapes=tuple(tuple(s) for s in shapes),
                     parameters=sum(_numel(s) for s in shapes), **kw)


MODELS = {
    "resnet20": _spec(
        "resnet20", resnet20_shapes(),
        # accounted bytes per worker and step, 2 workers
        # (benchmarks/results/link_tta_resnet20.json, bytes_by_replicas_20261127.json)
        measured_bytes={"uncompressed": 1078888, "topk": 31364, "golomb_qsgd": 15350,
                        "golomb_qsgd_dgc": 16691, "lgc_rar": 12564, "powersgd_r1": 31168,
                        "max_reduction": 1616,  # steady state (3,540 with the warm-up)
                        "powersgd_r2": 56788, "powersgd_r4": 108028},
        steps_ratio=RESNET20_STEPS_RATIO,
        note="ResNet-20 (Fashion-MNIST), batch 32 per worker"),
    "resnet50": _spec("resnet50", resnet50_shapes(), note="ResNet-50 v1.5, 25.6 M parameters"),
    "gpt1.3b": _spec("gpt1.3b", gpt_shapes(), note="GPT-style 1.3 B (24 x 2048)"),
    # NCF's gradients are mostly embedding rows (IndexedSlices, no top-k):
    # TensorFlow all-gathers the slices (values + int64 rows), the library codes
    # them losslessly. Bytes per worker and step, 2 workers
    # (benchmarks/results/link_tta_ncf.json). Adam, so no DGC momentum: the
    # recommended configuration is golomb_qsgd. No PowerSGD or LGC for slices.
    "ncf": ModelSpec(
        name="ncf", shapes=None, parameters=0, tf_exchange="allgather",
        recommended="golomb_qsgd",
        measured_bytes={"uncompressed": 97060, "topk": 77178, "golomb_qsgd": 21444},
        accuracy_model="ncf",
        accuracy_source="HR@10 points, NCF / MovieLens-100K (the project's accuracy table, "
                        "benchmarks/results/accuracy.json)",
        note="NCF (NeuMF) on MovieLens-100K, batch 256 per worker"),
}


def model_from_shapes(name, shapes):
    """A ModelSpec from a list of variable shapes (e.g. a Keras model's
    [v.shape for v in model.trainable_variables])."""
    shapes = [tuple(int(d) for d in s) for s in shapes]
    if not shapes or any(d < 1 for s in shapes for d in s):
        raise ScalingError(f"model {name!r}: shapes must be a non-empty list of positive dims")
    return _spec(name, shapes, note=f"{len(shapes)} tensors")


def model_from_parameters(name, parameters):
    """A ModelSpec from a parameter count alone: one vector of that size is
    assumed (no small tensors, a square-ish matrix for PowerSGD)."""
    parameters = int(parameters)
    if parameters < 1:
        raise ScalingError(f"model {name!r}: the parameter count must be >= 1, got {parameters}")
    side = max(1, int(math.isqrt(parameters)))
    shapes = [(side, parameters // side)]
    rest = parameters - side * (parameters // side)
    if rest:
        shapes.append((rest,))
    return _spec(name, shapes, note=f"{parameters:,} parameters, assumed one square matrix")


def get_model(name):
    try:
        return MODELS[name]
    except KeyError:
        raise ScalingError(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}, "
                           "or give --parameters / --shapes") from None


# --------------------------------------------------------------------------
# Bytes: the library's own arithmetic.

def ring_received(nbytes, replicas):
    """Bytes a ring all-reduce of an nbytes vector delivers to each replica:
    2 (R - 1) / R of it (deepreduce_tf.accounting.ring_received, the same
    integer arithmetic)."""
    return 2 * (replicas - 1) * nbytes // replicas


def allgather_received(payload, replicas):
    """Bytes an all-gather delivers to each replica: the others' payloads."""
    return (replicas - 1) * payload


def topk_k(n, density=DENSITY):
    """Top-k's k for one tensor of n elements (compressor: at least 1)."""
    return min(n, max(1, math.ceil(density * n)))


def split_sections(shapes, density=DENSITY):
    """(K sparse positions, elements of the dense section, sparse tensors)."""
    k = small = sparse = 0
    for s in shapes:
        n = _numel(s)
        if n < MIN_SIZE:
            small += n
        else:
            k += topk_k(n, density)
            sparse += 1
    return k, small, sparse


def golomb_bits_per_index(density):
    """Expected bits per position of a Rice code of the gaps between top-k
    positions, at the best Rice parameter, for positions spread uniformly at
    this density: a gap g is geometric, its code is r + 1 + floor((g-1)/2^r)
    bits, and E floor((g-1)/2^r) = q / (1 - q) with q = (1 - density)^(2^r).
    At 1 %: 8.108 bits (measured: 8.120 with the block headers)."""
    if not 0 < density < 1:
        return 32.0
    best = None
    for r in range(0, 31):
        q = (1.0 - density) ** (2 ** r)
        bits = r + 1 + q / (1.0 - q)
        best = bits if best is None else min(best, bits)
    return best


def qsgd_bits_per_value(bits=7, bucket=512):
    """QSGD: sign + `bits` per value and one float32 norm per bucket
    (8.0625 at 7 bits, bucket 512; measured 8.063)."""
    return bits + 1 + 32.0 / bucket


def buckets(shapes):
    return max(1, math.ceil(4 * sum(_numel(s) for s in shapes) / BUCKET_CAP_BYTES))


def golomb_qsgd_payload(shapes, density=DENSITY):
    """Bytes of one payload of top-k + golomb + QSGD 7 bit over these tensors:
    dense section in float32, K positions and K values, headers."""
    k, small, _ = split_sections(shapes, density)
    return (4 * small + math.ceil(k * golomb_bits_per_index(density) / 8)
            + math.ceil(k * qsgd_bits_per_value() / 8) + HEADER_BYTES_PER_BUCKET * buckets(shapes))


def max_reduction_payload(shapes, density=0.0025, bits=7):
    """deepreduce-bench's max_reduction, steady state: one top-k per whole bucket
    over every tensor (min_size 1), golomb + QSGD, a header per bucket; K over all
    elements (exact with one bucket, B buckets round up at most B more)."""
    n = sum(_numel(s) for s in shapes)
    k = max(1, math.ceil(density * n))
    return (math.ceil(k * golomb_bits_per_index(density) / 8)
            + math.ceil(k * qsgd_bits_per_value(bits) / 8) + HEADER_BYTES_PER_BUCKET * buckets(shapes))


def topk_payload(shapes, density=DENSITY):
    """Plain top-k: int32 positions + float32 values, dense section, headers."""
    k, small, _ = split_sections(shapes, density)
    return 4 * small + 8 * k + HEADER_BYTES_PER_BUCKET * buckets(shapes)


def matrix_view(shape):
    """PowerSGD's n x m view: every dimension but the last, the last."""
    if len(shape) < 2:
        return None
    m = int(shape[-1])
    return _numel(shape) // m, m


def powersgd_bytes(shapes, rank, min_compression_rate=2):
    """Bytes one worker all-reduces per step (docs/powersgd.md): P (n x r) and
    Q (m x r) of every matrix worth compressing ((n + m) r rate < n m), every
    other tensor uncompressed, and one count (the non-finite workers)."""
    total = 4
    for s in shapes:
        view = matrix_view(s)
        if view and (view[0] + view[1]) * rank * min_compression_rate < view[0] * view[1]:
            total += 4 * (view[0] + view[1]) * rank
        else:
            total += 4 * _numel(s)
    return total


def lgc_rar_bytes(shapes, density=DENSITY, latent_channels=4):
    """LGC-RAR in its compressed phase (docs/lgc.md): the latent, k/16 x
    channels floats (k/4 by default), and the dense section, all-reduced."""
    k, small, _ = split_sections(shapes, density)
    return 4 * small + 4 * math.ceil(k * latent_channels / 16) + HEADER_BYTES_PER_BUCKET


def sparse_allreduce_parts(shapes, parties, density=DENSITY, whole_bucket=False,
                           value_bytes=2):
    """(q, v): the bytes of one party's positions payload (its top-(k/P)
    positions per variable, Golomb-coded at density/P, and the header) and of
    the vector every party sums (values of value_bytes at the union: 2 for
    fp16, 1 for int8 codes, counted as its bound k, and the dense section in
    float32). whole_bucket (sparse_max): one top-k over every element, small
    tensors included (min_size 1)."""
    if whole_bucket:
        n = sum(_numel(s) for s in shapes)
        k, small, share = topk_k(n, density), 0, topk_k(n, density / parties)
    else:
        k, small, _ = split_sections(shapes, density)
        share, _, _ = split_sections(shapes, density / parties)
    q = (math.ceil(share * golomb_bits_per_index(density / parties) / 8)
         + HEADER_BYTES_PER_BUCKET * buckets(shapes))
    return q, value_bytes * k + 4 * small


# The sparse all-reduce's presets: (density, one top-k over the whole bucket,
# bytes per summed value).
SPARSE_ALLREDUCE = {"sparse_allreduce": (DENSITY, False, 2), "sparse_max": (0.005, True, 1)}


def config_bytes(model, config):
    """Bytes one worker sends per step: measured where the project measured
    this model, else the arithmetic above. Returns (bytes, source)."""
    if config in model.measured_bytes:
        return model.measured_bytes[config], "measured"
    if model.shapes is None:
        raise ScalingError(f"model {model.name!r}: no bytes for {config!r} "
                           "(not measured, and no variable shapes to compute them)")
    shapes = model.shapes
    if config == "uncompressed":
        return 4 * model.elements, "exact"
    if config in ("golomb_qsgd", "golomb_qsgd_dgc"):
        return golomb_qsgd_payload(shapes), "computed"
    if config == "topk":
        return topk_payload(shapes), "computed"
    if config == "max_reduction":
        return max_reduction_payload(shapes), "computed"
    if config.startswith("powersgd_r"):
        return powersgd_bytes(shapes, int(config[len("powersgd_r"):])), "computed"
    if config == "lgc_rar":
        return lgc_rar_bytes(shapes), "computed"
    if config in SPARSE_ALLREDUCE:  # with 2 workers, as measured_bytes
        return sum(sparse_allreduce_parts(shapes, 2, *SPARSE_ALLREDUCE[config])), "computed"
    raise ScalingError(f"unknown configuration {config!r}")


# --------------------------------------------------------------------------
# Profiles and links.

PROFILE_KEYS = ("name", "device", "compute_ms", "codecs", "link", "local_link")
CODEC_KEYS = ("encode_ns_per_element", "decode_ns_per_element")


@dataclasses.dataclass(frozen=True)
class Link:
    """A network link: bandwidth in bit/s, latency per message in seconds,
    efficiency = achieved / nominal rate, burst = bytes a token-bucket shaper
    lets through at line rate after an idle period (0 on a real link)."""
    name: str
    bandwidth: float
    latency: float = 0.0
    efficiency: float = 1.0
    burst: float = 0.0

    def __post_init__(self):
        if not self.bandwidth > 0:
            raise ScalingError(f"link {self.name!r}: bandwidth must be > 0, got {self.bandwidth}")
        if self.latency < 0:
            raise ScalingError(f"link {self.name!r}: latency must be >= 0, got {self.latency}")
        if not 0 < self.efficiency <= 1:
            raise ScalingError(f"link {self.name!r}: efficiency must be in (0, 1], "
                               f"got {self.efficiency}")

    @property
    def rate(self):
        """Achieved bytes per second."""
        return self.bandwidth * self.efficiency / 8.0

    def transfer(self, nbytes, idle=0.0):
        """Seconds to move nbytes after `idle` seconds without traffic."""
        credit = min(self.burst, self.rate * idle)
        return max(0.0, nbytes - credit) / self.rate


def parse_link(text, latency_us=None):
    """'10gbit', '20mbit', '1.5gbit' -> Link (latency: latency_us, else the
    profile's or 0)."""
    t = str(text).strip().lower()
    for suffix, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if t.endswith(suffix):
            try:
                value = float(t[: -len(suffix)])
            except ValueError:
                break
            if not value > 0:
                raise ScalingError(f"link {text!r}: bandwidth must be > 0")
            return Link(t, value * scale, (latency_us or 0.0) * 1e-6)
    raise ScalingError(f"link {text!r}: expected a rate such as 1gbit, 10gbit or 100mbit")


def _require(obj, key, where):
    if not isinstance(obj, dict) or key not in obj:
        raise ScalingError(f"profile {where}: missing key {key!r}")
    return obj[key]


def _positive(value, where, allow_zero=False):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            value < 0 or (value == 0 and not allow_zero) or math.isnan(value):
        kind = "non-negative" if allow_zero else "positive"
        raise ScalingError(f"profile {where}: expected a {kind} number, got {value!r}")
    return float(value)


@dataclasses.dataclass(frozen=True)
class Profile:
    """A machine's measured costs (see docs/scaling.md#profile-format)."""
    name: str
    device: str
    compute_ms: dict          # model -> ms per step (per replica batch in `note`)
    codecs: dict              # config -> {encode/decode ns per element, fixed ms}
    link: dict                # wire_overhead, latency_us, named links
    local_link: dict          # gbit, latency_us (hierarchical's intra-machine link)
    overlap: float = 0.0
    compute_per_parameter_ns: float = None
    tf_exchange_fixed_ms: dict = dataclasses.field(default_factory=dict)
    raw: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_dict(cls, d, where="<dict>"):
        if not isinstance(d, dict):
            raise ScalingError(f"profile {where}: expected a JSON object")
        for key in PROFILE_KEYS:
            _require(d, key, where)
        compute = {}
        for model, entry in _require(d, "compute_ms", where).items():
            value = entry.get("value") if isinstance(entry, dict) else entry
            if value is None:
                raise ScalingError(f"profile {where}: missing key 'value' in compute_ms.{model}")
            compute[model] = _positive(value, f"{where} compute_ms.{model}")
        codecs = {}
        for config, entry in _require(d, "codecs", where).items():
            c = {}
            for key in CODEC_KEYS:
                c[key] = _positive(_require(entry, key, f"{where} codecs.{config}"),
                                   f"{where} codecs.{config}.{key}", allow_zero=True)
            for key in ("encode_fixed_ms", "decode_fixed_ms", "ns_per_element_per_rank"):
                c[key] = _positive(entry.get(key, 0.0), f"{where} codecs.{config}.{key}",
                                   allow_zero=True)
            codecs[config] = c
        link = _require(d, "link", where)
        _positive(_require(link, "wire_overhead", f"{where} link"), f"{where} link.wire_overhead")
        _positive(_require(link, "latency_us", f"{where} link"), f"{where} link.latency_us",
                  allow_zero=True)
        local = _require(d, "local_link", where)
        _positive(_require(local, "gbit", f"{where} local_link"), f"{where} local_link.gbit")
        _positive(_require(local, "latency_us", f"{where} local_link"),
                  f"{where} local_link.latency_us", allow_zero=True)
        tf_fixed = {}
        for model, entry in d.get("tf_exchange_fixed_ms", {}).items():
            value = entry.get("value") if isinstance(entry, dict) else entry
            tf_fixed[model] = _positive(value, f"{where} tf_exchange_fixed_ms.{model}",
                                        allow_zero=True)
        per_param = d.get("compute_per_parameter_ns")
        if isinstance(per_param, dict):
            per_param = per_param.get("value")
        if per_param is not None:
            per_param = _positive(per_param, f"{where} compute_per_parameter_ns")
        overlap = d.get("overlap", 0.0)
        overlap = overlap.get("value", 0.0) if isinstance(overlap, dict) else overlap
        overlap = _positive(overlap, f"{where} overlap", allow_zero=True)
        if overlap > 1:
            raise ScalingError(f"profile {where}: overlap must be in [0, 1], got {overlap}")
        return cls(name=str(d["name"]), device=str(d["device"]), compute_ms=compute,
                   codecs=codecs, link=link, local_link=local, overlap=overlap,
                   compute_per_parameter_ns=per_param, tf_exchange_fixed_ms=tf_fixed, raw=d)

    def named_link(self, name):
        """A link the profile describes (e.g. this machine's shaped links)."""
        links = self.link.get("named", {})
        if name not in links:
            return None
        e = links[name]
        return Link(name, float(e["gbit"]) * 1e9, float(e.get("latency_us", 0.0)) * 1e-6,
                    float(e.get("efficiency", 1.0)), float(e.get("burst_bytes", 0.0)))

    def link_for(self, text, latency_us=None):
        named = self.named_link(text)
        if named is not None:
            return named
        if latency_us is None:
            latency_us = float(self.link["latency_us"])
        return parse_link(text, latency_us)

    def local(self):
        return Link("local", float(self.local_link["gbit"]) * 1e9,
                    float(self.local_link["latency_us"]) * 1e-6)

    def compute_s(self, model):
        if model.name in self.compute_ms:
            return self.compute_ms[model.name] / 1e3, "profile"
        if self.compute_per_parameter_ns:
            return self.compute_per_parameter_ns * model.elements * 1e-9, "per parameter (assumed)"
        raise ScalingError(f"profile {self.name!r} has no compute time for model "
                           f"{model.name!r} and no compute_per_parameter_ns; give --compute_ms")

    def codec(self, config, model=None):
        """Costs of `config`; an entry "config@model" (measured on that model's
        own exchange, e.g. NCF's slices) comes first."""
        key = config
        if model is not None and f"{config}@{model.name}" in self.codecs:
            key = f"{config}@{model.name}"
        elif key not in self.codecs and key.startswith("powersgd"):
            key = "powersgd"
        elif key not in self.codecs and key == "sparse_max":  # the same sender and decoder
            key = "sparse_allreduce"
        if key not in self.codecs:
            raise ScalingError(f"profile {self.name!r}: no codec costs for {config!r} "
                               f"(has {', '.join(sorted(self.codecs))})")
        return self.codecs[key]


def load_profile(path_or_name):
    """A profile from a JSON file, or by name from the package's profiles
    ('cpu_2core', 'h100')."""
    path = path_or_name
    if not os.path.exists(path):
        candidate = os.path.join(PROFILE_DIR, f"{path_or_name}.json")
        if os.path.exists(candidate):
            path = candidate
        else:
            names = sorted(f[:-5] for f in os.listdir(PROFILE_DIR) if f.endswith(".json"))
            raise ScalingError(f"profile {path_or_name!r}: no such file, and not one of "
                               f"the package's profiles ({', '.join(names)})")
    try:
        with open(path) as f:
            d = json.load(f)
    except json.JSONDecodeError as e:
        raise ScalingError(f"profile {path}: not valid JSON ({e})") from None
    return Profile.from_dict(d, where=path)


# --------------------------------------------------------------------------
# The step.

@dataclasses.dataclass
class Step:
    """A predicted step, its parts in seconds."""
    config: str
    compute: float
    encode: float
    decode: float
    exchange: float
    local: float = 0.0
    payloads: int = 0
    bytes_sent: float = 0.0
    bytes_received: float = 0.0
    bytes_source: str = ""

    @property
    def total(self):
        return self.compute + self.encode + self.decode + self.exchange + self.local


def _codec_time(codec, elements, payloads):
    enc = codec["encode_fixed_ms"] / 1e3 + codec["encode_ns_per_element"] * elements * 1e-9
    dec = payloads * (codec["decode_fixed_ms"] / 1e3
                      + codec["decode_ns_per_element"] * elements * 1e-9)
    return enc, dec


def _idle(step):
    """Seconds per step the network link carries nothing: all but the exchange.
    (A token-bucket shaper refills during them; real links have no burst.)"""
    return step.compute + step.encode + step.decode + step.local


def _check_counts(workers, gpus):
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ScalingError(f"workers must be an integer >= 1, got {workers!r}")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ScalingError(f"GPUs per worker must be an integer >= 1, got {gpus!r}")


def predict(profile, model, config, workers, link, gpus=1, hierarchical=False,
            nbytes=None, compute=None):
    """Predicted step of `config` for `model` on `workers` machines of `gpus`
    replicas each over `link`. nbytes overrides the bytes one worker sends
    (e.g. the accounted bytes of a measured row); compute overrides the
    profile's compute seconds. Returns a Step."""
    _check_counts(workers, gpus)
    if compute is None:
        compute, _ = profile.compute_s(model)
    if nbytes is None:
        nbytes, source = config_bytes(model, config)
    else:
        source = "given"
    wire = float(profile.link["wire_overhead"]) * nbytes
    n = workers * gpus
    elements = model.elements
    step = Step(config, compute, 0.0, 0.0, 0.0, bytes_sent=nbytes, bytes_source=source)

    if config == "uncompressed":
        fixed = profile.tf_exchange_fixed_ms.get(model.name, 0.0) / 1e3
        if model.tf_exchange == "allgather":
            received = allgather_received(wire, n)
            moved = link.transfer(received, idle=compute) + (n - 1) * link.latency
        else:
            received = ring_received(wire, n)
            moved = link.transfer(received, idle=compute) + 2 * (n - 1) * link.latency
        # TensorFlow's other per-step exchange costs (measured only for NCF's
        # IndexedSlices: round trips of many small concurrent collectives)
        # proceed while the bytes move.
        exchange = max(fixed, moved)
        step.exchange = max(0.0, exchange - profile.overlap * compute)
        step.bytes_received = received / float(profile.link["wire_overhead"])
        return step

    codec = profile.codec(config, model)
    if config.startswith("powersgd"):
        rank = int(config[len("powersgd_r"):])
        step.encode = codec["ns_per_element_per_rank"] * rank * elements * 1e-9 \
            + codec["encode_ns_per_element"] * elements * 1e-9
        received = ring_received(wire, n)
        step.exchange = link.transfer(received, idle=_idle(step)) + 3 * 2 * (n - 1) * link.latency
    elif config == "lgc_rar":
        step.encode, step.decode = _codec_time(codec, elements, 1)
        step.payloads = 1
        received = ring_received(wire, n)
        step.exchange = link.transfer(received, idle=_idle(step)) + 2 * (n - 1) * link.latency
    elif config in SPARSE_ALLREDUCE:
        parties = _hierarchical_local(step, profile, elements, workers, gpus, hierarchical)
        if model.shapes is None:
            raise ScalingError(f"model {model.name!r}: {config} needs the variable "
                               "shapes (its bytes depend on the number of workers)")
        layout = SPARSE_ALLREDUCE[config]
        q, v = sparse_allreduce_parts(model.shapes, parties, *layout)
        # Bytes one worker sends, given (an accounted row, at this W) or
        # measured (2 workers), scale the computed parts.
        scale = 1.0
        if source != "computed":
            at = parties if source == "given" else 2
            scale = nbytes / float(sum(sparse_allreduce_parts(model.shapes, at, *layout)))
        scale *= float(profile.link["wire_overhead"])
        q, v = q * scale, v * scale
        step.bytes_sent = (q + v) / float(profile.link["wire_overhead"])
        # One selection and coding per party, the positions of P parties
        # decoded (k positions in all) and one scatter of the sum.
        step.encode, step.decode = _codec_time(codec, elements, 1)
        step.payloads = parties
        received = allgather_received(q, parties) + ring_received(v, parties)
        step.exchange = (link.transfer(received, idle=_idle(step))
                         + 3 * (parties - 1) * link.latency)
    else:
        # all-gather of compressed payloads
        parties = _hierarchical_local(step, profile, elements, workers, gpus, hierarchical)
        step.payloads = parties
        step.encode, step.decode = _codec_time(codec, elements, parties)
        received = allgather_received(wire, parties)
        step.exchange = link.transfer(received, idle=_idle(step)) + (parties - 1) * link.latency
    step.bytes_received = received / float(profile.link["wire_overhead"])
    return step


def _hierarchical_local(step, profile, elements, workers, gpus, hierarchical):
    """The parties of an exchange that sends bytes: the W machines when
    hierarchical with several local devices (step.local then holds the local
    dense sum and the broadcast of the result), else every replica."""
    if hierarchical and gpus > 1:
        local = profile.local()
        dense = 4 * elements
        step.local = (ring_received(dense, gpus) / local.rate + 2 * (gpus - 1) * local.latency
                      + dense / local.rate + local.latency)
        return workers
    return workers * gpus


def steps_ratio(model, config):
    """(steps to target of config / of uncompressed, source): measured where the
    project measured it, else (1.0, 'assumed'); (None, 'not reached') where the
    measured runs did not reach the target."""
    if config == "uncompressed":
        return 1.0, "reference"
    if config in model.steps_ratio:
        value = model.steps_ratio[config]
        return (value, "measured") if value is not None else (None, "not reached")
    return 1.0, "assumed"
