"""C++ expressions for elementwise Fusion IR ops, over the device runtime `fuser_runtime.cuh`.

Every emitter takes C++ expressions whose type is `ctype` of their dtype and returns an
expression of `ctype(out)`. The semantics are PyTorch's as `fuser.runtime.reference`
defines them:

* half, bfloat16 and fp8 operands are widened to float, the op runs in float and the
  result is rounded once to the output type (`compute_dtype`);
* operands of another dtype than the op computes in (the IR may or may not have cast them)
  are converted inside the expression: arithmetic runs in `compute_dtype(out)`, comparisons
  and logical ops in the promoted type of the operands (`common`, below), `nextafter` in its
  output type itself;
* conversions follow PyTorch's casts: narrow floats go through float (double -> float ->
  half), complex -> real keeps the real part, anything -> bool is `!= 0`.

Comparisons (and `threshold`) need the operands' promoted type, which depends on whether an
operand is a tensor or a scalar (a "wrapped number": ``float_tensor < 0.1`` compares in
float). The dtypes alone cannot say; pass ``common=common_dtype(lhs_val, rhs_val)`` from the
IR. Without it, comparisons promote as two tensors (`promote_types`) and `threshold` treats
its threshold as a number (as `torch.threshold`'s Scalar argument).

A combination the runtime has no implementation for raises `NotImplementedError` naming the
op and the dtypes.
"""
from __future__ import annotations

import functools
import importlib.resources
import math
import re
import struct
from typing import Any, Sequence

from fuser.ir.dtype import DataType, promote_types, result_type, to_real
from fuser.ir.dtype import compute_dtype as _compute_dtype
from fuser.ir.exprs import BinaryOpType, TernaryOpType, UnaryOpType

__all__ = [
    "RUNTIME_HEADER_NAME",
    "compute_dtype",
    "ctype",
    "emit_binary",
    "emit_cast",
    "emit_constant",
    "emit_random",
    "emit_ternary",
    "emit_unary",
    "e4m3_saturates",
    "runtime_headers",
]

RUNTIME_HEADER_NAME = "fuser_runtime.cuh"

_CTYPE = {
    DataType.Double: "double",
    DataType.Float: "float",
    DataType.Half: "__half",
    DataType.BFloat16: "__bfloat",
    DataType.Float8_e4m3fn: "__e4m3",
    DataType.Float8_e5m2: "__e5m2",
    DataType.Int: "long long",
    DataType.Int32: "int",
    DataType.Bool: "bool",
    DataType.ComplexFloat: "fuser::complex<float>",
    DataType.ComplexDouble: "fuser::complex<double>",
}

# narrow float <-> float
_TO_FLOAT = {
    DataType.Half: "fuser::half_to_float",
    DataType.BFloat16: "fuser::bfloat_to_float",
    DataType.Float8_e4m3fn: "fuser::e4m3_to_float",
    DataType.Float8_e5m2: "fuser::e5m2_to_float",
}
_FROM_FLOAT = {
    DataType.Half: "fuser::float_to_half",
    DataType.BFloat16: "fuser::float_to_bfloat",
    DataType.Float8_e4m3fn: "fuser::float_to_e4m3",
    DataType.Float8_e5m2: "fuser::float_to_e5m2",
}
_FROM_BITS = {
    DataType.Half: ("fuser::half_from_bits", 4),
    DataType.BFloat16: ("fuser::bfloat_from_bits", 4),
    DataType.Float8_e4m3fn: ("fuser::e4m3_from_bits", 2),
    DataType.Float8_e5m2: ("fuser::e5m2_from_bits", 2),
}


# --- types --------------------------------------------------------------------------------------


def ctype(dt: DataType) -> str:
    """The C++ type a value of `dt` is stored (and passed) as in generated code."""
    try:
        return _CTYPE[dt]
    except KeyError:
        raise NotImplementedError(f"no C++ type for {dt}") from None


def compute_dtype(dt: DataType) -> DataType:
    """The dtype arithmetic producing `dt` runs in: Float for half, bfloat16 and fp8."""
    _check_dtype(dt, "compute_dtype")
    return _compute_dtype(dt)


def _check_dtype(dt: Any, what: str) -> None:
    if dt not in _CTYPE:
        raise NotImplementedError(f"{what}: unsupported dtype {dt}")


def _kind(dt: DataType) -> str:
    """b(ool), i(nteger), f(loat/double), c(omplex), h (a narrow float, computed natively)."""
    if dt is DataType.Bool:
        return "b"
    if dt.is_integral:
        return "i"
    if dt.is_complex:
        return "c"
    if dt.is_reduced_float:
        return "h"
    return "f"


# --- headers ------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _header_files() -> tuple[tuple[str, str], ...]:
    root = importlib.resources.files("fuser.codegen").joinpath("runtime")
    files = [p for p in root.iterdir() if p.name.endswith(".cuh")]
    return tuple((p.name, p.read_text(encoding="utf-8")) for p in sorted(files, key=lambda p: p.name))


@functools.lru_cache(maxsize=None)
def e4m3_saturates() -> bool:
    """Whether the installed PyTorch saturates float -> float8_e4m3fn overflow to +-448
    (as 2.13 does) rather than giving NaN (as 2.11 does)."""
    import torch

    return not math.isnan(torch.tensor([1000.0]).to(torch.float8_e4m3fn).float().item())


def runtime_headers() -> dict[str, str]:
    """{file name: contents} of the runtime header(s), for NVRTC's in-memory headers (or to
    write beside a source compiled with nvcc). Generated code includes RUNTIME_HEADER_NAME.

    The main header defines FUSER_E4M3_SATURATE to match the installed PyTorch's fp8 e4m3fn
    conversion (the reference executor's), so the text depends on it: key caches on it."""
    out = dict(_header_files())
    main = out[RUNTIME_HEADER_NAME]
    define = f"#pragma once\n#define FUSER_E4M3_SATURATE {int(e4m3_saturates())}\n"
    out[RUNTIME_HEADER_NAME] = main.replace("#pragma once\n", define, 1)
    return out


# --- expression plumbing ------------------------------------------------------------------------

_IDENT = re.compile(r"[A-Za-z_]\w*(?:(?:::|\.|->)[A-Za-z_]\w*|<[\w:]+>)*")
_NUMBER = re.compile(r"(?:0[xX][0-9a-fA-F]+|\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)[uUlLfF]*")


def _matching_open(x: str) -> int | None:
    """Index of the bracket that the final ')' or ']' of `x` closes."""
    depth = 0
    for k in range(len(x) - 1, -1, -1):
        ch = x[k]
        if ch in ")]":
            depth += 1
        elif ch in "([":
            depth -= 1
            if depth == 0:
                return k
    return None


def _atomic(x: str) -> bool:
    """Whether `x` binds tighter than any operator: a name, a literal, a call, an index or a
    parenthesised expression."""
    if _IDENT.fullmatch(x) or _NUMBER.fullmatch(x):
        return True
    if x and x[-1] in ")]":
        k = _matching_open(x)
        if k is None:
            return False
        prefix = x[:k]
        if prefix == "":
            return x[-1] == ")"
        return _atomic(prefix)
    return False


def _p(x: str) -> str:
    """`x`, parenthesised unless it already binds tightly."""
    x = x.strip()
    return x if _atomic(x) else f"({x})"


def _fmt(template: str, *args: str) -> str:
    return template.format(*(_p(a) for a in args))


# --- constants ----------------------------------------------------------------------------------

_INT_RANGE = {DataType.Int: 64, DataType.Int32: 32}


def _float32(value: float) -> float:
    """`value` rounded to float32 (to nearest even; overflow gives inf)."""
    try:
        return struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError:
        import numpy as np

        with np.errstate(over="ignore"):
            return float(np.float32(value))


def _float_literal(value: float, dt: DataType) -> str:
    """A C++ literal (or intrinsic call) of type float or double with exactly `value`."""
    single = dt is DataType.Float
    if single:
        value = _float32(value)
    if math.isnan(value):
        return "__uint_as_float(0x7fc00000u)" if single else "__longlong_as_double(0x7ff8000000000000LL)"
    if math.isinf(value):
        if single:
            return "__uint_as_float(0x7f800000u)" if value > 0 else "__uint_as_float(0xff800000u)"
        return "__longlong_as_double(0x7ff0000000000000LL)" if value > 0 else "(-__longlong_as_double(0x7ff0000000000000LL))"
    if single:
        text = next(t for t in (f"{value:.{p}g}" for p in range(6, 10)) if _float32(float(t)) == value)
    else:
        text = repr(value)
    if not any(ch in text for ch in ".en"):
        text += ".0"
    if single:
        text += "f"
    if text.startswith("-"):
        text = f"({text})"
    return text


def _as_real(value: Any) -> Any:
    return value.real if isinstance(value, complex) else value


def emit_constant(value: Any, dt: DataType) -> str:
    """A C++ expression of type `ctype(dt)` with `value` (a Python bool, int, float or
    complex) converted to `dt` as PyTorch casts it: inf, -inf, nan and -0.0 are exact, int64's
    extremes included, half/bfloat16/fp8 from their bit patterns (double -> float -> narrow)."""
    _check_dtype(dt, "emit_constant")
    if not isinstance(value, (bool, int, float, complex)):
        raise TypeError(f"emit_constant: {value!r} is not a Python number")
    if dt is DataType.Bool:
        return "true" if bool(value) else "false"
    if dt.is_integral:
        v = _as_real(value)
        if isinstance(v, float):
            if not math.isfinite(v):
                raise ValueError(f"emit_constant: {value!r} has no {dt} value")
            v = int(v)  # toward zero, as a C cast
        v = int(v)
        bits = _INT_RANGE[dt]
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        if not lo <= v <= hi:
            raise ValueError(f"emit_constant: {value!r} is out of range for {dt}")
        suffix = "LL" if dt is DataType.Int else ""
        if v == lo:
            return f"({lo + 1}{suffix} - 1{suffix})"
        return f"{v}{suffix}" if v >= 0 else f"({v}{suffix})"
    if dt.is_complex:
        part = to_real(dt)
        c = complex(value)
        return f"{ctype(dt)}({_float_literal(c.real, part)}, {_float_literal(c.imag, part)})"
    v = float(_as_real(value))
    if dt in (DataType.Float, DataType.Double):
        return _float_literal(v, dt)
    import torch

    t = torch.tensor([v], dtype=torch.float64).to(torch.float32).to(dt.torch)
    fn, digits = _FROM_BITS[dt]
    bits = int(t.view(torch.int16 if digits == 4 else torch.uint8).item()) & ((1 << (4 * digits)) - 1)
    return f"{fn}(0x{bits:0{digits}x})"


# --- casts --------------------------------------------------------------------------------------


def emit_cast(x: str, src: DataType, dst: DataType) -> str:
    """`x` (a `ctype(src)` expression) converted to `dst` as PyTorch's `.to(dst)` does."""
    _check_dtype(src, "cast")
    _check_dtype(dst, "cast")
    if src is dst:
        return x
    if src.is_reduced_float:
        f = f"{_TO_FLOAT[src]}({x})"
        return f if dst is DataType.Float else emit_cast(f, DataType.Float, dst)
    if dst.is_reduced_float:
        return f"{_FROM_FLOAT[dst]}({emit_cast(x, src, DataType.Float)})"
    if dst is DataType.Bool:
        return f"fuser::nonzero({x})"
    if src.is_complex:
        if dst.is_complex:
            return f"{ctype(dst)}({x})"
        return emit_cast(f"fuser::real({x})", to_real(src), dst)
    if dst.is_complex:
        part = to_real(dst)
        zero = "0.0f" if part is DataType.Float else "0.0"
        return f"{ctype(dst)}({emit_cast(x, src, part)}, {zero})"
    return f"(({ctype(dst)}){_p(x)})"


# --- random numbers -----------------------------------------------------------------------------

#: the header of the Philox generator and the RNG ops' distributions
RANDOM_HEADER_NAME = "fuser_random.cuh"


def emit_random(normal: bool, out: DataType, state: str, seed: str, offset: str, index: str,
                params: tuple[str, str], param_dtypes: tuple[DataType, DataType]) -> str:
    """An RNG op's element of linear index `index` of stream (`seed`, `offset`): uniform in
    [params[0], params[1]) or normal (mean, std), computed in double for a Double `out`, else
    in float, through the per-thread Philox cache `state` (fuser_random.cuh)."""
    _check_dtype(out, "random")
    if not out.is_floating:
        raise NotImplementedError(f"random numbers of dtype {out}")
    compute = DataType.Double if out is DataType.Double else DataType.Float
    a, b = (emit_cast(x, dt, compute) for x, dt in zip(params, param_dtypes))
    name = f"fuser::rng_{'normal' if normal else 'uniform'}_{'f64' if compute is DataType.Double else 'f32'}"
    return emit_cast(f"{name}({state}, {seed}, {offset}, {index}, {a}, {b})", compute, out)


# --- unary --------------------------------------------------------------------------------------

# op -> (runtime function, compute kinds it is defined for, result: "same" | "bool" | "real")
_FC = "fc"
_UNARY: dict[UnaryOpType, tuple[str, str, str]] = {
    UnaryOpType.Abs: ("abs", "ifc", "real"),
    UnaryOpType.Acos: ("acos", _FC, "same"),
    UnaryOpType.Acosh: ("acosh", _FC, "same"),
    UnaryOpType.Asin: ("asin", _FC, "same"),
    UnaryOpType.Asinh: ("asinh", _FC, "same"),
    UnaryOpType.Atan: ("atan", _FC, "same"),
    UnaryOpType.Atanh: ("atanh", _FC, "same"),
    UnaryOpType.BitwiseNot: ("bitwise_not", "bi", "same"),
    UnaryOpType.Ceil: ("ceil", "if", "same"),
    UnaryOpType.Cos: ("cos", _FC, "same"),
    UnaryOpType.Cosh: ("cosh", _FC, "same"),
    UnaryOpType.Exp: ("exp", _FC, "same"),
    UnaryOpType.Exp2: ("exp2", _FC, "same"),
    UnaryOpType.Expm1: ("expm1", _FC, "same"),
    UnaryOpType.Erf: ("erf", "f", "same"),
    UnaryOpType.Erfc: ("erfc", "f", "same"),
    UnaryOpType.Erfinv: ("erfinv", "f", "same"),
    UnaryOpType.Erfcinv: ("erfcinv", "f", "same"),
    UnaryOpType.Floor: ("floor", "if", "same"),
    UnaryOpType.Frac: ("frac", "f", "same"),
    UnaryOpType.Imag: ("imag", "c", "real"),
    UnaryOpType.IsFinite: ("is_finite", "bifc", "bool"),
    UnaryOpType.IsInf: ("is_inf", "bifc", "bool"),
    UnaryOpType.IsNan: ("is_nan", "bifc", "bool"),
    UnaryOpType.IsNegInf: ("is_neginf", "bif", "bool"),
    UnaryOpType.IsPosInf: ("is_posinf", "bif", "bool"),
    UnaryOpType.IsReal: ("is_real", "bifc", "bool"),
    UnaryOpType.Lgamma: ("lgamma", "f", "same"),
    UnaryOpType.Log: ("log", _FC, "same"),
    UnaryOpType.Log10: ("log10", _FC, "same"),
    UnaryOpType.Log1p: ("log1p", _FC, "same"),
    UnaryOpType.Log2: ("log2", _FC, "same"),
    UnaryOpType.LogicalNot: ("logical_not", "bifc", "bool"),
    UnaryOpType.Neg: ("neg", "ifc", "same"),
    UnaryOpType.Real: ("real", "bifc", "real"),
    UnaryOpType.Reciprocal: ("reciprocal", _FC, "same"),
    UnaryOpType.Relu: ("relu", "if", "same"),
    UnaryOpType.Round: ("round", "if", "same"),
    UnaryOpType.Rsqrt: ("rsqrt", _FC, "same"),
    UnaryOpType.Sigmoid: ("sigmoid", _FC, "same"),
    UnaryOpType.Sign: ("sign", "bif", "same"),
    UnaryOpType.Signbit: ("sign_bit", "bif", "bool"),
    UnaryOpType.Silu: ("silu", _FC, "same"),
    UnaryOpType.Sin: ("sin", _FC, "same"),
    UnaryOpType.Sinh: ("sinh", _FC, "same"),
    UnaryOpType.Sqrt: ("sqrt", _FC, "same"),
    UnaryOpType.Tan: ("tan", _FC, "same"),
    UnaryOpType.Tanh: ("tanh", _FC, "same"),
    UnaryOpType.Trunc: ("trunc", "if", "same"),
}


def _result_dtype(rule: str, c: DataType) -> DataType:
    if rule == "bool":
        return DataType.Bool
    if rule == "real":
        return to_real(c)
    return c


def _unary_compute(src: DataType, out: DataType) -> DataType:
    """The reference's: narrow floats widen to float; integer and bool operands of a floating
    result convert to its compute type; anything else computes in its own type."""
    if src.is_reduced_float:
        return DataType.Float
    if (src.is_integral or src.is_boolean) and out.is_floating:
        return _compute_dtype(out)
    return src


def emit_unary(op: UnaryOpType, x: str, src: DataType, out: DataType, *, approx: bool = False) -> str:
    """`op(x)` as a `ctype(out)` expression; `Cast` converts (`emit_cast`). `approx`: a float
    exp as ex2.approx (fuser.preseg.approx_exp)."""
    _check_dtype(src, op.value)
    _check_dtype(out, op.value)
    if op is UnaryOpType.Cast:
        return emit_cast(x, src, out)
    spec = _UNARY.get(op)
    c = _unary_compute(src, out)
    if spec is None or _kind(c) not in spec[1]:
        raise NotImplementedError(f"{op.value}: not supported for a {src} operand with a {out} result (computed in {c})")
    fn, _, rule = spec
    if approx and op is UnaryOpType.Exp and c is DataType.Float:
        fn = "exp_approx"
    core = f"fuser::{fn}({emit_cast(x, src, c)})"
    return emit_cast(core, _result_dtype(rule, c), out)


# --- binary -------------------------------------------------------------------------------------

# op -> {compute kinds: template}; comparisons and logical ops give bool, the others the compute type
_BINARY: dict[BinaryOpType, dict[str, str]] = {
    # complex add/sub as PyTorch: a + alpha * b (alpha = +-1), see the runtime header
    BinaryOpType.Add: {"b": "({} || {})", "if": "({} + {})", "c": "fuser::add({}, {})"},
    BinaryOpType.Sub: {"if": "({} - {})", "c": "fuser::sub({}, {})"},
    BinaryOpType.Mul: {"b": "({} && {})", "ifc": "({} * {})"},
    # true division for floats; C's truncating division for integer results: nvFuser's `div`
    # of integers truncates toward zero (its `truediv` gives a float result instead)
    BinaryOpType.Div: {"ifc": "({} / {})"},
    BinaryOpType.Mod: {"if": "fuser::fmod({}, {})"},
    BinaryOpType.Fmod: {"if": "fuser::fmod({}, {})"},
    BinaryOpType.Remainder: {"if": "fuser::remainder({}, {})"},
    BinaryOpType.Pow: {"ifc": "fuser::pow({}, {})"},
    BinaryOpType.Atan2: {"f": "fuser::atan2({}, {})"},
    BinaryOpType.Max: {"bif": "fuser::maximum({}, {})"},
    BinaryOpType.Min: {"bif": "fuser::minimum({}, {})"},
    BinaryOpType.Eq: {"bifc": "({} == {})"},
    BinaryOpType.Ne: {"bifc": "({} != {})"},
    BinaryOpType.Lt: {"bif": "({} < {})"},
    BinaryOpType.Le: {"bif": "({} <= {})"},
    BinaryOpType.Gt: {"bif": "({} > {})"},
    BinaryOpType.Ge: {"bif": "({} >= {})"},
    BinaryOpType.LogicalAnd: {"b": "({} && {})", "ifc": "(fuser::nonzero({}) && fuser::nonzero({}))"},
    BinaryOpType.LogicalOr: {"b": "({} || {})", "ifc": "(fuser::nonzero({}) || fuser::nonzero({}))"},
    BinaryOpType.BitwiseAnd: {"b": "({} && {})", "i": "({} & {})"},
    BinaryOpType.BitwiseOr: {"b": "({} || {})", "i": "({} | {})"},
    BinaryOpType.BitwiseXor: {"b": "({} != {})", "i": "({} ^ {})"},
    BinaryOpType.Lshift: {"i": "fuser::shl({}, {})"},
    BinaryOpType.Rshift: {"i": "fuser::shr({}, {})"},
    BinaryOpType.LogicalRshift: {"i": "fuser::shr_logical({}, {})"},
    BinaryOpType.Gcd: {"i": "fuser::gcd({}, {})"},
    BinaryOpType.Nextafter: {"f": "fuser::nextafter({}, {})"},
    BinaryOpType.CeilDiv: {"if": "fuser::ceil_div({}, {})"},
}
_NEXTAFTER_NARROW = (DataType.Half, DataType.BFloat16)
_ROUNDED_MUL = {DataType.Float: "__fmul_rn({}, {})", DataType.Double: "__dmul_rn({}, {})"}


def _promote(a: DataType, b: DataType) -> DataType:
    """promote_types of the operands as the reference computes them (narrow floats widened)."""
    return promote_types(_compute_dtype(a), _compute_dtype(b))


def _template(table: dict[str, str], kind: str) -> str | None:
    for kinds, template in table.items():
        if kind in kinds:
            return template
    return None


def emit_binary(op: BinaryOpType, a: str, b: str, a_dt: DataType, b_dt: DataType, out: DataType,
                *, common: DataType | None = None, rounded: bool = False, by_reciprocal: bool = False) -> str:
    """`op(a, b)` as a `ctype(out)` expression. Arithmetic runs in `compute_dtype(out)`;
    comparisons and logical ops in `compute_dtype(common)`, where `common` is the operands'
    promoted type (`common_dtype` of the IR operands; default: `promote_types` of the widened
    operand dtypes, right for two tensors); nextafter in `out` itself (half steps by a half ulp).
    `rounded`: a float or double product as an intrinsic the compiler never fuses into an FMA.
    `by_reciprocal`: a float or double division as a times 1/b (fuser.preseg.reciprocal_divisors)."""
    for dt in (a_dt, b_dt, out):
        _check_dtype(dt, op.value)
    table = _BINARY.get(op)
    if op.is_comparison or op.is_logical:
        if common is None:
            common = _promote(a_dt, b_dt)
        _check_dtype(common, op.value)
        c = _compute_dtype(common)
        result = DataType.Bool
    elif op is BinaryOpType.Nextafter:
        c = result = out
    else:
        c = result = _compute_dtype(out)
    kind = _kind(c)
    template = _template(table, kind) if table is not None else None
    if op is BinaryOpType.Nextafter and c in _NEXTAFTER_NARROW:
        template = "fuser::nextafter({}, {})"
    if rounded and op is BinaryOpType.Mul and c in _ROUNDED_MUL:
        template = _ROUNDED_MUL[c]
    if by_reciprocal and op is BinaryOpType.Div and c in (DataType.Float, DataType.Double):
        template = "fuser::div_by_reciprocal({}, {})"
    if template is None:
        raise NotImplementedError(
            f"{op.value}: not supported for operands {a_dt}, {b_dt} with a {out} result (computed in {c})"
        )
    core = _fmt(template, emit_cast(a, a_dt, c), emit_cast(b, b_dt, c))
    return emit_cast(core, result, out)


# --- ternary ------------------------------------------------------------------------------------


def emit_ternary(op: TernaryOpType, a: str, b: str, c: str, dts: Sequence[DataType], out: DataType,
                 *, common: DataType | None = None) -> str:
    """where(cond, x, y), lerp(start, end, weight), clamp(x, lo, hi) and threshold(x, th,
    value) as a `ctype(out)` expression. Threshold compares in `compute_dtype(common)`, the
    promoted type of x and th (`common_dtype`; default: th promotes as a number)."""
    if len(dts) != 3:
        raise ValueError(f"{op.value}: expected 3 operand dtypes, got {len(dts)}")
    a_dt, b_dt, c_dt = dts
    for dt in (a_dt, b_dt, c_dt, out):
        _check_dtype(dt, op.value)
    what = f"{op.value}: not supported for operands {a_dt}, {b_dt}, {c_dt} with a {out} result"
    if op is TernaryOpType.Where:
        cond = a if a_dt is DataType.Bool else emit_cast(a, a_dt, DataType.Bool)
        return f"({_p(cond)} ? {_p(emit_cast(b, b_dt, out))} : {_p(emit_cast(c, c_dt, out))})"
    comp = _compute_dtype(out)
    kind = _kind(comp)
    if op is TernaryOpType.Lerp:
        if kind not in "fc":
            raise NotImplementedError(what)
        core = f"fuser::lerp({emit_cast(a, a_dt, comp)}, {emit_cast(b, b_dt, comp)}, {emit_cast(c, c_dt, comp)})"
        return emit_cast(core, comp, out)
    if op is TernaryOpType.Clamp:
        if kind not in "if":
            raise NotImplementedError(what)
        core = f"fuser::clamp({emit_cast(a, a_dt, comp)}, {emit_cast(b, b_dt, comp)}, {emit_cast(c, c_dt, comp)})"
        return emit_cast(core, comp, out)
    if op is TernaryOpType.Threshold:
        if common is None:
            common = result_type([_compute_dtype(a_dt)], [_compute_dtype(b_dt)])
        _check_dtype(common, op.value)
        cmp = _compute_dtype(common)
        if kind not in "if" or _kind(cmp) not in "if":
            raise NotImplementedError(f"{what} (compared in {cmp})")
        core = (f"fuser::threshold<{ctype(cmp)}>({emit_cast(a, a_dt, comp)}, {emit_cast(b, b_dt, cmp)}, "
                f"{emit_cast(c, c_dt, comp)})")
        return emit_cast(core, comp, out)
    raise NotImplementedError(what)


def binds_tightly(x: str) -> bool:
    """Whether the C++ expression `x` needs no parentheses as an operand: a name, a literal,
    a call, an index or a parenthesised expression."""
    return _atomic(x.strip())
