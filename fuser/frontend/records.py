"""Records: one per definition call, the unit of the structural cache and of repro printing."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fuser.ir import DataType


@dataclass(frozen=True)
class StateRef:
    """A reference to the `index`-th state (tensor T, scalar S or vector V) of a definition."""

    index: int
    kind: str  # "T", "S" or "V"

    def __str__(self) -> str:
        return f"{self.kind}{self.index}"


@dataclass(frozen=True)
class Record:
    """One call: `outputs = fd.<name>(*args, **kwargs)` with states as StateRefs."""

    name: str
    args: tuple
    kwargs: tuple  # ((key, value), ...) in printing order
    outputs: tuple  # StateRefs

    def key(self) -> tuple:
        """A hashable identity: equal keys mean equal operations (1, 1.0 and True differ)."""
        return (self.name, _key(self.args), _key(self.kwargs), self.outputs)

    def python(self) -> str:
        """The call as a line of a repro script."""
        parts = [format_value(a) for a in self.args] + [f"{k}={format_value(v)}" for k, v in self.kwargs]
        call = f"fd.{self.name}({', '.join(parts)})"
        if not self.outputs:
            return call
        return f"{', '.join(str(o) for o in self.outputs)} = {call}"


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


def format_value(v: Any) -> str:
    """A value as the seeds' repro scripts spell it."""
    if isinstance(v, StateRef):
        return str(v)
    if isinstance(v, DataType):
        return f"DataType.{v.name}"
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, float):
        return format_float(v)
    if isinstance(v, complex):
        return f"complex({format_float(v.real)}, {format_float(v.imag)})"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(format_value(x) for x in v) + "]"
    return repr(v)


def format_float(x: float) -> str:
    """nvFuser's `%#.6g` spelling (1.00000, 0.000976562) when it round-trips, else exact."""
    if math.isnan(x):
        return "float('nan')"
    if math.isinf(x):
        return "float('inf')" if x > 0 else "float('-inf')"
    short = f"{x:#.6g}"
    if "e" in short:
        mant, exp = short.split("e")
        short = f"{mant}e{int(exp):+03d}"
    return short if float(short) == x else repr(x)
