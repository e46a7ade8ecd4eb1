"""Mark the divisions whose quotient may be computed as a times 1/b.

Softmax as Thunder and users write it, exp(x - max) / sum, divides every element of a row
by one value. A float32 IEEE division is about ten instructions; on an H200 a bf16
softmax divided that way is bound by instruction issue, not memory. a * (1/b), with 1/b
computed once a row, costs a multiply an element (two with the scale below).

a * RN(1/b) lies within about one float ulp of a / b. The pass marks a division only where
that difference cannot be seen: its quotient is rounded to half or bfloat16 (the op's own
output type, or every reader a cast to one; never a fusion output in float), so the two
agree except for a value within an ulp of float of a half / bfloat16 rounding boundary,
where they differ by one ulp of the narrow type. And only where the divisor is the same
across an axis of the quotient (a broadcast axis, or a scalar): elsewhere the reciprocal
costs what the division did.

Generated code keeps the reciprocal finite where 1/b would overflow (a nonzero divisor
below 2^-128 in float, where a * inf would be infinite and a / b finite): a divisor below
the smallest normal is scaled by a power of two s before the reciprocal and the product
scaled back, (a (1 / (b s))) s, two multiplies an element and no branch. Zero, infinite
and NaN divisors give what the division gives. A reduction kernel whose divisor is a
register of the row (the sum softmax divides by) computes s and 1 / (b s) once ahead of
its loop (`fuser.lower.reduction`); elsewhere `fuser::div_by_reciprocal` computes them with
each quotient. The IR op stays a division, so the reference executor and every other
reader see a / b.
"""
from __future__ import annotations

from fuser.ir import BinaryOp, BinaryOpType, DataType, Fusion, TensorView, UnaryOp, UnaryOpType, Val

#: the pass's FUSER_DISABLE name
NAME = "reciprocal_divisors"

#: the types whose rounding hides the difference between a / b and a * (1/b) in float
NARROW = frozenset({DataType.Half, DataType.BFloat16})
#: the quotient types the rewrite computes in (float for the narrow ones)
_QUOTIENTS = frozenset({DataType.Float, DataType.Double}) | NARROW


def _invariant_along_an_axis(b: Val, q: TensorView) -> bool:
    """Whether divisor `b` is the same along some axis along which quotient `q` varies (a
    broadcast axis, expanded or not)."""
    if not isinstance(b, TensorView):
        return True  # a scalar
    mine = b.logical_no_reductions()
    theirs = q.logical_no_reductions()
    return len(mine) == len(theirs) and any(
        m.is_broadcast and not t.is_broadcast for m, t in zip(mine, theirs))


def _rounded_narrow(q: TensorView, outputs: set) -> bool:
    """Whether every value computed from `q` first rounds it to half or bfloat16."""
    if q.dtype in NARROW:
        return True
    return (q not in outputs and bool(q.uses)
            and all(isinstance(u, UnaryOp) and u.op_type is UnaryOpType.Cast and u.output.dtype in NARROW
                    for u in q.uses))


def _candidates(fusion: Fusion) -> list[BinaryOp]:
    outputs = set(fusion.outputs)
    found = []
    for e in fusion.exprs():
        if not (isinstance(e, BinaryOp) and e.op_type is BinaryOpType.Div and not e.by_reciprocal):
            continue
        q = e.output
        if not isinstance(q, TensorView) or q.dtype not in _QUOTIENTS:
            continue
        a, b = e.inputs
        if not (a.dtype.is_floating and b.dtype.is_floating):  # (integer operands promote: a true division)
            continue
        if _invariant_along_an_axis(b, q) and _rounded_narrow(q, outputs):
            found.append(e)
    return found


def applies(fusion: Fusion) -> bool:
    """Whether `fusion` has a division to mark."""
    return bool(_candidates(fusion))


def mark_reciprocal_divisors(fusion: Fusion, original: dict[Val, Val] | None = None) -> int:
    """Mark `fusion`'s divisions that may multiply by the divisor's reciprocal, in place;
    returns how many."""
    found = _candidates(fusion)
    for e in found:
        e.by_reciprocal = True
    return len(found)


__all__ = ["NAME", "NARROW", "applies", "mark_reciprocal_divisors"]
