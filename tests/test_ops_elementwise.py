"""Elementwise ops against eager PyTorch: unary, binary, ternary, casts, Python operators,
tensor-scalar and scalar-only arithmetic, for every dtype each op accepts."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from _opcheck import (  # noqa: F401 - _seed is an autouse fixture
    DTYPES,
    FP8,
    TorchRejects,
    _seed,
    assert_rejects,
    check,
    define_fusion,
    execute,
    expect,
    fusion,
    ids,
    rand,
    scalar_value,
    symbolic,
)
from fuser import DataType, FusionDefinition

pytestmark = [
    pytest.mark.filterwarnings("ignore:Casting complex values to real"),
    pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental"),
]


def _erfcinv(x):
    # torch has no erfcinv; fuser (as nvFuser) defines it for floating-point inputs only
    if not x.is_floating_point():
        raise RuntimeError("erfcinv needs a floating-point input")
    return torch.erfinv(1 - x)


UNARY = {
    "abs": torch.abs, "acos": torch.acos, "acosh": torch.acosh, "asin": torch.asin, "asinh": torch.asinh,
    "atan": torch.atan, "atanh": torch.atanh, "bitwise_not": torch.bitwise_not, "ceil": torch.ceil,
    "cos": torch.cos, "cosh": torch.cosh, "exp": torch.exp, "exp2": torch.exp2, "expm1": torch.expm1,
    "erf": torch.erf, "erfc": torch.erfc, "erfinv": torch.erfinv, "erfcinv": _erfcinv, "floor": torch.floor,
    "frac": torch.frac, "imag": torch.imag, "isfinite": torch.isfinite, "isinf": torch.isinf,
    "isnan": torch.isnan, "isneginf": torch.isneginf, "isposinf": torch.isposinf, "isreal": torch.isreal,
    "lgamma": torch.lgamma, "log": torch.log, "log10": torch.log10, "log1p": torch.log1p, "log2": torch.log2,
    "logical_not": torch.logical_not, "neg": torch.neg, "real": torch.real, "reciprocal": torch.reciprocal,
    "relu": torch.relu, "round": torch.round, "rsqrt": torch.rsqrt, "sigmoid": torch.sigmoid,
    "sign": torch.sign, "signbit": torch.signbit, "silu": F.silu, "sin": torch.sin, "sinh": torch.sinh,
    "sqrt": torch.sqrt, "tan": torch.tan, "tanh": torch.tanh, "trunc": torch.trunc,
}


def _logical_right_shift(a, b):
    """Shift right filling with zeros, in the promoted integer type (torch has no such op)."""
    dt = torch.result_type(a, b)
    if dt not in (torch.int32, torch.int64):
        raise RuntimeError(f"logical_right_shift needs integer operands, got {dt}")
    a, b = torch.as_tensor(a).to(dt), torch.as_tensor(b).to(dt)
    a, b = torch.broadcast_tensors(a, b)
    u = np.uint32 if dt == torch.int32 else np.uint64
    r = a.numpy().view(u) >> b.numpy().astype(u)
    return torch.from_numpy(np.ascontiguousarray(r).view(a.numpy().dtype)).reshape(a.shape)


def _nv_div(a, b):
    """nvFuser's div: integer operands divide truncating toward zero, as in C (bool ones
    are refused); floating and complex ones divide truly."""
    tensors = [x for x in (a, b) if isinstance(x, torch.Tensor)]
    dt = torch.result_type(a, b) if tensors else torch.result_type(torch.tensor(a), b)
    if dt == torch.bool:
        raise RuntimeError("div is not defined for bool operands")
    if dt.is_floating_point or dt.is_complex:
        return torch.true_divide(a, b)
    return torch.div(a, b, rounding_mode="trunc")


BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": _nv_div,
    "truediv": torch.true_divide, "mod": torch.fmod, "remainder": torch.remainder, "fmod": torch.fmod,
    "pow": torch.pow, "atan2": torch.atan2, "maximum": torch.maximum, "minimum": torch.minimum,
    "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
    "logical_and": torch.logical_and, "logical_or": torch.logical_or, "bitwise_and": torch.bitwise_and,
    "bitwise_or": torch.bitwise_or, "bitwise_xor": torch.bitwise_xor,
    "bitwise_left_shift": torch.bitwise_left_shift, "bitwise_right_shift": torch.bitwise_right_shift,
    "logical_right_shift": _logical_right_shift, "gcd": torch.gcd, "nextafter": torch.nextafter,
}
_DIVISIONS = {"div", "truediv", "mod", "remainder", "fmod"}
_SHIFTS = {"bitwise_left_shift", "bitwise_right_shift", "logical_right_shift"}


def _lhs(name, shape, dt):
    if name == "pow":
        return rand(shape, dt, low=-3, high=4)
    return rand(shape, dt, low=-50, high=50) if name in _SHIFTS else rand(shape, dt)


def _rhs(name, shape, dt):
    """The second operand, kept where the op is defined: no integer division by zero,
    shift counts within the type, no integer negative powers."""
    if name in _DIVISIONS:
        return rand(shape, dt, nonzero=True)
    if name in _SHIFTS:
        return rand(shape, dt, low=0, high=8)
    if name == "pow":
        return rand(shape, dt, low=0, high=4)
    return rand(shape, dt)


# --- unary -------------------------------------------------------------------------------------

_RANK2_SHAPES = [(4, 127), (1, 3), (0, 5), (3, 1), (2, 0)]


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name, dtype):
    fn = UNARY[name]
    probe = rand((3,), dtype)
    try:
        expect(fn, probe)
    except TorchRejects:
        assert_rejects(name, lambda fd, a: getattr(fd.ops, name)(a), [probe])
        return
    # one definition with symbolic extents, run on several shapes (size 1 and 0 included)
    fd = define_fusion(lambda fd, a: getattr(fd.ops, name)(a), [rand((2, 2), dtype)], define=symbolic)
    for shape in _RANK2_SHAPES:
        x = rand(shape, dtype)
        (out,) = execute(fd, [x])
        check(out, expect(fn, x), f"{name}{tuple(shape)}")
    # 0-dim and a tail size
    for shape in [(), (127,)]:
        x = rand(shape, dtype)
        (out,) = fusion(lambda fd, a: getattr(fd.ops, name)(a), [x])
        check(out, expect(fn, x), f"{name}{tuple(shape)}")


def _layouts(dtype):
    """Inputs that are not plainly contiguous: transposed, strided, expanded, sliced."""
    base = rand((6, 10), dtype)
    return {
        "transposed": base.t(),
        "strided": base[::2, 1::3],
        "expanded": rand((10,), dtype).expand(4, 10),
        "expanded_inner": rand((4, 1), dtype).expand(4, 7),
        "sliced": base[1:5, 2:9],
        "size1_strided": base[:1, ::2],
    }


@pytest.mark.parametrize("dtype", [DataType.Bool, DataType.Int32, DataType.Half, DataType.BFloat16,
                                   DataType.Float, DataType.Double, DataType.ComplexFloat], ids=ids)
@pytest.mark.parametrize("name", ["abs", "neg", "exp", "sigmoid", "isnan", "logical_not", "bitwise_not", "real"])
def test_unary_noncontiguous(name, dtype):
    fn = UNARY[name]
    for layout, x in _layouts(dtype).items():
        try:
            want = expect(fn, x)
        except TorchRejects:
            return
        (out,) = fusion(lambda fd, a: getattr(fd.ops, name)(a), [x])
        check(out, want, f"{name} of a {layout} input")


def test_unary_noncontiguous_define_tensor():
    """contiguity=False inputs accept any strides."""
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[False, False], dtype=DataType.Float)
        fd.add_output(fd.ops.exp(t0))
    for x in (torch.randn(5, 7), torch.randn(7, 5).t(), torch.randn(8, 9)[::2, ::3]):
        (out,) = execute(fd, [x])
        check(out, torch.exp(x))


def test_unary_on_cast_fp8():
    """Arithmetic on fp8 goes through a cast: values are fp8-rounded, computed in float."""
    x = torch.randn(64).to(torch.float8_e4m3fn)
    (out,) = fusion(lambda fd, a: fd.ops.exp(fd.ops.cast(a, DataType.Float)), [x])
    check(out, torch.exp(x.float()))


# --- binary --------------------------------------------------------------------------------------

# shapes (lhs, rhs): equal, broadcast either side, zero-size, 0-dim beside a tensor
_BINARY_SHAPES = [((4, 127), (4, 127)), ((3, 5), (1, 5)), ((3, 1), (3, 7)), ((0, 5), (1, 5)),
                  ((3,), ()), ((), (5,)), ((1, 1), (2, 3)), ((2, 3), (2, 3))]


@pytest.mark.parametrize("lhs_dtype", DTYPES, ids=ids(DTYPES))
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(name, lhs_dtype):
    """op(lhs, rhs) for every rhs dtype: torch's promotion, acceptance and values."""
    fn = BINARY[name]
    for k, rhs_dtype in enumerate(DTYPES):
        shape_a, shape_b = _BINARY_SHAPES[k % len(_BINARY_SHAPES)]
        a, b = _lhs(name, shape_a, lhs_dtype), _rhs(name, shape_b, rhs_dtype)
        try:
            want = expect(fn, a, b)
        except TorchRejects:
            assert_rejects(name, lambda fd, x, y: getattr(fd.ops, name)(x, y), [a, b])
            continue
        (out,) = fusion(lambda fd, x, y: getattr(fd.ops, name)(x, y), [a, b])
        check(out, want, f"{name}({lhs_dtype}{tuple(shape_a)}, {rhs_dtype}{tuple(shape_b)})")


_SCALARS = {"bool": True, "int": 3, "float": -1.5, "complex": complex(0.5, -2.0)}


def _scalar_for(name, kind, position):
    value = _SCALARS[kind]
    if name in _SHIFTS and kind == "int":
        return 2
    if name == "pow" and kind == "int" and position == "rhs":
        return 2
    return value


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_tensor_scalar(name, dtype):
    """A Python number on either side: it promotes only across categories (wrapped number)."""
    fn = BINARY[name]
    for kind in _SCALARS:
        if dtype is DataType.Half and kind == "complex":
            continue  # torch gives ComplexHalf, which fuser has no type for: test_half_complex_scalar
        for position in ("lhs", "rhs"):
            if name == "pow" and dtype is DataType.Bool and kind == "bool":
                continue  # torch special-cases exponents 0 and 1 (a copy or ones), else rejects bool
            s = _scalar_for(name, kind, position)
            x = _lhs(name, (5, 3), dtype) if position == "rhs" else _rhs(name, (5, 3), dtype)
            args = (x, s) if position == "rhs" else (s, x)
            what = f"{name}({args[0] if position == 'lhs' else dtype}, {s if position == 'rhs' else dtype})"

            def build(fd, t):
                return getattr(fd.ops, name)(t, s) if position == "rhs" else getattr(fd.ops, name)(s, t)

            try:
                want = expect(fn, *args)
            except TorchRejects:
                assert_rejects(name, build, [x])
                continue
            (out,) = fusion(build, [x])
            check(out, want, what)


@pytest.mark.parametrize("name", ["add", "mul", "sub"])
def test_half_complex_scalar(name):
    """Half with a complex number is ComplexHalf in torch; fuser (like nvFuser) has no
    ComplexHalf and gives ComplexFloat, with torch's values."""
    x = rand((4, 3), DataType.Half)
    s = complex(0.5, -2.0)
    (out,) = fusion(lambda fd, t: getattr(fd.ops, name)(t, s), [x])
    check(out, BINARY[name](x.float(), s))


_SCALAR_INPUT_CASES = [
    (dt, sdt)
    for dt in (DataType.Int32, DataType.Half, DataType.BFloat16, DataType.Float)
    for sdt in (DataType.Int, DataType.Double, DataType.Bool, DataType.ComplexDouble)
    if not (dt is DataType.Half and sdt is DataType.ComplexDouble)  # ComplexHalf: test_half_complex_scalar
]


@pytest.mark.parametrize("dtype,sdtype", _SCALAR_INPUT_CASES,
                         ids=[f"{a.name}-{b.name}" for a, b in _SCALAR_INPUT_CASES])
@pytest.mark.parametrize("name", ["add", "mul", "div", "maximum", "lt", "pow"])
def test_binary_scalar_input(name, dtype, sdtype):
    """A scalar fusion input (fd.define_scalar) promotes like a Python number."""
    value = {DataType.Int: 2, DataType.Double: 0.75, DataType.Bool: True, DataType.ComplexDouble: 1 - 1j}[sdtype]
    x = rand((3, 4), dtype, low=0, high=4) if name == "pow" else rand((3, 4), dtype)
    fn = BINARY[name]
    try:
        want = expect(fn, x, value)
    except TorchRejects:
        with pytest.raises(TypeError, match=rf"fd\.ops\.{name}\b"):
            with FusionDefinition() as fd:
                t = fd.from_pytorch(x)
                s = fd.define_scalar(dtype=sdtype)
                fd.add_output(getattr(fd.ops, name)(t, s))
        return
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x)
        s = fd.define_scalar(dtype=sdtype)
        fd.add_output(getattr(fd.ops, name)(t, s))
    (out,) = execute(fd, [x, value])
    check(out, want)


def test_binary_semantics():
    """nvFuser's semantics: integer div truncates toward zero (C), truediv gives floats,
    mod = fmod (sign of the dividend), remainder = Python's (sign of the divisor),
    maximum/minimum propagate NaN."""
    a = torch.tensor([-7, 7, -7, 7, 5, -6], dtype=torch.int64)
    b = torch.tensor([3, -3, -3, 3, 2, 4], dtype=torch.int64)
    div, tdiv, mod, rem, fmod = fusion(
        lambda fd, x, y: [fd.ops.div(x, y), fd.ops.truediv(x, y), fd.ops.mod(x, y), fd.ops.remainder(x, y),
                          fd.ops.fmod(x, y)], [a, b]
    )
    check(div, torch.tensor([-2, -2, 2, 2, 2, -1]))
    check(tdiv, torch.tensor([-7 / 3, -7 / 3, 7 / 3, 7 / 3, 2.5, -1.5], dtype=torch.float32))
    check(mod, torch.tensor([-1, 1, -1, 1, 1, -2]))
    check(rem, torch.tensor([2, -2, -1, 1, 1, 2]))
    check(fmod, torch.tensor([-1, 1, -1, 1, 1, -2]))
    x = torch.tensor([1.0, float("nan"), 3.0, float("nan")])
    y = torch.tensor([float("nan"), 2.0, 1.0, float("nan")])
    mx, mn = fusion(lambda fd, p, q: [fd.ops.maximum(p, q), fd.ops.minimum(p, q)], [x, y])
    check(mx, torch.maximum(x, y))
    check(mn, torch.minimum(x, y))
    assert torch.isnan(mx[:2]).all() and torch.isnan(mn[:2]).all()


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_binary_broadcast_random_shapes(data):
    """Random shapes that broadcast: each dim of each operand is the full size or 1."""
    rank = data.draw(st.integers(0, 4), label="rank")
    full = data.draw(st.lists(st.integers(0, 5), min_size=rank, max_size=rank), label="shape")
    ones_a = data.draw(st.lists(st.booleans(), min_size=rank, max_size=rank), label="a is 1")
    ones_b = data.draw(st.lists(st.booleans(), min_size=rank, max_size=rank), label="b is 1")
    sa = [1 if o else s for s, o in zip(full, ones_a)]
    sb = [1 if o else s for s, o in zip(full, ones_b)]
    # fewer dims on one side: broadcast from the right, as in torch
    drop = data.draw(st.integers(-rank, rank), label="leading dims dropped (a if < 0)")
    sa, sb = (sa[-drop:] if drop < 0 else sa), (sb[drop:] if drop > 0 else sb)
    da = data.draw(st.sampled_from([DataType.Int32, DataType.Half, DataType.Float, DataType.Double]), label="a dtype")
    db = data.draw(st.sampled_from([DataType.Bool, DataType.Int, DataType.BFloat16, DataType.Float]), label="b dtype")
    a, b = rand(sa, da), rand(sb, db)
    for name in ("add", "mul", "maximum", "ge"):
        (out,) = fusion(lambda fd, x, y: getattr(fd.ops, name)(x, y), [a, b])
        check(out, expect(BINARY[name], a, b), f"{name}({da}{sa}, {db}{sb})")


def test_ternary_rank_broadcast():
    """where/lerp/clamp broadcast operands of lower rank from the right."""
    c, a, b = rand((5,), DataType.Bool), torch.randn(3, 1, 5), torch.randn(4, 1)
    (out,) = fusion(lambda fd, p, q, r: fd.ops.where(p, q, r), [c, a, b])
    check(out, torch.where(c, a, b))
    s, e, w = torch.randn(2, 3), torch.randn(3), torch.randn(())
    (out,) = fusion(lambda fd, p, q, r: fd.ops.lerp(p, q, r), [s, e, w])
    check(out, torch.lerp(s, e, w))
    lo, hi = torch.zeros(3), torch.ones(())
    (out,) = fusion(lambda fd, p, q, r: fd.ops.clamp(p, q, r), [s, lo, hi])
    check(out, torch.clamp(s, lo, hi))


@pytest.mark.parametrize("name", ["add", "mul", "atan2", "remainder", "eq"])
def test_binary_noncontiguous_and_expanded(name):
    fn = BINARY[name]
    a = torch.randn(7, 5).t()  # (5, 7), transposed
    b = torch.randn(7).expand(5, 7)  # stride 0
    c = torch.randn(10, 14)[::2, ::2]  # strided
    for x, y in ((a, b), (b, c), (c, a), (b, b)):
        (out,) = fusion(lambda fd, p, q: getattr(fd.ops, name)(p, q), [x, y])
        check(out, expect(fn, x, y))


# --- ternary and composites ----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_where(dtype):
    cond = rand((4, 6), DataType.Bool)
    a, b = rand((4, 6), dtype), rand((1, 6), dtype)
    (out,) = fusion(lambda fd, c, x, y: fd.ops.where(c, x, y), [cond, a, b])
    check(out, expect(torch.where, cond, a, b))
    # mixed dtypes promote, scalars on either side
    for other in (rand((4, 1), DataType.Float), rand((4, 6), DataType.Int32)):
        (out,) = fusion(lambda fd, c, x, y: fd.ops.where(c, x, y), [cond, a, other])
        check(out, expect(torch.where, cond, a, other))
    for s in (True, 2, -0.5, 1 + 2j):
        if dtype is DataType.Half and isinstance(s, complex):
            continue
        (out,) = fusion(lambda fd, c, x: fd.ops.where(c, x, s), [cond, a])
        check(out, expect(torch.where, cond, a, s), f"where(cond, {dtype}, {s!r})")
        (out,) = fusion(lambda fd, c, x: fd.ops.where(c, s, x), [cond, a])
        check(out, expect(torch.where, cond, s, a), f"where(cond, {s!r}, {dtype})")


def test_where_scalars_only_operands():
    """Two numbers into a tensor take the numbers' dtype (nvFuser): a Python float is
    Double, so where(cond, 1.5, -2) is a float64 tensor (PyTorch would give float32)."""
    cond = rand((5,), DataType.Bool)
    for x, y, dt in ((1, 2, torch.int64), (1.5, -2, torch.float64), (True, False, torch.bool), (3, 0.25, torch.float64)):
        (out,) = fusion(lambda fd, c: fd.ops.where(c, x, y), [cond])
        check(out, torch.where(cond, torch.tensor(x), torch.tensor(y)).to(dt), f"where(cond, {x!r}, {y!r})")


@pytest.mark.parametrize("dtype", [DataType.Int32, DataType.Int, DataType.Float, DataType.Half], ids=ids)
def test_where_rejects_non_bool_condition(dtype):
    cond, a = rand((4,), dtype), rand((4,), DataType.Float)
    with pytest.raises(TorchRejects):
        expect(torch.where, cond, a, a)
    assert_rejects("where", lambda fd, c, x: fd.ops.where(c, x, x), [cond, a])


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_lerp(dtype):
    start, end = rand((3, 8), dtype), rand((3, 8), dtype)
    weights = [0.25, rand((3, 8), dtype), rand((1, 8), dtype)]
    for w in weights:
        try:
            want = expect(torch.lerp, start, end, w)
        except TorchRejects:
            if isinstance(w, torch.Tensor):
                assert_rejects("lerp", lambda fd, a, b, c: fd.ops.lerp(a, b, c), [start, end, w])
            else:
                assert_rejects("lerp", lambda fd, a, b: fd.ops.lerp(a, b, w), [start, end])
            continue
        if isinstance(w, torch.Tensor):
            (out,) = fusion(lambda fd, a, b, c: fd.ops.lerp(a, b, c), [start, end, w])
        else:
            (out,) = fusion(lambda fd, a, b: fd.ops.lerp(a, b, w), [start, end])
        check(out, want)


def test_lerp_rejects_mixed_tensor_dtypes():
    start, end = rand((4,), DataType.Half), rand((4,), DataType.Float)
    with pytest.raises(TorchRejects):
        expect(torch.lerp, start, end, 0.5)
    assert_rejects("lerp", lambda fd, a, b: fd.ops.lerp(a, b, 0.5), [start, end])


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_clamp(dtype):
    x = rand((5, 7), dtype)
    for lo, hi in ((-1, 2), (-0.5, 0.5), (0, 0), (False, True)):
        try:
            want = expect(torch.clamp, x, lo, hi)
        except TorchRejects:
            assert_rejects("clamp", lambda fd, t: fd.ops.clamp(t, lo, hi), [x])
            continue
        (out,) = fusion(lambda fd, t: fd.ops.clamp(t, lo, hi), [x])
        check(out, want, f"clamp({dtype}, {lo}, {hi})")


def test_clamp_nan_and_tensor_bounds():
    x = torch.tensor([float("nan"), -3.0, 0.5, 4.0])
    lo, hi = torch.tensor([0.0, 0.0, 1.0, 0.0]), torch.tensor([1.0, 1.0, 2.0, 3.0])
    (out,) = fusion(lambda fd, a, b, c: fd.ops.clamp(a, b, c), [x, lo, hi])
    check(out, torch.clamp(x, lo, hi))


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_threshold(dtype):
    x = rand((6, 5), dtype)
    for th, value in ((0, 7), (0.5, -1.5), (2, 0)):
        try:
            want = expect(torch.threshold, x, th, value)
        except TorchRejects:
            assert_rejects("threshold", lambda fd, t: fd.ops.threshold(t, th, value), [x])
            continue
        (out,) = fusion(lambda fd, t: fd.ops.threshold(t, th, value), [x])
        check(out, want, f"threshold({dtype}, {th}, {value})")


_NUMERIC = [DataType.Int32, DataType.Int, DataType.Half, DataType.BFloat16, DataType.Float, DataType.Double,
            DataType.ComplexFloat]


@pytest.mark.parametrize("dtype", _NUMERIC + [DataType.Bool], ids=ids)
def test_add_sub_alpha(dtype):
    a, b = rand((4, 5), dtype), rand((4, 5), dtype)
    for alpha in (2, 0.5, True, 1 - 1j):
        for name, fn in (("add_alpha", torch.add), ("sub_alpha", torch.sub)):
            try:
                want = expect(lambda x, y: fn(x, y, alpha=alpha), a, b)
            except TorchRejects:
                assert_rejects(name, lambda fd, x, y: getattr(fd.ops, name)(x, y, alpha), [a, b])
                continue
            (out,) = fusion(lambda fd, x, y: getattr(fd.ops, name)(x, y, alpha), [a, b])
            # fuser composes b * alpha then the add: one more rounding than torch for narrow types
            check(out, want, f"{name}({dtype}, alpha={alpha!r})")


@pytest.mark.parametrize("dtype", [DataType.Int32, DataType.Int, DataType.Half, DataType.BFloat16, DataType.Float,
                                   DataType.Double, DataType.ComplexFloat], ids=ids)
def test_addcmul(dtype):
    x, a, b = rand((3, 4), dtype), rand((3, 4), dtype), rand((1, 4), dtype)
    value = 2 if not (dtype.is_floating or dtype.is_complex) else 0.5
    want = expect(lambda p, q, r: torch.addcmul(p, q, r, value=value), x, a, b)
    (out,) = fusion(lambda fd, p, q, r: fd.ops.addcmul(p, q, r, value), [x, a, b])
    # fuser composes a*b, value*(..) and x+(..), each rounded to a narrow type: bf16 gets
    # two more roundings than torch's single one
    tol = {"rtol": 2e-2, "atol": 2e-2} if dtype is DataType.BFloat16 else {}
    check(out, want, **tol)


# --- casts ---------------------------------------------------------------------------------------

_CAST_DTYPES = DTYPES + FP8


@pytest.mark.parametrize("src", _CAST_DTYPES, ids=ids(_CAST_DTYPES))
def test_cast(src):
    """x.to(dst) for every pair, fp8 included; int targets get values within range."""
    x = rand((4, 9), src) if src not in FP8 else torch.randn(4, 9).to(src.torch)
    if src.is_floating or src.is_complex:
        x = (x.to(torch.complex64 if src.is_complex else torch.float32) * 4).to(src.torch)
    for dst in _CAST_DTYPES:
        (out,) = fusion(lambda fd, t: fd.ops.cast(t, dst), [x])
        check(out, x.to(dst.torch), f"cast {src} -> {dst}")


@pytest.mark.parametrize("fp8", FP8, ids=ids(FP8))
@pytest.mark.parametrize("wide", [DataType.Float, DataType.Half, DataType.BFloat16, DataType.Double], ids=ids)
def test_cast_fp8_round_trip(fp8, wide):
    x = (torch.randn(3, 127) * 8).to(wide.torch)
    (narrow, back) = fusion(lambda fd, t: [n := fd.ops.cast(t, fp8), fd.ops.cast(n, wide)], [x])
    check(narrow, x.to(fp8.torch))
    check(back, x.to(fp8.torch).to(wide.torch))
    # fp8 -> wide -> fp8 is exact
    y = x.to(fp8.torch)
    (again,) = fusion(lambda fd, t: fd.ops.cast(fd.ops.cast(t, wide), fp8), [y])
    assert torch.equal(again.view(torch.uint8), y.view(torch.uint8))


@pytest.mark.parametrize("fp8", FP8, ids=ids(FP8))
def test_tolerance_assert_close_fp8(fp8):
    """fp8 outputs compare with the fp8 tolerances (torch.testing takes none for fp8)."""
    from fuser.runtime.tolerance import assert_close

    x = torch.randn(8).to(fp8.torch)
    assert_close(x, x.clone())
    with pytest.raises(AssertionError):
        assert_close(x, (x.float() + 4).to(fp8.torch))


def test_cast_noncontiguous_and_zero_size():
    for x in (torch.randn(6, 4).t(), torch.randn(0, 3), torch.randn(3).expand(2, 3), torch.randn(())):
        (out,) = fusion(lambda fd, t: fd.ops.cast(t, DataType.Half), [x])
        check(out, x.half())


def test_cast_to_same_dtype_copies():
    x = torch.randn(3, 4)
    (out,) = fusion(lambda fd, t: fd.ops.cast(t, DataType.Float), [x])
    check(out, x)
    assert out.data_ptr() != x.data_ptr()


# --- Python operators ----------------------------------------------------------------------------

_OPERATORS = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b,
    "%": lambda a, b: a % b, "**": lambda a, b: a ** b, "&": lambda a, b: a & b, "|": lambda a, b: a | b,
    "^": lambda a, b: a ^ b, "<<": lambda a, b: a << b, ">>": lambda a, b: a >> b,
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}
_REFLECTED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}
# nvFuser's operators: `/` is its truncating div, `%` its mod (C's fmod: the dividend's sign)
_OP_NAMES = {"+": "add", "-": "sub", "*": "mul", "/": "div", "%": "mod", "**": "pow",
             "&": "bitwise_and", "|": "bitwise_or", "^": "bitwise_xor", "<<": "bitwise_left_shift",
             ">>": "bitwise_right_shift", "==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}


@pytest.mark.parametrize("dtype", [DataType.Bool, DataType.Int32, DataType.Int, DataType.Half, DataType.Float,
                                   DataType.Double, DataType.ComplexFloat], ids=ids)
@pytest.mark.parametrize("sym", list(_OPERATORS))
def test_python_operators(sym, dtype):
    """t OP t, t OP number and number OP t behave as nvFuser's operators: as torch's, but
    `/` is nvFuser's div (integers truncate) and `%` its mod (torch.fmod)."""
    op, name = _OPERATORS[sym], _OP_NAMES[sym]
    a = _lhs(name, (3, 5), dtype)
    b = _rhs(name, (3, 5), dtype)
    number = 2 if sym in ("<<", ">>", "**", "%", "/") else 3
    for build, args, torch_args, what in (
        (lambda fd, x, y: op(x, y), [a, b], [a, b], f"t {sym} t"),
        (lambda fd, x: op(x, number), [a], [a, number], f"t {sym} {number}"),
        (lambda fd, x: op(number, x), [b], [number, b], f"{number} {sym} t"),
    ):
        if what.startswith(f"{number} ") and sym in ("<<", ">>"):
            continue  # a number shifted by a tensor: neither torch nor fuser define __rlshift__
        ref = {"/": _nv_div, "%": torch.fmod}.get(sym, op)
        try:
            want = expect(ref, *torch_args)
        except TorchRejects:
            # `3 < t` is evaluated as `t > 3`, in torch and in fuser
            reflected = _REFLECTED.get(name, name) if what.startswith(f"{number} ") else name
            assert_rejects(reflected, build, args)
            continue
        (out,) = fusion(build, args)
        check(out, want, f"{what} ({dtype})")


@pytest.mark.parametrize("dtype", [DataType.Bool, DataType.Int32, DataType.Half, DataType.Float,
                                   DataType.ComplexDouble], ids=ids)
def test_python_unary_operators(dtype):
    x = rand((4, 4), dtype)
    for sym, op, name in (("-", lambda t: -t, "neg"), ("abs", abs, "abs"), ("~", lambda t: ~t, "bitwise_not")):
        try:
            want = expect(op, x)
        except TorchRejects:
            assert_rejects(name, lambda fd, t: op(t), [x])
            continue
        (out,) = fusion(lambda fd, t: op(t), [x])
        check(out, want, f"{sym} ({dtype})")


def test_python_operators_with_scalar_handles():
    """Operators between tensors and Scalar handles (constants and inputs)."""
    x = rand((4, 3), DataType.Float)
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x)
        c = fd.define_scalar(2.5)
        s = fd.define_scalar(dtype=DataType.Double)
        fd.add_output((t + c) * s - t / s)
        fd.add_output(-t % c)
        fd.add_output(s ** t)
    out = execute(fd, [x, 1.25])
    check(out[0], (x + 2.5) * 1.25 - x / 1.25)
    check(out[1], torch.fmod(-x, 2.5))  # nvFuser's %: mod
    check(out[2], torch.pow(1.25, x))


def test_percent_operator_is_nvfusers_mod():
    """`%` on fusion values is nvFuser's mod: C's fmod, the sign of the dividend."""
    a, b = torch.tensor([-7, 7, -7, 7]), torch.tensor([3, -3, -3, 3])
    (out,) = fusion(lambda fd, x, y: x % y, [a, b])
    check(out, torch.tensor([-1, 1, -1, 1]))
    x = torch.tensor([-7.5, 7.5])
    (out,) = fusion(lambda fd, t: t % 2, [x])
    check(out, torch.tensor([-1.5, 1.5]))


# --- scalar-only arithmetic ----------------------------------------------------------------------

_PY_TYPE = {DataType.Bool: bool, DataType.Int: int, DataType.Int32: int, DataType.Double: float,
            DataType.Float: float, DataType.Half: float, DataType.BFloat16: float,
            DataType.ComplexDouble: complex, DataType.ComplexFloat: complex}


def _check_scalar(got, want: torch.Tensor, what: str) -> None:
    got = scalar_value(got)
    kind = {torch.bool: bool}.get(want.dtype) or (
        complex if want.dtype.is_complex else float if want.dtype.is_floating_point else int
    )
    assert type(got) is kind, f"{what}: got {type(got).__name__} {got!r}, torch's dtype is {want.dtype}"
    w = want.item()
    if got == w:
        return
    if kind in (bool, int):
        assert got == w, f"{what}: got {got!r}, expected {w!r}"
    elif not (isinstance(w, float) and math.isnan(w) and math.isnan(got)):
        rtol = 1e-5 if want.dtype in (torch.float32, torch.complex64) else 1e-12
        assert abs(got - w) <= rtol * max(1.0, abs(w)), f"{what}: got {got!r}, expected {w!r}"


def test_scalar_reciprocal_output():
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.reciprocal(fd.define_scalar(1024.0)))
    (out,) = execute(fd, [])
    _check_scalar(out, torch.reciprocal(torch.tensor(1024.0, dtype=torch.float64)), "reciprocal(1024.0)")


_SCALAR_VALUES = {DataType.Bool: [True, False], DataType.Int: [7, -3], DataType.Double: [2.5, -0.75],
                  DataType.ComplexDouble: [1 - 2j, 0.5 + 0.25j]}
_SCALAR_DTYPES = list(_SCALAR_VALUES)


@pytest.mark.parametrize("dtype", _SCALAR_DTYPES, ids=ids(_SCALAR_DTYPES))
@pytest.mark.parametrize("name", ["abs", "neg", "reciprocal", "cos", "exp", "sqrt", "floor", "logical_not",
                                  "bitwise_not", "isnan", "real", "sigmoid", "sign"])
def test_scalar_unary(name, dtype):
    """fd.ops on scalars only (constants and scalar inputs): torch on 0-dim tensors."""
    fn = UNARY[name]
    for value in _SCALAR_VALUES[dtype]:
        x = torch.tensor(value, dtype=dtype.torch)
        try:
            want = expect(fn, x)
        except TorchRejects:
            with pytest.raises(TypeError, match=rf"fd\.ops\.{name}\b"):
                with FusionDefinition() as fd:
                    fd.add_output(getattr(fd.ops, name)(fd.define_scalar(value)))
            return
        with FusionDefinition() as fd:
            fd.add_output(getattr(fd.ops, name)(fd.define_scalar(value)))
            fd.add_output(getattr(fd.ops, name)(fd.define_scalar(dtype=dtype)))
        const_out, input_out = execute(fd, [value])
        _check_scalar(const_out, want, f"{name}({value!r})")
        _check_scalar(input_out, want, f"{name}(input {value!r})")


_SCALAR_BINARY = ["add", "sub", "mul", "div", "mod", "remainder", "fmod", "pow", "atan2", "maximum", "minimum",
                  "eq", "ne", "lt", "ge", "logical_and", "bitwise_and", "bitwise_xor", "bitwise_left_shift", "gcd"]


@pytest.mark.parametrize("rhs", _SCALAR_DTYPES, ids=ids(_SCALAR_DTYPES))
@pytest.mark.parametrize("lhs", _SCALAR_DTYPES, ids=ids(_SCALAR_DTYPES))
@pytest.mark.parametrize("name", _SCALAR_BINARY)
def test_scalar_binary(name, lhs, rhs):
    fn = BINARY[name]
    a, b = _SCALAR_VALUES[lhs][0], _SCALAR_VALUES[rhs][1 if rhs is DataType.Int else 0]
    if name in ("pow", "bitwise_left_shift") and rhs is DataType.Int:
        b = 2
    ta, tb = torch.tensor(a, dtype=lhs.torch), torch.tensor(b, dtype=rhs.torch)
    try:
        want = expect(fn, ta, tb)
    except TorchRejects:
        with pytest.raises(TypeError, match=rf"fd\.ops\.{name}\b"):
            with FusionDefinition() as fd:
                fd.add_output(getattr(fd.ops, name)(fd.define_scalar(a), fd.define_scalar(b)))
        return
    with FusionDefinition() as fd:
        fd.add_output(getattr(fd.ops, name)(fd.define_scalar(a), fd.define_scalar(b)))
        fd.add_output(getattr(fd.ops, name)(fd.define_scalar(dtype=lhs), fd.define_scalar(dtype=rhs)))
    const_out, input_out = execute(fd, [a, b])
    _check_scalar(const_out, want, f"{name}({a!r}, {b!r})")
    _check_scalar(input_out, want, f"{name}(inputs {a!r}, {b!r})")


def test_scalar_semantics():
    """nvFuser's on scalars: Int div truncates, truediv gives a float, mod is fmod,
    remainder is Python's, `%` is mod and `/` is div."""
    with FusionDefinition() as fd:
        a, b = fd.define_scalar(-7), fd.define_scalar(2)
        fd.add_output(fd.ops.div(a, b))
        fd.add_output(fd.ops.mod(a, b))
        fd.add_output(fd.ops.remainder(a, b))
        fd.add_output(a % b)
        fd.add_output(a / b)
        fd.add_output(fd.ops.truediv(a, b))
    div, mod, rem, pct, slash, tdiv = (scalar_value(v) for v in execute(fd, []))
    assert isinstance(div, int) and div == -3
    assert (mod, rem, pct) == (-1, 1, -1)
    assert slash == -3 and isinstance(tdiv, float) and tdiv == -3.5


def test_scalar_cast():
    with FusionDefinition() as fd:
        x = fd.define_scalar(dtype=DataType.Double)
        fd.add_output(fd.ops.cast(x, DataType.Int))
        fd.add_output(fd.ops.cast(x, DataType.Bool))
        fd.add_output(fd.ops.cast(fd.define_scalar(3), DataType.Double))
    i, b, d = (scalar_value(v) for v in execute(fd, [-2.75]))
    assert (i, b, d) == (-2, True, 3.0) and type(i) is int and type(b) is bool and type(d) is float


def test_scalar_feeds_tensor_op():
    """A computed scalar used in a tensor op and output beside it."""
    x = rand((5,), DataType.Float)
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x)
        s = fd.define_scalar(dtype=DataType.Double)
        r = fd.ops.reciprocal(s)
        fd.add_output(fd.ops.mul(t, r))
        fd.add_output(r)
    out, r = execute(fd, [x, 8.0])
    check(out, x * 0.125)
    assert scalar_value(r) == 0.125
