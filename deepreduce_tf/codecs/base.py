"""The codec registry: every index and value codec is declared ONCE.

A codec's identity (name, wire id, aliases, and for value codecs whether its
values can be summed) is its row of the codec table, deepreduce_tf/ops/
codec_table.py, which the kernels share (kernels/common/codec_table.h). Its
Python side is a class (codecs.index.IndexCodec or codecs.value.ValueCodec)
decorated with `register`, which names the row and declares the rest:

    @register("golomb", params=(Param("block_size", ...),),
              summary="block Golomb-Rice gaps")
    class GolombIndex(_OpIndex):
        ...

The decorator records a CodecSpec (name, kind, wire id, aliases, parameters,
summable / stateful / lossless / sorting / seeded / carries_order) and writes
the identity and the properties back onto the class (cls.name, cls.codec_id,
cls.spec, ...), so instances read as they always did. Everything else derives
from the registry: make_index_codec / make_value_codec, INDEX_CODECS and the
other tables (live views), deepreduce_tf.from_params (its keys, defaults,
validation and which codec a key configures), the deepreduce-bench flags
(choices, help, one flag per parameter) and docs/codecs.md (markdown_table()).

Wire ids are part of the payload format (the header's index_codec /
value_codec fields): unique per kind, never reused, never renumbered. A codec
outside the table (a plugin, a test) passes its own wire_id and aliases; the
table's ids stay reserved for the table's codecs.

Parameters (Param) carry the from_params key (also the flag name), the
constructor argument, the default, the type with its range or choices and a
one-line help. A parameter shared by several codecs (e.g. SEED) is one Param
object declared once and listed by each codec; one key always means one
declaration.

Stateful codecs (stateful=True; e.g. a learned codec) create their variables
in `build(variable_factory)`: the compressor calls it before first use with
the factory that creates the memory's residuals (per replica under
tf.distribute); build runs once per instance (later calls do nothing), and
the codec lists its variables in `variables`.
"""
import abc
import collections.abc
import dataclasses
import functools
import numbers
import typing

from deepreduce_tf.ops import codec_table

KINDS = codec_table.KINDS
_FLAG_NAMES = ("lossless", "sorting", "seeded", "carries_order", "summable", "stateful")


# --------------------------------------------------------------------------- parameters

def table_param(kind, codec, attr, key, help, aliases=()):  # pylint: disable=redefined-builtin
    """The Param of a codec's encode-op attribute as its codec-table row
    declares it (default and bounds); `key`: its from_params key and flag."""
    a = codec_table.attrs(kind, codec)[attr]
    return Param(key, int, a.default, arg=attr, low=a.low, high=a.high, help=help,
                 aliases=tuple(aliases))


@dataclasses.dataclass(frozen=True)
class Param:
    """One constructor parameter of a codec (or a from_params key).

    Attributes:
      key: the from_params key and the deepreduce-bench flag name.
      type: int, float or str.
      default: the value when the key is absent (None: the codec's "unset").
      help: one line, for --help and docs/codecs.md.
      arg: the constructor's keyword argument (default: key).
      choices: the valid values (str parameters).
      low, high: bounds (None: unbounded); low_open / high_open make them
        exclusive.
      literals: extra values accepted verbatim besides the type (e.g. "auto").
      check: callable(value) raising ValueError, run after the checks above.
      aliases: other from_params spellings of the key (the original code's).
      flag: whether deepreduce-bench defines --key for it.
      flag_default: the flag's default (None: the flag is unset unless given).
      doc_type: overrides the type description in help and docs.
    """

    key: str
    type: type
    default: typing.Any = None
    help: str = ""
    arg: typing.Optional[str] = None
    choices: typing.Optional[tuple] = None
    low: typing.Optional[float] = None
    high: typing.Optional[float] = None
    low_open: bool = False
    high_open: bool = False
    literals: tuple = ()
    check: typing.Optional[typing.Callable] = dataclasses.field(default=None, compare=False)
    aliases: tuple = ()
    flag: bool = True
    flag_default: typing.Any = None
    doc_type: typing.Optional[str] = None

    def __post_init__(self):
        if self.type not in (int, float, str, bool):
            raise ValueError(f"Param {self.key!r}: type must be int, float, str or bool, got "
                             f"{self.type!r}")
        if self.arg is None:
            object.__setattr__(self, "arg", self.key)
        for name in ("choices", "literals", "aliases"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))

    # ---- descriptions
    def range_text(self):
        """The bounds, e.g. '(0, 1)', '[0, 15]', '> 0' ('' if unbounded)."""
        lo, hi = self.low, self.high
        if lo is not None and hi is not None:
            return (f"{'(' if self.low_open else '['}{lo}, {hi}{')' if self.high_open else ']'}")
        if lo is not None:
            return f"{'>' if self.low_open else '>='} {lo}"
        if hi is not None:
            return f"{'<' if self.high_open else '<='} {hi}"
        return ""

    def describe(self, sep=" | "):
        """The accepted values in words, e.g. 'int in [0, 15]', 'p0 | leftmost'."""
        if self.doc_type:
            return self.doc_type
        if self.choices:
            text = sep.join(str(c) for c in self.choices)
        else:
            rng = self.range_text()
            text = {int: "int", float: "float", str: "string", bool: "bool"}[self.type]
            if rng:
                text += (" in " if rng[0] in "([" else " ") + rng
        if self.literals:
            text = sep.join([str(v) for v in self.literals] + [text])
        return text

    def _bound_message(self):
        rng = self.range_text()
        if self.type is int:
            return "be an integer" + ((" in " if rng[:1] in "([" else " ") + rng if rng else "")
        if self.type is float:
            if rng[:1] in "([":
                return f"lie in {rng}"
            return "be a number" + (f" {rng}" if rng else "")
        return f"be a {self.type.__name__}"

    # ---- validation
    def validate(self, value, owner=None):
        """Checks `value` against the declared type/range/choices; returns it.

        Args:
          value: the given value.
          owner: the codec name, prefixed to range messages ("bloom: fpr ...").

        Raises:
          ValueError: naming the key (choices) or the argument (range) and the
            valid values.
        """
        if value is None and self.default is None:
            return value  # "unset" (e.g. qsgd bits / levels)
        if self.literals and isinstance(value, typing.Hashable) and value in self.literals:
            return value
        if self.choices:
            if not isinstance(value, typing.Hashable) or value not in self.choices:
                shown = ", ".join(repr(c) for c in self.choices)
                raise ValueError(f"{self.key}={value!r} is not valid; valid choices: {shown}")
        else:
            number = value
            if self.type is float and isinstance(value, str):
                try:  # the constructors take float(value), as the original code did
                    number = float(value)
                except ValueError:
                    pass
            ok = {int: lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool),
                  float: lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool),
                  str: lambda v: isinstance(v, str),
                  bool: lambda v: isinstance(v, bool)}[self.type](number)
            if ok and self.type in (int, float):
                if self.low is not None:
                    ok = number > self.low if self.low_open else number >= self.low
                if ok and self.high is not None:
                    ok = number < self.high if self.high_open else number <= self.high
            if not ok:
                prefix = f"{owner}: " if owner else ""
                need = self._bound_message()
                if self.literals:
                    shown = " or ".join(repr(v) for v in self.literals)
                    need = f"be {shown} or {need[3:] if need.startswith('be ') else need}"
                raise ValueError(f"{prefix}{self.arg} must {need}, got {value!r}")
        if self.check is not None:
            self.check(value)
        return value

    def parse(self, text):
        """A command-line string -> a value of this parameter (ValueError if not)."""
        if not isinstance(text, str):
            return text
        if text in [str(v) for v in self.literals]:
            return next(v for v in self.literals if str(v) == text)
        if self.type is int:
            return int(text)
        if self.type is float:
            return float(text)
        if self.type is bool:
            return text.lower() in ("1", "true", "yes")
        return text

    @property
    def flag_type(self):
        """The absl flag kind: 'integer', 'float' or 'string'."""
        if self.literals or self.choices or self.type in (str, bool):
            return "string"
        return {int: "integer", float: "float"}[self.type]


# Shared by the codecs that hash or draw (and by the compressor itself):
# declared once, listed in each such codec's params.
SEED = Param("seed", int, 0, flag=False,
             help="base seed: randomk positions, QSGD rounding, Bloom hashing (equal on "
                  "every worker; deepreduce-bench --seed)")


# --------------------------------------------------------------------------- specs

@dataclasses.dataclass(frozen=True)
class CodecSpec:
    """What the registry knows of one codec (see the module docstring)."""

    name: str
    kind: str
    wire_id: int
    cls: type
    aliases: tuple = ()
    params: tuple = ()
    summary: str = ""
    lossless: bool = False
    summable: bool = False
    stateful: bool = False
    sorting: bool = False
    seeded: bool = False
    carries_order: bool = False

    @property
    def additive(self):
        """Alias of summable (the original attribute name)."""
        return self.summable

    @property
    def keys(self):
        """The from_params keys this codec reads, in declaration order."""
        return tuple(p.key for p in self.params)

    def param(self, key):
        for p in self.params:
            if p.key == key or p.arg == key:
                return p
        raise KeyError(f"{self.kind} codec {self.name!r} has no parameter {key!r}")

    def kwargs_from(self, values, validate=True):
        """Constructor kwargs from a {key: value} dict (defaults for absent keys)."""
        out = {}
        for p in self.params:
            value = values.get(p.key, p.default)
            if validate:
                p.validate(value, self.name)
            out[p.arg] = value
        return out

    def make(self, **kwargs):
        """An instance (kwargs: constructor arguments)."""
        return self.cls(**kwargs)


# --------------------------------------------------------------------------- base class

class Codec(abc.ABC):
    """Common base of IndexCodec and ValueCodec (identity, properties, state).

    Subclasses are declared with `register`, which sets name, codec_id, spec
    and the properties below from its arguments (or keeps the class's own).
    """

    kind = None
    name = None
    codec_id = None
    spec = None
    lossless = False
    # True if the codec's *values* (not its bytes) can be summed across
    # workers: the all-reduce communicator sends codec.cast(values) as is.
    # `additive` is the original name, kept equal by register().
    summable = False
    additive = False
    # True if the codec owns variables (created by build()).
    stateful = False
    sorting = False
    seeded = False
    carries_order = False
    built = False

    def config(self):
        """Parameters the decoder must share with the encoder (fingerprinted)."""
        return {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "build" in cls.__dict__:
            cls.build = _build_once(cls.__dict__["build"])

    def build(self, variable_factory):
        """Creates the codec's variables (stateful codecs; default: nothing).

        The compressor calls it once, before the first encode/decode (and
        from_params after building the compressor). It runs once per
        instance: every override is wrapped so that later calls do nothing
        and `built` becomes True.

        Args:
          variable_factory: callable(initial_value, name) -> tf.Variable, the
            compressor's: the same one that creates the residual memory's
            variables (per replica under tf.distribute). A stateful codec must
            create every variable through it and list them in `variables`.
        """

    @property
    def variables(self):
        """The variables build() created (default: none)."""
        return ()

    def __repr__(self):
        cfg = ", ".join(f"{k}={v!r}" for k, v in sorted(self.config().items()))
        return f"{type(self).__name__}({cfg})"


def _build_once(build):
    """Wraps a Codec.build so that it runs once per instance."""
    if getattr(build, "_build_once", False):
        return build

    @functools.wraps(build)
    def wrapper(self, variable_factory):
        if self.__dict__.get("built", False):
            return None
        result = build(self, variable_factory)
        self.built = True
        return result

    wrapper._build_once = True
    return wrapper


Codec.build = _build_once(Codec.build)


# --------------------------------------------------------------------------- registry

class CodecRegistry:
    """name / alias / (kind, wire id) -> CodecSpec, per kind."""

    def __init__(self):
        self._specs = {k: {} for k in KINDS}      # name -> spec
        self._aliases = {k: {} for k in KINDS}    # alias -> name
        self._reserved = {}                       # from_params key -> owner

    # ---- registration
    def register(self, spec):
        kind = spec.kind
        if kind not in KINDS:
            raise ValueError(f"codec kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if not isinstance(spec.name, str) or not spec.name:
            raise ValueError(f"{kind} codec name must be a non-empty string, got {spec.name!r}")
        taken = self._specs[kind]
        for nm in (spec.name,) + tuple(spec.aliases):
            if nm in taken:
                raise ValueError(f"{kind} codec name {nm!r} is already registered "
                                 f"({taken[nm].cls.__name__})")
            if nm in self._aliases[kind]:
                raise ValueError(f"{kind} codec name {nm!r} is already an alias of "
                                 f"{self._aliases[kind][nm]!r}")
        if len(set(spec.aliases)) != len(spec.aliases) or spec.name in spec.aliases:
            raise ValueError(f"{kind} codec {spec.name!r}: repeated aliases {spec.aliases}")
        wid = spec.wire_id
        if isinstance(wid, bool) or not isinstance(wid, int) or wid < 0:
            raise ValueError(f"{kind} codec {spec.name!r}: wire id must be an int >= 0, got "
                             f"{wid!r}")
        for other in taken.values():
            if other.wire_id == wid:
                raise ValueError(f"{kind} codec {spec.name!r}: wire id {wid} is already used "
                                 f"by {kind} codec {other.name!r}")
        _check_table_row(kind, spec.name, wid, spec.aliases)
        self._check_params(spec)
        taken[spec.name] = spec
        for a in spec.aliases:
            self._aliases[kind][a] = spec.name

    def _check_params(self, spec):
        seen_keys, seen_args = set(), set()
        declared = self.params()
        for p in spec.params:
            if not isinstance(p, Param):
                raise TypeError(f"{spec.kind} codec {spec.name!r}: params must be Param "
                                f"instances, got {p!r}")
            if p.key in seen_keys or p.arg in seen_args:
                raise ValueError(f"{spec.kind} codec {spec.name!r}: parameter {p.key!r} "
                                 "declared twice")
            seen_keys.add(p.key)
            seen_args.add(p.arg)
            for spelling in (p.key,) + p.aliases:
                if spelling in self._reserved:
                    raise ValueError(f"{spec.kind} codec {spec.name!r}: parameter key "
                                     f"{spelling!r} is taken by {self._reserved[spelling]}")
            other = declared.get(p.key)
            if other is not None and other != p:
                raise ValueError(
                    f"{spec.kind} codec {spec.name!r}: parameter {p.key!r} differs from the "
                    "declaration other codecs share; use the same Param object")
            for alias in p.aliases:
                owner = self.param_aliases().get(alias)
                if owner is not None and owner != p.key:
                    raise ValueError(f"{spec.kind} codec {spec.name!r}: key alias {alias!r} "
                                     f"already means {owner!r}")

    def unregister(self, kind, name):
        """Removes a codec (tests, plugins); returns its spec."""
        spec = self.get(kind, name)
        del self._specs[kind][spec.name]
        for a in spec.aliases:
            self._aliases[kind].pop(a, None)
        return spec

    def reserve(self, keys, owner):
        """Marks from_params keys as not available to codec parameters."""
        keys = tuple(keys)
        declared = set(self.params()) | set(self.param_aliases())
        clash = sorted(declared & set(keys))
        if clash:
            raise ValueError(f"{owner}: keys {clash} are codec parameters")
        for k in keys:
            self._reserved[k] = owner

    def add_alias(self, kind, alias, name):
        """Adds an alias to a registered codec (the INDEX_ALIASES[...] = ... path)."""
        spec = self.get(kind, name)
        if alias in self._specs[kind] or alias in self._aliases[kind]:
            raise ValueError(f"{kind} codec name {alias!r} is already registered")
        new = dataclasses.replace(spec, aliases=spec.aliases + (alias,))
        self._specs[kind][spec.name] = new
        self._aliases[kind][alias] = spec.name
        spec.cls.spec = new

    # ---- lookup
    def _kind(self, kind):
        if kind not in KINDS:
            raise ValueError(f"codec kind must be one of {', '.join(KINDS)}, got {kind!r}")
        return kind

    def lookup(self, kind, name):
        """The spec of a codec name or alias, or None."""
        self._kind(kind)
        if not isinstance(name, typing.Hashable):
            return None
        name = self._aliases[kind].get(name, name)
        return self._specs[kind].get(name)

    def get(self, kind, name):
        """The spec of a codec name or alias.

        Raises:
          ValueError: unknown name; the message lists the names and aliases.
        """
        spec = self.lookup(kind, name)
        if spec is None:
            aliases = ", ".join(f"{a}={b}" for a, b in self.aliases(kind).items())
            raise ValueError(f"unknown {kind} codec {name!r}; valid choices: "
                             f"{', '.join(self.names(kind))} (aliases: {aliases})")
        return spec

    def by_wire_id(self, kind, wire_id):
        """The spec with this wire id (ValueError if none)."""
        for spec in self._specs[self._kind(kind)].values():
            if spec.wire_id == wire_id:
                return spec
        raise ValueError(f"no {kind} codec has wire id {wire_id!r}; known: "
                         + ", ".join(f"{s.wire_id}={s.name}" for s in self.specs(kind)))

    def specs(self, kind=None):
        """Specs of one kind (or all, index first), in wire-id order."""
        kinds = KINDS if kind is None else (self._kind(kind),)
        return [s for k in kinds for s in sorted(self._specs[k].values(),
                                                 key=lambda s: s.wire_id)]

    def names(self, kind):
        return tuple(s.name for s in self.specs(kind))

    def aliases(self, kind):
        """{alias: name} of one kind, grouped by codec in wire-id order."""
        return {a: s.name for s in self.specs(kind) for a in s.aliases}

    def params(self, kind=None):
        """{key: Param} of every registered codec parameter (declaration order)."""
        out = {}
        for s in self.specs(kind):
            for p in s.params:
                out.setdefault(p.key, p)
        return out

    def param_aliases(self):
        """{alias: key} of the codec parameters' alternative spellings."""
        return {a: p.key for p in self.params().values() for a in p.aliases}

    def codecs_of(self, key):
        """Specs whose parameters include `key`."""
        return [s for s in self.specs() if key in s.keys]

    def make(self, kind, name, **kwargs):
        return self.get(kind, name).make(**kwargs)


REGISTRY = CodecRegistry()

_TABLE_SOURCE = "the codec table (deepreduce_tf/ops/codec_table.py)"


def _check_table_row(kind, name, wire_id, aliases):
    """A codec of the codec table must carry its row's id and aliases; any
    other codec must stay off the table's ids (they are never reused)."""
    row = codec_table.row(kind, name)
    if row is not None:
        if wire_id != row.wire_id:
            raise ValueError(f"{kind} codec {name!r}: wire id {wire_id} differs from "
                             f"{_TABLE_SOURCE}, which gives it {row.wire_id}")
        if not set(row.aliases) <= set(aliases):
            raise ValueError(f"{kind} codec {name!r}: aliases {tuple(aliases)} lack those of "
                             f"{_TABLE_SOURCE}, {row.aliases}")
        return
    for other in codec_table.rows(kind):
        if other.wire_id == wire_id:
            raise ValueError(f"{kind} codec {name!r}: wire id {wire_id} is reserved for "
                             f"{kind} codec {other.name!r} by {_TABLE_SOURCE}")


def register(name, *, wire_id=None, aliases=None, params=(), summary="", additive=None,
             **props):
    """Class decorator: declares an IndexCodec/ValueCodec subclass as a codec.

    Args:
      name: canonical name (from_params value, --index/--value choice); a
        codec of the codec table takes its wire id, aliases and (value
        codecs) summable from its row.
      wire_id: the payload header's codec id; unique per kind, permanent.
        Only for codecs outside the table (where it must equal the row's).
      aliases: other accepted names (default: the row's, or none).
      params: Param declarations of the constructor's parameters.
      summary: one line for --help and docs/codecs.md (default: the first
        line of the class docstring).
      additive: alias of summable.
      **props: lossless, summable, stateful, sorting, seeded, carries_order;
        each defaults to the class's attribute (inherited from the base).

    Raises:
      ValueError: duplicate name, alias or wire id, a codec outside the table
        without a wire id, a table codec whose wire id, aliases or summable
        differ from its row, or conflicting parameters.
    """
    unknown = set(props) - set(_FLAG_NAMES)
    if unknown:
        raise TypeError(f"register() got unknown properties {sorted(unknown)}; valid: "
                        f"{', '.join(_FLAG_NAMES)}")
    if additive is not None:
        props.setdefault("summable", additive)

    def decorate(cls):
        if not (isinstance(cls, type) and issubclass(cls, Codec)) or cls.kind not in KINDS:
            raise TypeError(f"register() decorates IndexCodec / ValueCodec subclasses, got "
                            f"{cls!r}")
        kind = cls.kind
        row = codec_table.row(kind, name)
        wid, names = wire_id, aliases
        if row is not None:
            wid = row.wire_id if wid is None else wid
            names = row.aliases if names is None else names
        elif wid is None:
            raise ValueError(f"{kind} codec {name!r} is not in {_TABLE_SOURCE}: pass its "
                             "wire_id")
        values = {f: bool(props[f]) if f in props else bool(getattr(cls, f))
                  for f in _FLAG_NAMES}
        if "summable" not in props:
            values["summable"] = bool(cls.summable or cls.additive)
        if row is not None and kind == "value":
            table_summable = row.wire_dtype is not None
            if "summable" in props and values["summable"] != table_summable:
                raise ValueError(f"value codec {name!r}: summable={values['summable']} "
                                 f"differs from {_TABLE_SOURCE} (wire_dtype "
                                 f"{row.wire_dtype!r})")
            values["summable"] = table_summable
        if row is not None and row.seeded:
            # Its encode op takes the step's seed: the compressor must pass it.
            values["seeded"] = True
        text = summary or (cls.__doc__ or "").strip().split("\n")[0]
        spec = CodecSpec(name=name, kind=kind, wire_id=wid, cls=cls,
                         aliases=tuple(names or ()), params=tuple(params), summary=text,
                         **values)
        REGISTRY.register(spec)
        cls.name, cls.codec_id, cls.spec = name, wid, spec
        for f, v in values.items():
            setattr(cls, f, v)
        cls.additive = values["summable"]
        return cls

    return decorate


def spec_of(codec):
    """The CodecSpec of a codec instance or class."""
    spec = getattr(codec, "spec", None)
    if spec is None:
        raise ValueError(f"{codec!r} is not a registered codec")
    return spec


# --------------------------------------------------------------------------- views

class RegistryView(collections.abc.MutableMapping):
    """A live {name: class} mapping of one kind (INDEX_CODECS, VALUE_CODECS).

    Reading follows the registry; `VIEW[name] = cls` registers cls (with its
    own codec_id), `del VIEW[name]` unregisters: the original dicts' ways of
    adding a codec keep working.
    """

    def __init__(self, kind):
        self._kind = kind

    def __getitem__(self, name):
        spec = REGISTRY._specs[self._kind].get(name)
        if spec is None:
            raise KeyError(name)
        return spec.cls

    def __iter__(self):
        return iter(REGISTRY.names(self._kind))

    def __len__(self):
        return len(REGISTRY._specs[self._kind])

    def __setitem__(self, name, cls):
        register(name, wire_id=cls.codec_id)(cls)

    def __delitem__(self, name):
        if name not in REGISTRY._specs[self._kind]:
            raise KeyError(name)
        REGISTRY.unregister(self._kind, name)

    def __repr__(self):
        return f"{type(self).__name__}({self._kind!r}, {dict(self)!r})"


class AliasView(collections.abc.Mapping):
    """A live {alias: name} mapping of one kind (INDEX_ALIASES, VALUE_ALIASES)."""

    def __init__(self, kind):
        self._kind = kind

    def __getitem__(self, alias):
        return REGISTRY.aliases(self._kind)[alias]

    def __iter__(self):
        return iter(REGISTRY.aliases(self._kind))

    def __len__(self):
        return len(REGISTRY.aliases(self._kind))

    def __setitem__(self, alias, name):
        REGISTRY.add_alias(self._kind, alias, name)

    def __repr__(self):
        return f"{type(self).__name__}({self._kind!r}, {dict(self)!r})"



# --------------------------------------------------------------------------- docs

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
