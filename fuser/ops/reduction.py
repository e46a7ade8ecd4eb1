"""Reduction builders: sum, prod, max, min, welford and the variance family."""
from __future__ import annotations

import math
from typing import Sequence

from fuser.ir import (
    BinaryOpType,
    BroadcastOp,
    DataType,
    IterDomain,
    IterType,
    ReductionOp,
    Scalar,
    ScanOp,
    TensorDomain,
    TensorView,
    UnaryOpType,
    WelfordOp,
)

from . import arith


def normalize_dims(dims: Sequence[int], ndim: int, what: str = "dims") -> list[int]:
    """`dims` made non-negative and sorted; raises IndexError naming the bad entry."""
    out = []
    for d in dims:
        if not isinstance(d, int) or isinstance(d, bool):
            raise TypeError(f"{what} must be integers, got {d!r}")
        if not -ndim <= d < max(ndim, 1):
            raise IndexError(f"{what} entry {d} is out of range for a tensor of {ndim} dimensions")
        d = d % ndim if ndim else 0
        if d in out:
            raise ValueError(f"{what} names dimension {d} twice")
        out.append(d)
    return sorted(out)


def _reduced_domain(x: TensorView, dims: Sequence[int]) -> list[IterDomain]:
    ids = []
    for pos, i in enumerate(x.logical_no_reductions()):
        if pos in dims:
            # reducing an expanded broadcast covers its expanded extent
            ids.append(IterDomain(i.user_extent, IterType.Reduction))
        else:
            ids.append(i.clone_like())
    return ids


def _init_value(op: BinaryOpType, dtype: DataType) -> Scalar:
    if op is BinaryOpType.Add:
        return Scalar(dtype, 0)
    if op is BinaryOpType.Mul:
        return Scalar(dtype, 1)
    if dtype.is_boolean:
        return Scalar(dtype, op is BinaryOpType.Min)
    if dtype.is_integral:
        bits = dtype.itemsize * 8
        return Scalar(dtype, -(2 ** (bits - 1)) if op is BinaryOpType.Max else 2 ** (bits - 1) - 1)
    return Scalar(dtype, -math.inf if op is BinaryOpType.Max else math.inf)


def _split_broadcast(x: TensorView, dims: list[int]) -> tuple[TensorView, list[int], Scalar | None]:
    """`x` with the broadcast axes among `dims` squeezed away, the remaining `dims`
    renumbered for it, and how many times each element repeats along the squeezed axes
    (the product of their expanded extents; None when every one has extent 1).

    A reduction over a broadcast axis reduces copies of one value: it is decided here, where
    reductions are built, so no scheduler ever sees a reduction over a broadcast axis."""
    ids = x.logical_no_reductions()
    bcast = [d for d in dims if d < len(ids) and ids[d].is_broadcast]  # a 0-dim tensor takes dim 0
    if not bcast:
        return x, dims, None
    from .shape import squeeze

    count: Scalar | None = None
    for d in bcast:
        if ids[d].has_expanded_extent:
            n = ids[d].expanded_extent
            count = n if count is None else arith.binary(BinaryOpType.Mul, count, n)
    rest = [d - sum(b < d for b in bcast) for d in dims if d not in bcast]
    return squeeze(x, bcast, squeeze_expanded=True), rest, count


def reduction(
    op: BinaryOpType, x: TensorView, dims: Sequence[int], keepdim: bool = False, dtype: DataType = DataType.Null
) -> TensorView:
    """Reduce `x` over `dims` with add/mul/max/min; output dtype follows torch.sum/prod/amax.
    Broadcast axes among `dims` are squeezed first: a sum over an expanded axis of extent
    n multiplies by n, a product raises to the n-th power, max and min keep the value."""
    if not isinstance(x, TensorView):
        raise TypeError(f"reductions need a tensor, got {type(x).__name__}")
    if x.dtype.is_complex and op in (BinaryOpType.Max, BinaryOpType.Min):
        raise TypeError("max/min are not defined for complex tensors")
    ndim = x.ndim
    dims = normalize_dims(dims, ndim)
    if dtype is DataType.Null:
        if op in (BinaryOpType.Add, BinaryOpType.Mul) and (x.dtype.is_integral or x.dtype.is_boolean):
            dtype = DataType.Int
        else:
            dtype = x.dtype
    if dtype is not x.dtype:
        x = arith.cast(x, dtype)
    x, rest, count = _split_broadcast(x, dims)
    acc = dtype
    if count is not None and op in (BinaryOpType.Add, BinaryOpType.Mul) and dtype.is_floating and dtype.itemsize < 4:
        # the partial result is scaled by the repeat count before it is rounded, once, to the
        # narrow type (as PyTorch's float accumulator does): rounding it first rounds twice
        acc = DataType.Float
        x = arith.cast(x, acc)
    if rest or len(dims) == 0:
        out = TensorView(TensorDomain(_reduced_domain(x, rest)), acc)
        ReductionOp([x], [out], op_type=op, init=_init_value(op, acc))
    else:
        out = x
    if count is not None and op in (BinaryOpType.Add, BinaryOpType.Mul):
        repeat = BinaryOpType.Mul if op is BinaryOpType.Add else BinaryOpType.Pow
        out = arith.binary(repeat, out, count)
        if out.dtype is not dtype:  # bool sums are Int already; narrow floats stay narrow
            out = arith.cast(out, dtype)
    return keep_dims(out, dims, ndim) if keepdim else out


def keep_dims(x: TensorView, dims: Sequence[int], ndim: int) -> TensorView:
    """Broadcast size-1 axes back where `dims` were reduced (keepdim=True)."""
    return broadcast(x, [d in dims for d in range(ndim)])


def broadcast(x: TensorView, is_broadcast_dim: Sequence[bool]) -> TensorView:
    """Insert size-1 broadcast axes where `is_broadcast_dim` is True."""
    flags = [bool(f) for f in is_broadcast_dim]
    if not isinstance(x, TensorView):
        raise TypeError(f"broadcast needs a tensor, got {type(x).__name__}")
    kept = x.logical_no_reductions()
    if flags.count(False) != len(kept):
        raise ValueError(
            f"is_broadcast_dim has {flags.count(False)} False entries but the tensor has {len(kept)} dimensions"
        )
    if not any(flags):
        return arith.set_(x)
    it = iter(kept)
    ids = [IterDomain(1, IterType.Broadcast) if f else next(it).clone_like() for f in flags]
    out = TensorView(TensorDomain(ids), x.dtype)
    BroadcastOp([x], [out], flags=flags)
    return out


def welford(x: TensorView, dims: Sequence[int]) -> tuple[TensorView, TensorView, TensorView]:
    """(mean, sum of squared deviations, count) over `dims`, as nvFuser's WelfordOp."""
    if not isinstance(x, TensorView):
        raise TypeError(f"welford needs a tensor, got {type(x).__name__}")
    if x.dtype.is_complex:
        raise TypeError("welford is not defined for complex tensors")
    dims = normalize_dims(dims, x.ndim)
    dtype = x.dtype if x.dtype.is_floating else DataType.Float
    if dtype is not x.dtype:
        x = arith.cast(x, dtype)
    x, rest, count = _split_broadcast(x, dims)
    if not rest and dims:
        # every reduced axis repeats one value: it is the mean, with no deviation; where the
        # value is not finite both are NaN, as PyTorch's Welford pass over the copies gives
        m2 = arith.binary(BinaryOpType.Sub, x, x)
        avg = arith.binary(BinaryOpType.Add, x, m2)
        extents = [i.user_extent for i in avg.logical_no_reductions()]
        from .factory import full

        return avg, m2, full(extents, count if count is not None else Scalar(DataType.Int, 1), DataType.Int)
    outs = [TensorView(TensorDomain(_reduced_domain(x, rest)), dt) for dt in (dtype, dtype, DataType.Int)]
    WelfordOp([x], outs)
    avg, m2, n = outs
    if count is not None:  # each value repeats `count` times: so do the deviations
        m2 = arith.binary(BinaryOpType.Mul, m2, count)
        n = arith.binary(BinaryOpType.Mul, n, count)
    return avg, m2, n


def var_mean(
    x: TensorView, dims: Sequence[int], correction: int = 1, keepdim: bool = False
) -> tuple[TensorView, TensorView]:
    """(variance, mean) over `dims` with Bessel-style `correction`, like torch.var_mean."""
    if isinstance(x, TensorView) and x.dtype.is_complex:
        # as torch: a real variance, the sum of the real and imaginary parts' variances
        re_var, re_mean = var_mean(arith.unary(UnaryOpType.Real, x), dims, correction, keepdim)
        im_var, im_mean = var_mean(arith.unary(UnaryOpType.Imag, x), dims, correction, keepdim)
        im_mean = arith.binary(BinaryOpType.Mul, im_mean, Scalar(DataType.ComplexDouble, 1j))
        return arith.binary(BinaryOpType.Add, re_var, im_var), arith.binary(BinaryOpType.Add, re_mean, im_mean)
    if not x.dtype.is_floating:
        raise TypeError(f"var_mean needs a floating-point tensor, got {x.dtype}")
    ndim = x.ndim
    dims = normalize_dims(dims, ndim)
    # narrow floats are reduced in float, as PyTorch does: their sum of squares overflows
    avg, var_sum, n = welford(arith.cast(x, DataType.Float) if x.dtype.itemsize < 4 else x, dims)
    denom = arith.binary(BinaryOpType.Max, arith.binary(BinaryOpType.Sub, n, Scalar(DataType.Int, correction)), Scalar(DataType.Int, 0))
    var = arith.binary(BinaryOpType.Div, var_sum, denom)
    var, avg = arith.cast(var, x.dtype), arith.cast(avg, x.dtype)
    if keepdim:
        var, avg = keep_dims(var, dims, ndim), keep_dims(avg, dims, ndim)
    return var, avg


def var(x: TensorView, dims: Sequence[int], correction: int = 1, keepdim: bool = False) -> TensorView:
    """Variance over `dims` (torch.var with `correction`)."""
    return var_mean(x, dims, correction, keepdim)[0]


def cumsum(x: TensorView, dim: int) -> TensorView:
    """Inclusive cumulative sum along `dim`; ints accumulate in int64 as in torch.cumsum."""
    if not isinstance(x, TensorView):
        raise TypeError(f"cumsum needs a tensor, got {type(x).__name__}")
    (dim,) = normalize_dims([dim], x.ndim, "dim")
    dtype = DataType.Int if (x.dtype.is_integral or x.dtype.is_boolean) else x.dtype
    if dtype is not x.dtype:
        x = arith.cast(x, dtype)
    out = TensorView(TensorDomain(arith.pointwise_domain([x])), dtype)
    ScanOp([x], [out], op_type=BinaryOpType.Add, dim=dim)
    return out
