"""Rewrite 1 ± tanh(z) as 2 * sigmoid(±2z), the form GELU's tanh approximation reaches.

    T2 = tanh(T1)                     T5 = T1 * 2.0
    T3 = T2 + 1.0              ->     T6 = sigmoid(T5)
                                      T3 = T6 * 2.0

1 + tanh(z) = 2 sigmoid(2z) and 1 - tanh(z) = 2 sigmoid(-2z) hold exactly in real
arithmetic. Generated code evaluates tanhf in ~27 instructions an element, sigmoid in a
handful (an exp and a division), and GELU on bf16 is bound by instruction issue, not
memory, on an H200: the rewrite takes it to copy bandwidth. Rounding differs by an ulp or
so of the compute type; z * 2 is exact (only overflows where tanh saturates: sigmoid(inf)
is 1, giving 2 = 1 + 1 as the original does).

Rewritten: `add(tanh(z), 1)`, `add(1, tanh(z))` and `sub(1, tanh(z))` with a constant
scalar 1 (floating or integer), where z, tanh(z) and the sum are tensors of one of Float,
Half and BFloat16. The last new op writes the add's (sub's) own output tensor, so its
readers and the fusion's outputs do not change. Left alone: a tanh with another reader or
that is a fusion output (keeping the one tanh is cheaper than adding a sigmoid), Double
and complex tensors (their tanh is the accurate one the user asked for), integer z, any
other constant or operation.
"""
from __future__ import annotations

from fuser.ir import (
    BinaryOp,
    BinaryOpType,
    DataType,
    Expr,
    Fusion,
    Scalar,
    TensorDomain,
    TensorView,
    UnaryOp,
    UnaryOpType,
    Val,
)
from fuser.ops.arith import pointwise_domain

#: the pass's FUSER_DISABLE name
NAME = "tanh_to_sigmoid"

#: the compute types the rewrite applies to (the generated sigmoid's float path)
_FLOATS = frozenset({DataType.Float, DataType.Half, DataType.BFloat16})


def _is_one(v: Val) -> bool:
    """A constant scalar 1 (1.0, or an integer 1): not a bool, not complex."""
    return (isinstance(v, Scalar) and v.is_const and (v.dtype.is_floating or v.dtype.is_integral)
            and v.value == 1)


def _tanh_of(v: Val) -> UnaryOp | None:
    """The tanh defining `v` when `v` is a tensor read by nothing else."""
    d = v.definition
    if not (isinstance(v, TensorView) and isinstance(d, UnaryOp) and d.op_type is UnaryOpType.Tanh):
        return None
    if v.is_fusion_output or len(v.uses) != 1:
        return None
    return d


def match(e: Expr) -> tuple[UnaryOp, float] | None:
    """(the tanh, the sign of 2z) when `e` is 1 + tanh(z), tanh(z) + 1 or 1 - tanh(z) that
    can be rewritten; None otherwise."""
    if not isinstance(e, BinaryOp) or e.op_type not in (BinaryOpType.Add, BinaryOpType.Sub):
        return None
    a, b = e.inputs
    if e.op_type is BinaryOpType.Add:
        other, sign = (b if _is_one(a) else a if _is_one(b) else None), 1.0
    else:  # 1 - tanh(z) only (tanh(z) - 1 is in no GELU form)
        other, sign = (b if _is_one(a) else None), -1.0
    t = _tanh_of(other) if other is not None else None
    if t is None:
        return None
    out, z = e.output, t.input
    if not (isinstance(out, TensorView) and isinstance(z, TensorView)):
        return None
    # one dtype throughout: the constant promoted nothing, z is no integer tanh widened
    if not (out.dtype in _FLOATS and out.dtype is t.output.dtype is z.dtype):
        return None
    if any(_scheduled(v) for v in (z, t.output, out)):  # (new tensors could not follow the splits)
        return None
    return t, sign


def _candidates(fusion: Fusion) -> list[tuple[BinaryOp, UnaryOp, float]]:
    """(the add, its tanh, the sign of 2z) of every 1 ± tanh(z) to rewrite."""
    return [(e, *m) for e in fusion.exprs() if (m := match(e)) is not None]


def applies(fusion: Fusion) -> bool:
    """Whether `fusion` has some 1 ± tanh(z) to rewrite."""
    return bool(_candidates(fusion))


def tanh_to_sigmoid(fusion: Fusion, original: dict[Val, Val] | None = None) -> int:
    """Rewrite every 1 ± tanh(z) of `fusion` as 2 * sigmoid(±2z), in place; returns how
    many. The new tensors stand for no value of the defined fusion, so `original` learns
    nothing (the add's output, still written, keeps its entry)."""
    found = _candidates(fusion)
    for e, t, sign in found:
        _rewrite(fusion, e, t, sign)
    return len(found)


def _rewrite(fusion: Fusion, e: BinaryOp, t: UnaryOp, sign: float) -> None:
    z, out = t.input, e.output
    fusion.remove_expr(e)
    fusion.remove_expr(t)
    with fusion.guard():
        # Double constants, as the frontend makes of Python floats: a Float, Half or
        # BFloat16 tensor times one keeps its dtype (codegen writes `(float)2.0`)
        scaled = _like(z, out)
        BinaryOp([z, Scalar(DataType.Double, 2.0 * sign)], [scaled], op_type=BinaryOpType.Mul)
        s = _like(z, out)
        UnaryOp([scaled], [s], op_type=UnaryOpType.Sigmoid)
        BinaryOp([s, Scalar(DataType.Double, 2.0)], [out], op_type=BinaryOpType.Mul)


def _scheduled(tv: TensorView) -> bool:
    """Whether the user gave `tv` a loop domain of its own (splits: a device mesh's shards)."""
    return tv.domain.loop != tv.domain.logical


def _like(z: TensorView, out: TensorView) -> TensorView:
    """A new tensor of `z`'s dtype over fresh axes with `z`'s extents (as an elementwise op
    on `z` would make: broadcast axes stay broadcast, expanded ones expanded), parallelised
    as `out` is, axis by axis, on `out`'s device mesh: a stream-parallel tensor between two
    others would split their stream loop in two."""
    new = TensorView(TensorDomain(pointwise_domain([z])), z.dtype)
    for mine, theirs in zip(new.logical_no_reductions(), out.logical_no_reductions()):
        mine.parallel_type = theirs.parallel_type
    if out.device_mesh is not None:
        new.device_mesh = out.device_mesh
    return new


__all__ = ["NAME", "applies", "match", "tanh_to_sigmoid"]
