"""The persistent (normalisation) schedulers: a reduction whose input is read again after
it, kept in registers and shared memory between the two reads. inner_persistent reduces
innermost axes, outer_persistent outer ones, inner_outer_persistent both at once (an inner
reduction per row and an outer one across rows, as in a layer-norm backward)."""
from __future__ import annotations

from . import reduction
from .analysis import SubFusion


def _common(sub: SubFusion) -> str | None:
    why = reduction.structure_reason(sub)
    if why is not None:
        return why
    if not sub.persistent_buffers():
        return "no persistent buffer: no reduction input is reused after the reduction"
    return None


def _fits(sub: SubFusion) -> str | None:
    if sub.a.info is None:
        return None
    need, budget = sub.persistent_buffer_bytes(), sub.persistent_budget()
    if need > budget:
        return f"persistent buffers need {need} bytes per row, more than the {budget} registers and shared memory hold"
    return None


def _same_axes(reds) -> bool:
    return all(r.same_axes(reds[0]) for r in reds[1:])


def inner_reason(sub: SubFusion) -> str | None:
    why = _common(sub)
    if why is not None:
        return why
    reds = sub.reductions()
    if not all(r.is_inner for r in reds):
        return "not every reduction is over the innermost axes"
    if not _same_axes(reds):
        return "reductions over different axes"
    return _fits(sub)


def outer_reason(sub: SubFusion) -> str | None:
    why = _common(sub)
    if why is not None:
        return why
    reds = sub.reductions()
    if any(r.is_inner for r in reds):
        return "some reduction is over the innermost axes"
    if not _same_axes(reds):
        return "reductions over different axes"
    return _fits(sub)


def inner_outer_reason(sub: SubFusion) -> str | None:
    why = _common(sub)
    if why is not None:
        return why
    reds = sub.reductions()
    inner = [r for r in reds if r.is_inner]
    outer = [r for r in reds if not r.is_inner]
    if not inner or not outer:
        return "needs both inner and outer reductions"
    if not _same_axes(inner) or not _same_axes(outer):
        return "inner (or outer) reductions over different axes"
    if inner[0].iter_classes != outer[0].red_classes or inner[0].red_classes != outer[0].iter_classes:
        return "the outer reductions do not reduce the axes the inner ones keep"
    return _fits(sub)
