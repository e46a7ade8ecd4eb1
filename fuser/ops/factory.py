"""Factory builders: full, iota, random tensors, triu's masks."""
from __future__ import annotations

from typing import Sequence, Union

from fuser.ir import (
    BinaryOpType,
    DataType,
    FullOp,
    IotaOp,
    IterDomain,
    IterType,
    RNGOp,
    RNGOpType,
    Scalar,
    TensorDomain,
    TensorView,
)

from . import arith
from .reduction import broadcast

Extent = Union[Scalar, int]


def _shape_ids(shape: Sequence[Extent]) -> tuple[list[IterDomain], list[Scalar]]:
    ids, extents = [], []
    for k, s in enumerate(shape):
        s = s if isinstance(s, Scalar) else Scalar(DataType.Int, int(s))
        if not s.dtype.is_integral:
            raise TypeError(f"shape entry {k} must be an integer, got {s.dtype}")
        if s.is_const and s.value < 0:
            raise ValueError(f"shape entry {k} is {s.value}; extents must be >= 0")
        extents.append(s)
        ids.append(IterDomain(1, IterType.Broadcast) if s.is_const and s.value == 1 else IterDomain(s))
    return ids, extents


def full(shape: Sequence[Extent], fill_value: Scalar, dtype: DataType) -> TensorView:
    """A tensor of `shape` filled with `fill_value` cast to `dtype`."""
    if dtype is DataType.Null:
        raise TypeError("full: dtype must not be DataType.Null")
    ids, extents = _shape_ids(shape)
    if fill_value.dtype is not dtype:
        fill_value = arith.cast(fill_value, dtype)
    out = TensorView(TensorDomain(ids), dtype)
    FullOp([*extents, fill_value], [out])
    return out


def iota(length: Scalar, start: Scalar, step: Scalar, dtype: DataType = DataType.Int) -> TensorView:
    """[start, start + step, ..., start + (length - 1) * step] as `dtype`."""
    if not (dtype.is_integral or dtype.is_floating):
        raise TypeError(f"iota: dtype must be an integer or floating type, got {dtype}")
    if not length.dtype.is_integral:
        raise TypeError(f"iota: length must be an integer, got {length.dtype}")
    start, step = (v if v.dtype is dtype else arith.cast(v, dtype) for v in (start, step))
    out = TensorView(TensorDomain([IterDomain(length)]), dtype)
    IotaOp([length, start, step], [out])
    return out


def rng(
    rng_type: RNGOpType,
    p1: Scalar,
    p2: Scalar,
    shape: Sequence[Extent],
    seed: Scalar | None = None,
    offset: Scalar | None = None,
    dtype: DataType = DataType.Float,
) -> TensorView:
    """uniform(p1=low, p2=high) or normal(p1=mean, p2=std) random numbers of `shape`."""
    if not dtype.is_floating:
        raise TypeError(f"{rng_type.value}: dtype must be a floating type, got {dtype}")
    if (seed is None) != (offset is None):
        raise ValueError(f"{rng_type.value}: rng_seed and rng_offset must be given together")
    ids, extents = _shape_ids(shape)
    out = TensorView(TensorDomain(ids), dtype)
    extra = [seed, offset] if seed is not None else []
    RNGOp([*extents, p1, p2, *extra], [out], rng_type=rng_type, has_seed=seed is not None)
    return out


def rand_like(x: TensorView, seed: Scalar | None = None, offset: Scalar | None = None) -> TensorView:
    shape = [i.user_extent for i in x.logical_no_reductions()]
    return rng(RNGOpType.Uniform, Scalar(DataType.Double, 0.0), Scalar(DataType.Double, 1.0), shape, seed, offset, x.dtype)


def randn_like(x: TensorView, seed: Scalar | None = None, offset: Scalar | None = None) -> TensorView:
    shape = [i.user_extent for i in x.logical_no_reductions()]
    return rng(RNGOpType.Normal, Scalar(DataType.Double, 0.0), Scalar(DataType.Double, 1.0), shape, seed, offset, x.dtype)


def triu(x: TensorView, diagonal: Scalar | int = 0) -> TensorView:
    """Zero the elements below the `diagonal`-th diagonal of the last two dims (torch.triu)."""
    ids = x.logical_no_reductions()
    if len(ids) < 2:
        raise ValueError(f"triu needs a tensor of at least 2 dimensions, got {len(ids)}")
    rows_n, cols_n = ids[-2].user_extent, ids[-1].user_extent
    zero, one = Scalar(DataType.Int, 0), Scalar(DataType.Int, 1)
    rows = broadcast(iota(rows_n, zero, one), [False, True])
    cols = broadcast(iota(cols_n, Scalar(DataType.Int, 0), Scalar(DataType.Int, 1)), [True, False])
    diag = diagonal if isinstance(diagonal, Scalar) else Scalar(DataType.Int, diagonal)
    mask = arith.binary(BinaryOpType.Ge, arith.binary(BinaryOpType.Sub, cols, rows), diag)
    if len(ids) > 2:
        mask = broadcast(mask, [True] * (len(ids) - 2) + [False, False])
    return arith.where(mask, x, Scalar(x.dtype, 0))
