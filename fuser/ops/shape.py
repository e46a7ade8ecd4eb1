"""Shape builders: expand, squeeze, broadcast_in_dim, reshape, permute, slice, pad, cat."""
from __future__ import annotations

import math
from typing import Sequence, Union

from fuser.ir import (
    BinaryOpType,
    CatOp,
    DataType,
    ExpandOp,
    IterDomain,
    IterType,
    LoadStoreOp,
    LoadStoreOpType,
    PadOp,
    ReshapeOp,
    Scalar,
    SliceOp,
    SqueezeOp,
    TensorDomain,
    TensorView,
)
from fuser.ir import extent as ext
from fuser.ir.domain import merge, resize, split

from . import arith
from .reduction import broadcast, normalize_dims

Extent = Union[Scalar, int]


def _scalar(x: Extent) -> Scalar:
    return x if isinstance(x, Scalar) else Scalar(DataType.Int, int(x))


def _const(x: Extent) -> int | None:
    if isinstance(x, Scalar):
        return x.value if x.is_const else None
    return int(x)


def _require_tensor(name: str, x: object) -> TensorView:
    if not isinstance(x, TensorView):
        raise TypeError(f"{name} needs a tensor, got {type(x).__name__}")
    return x


def expand(x: TensorView, shape: Sequence[Extent]) -> TensorView:
    """Give broadcast axes the extents in `shape` without copying; -1 keeps an axis."""
    _require_tensor("expand", x)
    ids = x.logical_no_reductions()
    if len(shape) != len(ids):
        raise ValueError(f"expand: shape has {len(shape)} entries for a tensor of {len(ids)} dimensions")
    out_ids, extents, changed = [], [], False
    for pos, (i, s) in enumerate(zip(ids, shape)):
        c = _const(s)
        if c == -1:
            out_ids.append(i.clone_like())
            extents.append(i.user_extent)
        elif i.is_broadcast:
            if c == 1 and i.expanded_extent is None:
                out_ids.append(i.clone_like())
            else:
                out_ids.append(IterDomain(1, IterType.Broadcast, expanded_extent=_scalar(s)))
                changed = True
            extents.append(_scalar(s))
        else:
            ic = _const(i.extent)
            if c is not None and ic is not None and c != ic:
                raise ValueError(f"expand: dimension {pos} has extent {ic} and cannot expand to {c}")
            if c is not None and c < 0:
                raise ValueError(f"expand: shape entry {pos} is {c}; extents must be >= 0 or -1")
            # a constant target documents the extent; a symbolic one keeps the input's
            out_ids.append(IterDomain(s if c is not None else i.extent, IterType.Iteration))
            extents.append(_scalar(s))
    if not changed:
        return arith.set_(x)
    out = TensorView(TensorDomain(out_ids), x.dtype)
    ExpandOp([x, *extents], [out])
    return out


def broadcast_in_dim(x: TensorView, shape: Sequence[Extent], broadcast_dims: Sequence[int]) -> TensorView:
    """Place input dim i at output dim broadcast_dims[i]; other output dims are new
    broadcasts; size-1 input dims mapped to larger extents become expanded broadcasts."""
    _require_tensor("broadcast_in_dim", x)
    ids = x.logical_no_reductions()
    bdims = list(broadcast_dims)
    if len(bdims) != len(ids):
        raise ValueError(
            f"broadcast_in_dim: broadcast_dims has {len(bdims)} entries for a tensor of {len(ids)} dimensions"
        )
    if len(shape) < len(ids):
        raise ValueError(f"broadcast_in_dim: shape has {len(shape)} entries, fewer than the {len(ids)} input dims")
    for d in bdims:
        if not isinstance(d, int) or not 0 <= d < len(shape):
            raise IndexError(f"broadcast_in_dim: broadcast_dims entry {d!r} is out of range for an output of {len(shape)} dims")
    if sorted(set(bdims)) != bdims:
        raise ValueError(f"broadcast_in_dim: broadcast_dims {bdims} must be strictly increasing")
    for i, d in zip(ids, bdims):
        c, ic = _const(shape[d]), _const(i.extent)
        if not i.is_broadcast and c is not None and ic is not None and c != ic and c != -1:
            raise ValueError(
                f"broadcast_in_dim: input dimension {bdims.index(d)} has extent {ic} but shape[{d}] is {c}"
            )
    y = broadcast(x, [d not in bdims for d in range(len(shape))]) if len(shape) > len(ids) else x
    return expand(y, shape)


def squeeze(x: TensorView, dims: Sequence[int], squeeze_expanded: bool = False) -> TensorView:
    """Remove size-1 axes `dims`; an expanded axis only with squeeze_expanded=True."""
    _require_tensor("squeeze", x)
    ids = x.logical_no_reductions()
    dims = normalize_dims(dims, len(ids))
    for d in dims:
        i = ids[d]
        if i.expanded_extent is not None and not squeeze_expanded:
            raise ValueError(
                f"squeeze: dimension {d} is an expanded broadcast; pass squeeze_expanded=True to squeeze it"
            )
        c = _const(i.extent)
        if not i.is_broadcast and c is not None and c != 1:
            raise ValueError(f"squeeze: dimension {d} has extent {c}; only size-1 dimensions can be squeezed")
    flags = [d in dims for d in range(len(ids))]
    out = TensorView(TensorDomain([i.clone_like() for d, i in enumerate(ids) if not flags[d]]), x.dtype)
    SqueezeOp([x], [out], flags=flags)
    return out


def permute(x: TensorView, dims: Sequence[int]) -> TensorView:
    """Reorder axes: output dim k is input dim dims[k] (root in input order, logical permuted)."""
    _require_tensor("permute", x)
    n = x.ndim
    if len(dims) != n:
        raise ValueError(f"permute: dims has {len(dims)} entries for a tensor of {n} dimensions")
    norm = [d % n if isinstance(d, int) and -n <= d < n else None for d in dims]
    if None in norm or sorted(norm) != list(range(n)):
        raise ValueError(f"permute: dims {list(dims)} is not a permutation of 0..{n - 1}")
    root = [i.clone_like() for i in x.logical_no_reductions()]
    if norm == list(range(n)):
        return arith.set_(x)
    out = TensorView(TensorDomain([root[d] for d in norm], root=root), x.dtype)
    LoadStoreOp([x], [out], op_type=LoadStoreOpType.Set, cache_op="Streaming")
    return out


def stride_order(x: TensorView, order: Sequence[int]) -> TensorView:
    """A copy of `x` laid out so that logical dim i has memory rank order[i] (highest outermost)."""
    _require_tensor("stride_order", x)
    n = x.ndim
    if sorted(order) != list(range(n)):
        raise ValueError(f"stride_order: {list(order)} is not a permutation of 0..{n - 1}")
    ids = [i.clone_like() for i in x.logical_no_reductions()]
    alloc = [ids[d] for d in sorted(range(n), key=lambda d: -order[d])]
    out = TensorView(TensorDomain(ids, allocation=alloc), x.dtype)
    LoadStoreOp([x], [out], op_type=LoadStoreOpType.Set, cache_op="Streaming")
    return out


def reshape(x: TensorView, new_shape: Sequence[Extent]) -> TensorView:
    """View `x` with `new_shape` (one -1 allowed). Static shapes become root→logical
    Split/Merge transforms; symbolic ones get fresh logical axes sized by `new_shape`."""
    _require_tensor("reshape", x)
    in_ids = x.logical_no_reductions()
    shape = list(new_shape)
    minus = [k for k, s in enumerate(shape) if _const(s) == -1]
    if len(minus) > 1:
        raise ValueError(f"reshape: new_shape has more than one -1 entry: {_fmt(shape)}")
    for k, s in enumerate(shape):
        c = _const(s)
        if c is not None and c < -1:
            raise ValueError(f"reshape: new_shape entry {k} is {c}")
    in_static = [_const(i.user_extent) for i in in_ids]
    all_static = None not in in_static and all(_const(s) is not None for s in shape)
    if all_static:
        numel = math.prod(in_static)
        known = math.prod(_const(s) for k, s in enumerate(shape) if k not in minus)
        if minus:
            if known == 0 or numel % known:
                raise ValueError(f"reshape: cannot infer -1 in {_fmt(shape)} for {numel} elements")
            shape[minus[0]] = numel // known
        elif known != numel:
            raise ValueError(f"reshape: new_shape {_fmt(shape)} has {known} elements, the tensor has {numel}")
        sizes = [_const(s) for s in shape]
        if sizes == in_static and not any(i.expanded_extent is not None for i in in_ids):
            return arith.set_(x)
        return _static_reshape(x, in_ids, sizes)
    if minus:
        numel = Scalar(DataType.Int, 1)
        for i in in_ids:
            numel = ext.mul(numel, i.user_extent)
        known = Scalar(DataType.Int, 1)
        for k, s in enumerate(shape):
            if k not in minus:
                known = ext.mul(known, s)
        shape[minus[0]] = ext.div(numel, known)
    root = [i.clone_like() for i in in_ids]
    logical = [
        IterDomain(1, IterType.Broadcast) if _const(s) == 1 else IterDomain(_scalar(s), IterType.Iteration, is_rfactor_product=True)
        for s in shape
    ]
    out = TensorView(TensorDomain(logical, root=root), x.dtype)
    ReshapeOp([x, *[s for s in shape if isinstance(s, Scalar)]], [out])
    return out


def _fmt(shape: Sequence[Extent]) -> str:
    from fuser.ir.printer import scalar_str

    return "[" + ", ".join(scalar_str(s) if isinstance(s, Scalar) else str(s) for s in shape) + "]"


def _static_reshape(x: TensorView, in_ids: list[IterDomain], sizes: list[int]) -> TensorView:
    """Group the non-size-1 input and output dims into runs of equal element count, merge
    each run's input axes and split the result into its output axes (nvFuser's view
    analysis). Size-1 input axes are dropped; size-1 output axes are new broadcasts."""
    root = [
        i.clone_like() if i.expanded_extent is None else IterDomain(i.expanded_extent, IterType.Iteration)
        for i in in_ids
    ]
    in_sizes = [_const(i.user_extent) for i in in_ids]
    if 0 in in_sizes:  # no element to map: every output axis is new
        logical = [_new_axis(s) for s in sizes]
    else:
        src = [r for r, n in zip(root, in_sizes) if n != 1]
        src_sizes = [n for n in in_sizes if n != 1]
        dst_sizes = [s for s in sizes if s != 1]
        mapped: list[IterDomain] = []
        a = b = 0
        while b < len(dst_sizes):
            run_in, run_out = [a], [b]
            pin, pout = src_sizes[a], dst_sizes[b]
            while pin != pout:
                if pin < pout:
                    a += 1
                    run_in.append(a)
                    pin *= src_sizes[a]
                else:
                    b += 1
                    run_out.append(b)
                    pout *= dst_sizes[b]
            a, b = a + 1, b + 1
            mapped.extend(_split_merge([src[k] for k in run_in], [dst_sizes[k] for k in run_out]))
        it = iter(mapped)
        logical = [IterDomain(1, IterType.Broadcast) if s == 1 else next(it) for s in sizes]
    out = TensorView(TensorDomain(logical, root=root), x.dtype)
    ReshapeOp([x], [out])
    return out


def _new_axis(size: int) -> IterDomain:
    if size == 1:
        return IterDomain(1, IterType.Broadcast)
    return IterDomain(size, IterType.Iteration, is_rfactor_product=True)


def _split_merge(ids: list[IterDomain], sizes: list[int]) -> list[IterDomain]:
    """Merge `ids` into one axis, then split it outer-first into axes of `sizes`."""
    if len(ids) == 1 and len(sizes) == 1:
        return [ids[0]]
    cur = ids[0]
    for i in ids[1:]:
        cur = merge(cur, i)
    outs = []
    for s in sizes[:-1]:
        outer, cur = split(cur, s, inner_split=False)
        outs.append(outer)
    outs.append(cur)
    return outs


def _normalize_index(idx: Extent, extent: Scalar, manual: bool) -> Scalar:
    """PyTorch's slice bound: negative counts from the end, then clamped to [0, extent]."""
    if manual:
        return _scalar(idx)
    c, e = _const(idx), _const(extent)
    if c is not None and e is not None:
        v = c + e if c < 0 else c
        return Scalar(DataType.Int, min(max(v, 0), e))
    if c == 0:
        return Scalar(DataType.Int, 0)  # extents are never negative
    if c is not None and c > 0:
        return ext.minimum(c, extent)
    if c is not None:
        return ext.maximum(ext.add(extent, c), 0)
    # a computed bound (e.g. from fd.ops.size): nvFuser's normalisation, evaluated per call:
    # where(idx < 0, idx + extent, idx), clamped to [0, extent]
    idx = _scalar(idx)
    wrapped = arith.where(arith.binary(BinaryOpType.Lt, idx, _scalar(0)), ext.add(idx, extent), idx)
    return ext.minimum(ext.maximum(wrapped, 0), extent)


def slice_(
    x: TensorView,
    start_indices: Sequence[Extent],
    end_indices: Sequence[Extent],
    strides: Sequence[Extent] | None = None,
    manual_normalization: bool = False,
) -> TensorView:
    """x[start:end:stride] on every axis; bounds normalised as Python slices unless manual."""
    _require_tensor("slice", x)
    ids = x.logical_no_reductions()
    n = len(ids)
    strides = list(strides) if strides is not None else [1] * n
    for name, seq in (("start_indices", start_indices), ("end_indices", end_indices), ("strides", strides)):
        if len(seq) != n:
            raise ValueError(f"slice: {name} has {len(seq)} entries for a tensor of {n} dimensions")
    root = [i.clone_like() for i in ids]
    logical, ranges = [], []
    for k, (i, s, e, st) in enumerate(zip(root, start_indices, end_indices, strides)):
        stc = _const(st)
        if stc is None or stc < 1:
            raise ValueError(f"slice: stride {k} must be a positive constant, got {st!r}")
        start = _normalize_index(s, i.user_extent, manual_normalization)
        stop = _normalize_index(e, i.user_extent, manual_normalization)
        stop = ext.maximum(stop, start)
        ranges.append((start, stop, _scalar(st)))
        length = ext.sub(stop, start)
        if stc == 1 and _const(start) == 0 and _const(stop) is not None and _const(stop) == _const(i.user_extent):
            logical.append(i)
        elif stc == 1:
            if i.is_broadcast:
                logical.append(IterDomain(length, IterType.Iteration, is_rfactor_product=True))
            else:
                logical.append(resize(i, ext.sub(0, start), ext.sub(stop, i.extent), length))
        else:
            logical.append(IterDomain(ext.ceil_div(length, stc), IterType.Iteration, is_rfactor_product=True))
    out = TensorView(TensorDomain(logical, root=root), x.dtype)
    scalars = [v for r in ranges for v in r]
    SliceOp([x, *scalars], [out], ranges=ranges)
    return out


def pad(x: TensorView, pad_widths: Sequence[Extent], value: Scalar | None = None) -> TensorView:
    """Pad with `value` (default 0): pad_widths = [left_last, right_last, left_prev, ...]
    as in torch.nn.functional.pad; negative widths crop."""
    _require_tensor("pad", x)
    ids = x.logical_no_reductions()
    n = len(ids)
    if len(pad_widths) % 2 or len(pad_widths) > 2 * n:
        raise ValueError(f"pad: pad_widths needs an even number of entries, at most {2 * n}; got {len(pad_widths)}")
    if value is None:
        value = Scalar(x.dtype, 0)
    elif not isinstance(value, Scalar):
        raise TypeError(f"pad: value must be a scalar, got {type(value).__name__}")
    npad = len(pad_widths) // 2
    pairs: list[tuple[Scalar, Scalar]] = [(_scalar(0), _scalar(0)) for _ in range(n)]
    for k in range(npad):
        pairs[n - 1 - k] = (_scalar(pad_widths[2 * k]), _scalar(pad_widths[2 * k + 1]))
    root = [i.clone_like() for i in ids]
    logical = []
    for i, (left, right) in zip(root, pairs):
        if _const(left) == 0 and _const(right) == 0:
            logical.append(i)
            continue
        new_extent = ext.add(ext.add(i.user_extent, left), right)
        c = _const(new_extent)
        if c is not None and c < 0:
            raise ValueError(f"pad: the padded extent would be {c}")
        logical.append(resize(i, left, right, new_extent))
    out = TensorView(TensorDomain(logical, root=root), x.dtype)
    PadOp([x, value, *[v for p in pairs for v in p]], [out], pad_widths=pairs)
    return out


def cat(tensors: Sequence[TensorView], dim: int = 0, manual_padding: bool = False) -> TensorView:
    """Concatenate along `dim`; other extents must agree; dtypes promote as torch.cat.
    `manual_padding`: the tensors are pads already placed at their offsets (see
    `_cat_padded`)."""
    if not tensors:
        raise ValueError("cat needs at least one tensor")
    for k, t in enumerate(tensors):
        _require_tensor(f"cat (tensor {k})", t)
    n = tensors[0].ndim
    for k, t in enumerate(tensors):
        if t.ndim != n:
            raise ValueError(f"cat: tensor {k} has {t.ndim} dimensions, tensor 0 has {n}")
    if n == 0:
        raise ValueError("cat: zero-dimensional tensors cannot be concatenated")
    (dim,) = normalize_dims([dim], n, "dim")
    if manual_padding:
        return _cat_padded(tensors, dim)
    from fuser.ir.dtype import result_type

    dtype = result_type([t.dtype for t in tensors], [])
    tensors = [arith.cast(t, dtype) if t.dtype is not dtype else t for t in tensors]
    # inputs empty along `dim` by their static extent add nothing (nvFuser drops them too):
    # a cat left with one input is a copy of it, which keeps its axes mapped to the output's
    nonempty = [t for t in tensors if _const(t.logical_no_reductions()[dim].user_extent) != 0]
    if len(nonempty) == 1:
        return arith.set_(nonempty[0])
    if nonempty:
        tensors = nonempty
    ref = tensors[0].logical_no_reductions()
    ids = []
    for pos in range(n):
        if pos == dim:
            total: Extent = 0
            for t in tensors:
                total = ext.add(total, t.logical_no_reductions()[pos].user_extent)
            ids.append(IterDomain(total, IterType.Iteration, is_rfactor_product=True))
        else:
            others = [t.logical_no_reductions()[pos] for t in tensors]
            consts = {_const(i.user_extent) for i in others} - {None}
            if len(consts) > 1:
                raise ValueError(f"cat: tensors have different extents {sorted(consts)} in dimension {pos}")
            concrete = [i for i in others if not i.is_broadcast]
            ids.append(concrete[0].clone_like() if concrete else ref[pos].clone_like())
    out = TensorView(TensorDomain(ids), dtype)
    CatOp(list(tensors), [out], dim=dim)
    return out


def _cat_padded(tensors: Sequence[TensorView], dim: int) -> TensorView:
    """nvFuser's cat with manual padding: every tensor is a pad's result of the output's
    shape, its data at [left, left + extent) along `dim`; each position takes the first
    tensor whose data holds it (the last tensor where none does). Pads that place their
    inputs side by side from 0 are a plain cat of those inputs."""
    pads: list[PadOp] = []
    for k, t in enumerate(tensors):
        d = t.definition
        if not isinstance(d, PadOp):
            raise ValueError(f"cat: manual_padding needs every tensor to be a pad's result; tensors[{k}] is not")
        if t.dtype is not tensors[0].dtype:
            raise TypeError(f"cat: manual_padding needs one dtype; tensors[{k}] is {t.dtype}, "
                            f"tensors[0] {tensors[0].dtype}")
        pads.append(d)
    if len(tensors) == 1:
        return arith.set_(tensors[0])
    srcs = [p.inputs[0] for p in pads]
    offset = 0
    side_by_side = True
    for p, x in zip(pads, srcs):
        left, right = (_const(w) for w in p.pad_widths[dim])
        others = [_const(w) for d, pair in enumerate(p.pad_widths) if d != dim for w in pair]
        if left != offset or right is None or any(w != 0 for w in others):
            side_by_side = False
            break
        size = _const(x.logical_no_reductions()[dim].user_extent)
        if size is None:
            side_by_side = False
            break
        offset += size
    total = _const(tensors[0].logical_no_reductions()[dim].user_extent)
    if side_by_side and offset == total:
        return cat(srcs, dim)
    from .factory import iota

    n = tensors[0].ndim
    length = tensors[0].logical_no_reductions()[dim].user_extent
    pos = iota(length, Scalar(DataType.Int, 0), Scalar(DataType.Int, 1))
    pos = broadcast(pos, [d != dim for d in range(n)])
    out = tensors[-1]
    for p, x, t in zip(reversed(pads[:-1]), reversed(srcs[:-1]), reversed(tensors[:-1])):
        left = p.pad_widths[dim][0]
        end = arith.binary(BinaryOpType.Add, left, x.logical_no_reductions()[dim].user_extent)
        inside = arith.binary(BinaryOpType.LogicalAnd, arith.binary(BinaryOpType.Ge, pos, left),
                              arith.binary(BinaryOpType.Lt, pos, end))
        out = arith.where(inside, t, out)
    return out
