"""Which tensors a kernel may read or write with vector accesses along an axis, and how
wide those accesses may be: decided from the call's sizes, strides and alignment."""
from __future__ import annotations

from fuser.ir import IterDomain, TensorView

from .analysis import SubFusion


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
