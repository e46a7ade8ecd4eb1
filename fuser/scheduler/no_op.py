"""no_op: segments that compute nothing — every output is empty, or only a view of its
inputs (broadcast, squeeze, expand, reshape, permute, slice): the host evaluates those
on the tensors as PyTorch views (nvFuser's alias analysis), so an output that is only a
view of an input shares its storage, with no kernel and no copy."""
from __future__ import annotations

from fuser.ir import Expr, LoadStoreOp, LoadStoreOpType, ReshapeOp, SliceOp

from .analysis import SCALAR, SCATTER, VIEW, SubFusion


def is_view_op(e: Expr) -> bool:
    """Whether `e`, besides the VIEW kind (broadcast, squeeze, expand), makes its output a
    view of its input: a reshape (a view wherever the layout allows one, a copy by PyTorch
    otherwise), a permute, a slice."""
    if isinstance(e, (ReshapeOp, SliceOp)):
        return True
    if isinstance(e, LoadStoreOp) and e.op_type is LoadStoreOpType.Set:
        # a permute (logical axes reordering the root), or a set the fusion does not output
        # (what a folded broadcast leaves); a set that is an output is a copy (fd.ops.set)
        out = e.outputs[0]
        return out.domain.allocation is None and (out.domain.root is not None or not out.is_fusion_output)
    return False


def reject_reason(sub: SubFusion) -> str | None:
    kinds = sub.a.kinds
    if all(kinds[k] in (VIEW, SCALAR) or is_view_op(e) for k, e in zip(sub.expr_ids, sub.exprs)):
        return None
    info = sub.a.info
    # (a scatter writing nothing still checks its indices: the greedy scheduler's kernel does)
    if info is not None and sub.outputs and SCATTER not in sub.kinds and all(info.numel(tv) == 0 for tv in sub.outputs):
        return None
    return "computes data: not only views, and some output is not empty"
