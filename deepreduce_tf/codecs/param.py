"""A codec's parameters, declared once (Param): the from_params key (also the
deepreduce-bench flag), the constructor argument, the default, the type with
its range or choices, one line of help; validation and parsing from the
declaration. Used by the codec registry (codecs/base.py), the communicators'
and the compressor's own parameters, from_params and the flags.
"""
import dataclasses
import numbers
import typing

from deepreduce_tf.ops import codec_table


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
