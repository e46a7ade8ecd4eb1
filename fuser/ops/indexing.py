"""Indexing builders (select, index_select, gather, scatter) and the ATen-backed matmul/linear."""
from __future__ import annotations

from fuser.ir import (
    GatherOp,
    IndexSelectOp,
    IterDomain,
    IterType,
    LinearOp,
    MatmulOp,
    Scalar,
    ScatterOp,
    SelectOp,
    TensorDomain,
    TensorView,
)
from fuser.ir.dtype import result_type

from .reduction import normalize_dims


def _tensor(name: str, arg: str, x: object) -> TensorView:
    if not isinstance(x, TensorView):
        raise TypeError(f"{name}: {arg} must be a tensor, got {type(x).__name__}")
    return x


def _index_tensor(name: str, index: object) -> TensorView:
    """`index` checked as an index tensor: integers, or floating point as nvFuser takes
    (its kernels convert the value to the index type, truncating toward zero; Thunder's
    cross_entropy passes `where(target != ignore_index, target, 0.0)`, a Float tensor)."""
    index = _tensor(name, "index", index)
    if not (index.dtype.is_integral or index.dtype.is_floating):
        raise TypeError(f"{name}: index must be an integer or floating-point tensor, got {index.dtype}")
    return index


def _lookup_axis(inp: IterDomain, idx: IterDomain) -> IterDomain:
    """take_along_axis's output axis on an axis other than the gathered one, as nvFuser's
    takeAlongAxis makes it: the input's, unless the input's is a broadcast and the index's
    is not, or the index's is an expanded broadcast. The output then varies along the axis
    wherever the input or the index does (an index broadcast along it still picks
    different input rows there), and is an expanded broadcast only where both are constant."""
    if inp.is_broadcast and (not idx.is_broadcast or idx.has_expanded_extent):
        return idx.clone_like()
    return inp.clone_like()


def _gather_axis(inp: IterDomain, idx: IterDomain) -> IterDomain:
    """gather's output axis on an axis other than the gathered one: the index's extent (torch
    takes an index no larger than the input there), a broadcast only where the values are
    the same all along it. An index expanded along an axis the input varies on reads
    different input rows at each position: a concrete axis of the expanded extent."""
    if idx.has_expanded_extent and not inp.is_broadcast:
        return IterDomain(idx.user_extent)
    return idx.clone_like()


def select(x: TensorView, index: Scalar, dim: int) -> TensorView:
    """x.select(dim, index): drops axis `dim`."""
    _tensor("select", "arg", x)
    if not isinstance(index, Scalar) or not index.dtype.is_integral:
        raise TypeError("select: index must be an integer scalar")
    ids = x.logical_no_reductions()
    (dim,) = normalize_dims([dim], len(ids), "dim")
    out = TensorView(TensorDomain([i.clone_like() for k, i in enumerate(ids) if k != dim]), x.dtype)
    SelectOp([x, index], [out], dim=dim)
    return out


def index_select(x: TensorView, index: TensorView, dim: int) -> TensorView:
    """torch.index_select: axis `dim` replaced by the positions in the 1-D `index`; a 0-dim
    index selects one slice and keeps the axis with extent 1 (nvFuser's select + unsqueeze)."""
    from .reduction import broadcast

    _tensor("index_select", "arg", x)
    index = _index_tensor("index_select", index)
    if index.ndim == 0:
        index = broadcast(index, [True])
    if index.ndim != 1:
        raise ValueError(f"index_select: index must be 1-D or 0-D, got {index.ndim} dimensions")
    ids = x.logical_no_reductions()
    (dim,) = normalize_dims([dim], len(ids), "dim")
    n = index.logical_no_reductions()[0]
    out_ids = [n.clone_like() if k == dim else i.clone_like() for k, i in enumerate(ids)]
    out = TensorView(TensorDomain(out_ids), x.dtype)
    IndexSelectOp([x, index], [out], dim=dim)
    return out


def gather(x: TensorView, index: TensorView, dim: int, exact_sizes: bool = False) -> TensorView:
    """torch.gather (exact_sizes=False) or take_along_axis (True): output shaped like `index`."""
    name = "take_along_axis" if exact_sizes else "gather"
    _tensor(name, "arg", x)
    index = _index_tensor(name, index)
    if index.ndim != x.ndim:
        raise ValueError(f"{name}: index has {index.ndim} dimensions, the tensor has {x.ndim}")
    (dim,) = normalize_dims([dim], x.ndim, "dim")
    pick = _lookup_axis if exact_sizes else _gather_axis
    # on the gathered axis the output has the index's positions; elsewhere it follows the
    # axis rule (the index's broadcast flags alone would make later ops take the result
    # as constant along an axis where the input's rows differ)
    out_ids = [ii.clone_like() if k == dim else pick(xi, ii)
               for k, (xi, ii) in enumerate(zip(x.logical_no_reductions(), index.logical_no_reductions()))]
    out = TensorView(TensorDomain(out_ids), x.dtype)
    GatherOp([x, index], [out], dim=dim, exact_sizes=exact_sizes)
    return out


def scatter(x: TensorView, index: TensorView, src: TensorView | Scalar, dim: int) -> TensorView:
    """torch.scatter: a copy of `x` with `src` written at `index` along `dim`; a scalar
    `src` writes its value (cast to `x`'s dtype) at every index."""
    _tensor("scatter", "arg", x)
    index = _index_tensor("scatter", index)
    if isinstance(src, Scalar):
        from .factory import full

        src = full([i.user_extent for i in index.logical_no_reductions()], src, x.dtype)
    src = _tensor("scatter", "src", src)
    if not (index.ndim == src.ndim == x.ndim):
        raise ValueError(f"scatter: arg, index and src need equal ranks, got {x.ndim}, {index.ndim}, {src.ndim}")
    if src.dtype is not x.dtype:
        raise TypeError(f"scatter: src dtype {src.dtype} differs from arg dtype {x.dtype}")
    (dim,) = normalize_dims([dim], x.ndim, "dim")
    # an expanded axis of `x` is a real one of the result: the writes differ along it
    out = TensorView(TensorDomain([IterDomain(i.user_extent) if i.has_expanded_extent else i.clone_like()
                                   for i in x.logical_no_reductions()]), x.dtype)
    ScatterOp([x, index, src], [out], dim=dim)
    return out


def _float_operands(name: str, *xs: TensorView) -> None:
    for x in xs:
        if not (x.dtype.is_floating or x.dtype.is_complex):
            raise TypeError(f"{name}: operands must be floating-point, got {x.dtype}")
    dts = {x.dtype for x in xs}
    if len(dts) > 1:
        raise TypeError(f"{name}: operands must have one dtype, got {', '.join(sorted(map(str, dts)))}")


def _fresh(i: IterDomain) -> IterDomain:
    return IterDomain(1, IterType.Broadcast) if i.is_broadcast and i.expanded_extent is None else IterDomain(i.user_extent)


def matmul(a: TensorView, b: TensorView) -> TensorView:
    """torch.matmul: 1-D and batched operands, batch dims broadcast."""
    _tensor("matmul", "arg1", a)
    _tensor("matmul", "arg2", b)
    _float_operands("matmul", a, b)
    ai, bi = a.logical_no_reductions(), b.logical_no_reductions()
    if not ai or not bi:
        raise ValueError("matmul: operands must have at least one dimension")
    _check_k("matmul", ai[-1], bi[-2] if len(bi) > 1 else bi[0])
    if len(ai) == 1 and len(bi) == 1:
        out_ids: list[IterDomain] = []
    elif len(bi) == 1:
        out_ids = [_fresh(i) for i in ai[:-1]]
    elif len(ai) == 1:
        out_ids = [_fresh(i) for i in bi[:-2]] + [_fresh(bi[-1])]
    else:
        batch_a, batch_b = ai[:-2], bi[:-2]
        n = max(len(batch_a), len(batch_b))
        batch_a = [None] * (n - len(batch_a)) + list(batch_a)
        batch_b = [None] * (n - len(batch_b)) + list(batch_b)
        batch = []
        for x, y in zip(batch_a, batch_b):
            pick = x if (y is None or (x is not None and not x.is_broadcast)) else y
            batch.append(_fresh(pick))
        out_ids = batch + [_fresh(ai[-2]), _fresh(bi[-1])]
    out = TensorView(TensorDomain(out_ids), a.dtype)
    MatmulOp([a, b], [out])
    return out


def _check_k(name: str, ka: IterDomain, kb: IterDomain) -> None:
    ca, cb = ka.user_extent, kb.user_extent
    if ca.is_const and cb.is_const and ca.value != cb.value:
        raise ValueError(f"{name}: contraction extents differ ({ca.value} vs {cb.value})")


def linear(x: TensorView, weight: TensorView, bias: TensorView | None = None) -> TensorView:
    """torch.nn.functional.linear: x @ weight.T + bias."""
    _tensor("linear", "arg1", x)
    _tensor("linear", "arg2", weight)
    ops = [x, weight] + ([_tensor("linear", "bias", bias)] if bias is not None else [])
    _float_operands("linear", *ops)
    xi, wi = x.logical_no_reductions(), weight.logical_no_reductions()
    if not xi or len(wi) not in (1, 2):
        raise ValueError(f"linear: weight must be 1-D or 2-D and input at least 1-D, got {len(xi)}-D and {len(wi)}-D")
    _check_k("linear", xi[-1], wi[-1])
    out_ids = [_fresh(i) for i in xi[:-1]] + ([_fresh(wi[0])] if len(wi) == 2 else [])
    out = TensorView(TensorDomain(out_ids), result_type([t.dtype for t in ops], []))
    LinearOp(ops, [out])
    return out
