"""Builders for work only ATen does (AtenOp): argsort, topk, embedding, flash attention
forward and backward, grouped matmul, bitcast and ndtri. Like matmul, each becomes an
expr_eval segment that the reference executor runs with PyTorch."""
from __future__ import annotations

from typing import Any, Sequence

import torch

from fuser.ir import AtenOp, DataType, IterDomain, Scalar, TensorDomain, TensorView
from fuser.ir.dtype import result_type

from .indexing import _fresh
from .reduction import normalize_dims

#: PyTorch 2.7 made flash attention's philox seed a (2,) uint64 tensor (before: an int64 scalar)
_PHILOX_UINT64 = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 7)


def _tensor(name: str, arg: str, x: Any) -> TensorView:
    if not isinstance(x, TensorView):
        raise TypeError(f"{name}: {arg} must be a tensor, got {type(x).__name__}")
    return x


def _like(ids: Sequence[IterDomain]) -> list[IterDomain]:
    return [_fresh(i) for i in ids]


def _aten(name: str, operands: Sequence[tuple[str, Any]], params: Sequence[tuple[str, Any]],
          outs: Sequence[TensorView]) -> Any:
    """Record `name` reading the non-None operands; None operands become params."""
    inputs = [v for _, v in operands if v is not None]
    arg_names = tuple(k for k, v in operands if v is not None)
    params = tuple(params) + tuple((k, None) for k, v in operands if v is None)
    AtenOp(inputs, list(outs), name=name, arg_names=arg_names, params=params)
    return outs[0] if len(outs) == 1 else tuple(outs)


def argsort(x: TensorView, dim: int, descending: bool = False, stable: bool = False) -> TensorView:
    """Indices that sort `x` along `dim` (torch.argsort)."""
    _tensor("argsort", "arg", x)
    ids = x.logical_no_reductions()
    (dim,) = normalize_dims([dim], len(ids), "dim")
    out = TensorView(TensorDomain(_like(ids)), DataType.Int)
    return _aten("argsort", [("arg", x)], [("dim", dim), ("descending", bool(descending)), ("stable", bool(stable))], [out])


def topk(x: TensorView, k: Scalar, dim: int = -1, largest: bool = True, sorted: bool = False) -> tuple[TensorView, TensorView]:  # noqa: A002
    """The `k` largest (or smallest) values along `dim` and their indices (torch.topk)."""
    _tensor("topk", "arg", x)
    if not isinstance(k, Scalar) or not k.dtype.is_integral:
        raise TypeError("topk: k must be an integer scalar")
    ids = x.logical_no_reductions()
    (dim,) = normalize_dims([dim], len(ids), "dim")
    shape = _like(ids)
    shape[dim] = IterDomain(k)
    values = TensorView(TensorDomain(shape), x.dtype)
    indices = TensorView(TensorDomain([i.clone_like() for i in shape]), DataType.Int)
    return _aten("topk", [("arg", x), ("k", k)], [("dim", dim), ("largest", bool(largest)), ("sorted", bool(sorted))],
                 [values, indices])


def embedding_fwd(x: TensorView, weight: TensorView, padding_idx: Scalar | None = None, max_norm: Scalar | None = None,
                  norm_type: Scalar | None = None, scale_grad_by_freq: Scalar | None = None,
                  sparse: Scalar | None = None) -> TensorView:
    """Rows of `weight` at the positions in `x` (torch.nn.functional.embedding)."""
    _tensor("embedding_fwd", "input", x)
    _tensor("embedding_fwd", "weight", weight)
    if not x.dtype.is_integral:
        raise TypeError(f"embedding_fwd: input must be an integer tensor, got {x.dtype}")
    w = weight.logical_no_reductions()
    if len(w) != 2:
        raise ValueError(f"embedding_fwd: weight must be 2-D, got {len(w)}-D")
    out = TensorView(TensorDomain(_like(x.logical_no_reductions()) + [_fresh(w[1])]), weight.dtype)
    operands = [("input", x), ("weight", weight), ("padding_idx", padding_idx), ("max_norm", max_norm),
                ("norm_type", norm_type), ("scale_grad_by_freq", scale_grad_by_freq), ("sparse", sparse)]
    return _aten("embedding_fwd", operands, [], [out])


def _attention_dims(name: str, q: TensorView, k: TensorView, v: TensorView) -> None:
    for arg, t in (("query", q), ("key", k), ("value", v)):
        _tensor(name, arg, t)
        if t.ndim != 4:
            raise ValueError(f"{name}: {arg} must be 4-D [batch, heads, sequence, head dim], got {t.ndim}-D")
        if not t.dtype.is_floating:
            raise TypeError(f"{name}: {arg} must be floating-point, got {t.dtype}")


def sdpfa_fwd(q: TensorView, k: TensorView, v: TensorView, dropout_p: Scalar | None = None,
              is_causal: Scalar | None = None, scale: Scalar | None = None) -> tuple[TensorView, ...]:
    """Flash attention forward: (output, log_sumexp, philox_seed, philox_offset)."""
    _attention_dims("sdpfa_fwd", q, k, v)
    qi, vi = q.logical_no_reductions(), v.logical_no_reductions()
    out = TensorView(TensorDomain(_like(qi[:3]) + [_fresh(vi[3])]), q.dtype)
    lse = TensorView(TensorDomain(_like(qi[:3])), DataType.Float)
    philox = DataType.UInt64 if _PHILOX_UINT64 else DataType.Int
    seed = TensorView(TensorDomain([IterDomain(2)] if _PHILOX_UINT64 else []), philox)
    offset = TensorView(TensorDomain([]), philox)
    operands = [("query", q), ("key", k), ("value", v), ("dropout_p", dropout_p), ("is_causal", is_causal),
                ("scale", scale)]
    return _aten("sdpfa_fwd", operands, [], [out, lse, seed, offset])


def sdpfa_bwd(grad: TensorView, q: TensorView, k: TensorView, v: TensorView, out: TensorView, lse: TensorView,
              dropout_p: Scalar | None, is_causal: Scalar | None, seed: TensorView, offset: TensorView,
              scale: Scalar | None = None) -> tuple[TensorView, TensorView, TensorView]:
    """Flash attention backward: the gradients of query, key and value."""
    _attention_dims("sdpfa_bwd", q, k, v)
    for arg, t in (("grad_output", grad), ("output", out), ("log_sumexp", lse), ("philox_seed", seed),
                   ("philox_offset", offset)):
        _tensor("sdpfa_bwd", arg, t)
    grads = [TensorView(TensorDomain(_like(t.logical_no_reductions())), t.dtype) for t in (q, k, v)]
    operands = [("grad_output", grad), ("query", q), ("key", k), ("value", v), ("output", out), ("log_sumexp", lse),
                ("dropout_p", dropout_p), ("is_causal", is_causal), ("philox_seed", seed), ("philox_offset", offset),
                ("scale", scale)]
    return _aten("sdpfa_bwd", operands, [], grads)


def grouped_mm(mat1: TensorView, mat2: TensorView, offsets: TensorView) -> TensorView:
    """Matmuls of groups of rows (or of the contraction) split at `offsets` (torch._grouped_mm):
    [M, K] x [G, K, N] -> [M, N]; [G, M, K] x [K, N] -> [M, N] (groups of columns of the
    [K, N] operand); [M, K] x [K, N] -> [G, M, N] (groups of the contraction)."""
    for arg, t in (("mat1", mat1), ("mat2", mat2), ("offsets", offsets)):
        _tensor("grouped_mm", arg, t)
    if not offsets.dtype.is_integral or offsets.ndim != 1:
        raise TypeError(f"grouped_mm: offsets must be a 1-D integer tensor, got a {offsets.ndim}-D {offsets.dtype} one")
    a, b, g = mat1.logical_no_reductions(), mat2.logical_no_reductions(), offsets.logical_no_reductions()
    if (len(a), len(b)) == (2, 3):
        ids = [_fresh(a[0]), _fresh(b[2])]
    elif (len(a), len(b)) == (3, 2):
        ids = [_fresh(a[1]), _fresh(b[1])]
    elif (len(a), len(b)) == (2, 2):
        ids = [_fresh(g[0]), _fresh(a[0]), _fresh(b[1])]
    else:
        raise ValueError(f"grouped_mm: operands must be 2-D x 3-D, 3-D x 2-D or 2-D x 2-D, got {len(a)}-D x {len(b)}-D")
    out = TensorView(TensorDomain(ids), result_type([mat1.dtype, mat2.dtype], []))
    return _aten("grouped_mm", [("mat1", mat1), ("mat2", mat2), ("offsets", offsets)], [], [out])


def bitcast(x: TensorView, dtype: DataType) -> TensorView:
    """`x`'s bits read as `dtype`, which must have the same size (Tensor.view(dtype))."""
    _tensor("bitcast", "arg", x)
    if dtype.itemsize != x.dtype.itemsize:
        raise ValueError(f"bitcast: {x.dtype} and {dtype} have different sizes ({x.dtype.itemsize} vs {dtype.itemsize} bytes)")
    out = TensorView(TensorDomain(_like(x.logical_no_reductions())), dtype)
    return _aten("bitcast", [("arg", x)], [("dtype", dtype)], [out])


def ndtri(x: TensorView) -> TensorView:
    """The inverse of the standard normal CDF (torch.special.ndtri); integers give Float."""
    _tensor("ndtri", "arg", x)
    if x.dtype.is_complex:
        raise TypeError("ndtri is not defined for complex operands")
    dtype = x.dtype if x.dtype.is_floating else DataType.Float
    out = TensorView(TensorDomain(_like(x.logical_no_reductions())), dtype)
    return _aten("ndtri", [("arg", x)], [], [out])


__all__ = ["argsort", "topk", "embedding_fwd", "sdpfa_fwd", "sdpfa_bwd", "grouped_mm", "bitcast", "ndtri"]
