"""transpose: elementwise work whose inputs and outputs are laid out with different
innermost axes, staged through shared-memory tiles."""
from __future__ import annotations

from fuser.ir import TensorView

from . import pointwise
from .analysis import RESIZE, SubFusion

#: both innermost extents must span at least one tile edge for tiling to pay off
MIN_TRANSPOSE_EXTENT = 32


def _innermost(sub: SubFusion, tv: TensorView):
    order = tv.allocation if tv.is_fusion_input or tv.is_fusion_output else tv.logical_no_reductions()
    ids = [i for i in order if not i.is_broadcast and not i.is_reduction]
    return ids[-1] if ids else None


def reject_reason(sub: SubFusion) -> str | None:
    if RESIZE in sub.kinds:
        return "has slice, pad or cat"
    why = pointwise.structure_reason(sub)
    if why is not None:
        return why
    find = sub.uf.find
    a = sub.a
    inner: dict[int, object] = {}
    for tv in sub.inputs + sub.outputs:
        i = _innermost(sub, tv)
        if i is not None:
            inner.setdefault(find(a.id_of(i)), i)
    if len(inner) < 2:
        return "inputs and outputs share their innermost axis: nothing to transpose"
    info = a.info
    if info is not None:
        extents = sorted((info.extent(i) for i in inner.values()), reverse=True)
        if extents[1] < MIN_TRANSPOSE_EXTENT:
            return f"a transposed innermost axis has {extents[1]} < {MIN_TRANSPOSE_EXTENT} elements"
    return None
