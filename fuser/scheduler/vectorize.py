"""Which tensors a kernel may read or write with vector accesses along an axis, and how
wide those accesses may be: decided from the call's sizes, strides and alignment."""
from __future__ import annotations

from fuser.ir import IterDomain, TensorView

from .analysis import SubFusion

#: bytes one vector access moves (LDG.128)
VECTOR_BYTES = 16


def vectorizable(sub: SubFusion, axis: IterDomain) -> list[TensorView]:
    """Inputs and outputs whose innermost stored axis is `axis` (the same axis class) with
    stride 1: consecutive elements along `axis` are consecutive in their memory."""
    find, id_of = sub.uf.find, sub.a.id_of
    info = sub.a.info
    want = find(id_of(axis))
    out = []
    fusion = sub.a.fusion
    for tv in [*fusion.inputs, *fusion.outputs]:
        if not isinstance(tv, TensorView):
            continue
        alloc = [i for i in tv.domain.maybe_allocation if not i.is_reduction and not i.is_broadcast]
        if not alloc or find(id_of(alloc[-1])) != want:
            continue
        strides = info.strides.get(tv)
        if strides is not None:
            logical = tv.logical_no_reductions()
            d = logical.index(alloc[-1])
            if strides[d] != 1 and info.sizes[tv][d] > 1:
                continue
        out.append(tv)
    return out


def stride_alignment(sub: SubFusion, tvs: list[TensorView]) -> int:
    """The largest power of two (up to 16) dividing every outer stride, in elements, of the
    vector-accessed inputs among `tvs`: a vector must never straddle a row start."""
    info = sub.a.info
    align = 16
    for tv in tvs:
        strides = info.strides.get(tv)
        if strides is None:
            continue
        for st, n in zip(strides, info.sizes[tv]):
            if st > 1 and n > 1:
                while align > 1 and st % align:
                    align //= 2
    return align


def vector_width(sub: SubFusion, tvs: list[TensorView], extent: int, limit: int) -> int:
    """Elements per vector access of `tvs` along an axis of `extent` elements: 16 bytes of
    the widest element, bounded by every tensor's alignment, dividing `extent`, at most
    `limit` (the elements every outer stride is a multiple of, and the caller's bounds).
    Every tensor's element size sets it, not only the big tensors': widening bf16 rows to 8
    lanes while their float [N] batch-norm statistics take two accesses a vector was slower
    (H100, batch norm bf16 [16384, 4096] 161.2 -> 192.5 us, [1024, 1000] 23.8 -> 90.2:
    registers and fewer blocks)."""
    if not tvs:
        return 1
    info = sub.a.info
    width = max(1, VECTOR_BYTES // max(tv.dtype.itemsize for tv in tvs))
    for tv in tvs:
        align = info.alignment.get(tv)
        if align is not None:
            width = min(width, max(1, align // tv.dtype.itemsize))
    width = min(width, limit)
    while width > 1 and extent % width:
        width //= 2
    return width
