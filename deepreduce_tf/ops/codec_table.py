"""The codec table: every codec's name, wire id and aliases, declared ONCE.

This is the one place that says which codecs exist and which number each one
has on the wire (the payload header's index_codec / value_codec fields, and
byte 1 / byte 2 of the self-describing index / value op payloads). Everything
else derives from it:

  kernels/common/codec_table.h   the same rows as C++ X-macros, generated from
                                 this file and committed (regenerate:
                                 REGENERATE_HEADER); the kernels' codec ids
                                 (kCodec*), their CodecName(), the index and
                                 value ops, their CPU and GPU kernel
                                 registrations and the fuzz harness's targets
                                 expand them, and the op library reports them
                                 in its BuildInfo;
  kernels/<family>/<family>_codecs.h
                                 generated too: the header of every codec of
                                 the family, kernels/<family>/<name>.h, whose
                                 struct <name>::Codec the X-macros name;
  deepreduce_tf.codecs           register() takes a codec's wire id, aliases
                                 and summable from its row; the codec class
                                 declares the rest (parameters, properties);
  deepreduce_tf.ops.index/value  their CODECS, CODEC_IDS and ALIASES;
  compressor.SUMMABLE_WIRE_DTYPES  which value codecs are summed, in which
                                 dtype;
  build_deps/fuzz.sh, tests      the decoder fuzz targets (FUZZ_TARGETS).

A mismatch cannot build or load: setup.py refuses to compile when a
committed generated header differs from generated_files(), and the op loader
refuses a
library whose compiled table differs from this one (a stale build, a
hand-edited header); tests/codecs/test_codec_table.py checks both.

Wire ids are part of the payload format: unique per kind, never reused, never
renumbered. Pure data and the standard library only: setup.py and
build_deps/ read it without TensorFlow (`python deepreduce_tf/ops/codec_table.py`
prints the header).
"""
import collections
import os
import sys

KINDS = ("index", "value")

# kernels: the op family whose kernels encode and decode the codec's section
# ("index": the self-describing payload of kernels/index, "bloom": the filter
# of kernels/bloom, "value": the self-describing payload of kernels/value), or
# None for a codec written in Python alone.
# wire_dtype (value codecs): None if the codec's values cannot be summed
# across workers, else the dtype the all-reduce sums them in ("gradient":
# the gradient's own dtype; "shared_int8": integers on a scale the workers
# share, which only the sparse all-reduce agrees, four to an int32 word).
# gpu: the codec's ops also have CUDA kernels (a CUDA build registers them on
# the GPU); False: CPU kernels only, wherever the op is placed.
# attrs (codecs with kernels="index" or "value"): the integer attributes of
# the codec's encode op, Attr(name, default, low, high), each a parameter of
# its format that the generated op declares ("<name>: int = <default>"), the
# generic kernel checks against [low, high] and hands the codec's encoder,
# and deepreduce_tf.ops.index / .value pass by name (at most MAX_ATTRS).
# seeded: its encode op takes a scalar int64 `seed` input after the values
# (stochastic rounding: the same seed, the same payload on every device).
Codec = collections.namedtuple("Codec", ["kind", "name", "wire_id", "aliases", "kernels",
                                         "wire_dtype", "gpu", "attrs", "seeded"])
Attr = collections.namedtuple("Attr", ["name", "default", "low", "high"])
MAX_ATTRS = 4

_KERNELS = {"index": (None, "index", "bloom"), "value": (None, "value")}
_WIRE_DTYPES = (None, "gradient", "float16", "bfloat16", "shared_int8")


def _index(name, wire_id, aliases=(), kernels=None, gpu=False, attrs=()):
    return Codec("index", name, wire_id, tuple(aliases), kernels, None, gpu,
                 tuple(Attr(*a) for a in attrs), False)


def _value(name, wire_id, aliases=(), kernels=None, wire_dtype=None, gpu=False, attrs=(),
           seeded=False):
    return Codec("value", name, wire_id, tuple(aliases), kernels, wire_dtype, gpu,
                 tuple(Attr(*a) for a in attrs), seeded)


# --------------------------------------------------------------------------- the table
# One row per codec, in wire-id order. Adding a codec: docs/codecs.md, "Adding a codec".

INDEX_CODECS = (
    _index("raw", 0, aliases=("none",)),
    _index("int32", 1, kernels="index", gpu=True),
    _index("bitmap", 2, kernels="index", gpu=True),
    _index("rle", 3, kernels="index", gpu=True),
    _index("golomb", 4, aliases=("gr", "rice", "lossless"), kernels="index", gpu=True),
    _index("bloom", 5, aliases=("bloom_cpu",), kernels="bloom", gpu=True),
)

VALUE_CODECS = (
    _value("raw", 0, aliases=("none",), wire_dtype="gradient"),
    _value("polyfit", 1, aliases=("polyfit_cpu",), kernels="value", gpu=True),
    _value("dexp", 2, kernels="value", gpu=True),
    _value("qsgd", 3, kernels="value", gpu=True),
    _value("fp16", 4, aliases=("float16", "half"), kernels="value", wire_dtype="float16",
           gpu=True),
    _value("bf16", 5, aliases=("bfloat16",), kernels="value", wire_dtype="bfloat16",
           gpu=True),
    _value("deflate", 6, aliases=("zlib", "gzip"), kernels="value", attrs=[("level", 6, 0, 9)]),
    _value("ternary", 7, aliases=("stc",)),
    _value("int8", 8, wire_dtype="shared_int8"),
)

# The decoder fuzz harness's targets that are not codecs (kernels/fuzz/
# decoders_fuzzer.cpp); every codec with kernels follows, index codecs first.
FUZZ_EXTRA_TARGETS = ("container", "container_edit", "perm")

# --------------------------------------------------------------------------- derived

HEADER_PATH = "kernels/common/codec_table.h"
# Per op family whose ops and kernels are generated from the table: the header
# that includes every codec's own header, kernels/<family>/<name>.h.
FAMILY_HEADERS = {"index": "kernels/index/index_codecs.h",
                  "value": "kernels/value/value_codecs.h"}
REGENERATE_HEADER = "python deepreduce_tf/ops/codec_table.py --write"


def rows(kind=None, kernels=any):
    """The rows of one kind (or both, index first), in wire-id order;
    kernels: only the codecs of that op family (None: the Python-only ones)."""
    kinds = KINDS if kind is None else (kind,)
    table = {"index": INDEX_CODECS, "value": VALUE_CODECS}
    return tuple(r for k in kinds for r in sorted(table[k], key=lambda r: r.wire_id)
                 if kernels is any or r.kernels == kernels)


def row(kind, name):
    """The row of a canonical codec name, or None."""
    return next((r for r in rows(kind) if r.name == name), None)


def names(kind, kernels=any):
    return tuple(r.name for r in rows(kind, kernels))


def wire_ids(kind, kernels=any):
    """{name: wire id} of one kind."""
    return {r.name: r.wire_id for r in rows(kind, kernels)}


def aliases(kind, kernels=any):
    """{alias: name} of one kind."""
    return {a: r.name for r in rows(kind, kernels) for a in r.aliases}


def attrs(kind, name):
    """{attribute: Attr} of a codec's encode op (empty for most codecs)."""
    r = row(kind, name)
    return {} if r is None else {a.name: a for a in r.attrs}


def attr_values(kind, name, given):
    """The values of a codec's encode-op attributes: `given` ({attr: int})
    checked against its row (unknown names, non-integers and values out of
    [low, high] raise ValueError), the row's defaults for the rest."""
    declared = attrs(kind, name)
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise ValueError(f"{kind} codec {name!r} has no parameter(s) {', '.join(unknown)}; "
                         f"valid: {', '.join(declared) or 'none'}")
    out = {}
    for n, a in declared.items():
        v = given.get(n, a.default)
        if isinstance(v, bool) or not isinstance(v, int) or not a.low <= v <= a.high:
            raise ValueError(f"{name}: {n} must be an integer in [{a.low}, {a.high}], got {v!r}")
        out[n] = v
    return out


def wire_dtypes():
    """{value codec: dtype name its summed values travel in ("gradient": the
    gradient's own)} of the summable value codecs."""
    return {r.name: r.wire_dtype for r in rows("value") if r.wire_dtype is not None}


def fuzz_targets():
    """The decoder fuzz harness's targets, in the order of its enum (byte 0
    of a corpus input): the non-codec targets, then every codec with
    kernels, index codecs first, each kind in wire-id order."""
    return FUZZ_EXTRA_TARGETS + tuple(r.name for r in rows() if r.kernels is not None)


def build_info_table():
    """What the op library's BuildInfo reports under "codecs" when it was
    compiled from this table: {kind: {name: wire id}}."""
    return {k: wire_ids(k) for k in KINDS}


def check(table=None):
    """Raises ValueError if the table is malformed (ids and names unique per
    kind, fuzz target names unique, known kernel families and dtypes)."""
    table = rows() if table is None else tuple(table)
    for kind in KINDS:
        seen_ids, seen_names = {}, {}
        for r in (r for r in table if r.kind == kind):
            if isinstance(r.wire_id, bool) or not isinstance(r.wire_id, int) or \
                    not 0 <= r.wire_id <= 255:
                raise ValueError(f"{kind} codec {r.name!r}: wire id must be an int in "
                                 f"[0, 255], got {r.wire_id!r}")
            if r.wire_id in seen_ids:
                raise ValueError(f"{kind} codecs {seen_ids[r.wire_id]!r} and {r.name!r} "
                                 f"share wire id {r.wire_id}")
            seen_ids[r.wire_id] = r.name
            if not r.name.isidentifier() or r.name != r.name.lower():
                raise ValueError(f"{kind} codec name {r.name!r} must be a lower-case "
                                 "identifier (it names ops and C++ constants)")
            for n in (r.name,) + r.aliases:
                if n in seen_names:
                    raise ValueError(f"{kind} codec name {n!r} is used twice "
                                     f"({seen_names[n]!r}, {r.name!r})")
                seen_names[n] = r.name
            if r.kernels not in _KERNELS[kind]:
                raise ValueError(f"{kind} codec {r.name!r}: kernels must be one of "
                                 f"{_KERNELS[kind]}, got {r.kernels!r}")
            if r.wire_dtype not in _WIRE_DTYPES or (kind == "index" and r.wire_dtype):
                raise ValueError(f"{kind} codec {r.name!r}: bad wire_dtype {r.wire_dtype!r}")
            if r.gpu not in (False, True) or (r.gpu and r.kernels is None):
                raise ValueError(f"{kind} codec {r.name!r}: gpu must be True or False, and "
                                 f"True only for a codec with kernels, got {r.gpu!r}")
            _check_attrs(r)
    targets = FUZZ_EXTRA_TARGETS + tuple(r.name for r in table if r.kernels is not None)
    if len(set(targets)) != len(targets):
        raise ValueError(f"fuzz target names must be unique: {targets}")


def _check_attrs(r):
    where = f"{r.kind} codec {r.name!r}"
    if r.seeded not in (False, True):
        raise ValueError(f"{where}: seeded must be True or False, got {r.seeded!r}")
    if r.attrs and r.kernels not in ("index", "value"):
        raise ValueError(f"{where}: attrs are read by the generated ops and generic kernels "
                         "of kernels/index and kernels/value only (kernels='index' or 'value')")
    if r.seeded and r.kernels != "value":
        raise ValueError(f"{where}: seeded is read by the generic kernels of kernels/value "
                         "only (kernels='value')")
    if len(r.attrs) > MAX_ATTRS:
        raise ValueError(f"{where}: at most {MAX_ATTRS} attrs, got {len(r.attrs)}")
    seen = {"values", "seed", "payload", "name"}
    for a in r.attrs:
        if not isinstance(a.name, str) or not a.name.isidentifier() or a.name != a.name.lower() \
                or a.name in seen:
            raise ValueError(f"{where}: attr name {a.name!r} must be a new lower-case "
                             "identifier (not values, seed, payload or name)")
        seen.add(a.name)
        bounds = (a.default, a.low, a.high)
        if any(isinstance(v, bool) or not isinstance(v, int) or abs(v) >= 1 << 62
               for v in bounds) or not a.low <= a.default <= a.high:
            raise ValueError(f"{where}: attr {a.name!r} needs integers low <= default <= "
                             f"high, got {bounds}")


# --------------------------------------------------------------------------- C++ header

def camel(name):
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def header_text():
    """kernels/common/codec_table.h, generated from the table."""
    guard = "DEEPREDUCE_KERNELS_COMMON_CODEC_TABLE_H_"
    out = ["// Generated from deepreduce_tf/ops/codec_table.py by",
           f"// `{REGENERATE_HEADER}`; do not edit by hand (setup.py and",
           "// tests/codecs/test_codec_table.py check that it matches the table, and the op",
           "// loader checks the compiled library).",
           "//",
           "// The codec table as X-macros: X(name, Camel, wire_id, kernels), in wire-id",
           "// order. name is the codec's canonical name, Camel the same in CamelCase",
           "// (kCodec<Camel>, Fuzz<Camel>), wire_id its number on the wire, kernels its",
           "// op family (none: a codec written in Python alone).",
           "//   DR_INDEX_CODECS, DR_VALUE_CODECS     every codec of the kind;",
           "//   DR_INDEX_PAYLOAD_CODECS              the self-describing payloads of",
           "//                                        kernels/index (kernels == index);",
           "//   DR_VALUE_PAYLOAD_CODECS              those of kernels/value;",
           "//   DR_INDEX_KERNEL_CODECS,",
           "//   DR_VALUE_KERNEL_CODECS               every codec with kernels (the fuzz",
           "//                                        harness's codec targets);",
           "//   DR_INDEX_GPU_CODECS,",
           "//   DR_VALUE_GPU_CODECS                  the payload codecs whose ops have",
           "//                                        CUDA kernels (gpu=True).",
           f"#ifndef {guard}", f"#define {guard}", ""]

    def macro(name, selected):
        lines = [f"#define {name}(X)"]
        for r in selected:
            lines.append(f"  X({r.name}, {camel(r.name)}, {r.wire_id}, {r.kernels or 'none'})")
        width = max(len(line) for line in lines) + 1
        text = [line.ljust(width) + "\\" for line in lines[:-1]] + [lines[-1]]
        return text + [""]

    out += ["#include <cstdint>", "", "namespace deepreduce {", "",
            "// An integer attribute of a codec's encode op (the table's attrs).",
            "struct IntAttr {", "  const char* name;", "  int64_t default_value;",
            "  int64_t low;", "  int64_t high;", "};",
            f"constexpr int kMaxAttrs = {MAX_ATTRS};", "",
            "// What a generic encode kernel hands a codec's encoder: its attributes in",
            "// the table's order (checked against [low, high]) and the seed input (0",
            "// for a codec without one).",
            "struct EncodeArgs {", "  int64_t attr[kMaxAttrs] = {};", "  uint64_t seed = 0;", "};",
            "",
            "// A codec struct's encode-op attributes and seed input, from its row;",
            "// the family headers (index_codecs.h, value_codecs.h) specialize it for",
            "// the codecs that have any.",
            "template <typename Codec>", "struct OpArgsOf {",
            "  static constexpr int kNumAttrs = 0;",
            "  static constexpr IntAttr kAttrs[kMaxAttrs] = {};",
            "  static constexpr bool kSeeded = false;", "};", "",
            "}  // namespace deepreduce", ""]
    for kind in KINDS:
        k = kind.upper()
        out += macro(f"DR_{k}_CODECS", rows(kind))
        out += macro(f"DR_{k}_PAYLOAD_CODECS", rows(kind, kind))
        out += macro(f"DR_{k}_KERNEL_CODECS", [r for r in rows(kind) if r.kernels])
        out += macro(f"DR_{k}_GPU_CODECS", [r for r in rows(kind, kind) if r.gpu])
    out += [f"#endif  // {guard}", ""]
    return "\n".join(out)


def family_header_text(family):
    """kernels/<family>/<family>_codecs.h: includes the header of every codec
    of the family, kernels/<family>/<name>.h (the family's ops, kernels and
    the fuzz harness expand the table's X-macros over their namespaces)."""
    path = FAMILY_HEADERS[family]
    guard = "DEEPREDUCE_" + path.upper().replace("/", "_").replace(".", "_") + "_"
    out = ["// Generated from deepreduce_tf/ops/codec_table.py by",
           f"// `{REGENERATE_HEADER}`; do not edit by hand (setup.py and",
           "// tests/codecs/test_codec_table.py check it).",
           "//",
           f"// The header of every {family} codec with kernels=\"{family}\" in the codec",
           f"// table, kernels/{family}/<name>.h, which declares its struct",
           f"// {family}::<name>::Codec (docs/codecs.md, \"Adding a codec\").",
           f"#ifndef {guard}", f"#define {guard}", "", "#include <cstdint>", "",
           '#include "kernels/common/codec_table.h"']
    out += [f'#include "kernels/{family}/{r.name}.h"' for r in rows(family, family)]
    k = family.upper()
    out += ["", "namespace deepreduce {", f"namespace {family} {{", "",
            "// The table's wire id and names of a codec's struct:",
            "// CodecOf<<name>::Codec>::kId, ::kName, ::kCamel (its ops' prefix).",
            "template <typename Codec>", "struct CodecOf;"]
    body = [f"#define DR_{k}_CODEC_OF(name, Camel, id, kernels)", "  template <>",
            "  struct CodecOf<name::Codec> {", "    static constexpr uint8_t kId = id;",
            "    static constexpr const char* kName = #name;",
            "    static constexpr const char* kCamel = #Camel;"]
    width = max(len(line) for line in body) + 1
    out += [line.ljust(width) + "\\" for line in body] + ["  };"]
    out += [f"DR_{k}_PAYLOAD_CODECS(DR_{k}_CODEC_OF)",
            f"#undef DR_{k}_CODEC_OF", ""]
    specs = [r for r in rows(family, family) if r.attrs or r.seeded]
    if specs:
        out += ["}  // namespace " + family, "",
                "// The table's encode-op attributes and seed input of these codecs",
                "// (codec_table.h's OpArgsOf)."]
        for r in specs:
            listed = ", ".join(f'{{"{a.name}", {a.default}, {a.low}, {a.high}}}'
                               for a in r.attrs)
            out += ["template <>", f"struct OpArgsOf<{family}::{r.name}::Codec> {{",
                    f"  static constexpr int kNumAttrs = {len(r.attrs)};",
                    f"  static constexpr IntAttr kAttrs[kMaxAttrs] = {{{listed}}};",
                    f"  static constexpr bool kSeeded = {'true' if r.seeded else 'false'};",
                    "};"]
    out += ([""] if specs else [f"}}  // namespace {family}"]) + ["}  // namespace deepreduce", "",
            f"#endif  // {guard}", ""]
    return "\n".join(out)


def generated_files():
    """{path relative to the repository: text} of every file generated from
    the table."""
    files = {HEADER_PATH: header_text()}
    files.update({path: family_header_text(f) for f, path in FAMILY_HEADERS.items()})
    return files


def header_mismatch(root):
    """None if every generated file under <root> (kernels/common/codec_table.h
    and the family headers) matches the table, else a one-line error saying
    how to regenerate them (setup.py's build check)."""
    for path, text in generated_files().items():
        try:
            with open(os.path.join(root, path), encoding="utf-8") as f:
                if f.read() == text:
                    continue
        except OSError:
            pass
        what = ("the kernels would use other codec ids than Python" if path == HEADER_PATH
                else "the kernels would not include every codec of the table")
        return (f"{path} does not match deepreduce_tf/ops/codec_table.py ({what}); "
                f"regenerate it with `{REGENERATE_HEADER}`")
    return None


def write_generated(root):
    """Writes every generated file under root; returns their paths."""
    for path, text in generated_files().items():
        with open(os.path.join(root, path), "w", encoding="utf-8") as f:
            f.write(text)
    return sorted(generated_files())


check()

if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        here = os.path.dirname(os.path.abspath(__file__))
        for p in write_generated(os.path.dirname(os.path.dirname(here))):
            print(f"wrote {p}")
    else:
        sys.stdout.write(header_text())
