"""Mark the float products that must be rounded on their own in every kernel.

nvcc fuses a product into the add or subtract that reads it (an FMA: one rounding). A
product observed two ways, fused into a subtract in one place and rounded where a
reduction, a store or a comparison reads it, holds two values: `t - max(t)` was 2e-4 at
the maximum, not 0. Within one kernel codegen sees every read (fuser.codegen.contraction);
a product that a later segment recomputes for itself (rematerialisation) is read there
only by its add, while the segment that first made it rounded it. So the decision is made
here, on the whole fusion: a Float or Double product with two or more readers (a fusion
output counts as one), not all of them adds or subtracts of its own type, is marked
`BinaryOp.rounded`, and every copy of it is printed as `__fmul_rn` / `__dmul_rn`. A
product with one reader is used one way wherever it is computed.
"""
from __future__ import annotations

from fuser.codegen.contraction import FUSING, PRODUCT_TYPES
from fuser.ir import BinaryOp, BinaryOpType, Fusion, TensorView, Val

#: the pass's FUSER_DISABLE name
NAME = "rounded_products"


def _candidates(fusion: Fusion) -> list[BinaryOp]:
    outputs = set(fusion.outputs)
    found = []
    for e in fusion.exprs():
        if not (isinstance(e, BinaryOp) and e.op_type is BinaryOpType.Mul and not e.rounded):
            continue
        v = e.output
        if not isinstance(v, TensorView) or v.dtype not in PRODUCT_TYPES:
            continue
        readers = len(v.uses) + (v in outputs)
        fused_only = v not in outputs and all(
            isinstance(u, BinaryOp) and u.op_type in FUSING and u.output.dtype is v.dtype for u in v.uses)
        if readers >= 2 and not fused_only:
            found.append(e)
    return found


def applies(fusion: Fusion) -> bool:
    """Whether `fusion` has a product to mark."""
    return bool(_candidates(fusion))


def mark_rounded_products(fusion: Fusion, original: dict[Val, Val] | None = None) -> int:
    """Mark `fusion`'s products read two ways `rounded`, in place; returns how many."""
    found = _candidates(fusion)
    for e in found:
        e.rounded = True
    return len(found)
