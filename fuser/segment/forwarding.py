"""Forwarding (seed 002): cheap work every segment recomputes instead of reading from memory.

A chain of unary ops that starts at a fusion input, or at a factory (`full`, `iota`; never
RNG), is set aside before merging: each segment that reads the chain's end gets its own
copy of the chain, so the chain's tensors never cross a segment boundary. A chain stops
where a tensor has several uses, the next op's result is a fusion output (forwarding
into an output would leave an empty segment) or feeds a `segment_set`, as nvFuser's
`shouldForward` does; a factory whose result is a fusion output is not forwarded.
"""
from __future__ import annotations

from fuser.ir import Expr, FullOp, Fusion, IotaOp, TensorView, UnaryOp
from fuser.scheduler.analysis import is_segmenter_set


def _next_unary(v: TensorView, live: set[Expr]) -> UnaryOp | None:
    uses = [u for u in v.uses if u in live]
    if len(uses) != 1:
        return None
    use = uses[0]
    if not isinstance(use, UnaryOp) or not isinstance(use.outputs[0], TensorView):
        return None
    if use.outputs[0].is_fusion_output or _feeds_segment_set(use.outputs[0], live):
        return None
    return use


def _feeds_segment_set(v: TensorView, live: set[Expr]) -> bool:
    """A segment_set's operand stays where it is made: forwarding it would move the work
    the user cut off into the segment after the boundary."""
    return any(is_segmenter_set(u) for u in v.uses if u in live)


def forwarded_exprs(fusion: Fusion, live: set[Expr]) -> list[Expr]:
    """The exprs every consuming segment recomputes, producers first."""
    out: dict[Expr, None] = {}
    starts: list[TensorView] = [v for v in fusion.inputs if isinstance(v, TensorView)]
    for e in fusion.exprs():
        if isinstance(e, (FullOp, IotaOp)) and not e.outputs[0].is_fusion_output and not _feeds_segment_set(e.outputs[0], live):
            out[e] = None
            starts.append(e.outputs[0])
    for v in starts:
        use = _next_unary(v, live)
        while use is not None:
            out[use] = None
            use = _next_unary(use.outputs[0], live)
    return list(out)
