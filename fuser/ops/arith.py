"""Elementwise builders: unary, binary and ternary ops, casts, and their composites."""
from __future__ import annotations

from typing import Sequence, Union

from fuser.ir import (
    BinaryOp,
    BinaryOpType,
    DataType,
    IterDomain,
    IterType,
    LoadStoreOp,
    LoadStoreOpType,
    Scalar,
    TensorDomain,
    TensorView,
    TernaryOp,
    TernaryOpType,
    UnaryOp,
    UnaryOpType,
    Val,
)
from fuser.ir.dtype import promote_types, result_type, to_complex, to_real

Operand = Union[TensorView, Scalar]

# unary ops whose integer/bool inputs compute in the default float type, as in PyTorch
_FLOAT_UNARY = frozenset(
    {
        UnaryOpType.Acos, UnaryOpType.Acosh, UnaryOpType.Asin, UnaryOpType.Asinh, UnaryOpType.Atan,
        UnaryOpType.Atanh, UnaryOpType.Cos, UnaryOpType.Cosh, UnaryOpType.Exp, UnaryOpType.Exp2,
        UnaryOpType.Expm1, UnaryOpType.Erf, UnaryOpType.Erfc, UnaryOpType.Erfinv, UnaryOpType.Erfcinv,
        UnaryOpType.Lgamma, UnaryOpType.Log, UnaryOpType.Log10, UnaryOpType.Log1p, UnaryOpType.Log2,
        UnaryOpType.Reciprocal, UnaryOpType.Rsqrt, UnaryOpType.Sigmoid, UnaryOpType.Silu, UnaryOpType.Sin,
        UnaryOpType.Sinh, UnaryOpType.Sqrt, UnaryOpType.Tan, UnaryOpType.Tanh,
    }
)
_BOOL_UNARY = frozenset(
    {
        UnaryOpType.IsFinite, UnaryOpType.IsInf, UnaryOpType.IsNan, UnaryOpType.IsNegInf,
        UnaryOpType.IsPosInf, UnaryOpType.IsReal, UnaryOpType.Signbit, UnaryOpType.LogicalNot,
    }
)
# ops PyTorch does not define for complex inputs
_REAL_ONLY_UNARY = frozenset(
    {
        UnaryOpType.Ceil, UnaryOpType.Floor, UnaryOpType.Frac, UnaryOpType.Round, UnaryOpType.Trunc,
        UnaryOpType.Erf, UnaryOpType.Erfc, UnaryOpType.Erfinv, UnaryOpType.Erfcinv, UnaryOpType.Lgamma,
        UnaryOpType.Relu, UnaryOpType.Signbit, UnaryOpType.IsNegInf, UnaryOpType.IsPosInf, UnaryOpType.Sign,
    }
)
_FLOAT_ONLY_UNARY = frozenset({UnaryOpType.Frac, UnaryOpType.Erfcinv})
# ops PyTorch defines for floating and complex inputs only (no integer or bool kernels)
_INEXACT_ONLY_UNARY = frozenset({UnaryOpType.Silu})
# ops PyTorch does not define for bool inputs (integers are fine)
_NO_BOOL_UNARY = frozenset(
    {UnaryOpType.Abs, UnaryOpType.Ceil, UnaryOpType.Floor, UnaryOpType.Round, UnaryOpType.Trunc, UnaryOpType.Relu}
)
_INT_ONLY_UNARY = frozenset({UnaryOpType.BitwiseNot})

_INT_ONLY_BINARY = frozenset(
    {
        BinaryOpType.BitwiseAnd, BinaryOpType.BitwiseOr, BinaryOpType.BitwiseXor, BinaryOpType.Lshift,
        BinaryOpType.Rshift, BinaryOpType.LogicalRshift, BinaryOpType.Gcd,
    }
)
_NO_BOOL_BINARY = frozenset({BinaryOpType.Lshift, BinaryOpType.Rshift, BinaryOpType.LogicalRshift, BinaryOpType.Gcd})
# ops PyTorch has no bool kernel for: rejected when the operands promote to bool
_NO_BOOL_RESULT_BINARY = frozenset({BinaryOpType.Mod, BinaryOpType.Remainder, BinaryOpType.Fmod, BinaryOpType.Pow})
_REAL_ONLY_BINARY = frozenset(
    {
        BinaryOpType.Mod, BinaryOpType.Remainder, BinaryOpType.Fmod, BinaryOpType.Atan2, BinaryOpType.Max,
        BinaryOpType.Min, BinaryOpType.Lt, BinaryOpType.Le, BinaryOpType.Gt, BinaryOpType.Ge,
        BinaryOpType.Nextafter,
    }
)
# ops whose integer and bool operands compute in the default float type (nvFuser's
# float_op_config); `div` is not one: integer div truncates toward zero, as in C
_FLOAT_RESULT_BINARY = frozenset({BinaryOpType.Atan2})


def _tensors(args: Sequence[Val]) -> list[TensorView]:
    return [a for a in args if isinstance(a, TensorView)]


def pointwise_domain(operands: Sequence[Val]) -> list[IterDomain]:
    """The output axes of an elementwise op: each position takes the first non-broadcast
    operand axis; all-broadcast positions stay broadcast (expanded if any operand is)."""
    tvs = _tensors(operands)
    if not tvs:
        return []
    ranks = {len(t.logical_no_reductions()) for t in tvs}
    if len(ranks) != 1:
        desc = ", ".join(f"T{t.name} has {t.ndim}" for t in tvs)
        raise ValueError(f"elementwise operands must have the same number of dimensions: {desc}")
    doms = [t.logical_no_reductions() for t in tvs]
    out: list[IterDomain] = []
    for pos in range(ranks.pop()):
        ids = [d[pos] for d in doms]
        concrete = [i for i in ids if not i.is_broadcast]
        if concrete:
            _check_static_extents(concrete, pos, tvs)
            # prefer a constant extent: it says more than a symbolic one
            ref = next((i for i in concrete if i.extent.is_const), concrete[0])
            out.append(IterDomain(ref.extent, IterType.Iteration))
        else:
            expanded = [i for i in ids if i.expanded_extent is not None]
            if expanded:
                ref = next((i for i in expanded if i.expanded_extent.is_const), expanded[0])
                out.append(IterDomain(1, IterType.Broadcast, expanded_extent=ref.expanded_extent))
            else:
                out.append(IterDomain(1, IterType.Broadcast))
    return out


def _check_static_extents(ids: Sequence[IterDomain], pos: int, tvs: Sequence[TensorView]) -> None:
    consts = {i.extent.value for i in ids if i.extent.is_const}
    if len(consts) > 1:
        desc = ", ".join(f"T{t.name}: {[str(e) for e in _shape_str(t)]}" for t in tvs)
        raise ValueError(f"operands have different extents {sorted(consts)} in dimension {pos} ({desc})")


def _shape_str(t: TensorView) -> list[str]:
    from fuser.ir.printer import scalar_str

    return [scalar_str(i.user_extent) for i in t.logical_no_reductions()]


def _new_output(operands: Sequence[Val], dtype: DataType) -> Val:
    if any(isinstance(a, TensorView) for a in operands):
        return TensorView(TensorDomain(pointwise_domain(operands)), dtype)
    return Scalar(dtype)


def _promoted(operands: Sequence[Val]) -> DataType:
    """nvFuser's common dtype (`computeTypes`): operands of one dtype keep it (two Double
    scalars stay Double); otherwise PyTorch's result type by tiers (`_tiered`)."""
    if len({a.dtype for a in operands}) == 1:
        return operands[0].dtype
    return _tiered(operands, lambda v: v.dtype)


def _tiered(operands: Sequence[Val], dtype_of) -> DataType:
    """PyTorch's result type, where tensors with dimensions outrank 0-dim tensors, which
    outrank scalars (wrapped numbers), and a lower tier counts only where its category is
    higher; each operand's type is `dtype_of(operand)`."""
    tvs = [a for a in operands if isinstance(a, TensorView)]
    scalars = [dtype_of(a) for a in operands if not isinstance(a, TensorView)]
    if not tvs:
        return result_type([], scalars)
    dim = [dtype_of(t) for t in tvs if t.logical_no_reductions()]
    zero = [dtype_of(t) for t in tvs if not t.logical_no_reductions()]
    lower = result_type(zero, scalars) if zero else (result_type([DataType.Bool], scalars) if scalars else None)
    if not dim:
        return lower
    higher = result_type(dim, [])
    return higher if lower is None else _combine_categories(higher, lower)


def _combine_categories(higher: DataType, lower: DataType) -> DataType:
    """torch's combine_categories: `lower` (a 0-dim tensor's or a number's type) only
    contributes where its category is above `higher`'s."""
    if higher.is_complex:
        return higher
    if lower.is_complex:
        return to_complex(higher) if higher.is_floating else lower
    if higher.is_floating:
        return higher
    if higher.is_boolean or lower.is_floating:
        return promote_types(higher, lower)
    return higher


def _check_operands(name: str, operands: Sequence[Val]) -> None:
    for a in operands:
        if not isinstance(a, (TensorView, Scalar)):
            raise TypeError(f"{name}: operands must be tensors or scalars, got {type(a).__name__}")
        if a.dtype is DataType.Null:
            raise TypeError(f"{name}: an operand has no dtype")


def unary_output_dtype(op: UnaryOpType, dt: DataType) -> DataType:
    """The dtype PyTorch gives `op` applied to a `dt` tensor; raises for unsupported dtypes."""
    name = op.value
    if op in _INT_ONLY_UNARY and not (dt.is_integral or dt.is_boolean):
        raise TypeError(f"{name} needs an integer or bool operand, got {dt}")
    if op in _FLOAT_ONLY_UNARY and not dt.is_floating:
        raise TypeError(f"{name} needs a floating-point operand, got {dt}")
    if op in _INEXACT_ONLY_UNARY and not (dt.is_floating or dt.is_complex):
        raise TypeError(f"{name} needs a floating-point or complex operand, got {dt}")
    if op in _REAL_ONLY_UNARY and dt.is_complex:
        raise TypeError(f"{name} is not defined for complex operands ({dt})")
    if op in _NO_BOOL_UNARY and dt.is_boolean:
        raise TypeError(f"{name} is not defined for bool operands")
    if op in _BOOL_UNARY:
        return DataType.Bool
    if op in (UnaryOpType.Real, UnaryOpType.Imag):
        if op is UnaryOpType.Imag and not dt.is_complex:
            raise TypeError(f"imag needs a complex operand, got {dt}")
        return to_real(dt)
    if op is UnaryOpType.Abs:
        return to_real(dt)
    if op in _FLOAT_UNARY and (dt.is_integral or dt.is_boolean):
        return DataType.Float
    if op is UnaryOpType.Neg and dt.is_boolean:
        raise TypeError("neg is not defined for bool operands; use logical_not")
    return dt


def unary(op: UnaryOpType, x: Operand) -> Operand:
    """`op(x)` for a tensor or a scalar."""
    _check_operands(op.value, [x])
    out = _new_output([x], unary_output_dtype(op, x.dtype))
    UnaryOp([x], [out], op_type=op)
    return out


def cast(x: Operand, dtype: DataType) -> Operand:
    """`x` converted to `dtype`; a cast to the same dtype is a plain copy (`set`)."""
    _check_operands("cast", [x])
    if dtype is DataType.Null:
        raise TypeError("cast: dtype must not be DataType.Null")
    if x.dtype is dtype:
        return set_(x) if isinstance(x, TensorView) else x
    out = _new_output([x], dtype)
    UnaryOp([x], [out], op_type=UnaryOpType.Cast)
    return out


def set_(x: TensorView, op_type: LoadStoreOpType = LoadStoreOpType.Set) -> TensorView:
    """A copy of `x` (`set`), or a forced segment boundary (`segment_set`)."""
    if not isinstance(x, TensorView):
        raise TypeError(f"set needs a tensor, got {type(x).__name__}")
    out = TensorView(TensorDomain(pointwise_domain([x])), x.dtype)
    LoadStoreOp([x], [out], op_type=op_type, cache_op="Streaming")
    return out


def binary_output_dtype(op: BinaryOpType, operands: Sequence[Val]) -> DataType:
    """The dtype PyTorch gives `op` on these operands; raises for unsupported dtypes."""
    name = op.value
    dts = [a.dtype for a in operands]
    if op in _INT_ONLY_BINARY and not all(d.is_integral or d.is_boolean for d in dts):
        raise TypeError(f"{name} needs integer or bool operands, got {', '.join(map(str, dts))}")
    if op in _NO_BOOL_BINARY and all(d.is_boolean for d in dts):
        raise TypeError(f"{name} is not defined for bool operands")
    if op is BinaryOpType.Sub and any(d.is_boolean for d in dts):
        raise TypeError("sub is not defined for bool operands; use logical_xor or bitwise_xor")
    if op in _REAL_ONLY_BINARY and any(d.is_complex for d in dts):
        raise TypeError(f"{name} is not defined for complex operands")
    promoted = _promoted(operands)
    if op in _NO_BOOL_RESULT_BINARY and promoted.is_boolean:
        raise TypeError(f"{name} is not defined for bool operands")
    if op is BinaryOpType.Div and promoted.is_boolean:
        raise TypeError("div is not defined for bool operands; cast them, or use truediv")
    if op is BinaryOpType.Nextafter and not promoted.is_floating:
        raise TypeError(f"nextafter needs operands that promote to a floating-point type, got {', '.join(map(str, dts))}")
    if op.is_comparison or op.is_logical:
        return DataType.Bool
    if op in _FLOAT_RESULT_BINARY and (promoted.is_integral or promoted.is_boolean):
        return DataType.Float
    return promoted


def _align_ranks(operands: Sequence[Operand]) -> list[Operand]:
    """Tensors of lower rank get broadcast axes in front, as PyTorch (and nvFuser) broadcast."""
    tvs = _tensors(operands)
    if not tvs:
        return list(operands)
    n = max(len(t.logical_no_reductions()) for t in tvs)
    out = []
    for x in operands:
        if isinstance(x, TensorView) and len(x.logical_no_reductions()) < n:
            from .reduction import broadcast

            r = len(x.logical_no_reductions())
            x = broadcast(x, [True] * (n - r) + [False] * r)
        out.append(x)
    return out


def binary(op: BinaryOpType, a: Operand, b: Operand) -> Operand:
    """`op(a, b)` with PyTorch's type promotion and broadcasting of size-1 axes."""
    _check_operands(op.value, [a, b])
    dtype = binary_output_dtype(op, [a, b])  # before broadcasting: 0-dim tensors promote as such
    a, b = _align_ranks([a, b])
    out = _new_output([a, b], dtype)
    BinaryOp([a, b], [out], op_type=op)
    return out


def truediv(a: Operand, b: Operand) -> Operand:
    """a / b as Python's `/`: integer and bool operands divide in the default float type
    (nvFuser's truediv); floating and complex ones as `div`."""
    _check_operands("truediv", [a, b])
    dtype = _promoted([a, b])
    if dtype.is_integral or dtype.is_boolean:
        dtype = DataType.Float
    a, b = _align_ranks([a, b])
    out = _new_output([a, b], dtype)
    BinaryOp([a, b], [out], op_type=BinaryOpType.Div)
    return out


def ternary(op: TernaryOpType, a: Operand, b: Operand, c: Operand) -> Operand:
    """where(cond, x, y), lerp(start, end, weight), clamp(x, lo, hi), threshold(x, th, value)."""
    operands = [a, b, c]
    _check_operands(op.value, operands)
    if op is TernaryOpType.Where:
        if not a.dtype.is_boolean:
            raise TypeError(f"where needs a bool condition, got {a.dtype}")
        # nvFuser promotes the two branches only: where(cond, 3.0, 5.0) is Double, also
        # for a tensor condition (PyTorch would give its default float type)
        dtype = _promoted([b, c])
    elif op is TernaryOpType.Lerp:
        dtype = _promoted(operands)
        tensor_dtypes = {x.dtype for x in _tensors(operands)}
        if not all(d.is_floating or d.is_complex for d in tensor_dtypes | {dtype}):
            raise TypeError(f"lerp needs floating-point operands, got {', '.join(str(x.dtype) for x in operands)}")
        if len(tensor_dtypes) > 1:
            raise TypeError(f"lerp needs tensors of one dtype, got {', '.join(sorted(map(str, tensor_dtypes)))}")
    elif op is TernaryOpType.Clamp:
        if any(x.dtype.is_complex for x in operands):
            raise TypeError("clamp is not defined for complex operands")
        dtype = _promoted(operands)
        if dtype.is_boolean:
            raise TypeError("clamp is not defined for bool operands")
    else:  # threshold keeps the input's type, as torch.threshold does
        if a.dtype.is_complex or a.dtype.is_boolean:
            raise TypeError(f"threshold is not defined for {a.dtype} operands")
        dtype = a.dtype
    operands = _align_ranks(operands)  # after promotion: 0-dim tensors promote as such
    out = _new_output(operands, dtype)
    TernaryOp(operands, [out], op_type=op)
    return out


def where(cond: Operand, x: Operand, y: Operand) -> Operand:
    """torch.where: `cond` must be bool, as PyTorch requires."""
    return ternary(TernaryOpType.Where, cond, x, y)


# --- composites ----------------------------------------------------------------------


def _scaled(name: str, a: Operand, b: Operand, alpha: Operand) -> Operand:
    """alpha * b in the type of the result (a, b promoted), checking alpha as torch.add does."""
    _check_operands(name, [a, b, alpha])
    dtype = _promoted([a, b])
    if alpha.dtype.is_boolean and not dtype.is_boolean:
        raise TypeError(f"{name}: a bool alpha needs bool operands, the result is {dtype}")
    if alpha.dtype.is_floating and (dtype.is_integral or dtype.is_boolean):
        raise TypeError(f"{name}: alpha must not be a floating-point number for integral operands ({dtype})")
    if alpha.dtype.is_complex and not dtype.is_complex:
        raise TypeError(f"{name}: alpha must not be a complex number for non-complex operands ({dtype})")
    scaled = binary(BinaryOpType.Mul, b, alpha)
    return cast(scaled, dtype) if scaled.dtype is not dtype else scaled


def add_alpha(a: Operand, b: Operand, alpha: Operand) -> Operand:
    """a + alpha * b (torch.add's alpha)."""
    return binary(BinaryOpType.Add, a, _scaled("add_alpha", a, b, alpha))


def sub_alpha(a: Operand, b: Operand, alpha: Operand) -> Operand:
    """a - alpha * b (torch.sub's alpha)."""
    if any(x.dtype.is_boolean for x in (a, b)):
        raise TypeError("sub_alpha is not defined for bool operands")
    return binary(BinaryOpType.Sub, a, _scaled("sub_alpha", a, b, alpha))


def addcmul(x: Operand, a: Operand, b: Operand, value: Operand) -> Operand:
    """x + value * a * b (torch.addcmul)."""
    return binary(BinaryOpType.Add, x, binary(BinaryOpType.Mul, value, binary(BinaryOpType.Mul, a, b)))


def common_dtype(*operands: Val) -> DataType:
    """The type PyTorch compares (or promotes) these IR operands in: narrow floats first
    widen to float, then the tiers of `_tiered`. Comparisons, logical ops and threshold run
    in it (generated code and the reference executor alike)."""
    from fuser.ir.dtype import compute_dtype

    return _tiered(operands, lambda v: compute_dtype(v.dtype))
