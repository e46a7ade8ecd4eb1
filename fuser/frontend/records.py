"""Records: one per definition call, the unit of the structural cache and of repro printing.

Printing follows nvFuser's `RecordFunctor::print`: positional arguments, then the keyword
arguments the record names; a constant nvFuser defines *inline* (the ints of a shape list
given to an op, a default slice stride) is printed in place of its state (`shape=[2, S3]`)
and has no line of its own.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from fuser.ir import DataType, ParallelType


@dataclass(frozen=True)
class StateRef:
    """A reference to the `index`-th state (tensor T, scalar S or vector V) of a definition."""

    index: int
    kind: str  # "T", "S" or "V"

    def __str__(self) -> str:
        return f"{self.kind}{self.index}"


@dataclass(frozen=True)
class Record:
    """One call: `outputs = fd.<name>(*args, **kwargs)` with states as StateRefs.

    `inline` marks a constant scalar or vector nvFuser defines inside another call: it is
    printed where it is read; it is not part of the record's identity (as in nvFuser)."""

    name: str
    args: tuple
    kwargs: tuple  # ((key, value), ...) in printing order
    outputs: tuple  # StateRefs
    inline: bool = False

    def key(self) -> tuple:
        """A hashable identity: equal keys mean equal operations (1, 1.0 and True differ)."""
        return (self.name, _key(self.args), _key(self.kwargs), self.outputs)

    def python(self, inline: Mapping[int, "Record"] | None = None) -> str:
        """The call as a line of a repro script; states in `inline` print as their values."""
        inline = inline or {}
        parts = [format_value(a, inline) for a in self.args] + [f"{k}={format_value(v, inline)}" for k, v in self.kwargs]
        call = f"fd.{self.name}({', '.join(parts)})"
        if not self.outputs:
            return call
        return f"{', '.join(str(o) for o in self.outputs)} = {call}"

    def inline_text(self, inline: Mapping[int, "Record"]) -> str:
        """How an inline-defined constant prints where it is read: its value, or a list."""
        return format_value(self.args[0], inline)


def _key(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, tuple(_key(x) for x in v))
    if isinstance(v, float) and math.isnan(v):
        return ("float", "nan")
    if isinstance(v, float):  # 0.0 == -0.0, but they are different constants
        return ("float", v, math.copysign(1.0, v))
    if isinstance(v, complex):
        return ("complex", _key(v.real), _key(v.imag))
    if isinstance(v, (bool, int)):
        return (type(v).__name__, v)
    return v


def format_value(v: Any, inline: Mapping[int, Record] | None = None) -> str:
    """A value as nvFuser prints it in a definition."""
    if isinstance(v, StateRef):
        rec = (inline or {}).get(v.index)
        return rec.inline_text(inline) if rec is not None else str(v)
    if isinstance(v, DataType):
        return f"DataType.{v.name}"
    if isinstance(v, ParallelType):
        return f"ParallelType.{v.name}"
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, float):
        return format_float(v)
    if isinstance(v, complex):
        # nvFuser's `real+imagj` (a negative imaginary part prints as +-x, still Python)
        return f"{format_float(v.real)}+{format_float(v.imag)}j"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(format_value(x, inline) for x in v) + "]"
    return repr(v)


def format_float(x: float) -> str:
    """nvFuser's `std::showpoint` spelling (1.00000, 0.000976562, float("inf")) when it reads
    back as the same number, else the exact repr (nvFuser would print six digits)."""
    if math.isnan(x):
        return 'float("nan")'
    if math.isinf(x):
        return 'float("inf")' if x > 0 else 'float("-inf")'
    short = f"{x:#.6g}"
    if "e" in short:
        mant, exp = short.split("e")
        short = f"{mant}e{int(exp):+03d}"
    return short if float(short) == x else repr(x)
