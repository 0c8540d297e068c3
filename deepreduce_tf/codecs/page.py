"""docs/codecs.md, generated from the codec registry (codecs/base.py):

    python -m deepreduce_tf.codecs > docs/codecs.md

The committed page must equal markdown_table()'s output
(tests/codecs/test_codec_registry.py).
"""
from deepreduce_tf.codecs.base import KINDS, REGISTRY

REGENERATE_DOCS = "python -m deepreduce_tf.codecs > docs/codecs.md"


def _cell(value):
    text = "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _yes(flag):
    return "yes" if flag else "no"


ADDING_A_CODEC = [
    "## Adding a codec", "",
    "What a new codec touches (`<name>`: its table name, `<Camel>`: the same in "
    "CamelCase): four files for an index or value codec with kernels whose ops follow its "
    "family's convention (step 3), plus the files regenerated from them; five for a value "
    "codec with GPU kernels (step 3's `kernels/value/<name>.cu`); three for a codec written "
    "in Python alone (steps 1, 2 and 4).", "",
    "1. `deepreduce_tf/ops/codec_table.py`: its row: name, the next free wire id of its kind, "
    "aliases, `kernels` (the op family, or None for a codec written in Python alone), `gpu` "
    "(True only for a codec with CUDA kernels) and, for a value codec, `wire_dtype` (None "
    "unless its values can be summed); `attrs` (its encode op's integer parameters: "
    "`[(name, default, low, high)]`) and, for a value codec, `seeded` (its encoder takes "
    "the step's seed). "
    "Then regenerate: `python "
    "deepreduce_tf/ops/codec_table.py --write` (kernels/common/codec_table.h and the "
    "families' includes kernels/index/index_codecs.h, kernels/value/value_codecs.h), `python "
    "-m deepreduce_tf.codecs > docs/codecs.md` and, once built, `python "
    "tests/fuzz_corpus/make_corpus.py` (its fuzz seeds, tests/fuzz_corpus/<name>/). setup.py "
    "refuses to build a stale generated header; the op loader refuses a library compiled "
    "with another table.",
    "2. `deepreduce_tf/codecs/index.py` or `deepreduce_tf/codecs/value.py`: the class, "
    "decorated with `@register(\"<name>\", params=(...), summary=...)`; it takes its wire id "
    "and aliases from the row. A codec with kernels subclasses `_OpIndex` / `_OpValue`, "
    "which call its ops by its name; a codec with `attrs` (or `seeded`) subclasses "
    "`_TableIndex` / `_TableValue` (its parameters are the row's attributes) and declares "
    "each with `table_param(\"<kind>\", \"<name>\", \"<attr>\", \"<from_params key>\", "
    "help=...)` (the row's default and bounds).",
    "3. `kernels/index/<name>.h` or `kernels/value/<name>.h` (`kernels=\"index\"` or "
    "`\"value\"`): the format and `struct Codec` in namespace `deepreduce::index::<name>` / "
    "`deepreduce::value::<name>`, derived from the family's `CodecDefaults` "
    "(kernels/index/index_format.h, kernels/value/value_format.h, which specify it): the "
    "TF-free host functions BodyBytes, EncodeBody, CheckBody (before anything is "
    "allocated) and DecodeBody (an index codec may give StaticPayloadBytes; a value codec "
    "says kCanonical, and its encoder gets the row's attributes and the seed as "
    "`EncodeArgs`; its body may be shorter than BodyBytes reserved, as deflate's is; an "
    "element-wise value codec, a fixed number of bytes per value, derives them from its "
    "EncodeRange / DecodeRange with `ElementwiseCodec`, kernels/value/value_decode.h, as "
    "fp16 and bf16 do, and its CPU kernels run on the thread pool). A value codec with "
    "`gpu=True` also declares its launchers in the struct, EncodeGpu and DecodeGpu "
    "(TF-free, CUDA-free declarations; value_format.h says what they do), and defines them "
    "with its CUDA kernels in `kernels/value/<name>.cu` (no TensorFlow headers; the launch "
    "helpers of kernels/common/gpu_launch.h: kThreads, GridSize, CeilDiv, the grid-stride "
    "indices, DR_CUDA_RETURN_IF_ERROR), as kernels/value/fp16.cu does; the build, the "
    "standalone CUDA tests and the benchmarks compile every kernels/<family>/*.cu. The "
    "rest follows the table: its ops `DeepReduce>IndexEncode<Camel>` / "
    "`IndexDecode<Camel>` (kernels/ops/index_ops.cc) or `DeepReduce><Camel>Encode` / "
    "`<Camel>Decode` (kernels/ops/value_ops.cc, with the row's attributes and seed input), "
    "their OpKernels (the family's generic kernels over the struct, which check the "
    "attributes against the row's bounds; index: for int32 and int64 indices; value: one "
    "EncodeOp / DecodeOp templated on the device, kernels/value/value_kernels.h, whose CPU "
    "functors run the host functions and GPU functors the launchers, registered on the GPU "
    "exactly when `gpu=True`), the wrappers deepreduce_tf.ops.index and .value (by name), "
    "the decoder fuzz target `<name>` (kernels/fuzz/decoders_fuzzer.cpp's generic target: "
    "allocation bound, decode, an accepted payload re-encodes to its own bytes once the "
    "struct's Canonicalize has run) and the tests.",
    "4. `tests/index_reference.py` (`encode_<name>(idx, n)` and its CODEC_IDS entry) or "
    "`tests/value_reference.py` (`<name>_encode_reference(values)` and its CODEC_IDS "
    "entry): the numpy reference. tests/ops/test_codec_files.py checks every row of the "
    "table for its ops, kernels (GPU ones exactly when `gpu=True`), fuzz target, seeds, "
    "header, CUDA source (`kernels/value/<name>.cu` exactly when a value codec of the "
    "convention has `gpu=True`) and reference; tests/ops/test_index_codecs.py, "
    "tests/ops/test_value_codecs.py, tests/ops/test_value_cuda.py, the registry tests "
    "(round trip through from_params) and the fuzz-corpus tests are parameterized over "
    "the table.", "",
    "Beyond that convention a codec touches its family's shared files, as these built-in "
    "ones still do. An index codec whose encode op takes an attribute that is not an "
    "integer range (golomb's block_size: 0 or a power of two) sets `kOwnEncodeOp` in its "
    "struct, registers that op in `kernels/ops/index_ops.cc` and reads the attribute in its "
    "own `EncodeOp` specialization in `kernels/index/index_kernels.h`. The index codecs "
    "with device kernels of their own (int32, bitmap, rle, golomb: thread-pool and CUDA "
    "functors) follow the older path: each specializes `EncodeOp` / `DecodeOp` for its "
    "struct in `kernels/index/index_kernels.h`, writes its CPU functors in "
    "`index_kernels.cc` and specializes `FuzzIndexCodec` in "
    "`kernels/fuzz/decoders_fuzzer.cpp`, and its GPU functors in `index_kernels_gpu.cc`, "
    "`index_kernels.cu` and `index_gpu.h` (the CPU and GPU registrations follow the table); "
    "their GPU encoders size the payload on the device and copy sizes back between steps, "
    "which the value convention's one-launch EncodeGpu does not express, so they stay "
    "there until the index family gets a GPU convention of its own. Likewise the value "
    "codecs polyfit, dexp and qsgd set `kOwnOps`: polyfit and dexp return a permutation "
    "and their GPU encoders need the host between steps (sort, segmentation, fit; polyfit "
    "also takes a string parameter and its decoder max_values), and qsgd's decoder checks its scales, codes and padding on the "
    "device and reports them in the CPU kernel's order, which DecodeGpu (every body "
    "CheckBody accepts decodes) does not express. Each registers its ops in "
    "`kernels/ops/value_ops.cc` and its OpKernels in `kernels/value/value_kernels.h` / "
    "`.cc` (GPU: `value_kernels_gpu.cc`, `value_kernels.cu`, `value_gpu.h`), passes its "
    "parameters in `deepreduce_tf/ops/value.py` and specializes `FuzzValueCodec`.", "",
    "A codec outside the table (a plugin, a test) passes `wire_id=` and `aliases=` to "
    "`register` and cannot take a table id.", "",
]


def markdown_table(registry=None):
    """docs/codecs.md: the codecs and their parameters, from the registry.

    The committed file must equal this function's output
    (tests/codecs/test_codec_registry.py); regenerate it with REGENERATE_DOCS.
    """
    registry = registry or REGISTRY
    out = ["# Codecs", "",
           f"<!-- Generated from the codec registry (deepreduce_tf/codecs/base.py) by "
           f"`{REGENERATE_DOCS}`; do not edit by hand. -->", "",
           "Every codec is declared once: its name, wire id and aliases (and, for a value "
           "codec, whether its values are summed and in which dtype) in the codec table, "
           "`deepreduce_tf/ops/codec_table.py`; its parameters and properties with "
           "`deepreduce_tf.codecs.register`. The kernels' codec ids "
           "(`kernels/common/codec_table.h`, generated from the table), `from_params`, the "
           "deepreduce-bench flags, the decoder fuzz targets and this page derive from those "
           "declarations. The wire id is the payload header's `index_codec` / `value_codec` "
           "field: permanent, unique per kind.", ""]
    columns = {
        "index": ("lossless", "carries_order", "stateful"),
        "value": ("lossless", "summable", "sorting", "seeded", "stateful"),
    }
    titles = {"index": "Index codecs (`index`, `--index`)",
              "value": "Value codecs (`value`, `--value`)"}
    for kind in KINDS:
        cols = columns[kind]
        out += [f"## {titles[kind]}", "",
                "| name | wire id | aliases | " + " | ".join(c.replace("_", " ") for c in cols)
                + " | parameters | description |",
                "|" + "---|" * (len(cols) + 5)]
        for s in registry.specs(kind):
            row = [f"`{s.name}`", s.wire_id, ", ".join(s.aliases)]
            row += [_yes(getattr(s, c)) for c in cols]
            row += [", ".join(f"`{k}`" for k in s.keys), s.summary]
            out.append("| " + " | ".join(_cell(v) for v in row) + " |")
        out.append("")
    out += ["## Parameters", "",
            "`from_params` key (also the deepreduce-bench flag `--key`), the "
            "constructor argument, the codecs that read it, the accepted values and the "
            "default.", "",
            "| key | argument | codecs | values | default | also accepted as | description |",
            "|---|---|---|---|---|---|---|"]
    for key, p in registry.params().items():
        users = ", ".join(f"{s.kind} `{s.name}`" for s in registry.codecs_of(key))
        help_text = p.help
        row = [f"`{key}`", f"`{p.arg}`", users, p.describe(", "),
               "unset" if p.default is None else repr(p.default), ", ".join(p.aliases),
               help_text]
        out.append("| " + " | ".join(_cell(v) for v in row) + " |")
    out.append("")
    out += ADDING_A_CODEC
    return "\n".join(out)
