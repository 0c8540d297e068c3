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
(choices, help, one flag per parameter) and docs/codecs.md (codecs/page.py).

Wire ids are part of the payload format (the header's index_codec /
value_codec fields): unique per kind, never reused, never renumbered. A codec
outside the table (a plugin, a test) passes its own wire_id and aliases; the
table's ids stay reserved for the table's codecs.

Parameters (Param, codecs/param.py) carry the from_params key (also the flag name), the
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
import typing

from deepreduce_tf.codecs.param import SEED, Param, table_param  # noqa: F401 (named here as before)
from deepreduce_tf.ops import codec_table

KINDS = codec_table.KINDS
_FLAG_NAMES = ("lossless", "sorting", "seeded", "carries_order", "summable", "stateful")


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
