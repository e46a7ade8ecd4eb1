"""Fusion: the container of one computation's IR (inputs, outputs, expressions)."""
from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np

from fuser._core import CycleError, topo_order

from .base import Expr, Scalar, Val, fusion_guard
from .domain import MemoryType, TensorDomain
from .dtype import DataType
from .tensor import TensorView


class Fusion:
    """Inputs, outputs and the expressions between them.

    Names are numbered per kind (tensors T0.., iteration domains, scalars), as in nvFuser,
    so a printed fusion reads the same as one of nvFuser's.
    """

    def __init__(self) -> None:
        self._counters: dict[str, int] = {}
        self._exprs: list[Expr] = []  # tensor- and scalar-level exprs, creation order
        self.inputs: list[Val] = []
        self.outputs: list[Val] = []
        self._input_set: set[Val] = set()
        self._output_set: set[Val] = set()
        #: output -> the input it is written into (fd.add_output(t, alias_input=...))
        self.output_aliases: dict[Val, Val] = {}
        self._sorted: list[Expr] | None = None

    # --- construction ----------------------------------------------------------------
    def _next_name(self, kind: str) -> int:
        n = self._counters.get(kind, 0)
        self._counters[kind] = n + 1
        return n

    def _zero(self) -> Scalar:
        """The shared constant 0 (every IterDomain starts at it)."""
        z = self.__dict__.get("_zero_val")
        if z is None:
            z = self._zero_val = Scalar(DataType.Int, 0, fusion=self)
        return z

    def _register_expr(self, expr: Expr) -> None:
        if expr.tensor_level:
            self._exprs.append(expr)
            self._sorted = None

    def guard(self):
        """`with fusion.guard():` creates IR in this fusion."""
        return fusion_guard(self)

    def add_input(self, val: Val) -> None:
        if val in self._input_set:
            raise ValueError(f"{val!r} is already an input of this fusion")
        if val.definition is not None:
            raise ValueError(f"{val!r} is computed in this fusion and cannot be an input")
        self.inputs.append(val)
        self._input_set.add(val)
        if isinstance(val, TensorView):
            val.memory_type = MemoryType.Global
        self._sorted = None

    def add_output(self, val: Val, alias_input: Val | None = None) -> None:
        if alias_input is not None:
            if alias_input not in self._input_set:
                raise ValueError(f"alias_input {alias_input!r} is not an input of this fusion")
            self.output_aliases[val] = alias_input
        self.outputs.append(val)
        self._output_set.add(val)
        if isinstance(val, TensorView):
            val.memory_type = MemoryType.Global
        self._sorted = None

    def replace_input(self, old: Val, new: Val) -> None:
        """Make `new` the input in `old`'s place (same position); `old` stops being one."""
        if old not in self._input_set:
            raise ValueError(f"{old!r} is not an input of this fusion")
        if new.definition is not None or new in self._input_set:
            raise ValueError(f"{new!r} is computed in this fusion or already an input")
        self.inputs[self.inputs.index(old)] = new
        self._input_set.discard(old)
        self._input_set.add(new)
        if isinstance(new, TensorView):
            new.memory_type = MemoryType.Global
        self._sorted = None

    def remove_expr(self, expr: Expr) -> None:
        """Unregister `expr`: its outputs lose their definition, its inputs this use."""
        if expr in self._exprs:
            self._exprs.remove(expr)
        for v in expr.outputs:
            if v.definition is expr:
                v.definition = None
        for v in expr.inputs:
            while expr in v.uses:
                v.uses.remove(expr)
        self._sorted = None

    # --- traversal -------------------------------------------------------------------
    def exprs(self) -> list[Expr]:
        """The expressions the outputs need, in a topological order (cached)."""
        if self._sorted is None:
            self._sorted = self._sort(self._live_exprs())
        return self._sorted

    def all_exprs(self) -> list[Expr]:
        """Every registered expression, dead ones included, in a topological order."""
        return self._sort(self._exprs)

    def _live_exprs(self) -> list[Expr]:
        live: set[Expr] = set()
        stack = [v.definition for v in self.outputs if v.definition is not None]
        while stack:
            e = stack.pop()
            if e in live:
                continue
            live.add(e)
            stack.extend(i.definition for i in e.inputs if i.definition is not None and i.definition not in live)
        return [e for e in self._exprs if e in live]

    @staticmethod
    def _sort(exprs: Sequence[Expr]) -> list[Expr]:
        order, _ = expr_levels(exprs)
        return [exprs[i] for i in order]

    def vals(self) -> list[Val]:
        """Inputs, then every value the live exprs read or write, each once."""
        seen: dict[Val, None] = dict.fromkeys(self.inputs)
        for e in self.exprs():
            for v in (*e.inputs, *e.outputs):
                seen.setdefault(v, None)
        for v in self.outputs:
            seen.setdefault(v, None)
        return list(seen)

    def tensors(self) -> list[TensorView]:
        return [v for v in self.vals() if isinstance(v, TensorView)]

    # --- copies ----------------------------------------------------------------------
    def clone(self) -> tuple["Fusion", dict[Any, Any]]:
        """A deep copy with the same names; returns it and the old → new map."""
        return self._copy(self._exprs, self.inputs, self.outputs)

    def clone_subgraph(
        self, exprs: Iterable[Expr], inputs: Sequence[Val], outputs: Sequence[Val]
    ) -> tuple["Fusion", dict[Any, Any]]:
        """A new fusion holding `exprs`, reading `inputs` and producing `outputs`."""
        exprs = list(exprs)
        available = {v for e in exprs for v in e.outputs} | set(inputs)
        for e in exprs:
            for v in e.inputs:
                if isinstance(v, TensorView) and v not in available:
                    raise ValueError(f"{v!r} is read by {type(e).__name__} but neither produced nor an input")
        return self._copy(exprs, inputs, outputs)

    def _copy(self, exprs: Sequence[Expr], inputs: Sequence[Val], outputs: Sequence[Val]):
        new = Fusion()
        new._counters = dict(self._counters)
        cloner = _Cloner(new, set(exprs), set(inputs))
        for e in exprs:
            cloner(e)
        for v in inputs:
            nv = cloner(v)
            if v not in self._input_set and isinstance(nv, TensorView) and nv.domain.root is not None:
                # an intermediate made an input: its root describes a definition the copy
                # does not have, and is passed as its logical shape (nvFuser erases it too)
                nv.domain.root = None
            new.add_input(nv)
        for v in outputs:
            alias = self.output_aliases.get(v)
            new.add_output(cloner(v), alias_input=cloner(alias) if alias is not None and alias in cloner.memo else None)
        return new, cloner.memo

    def __repr__(self) -> str:
        from .printer import fusion_ir

        return fusion_ir(self)


def expr_levels(exprs: Sequence[Expr]) -> tuple[np.ndarray, np.ndarray]:
    """(topological order, level) of `exprs` by their producer → consumer edges.

    Order and levels come from the Cython topological sort over a CSR adjacency; a cycle
    raises ValueError naming the expressions on it.
    """
    index = {e: i for i, e in enumerate(exprs)}
    n = len(exprs)
    counts = np.zeros(n + 1, dtype=np.int64)
    succ: list[list[int]] = [[] for _ in range(n)]
    for i, e in enumerate(exprs):
        for out in e.outputs:
            for use in out.uses:
                j = index.get(use)
                if j is not None:
                    succ[i].append(j)
        counts[i + 1] = len(succ[i])
    offsets = np.cumsum(counts)
    indices = np.fromiter((j for s in succ for j in s), dtype=np.int64, count=int(offsets[-1]))
    try:
        return topo_order(offsets, indices)
    except CycleError as err:
        names = " -> ".join(f"{type(exprs[i]).__name__}({exprs[i].outputs[0]!r})" for i in err.cycle)
        raise ValueError(f"the fusion has a cycle: {names}") from None


class _Cloner:
    """Copies IR reachable from tensor-level exprs, restricted to the kept ones."""

    def __init__(self, fusion: Fusion, keep: set[Expr], cut: set[Val]) -> None:
        self.fusion = fusion
        self.keep = keep
        self.cut = cut  # inputs of the copy: their definitions are dropped
        self.memo: dict[Any, Any] = {}

    def __call__(self, obj: Any) -> Any:
        if isinstance(obj, (Val, Expr, TensorDomain)):
            got = self.memo.get(obj)
            if got is not None:
                return got
            return self._clone_node(obj)
        if isinstance(obj, list):
            return [self(x) for x in obj]
        if isinstance(obj, tuple):
            return tuple(self(x) for x in obj)
        return obj

    def _clone_node(self, obj: Any) -> Any:
        new = object.__new__(type(obj))
        self.memo[obj] = new
        for k, v in obj.__dict__.items():
            if k == "fusion":
                new.__dict__[k] = self.fusion
            elif k == "uses":
                new.__dict__[k] = []  # rebuilt as kept exprs are cloned
            elif k == "definition":
                keep = v is not None and obj not in self.cut and (not v.tensor_level or v in self.keep or _is_extent_math(v))
                new.__dict__[k] = self(v) if keep else None
            else:
                new.__dict__[k] = self(v)
        if isinstance(obj, Expr):
            if obj.tensor_level and obj in self.keep:
                self.fusion._exprs.append(new)
            for inp in new.inputs:
                if not inp.uses or inp.uses[-1] is not new:
                    inp.uses.append(new)
        return new


def _is_extent_math(expr: Expr) -> bool:
    """Scalar-only expressions (extent arithmetic) travel with the domains that use them."""
    return all(isinstance(v, Scalar) for v in (*expr.inputs, *expr.outputs))
