"""fuser.codegen.ops and the runtime header, without a GPU: every (op, dtypes) combination
the frontend accepts emits an expression that compiles (one translation unit, nvcc -cubin),
constants print exactly, and unsupported combinations fail by name.

`cases()` and `kernel_source()` are shared with tests/test_codegen_ops_cuda.py."""
from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import pytest

from fuser import DataType, FusionDefinition
from fuser.ops.arith import common_dtype
from fuser.codegen import ops as cops
from fuser.ir import BinaryOp, BinaryOpType, TernaryOp, TernaryOpType, TensorView, UnaryOp, UnaryOpType

ALL_DTYPES = [
    DataType.Bool, DataType.Int32, DataType.Int, DataType.Half, DataType.BFloat16, DataType.Float8_e4m3fn,
    DataType.Float8_e5m2, DataType.Float, DataType.Double, DataType.ComplexFloat, DataType.ComplexDouble,
]
# Python numbers beside a tensor, one of each kind (shift counts and integer exponents small)
SCALARS = [True, 3, -1.5, complex(0.5, -2.0)]
_SMALL_INT = {BinaryOpType.Lshift, BinaryOpType.Rshift, BinaryOpType.LogicalRshift, BinaryOpType.Pow}

_FRONTEND_BINARY = {
    op: op.value for op in BinaryOpType if op is not BinaryOpType.CeilDiv
}


@dataclass(frozen=True)
class Case:
    """One elementwise op on given operand dtypes, as the frontend built it.

    `operands` holds, per operand, a DataType (a tensor input) or a Python number (a
    constant scalar, whose dtype is in `dtypes`)."""

    op: Any  # UnaryOpType (Cast included) | BinaryOpType | TernaryOpType
    name: str  # the fd.ops name
    operands: tuple
    dtypes: tuple
    out: DataType
    common: DataType | None  # promoted type of the operands (comparisons, threshold)

    @property
    def tensor_positions(self) -> list[int]:
        return [k for k, o in enumerate(self.operands) if isinstance(o, DataType)]

    def __str__(self) -> str:
        ops = ", ".join(o.name if isinstance(o, DataType) else repr(o) for o in self.operands)
        return f"{self.name}({ops}) -> {self.out.name}"


def define(name: str, operands: tuple, extra: tuple = ()) -> FusionDefinition:
    """A FusionDefinition applying fd.ops.<name> to tensors (DataType) and numbers."""
    with FusionDefinition() as fd:
        args = [fd.define_tensor(shape=[-1], contiguity=[True], dtype=o) if isinstance(o, DataType) else o
                for o in operands]
        fd.add_output(getattr(fd.ops, name)(*args, *extra))
    return fd


def _case_of(name: str, operands: tuple, extra: tuple = ()) -> Case | None:
    try:
        fd = define(name, operands, extra)
    except TypeError:
        return None  # the frontend rejects these dtypes
    except RuntimeError as err:
        # torch.promote_types refuses fp8 beside another type; the frontend lets that through
        if "Float8" in str(err):
            return None
        raise
    exprs = [e for e in fd.fusion.exprs() if isinstance(e, (UnaryOp, BinaryOp, TernaryOp))]
    assert len(exprs) == 1, f"{name}{operands}: expected one elementwise expr, got {exprs}"
    (e,) = exprs
    assert all(isinstance(v, TensorView) == isinstance(o, DataType) for v, o in zip(e.inputs, operands))
    common = None
    if isinstance(e, BinaryOp) or (isinstance(e, TernaryOp) and e.op_type is TernaryOpType.Threshold):
        common = common_dtype(e.inputs[0], e.inputs[1])
    return Case(e.op_type, name, operands, tuple(v.dtype for v in e.inputs), e.output.dtype, common)


def _scalars_for(op: BinaryOpType) -> list:
    return [2 if (op in _SMALL_INT and isinstance(s, int) and not isinstance(s, bool)) else s for s in SCALARS]


@functools.lru_cache(maxsize=None)
def cases() -> tuple[Case, ...]:
    """Every elementwise (op, operand dtypes) combination the frontend accepts: unary ops and
    casts on each dtype, binary ops on each pair of tensor dtypes and on a tensor with a number
    of each kind on either side, and where/lerp/clamp/threshold on the usual operand mixes."""
    out: list[Case | None] = []
    for op in UnaryOpType:
        if op is UnaryOpType.Cast:
            continue
        out += [_case_of(op.value, (dt,)) for dt in ALL_DTYPES]
    for src in ALL_DTYPES:
        out += [_case_of("cast", (src,), (dst,)) for dst in ALL_DTYPES if dst is not src]
    for op, name in _FRONTEND_BINARY.items():
        for a in ALL_DTYPES:
            out += [_case_of(name, (a, b)) for b in ALL_DTYPES]
            for s in _scalars_for(op):
                out += [_case_of(name, (a, s)), _case_of(name, (s, a))]
    for x in ALL_DTYPES:
        for y in ALL_DTYPES:
            out.append(_case_of("where", (DataType.Bool, x, y)))
        for s in SCALARS:
            out += [_case_of("where", (DataType.Bool, x, s)), _case_of("where", (DataType.Bool, s, x))]
        out.append(_case_of("lerp", (x, x, x)))
        out += [_case_of("lerp", (x, x, w)) for w in (0.25, 0.75, complex(0.25, 0.5))]
        for lo, hi in ((-1, 2), (-0.5, 0.5), (False, True), (x, x), (DataType.Double, DataType.Double)):
            out.append(_case_of("clamp", (x, lo, hi)))
        for th, value in ((0, 7), (0.5, -1.5), (x, x), (DataType.Double, 2)):
            out.append(_case_of("threshold", (x, th, value)))
    for s, t in ((1, 2), (1.5, -2), (True, False), (3, 0.25), (complex(1, 1), 2)):
        out.append(_case_of("where", (DataType.Bool, s, t)))
    seen: dict[tuple, Case] = {}
    for c in out:
        if c is not None:
            seen.setdefault((c.op, c.operands, c.dtypes, c.out, c.common), c)
    return tuple(seen.values())


def expression(case: Case, args: list[str]) -> str:
    """The emitted C++ expression of `case` over the C expressions `args` (one per operand)."""
    d = case.dtypes
    if isinstance(case.op, UnaryOpType):
        return cops.emit_unary(case.op, args[0], d[0], case.out)
    if isinstance(case.op, BinaryOpType):
        return cops.emit_binary(case.op, args[0], args[1], d[0], d[1], case.out, common=case.common)
    return cops.emit_ternary(case.op, *args, d, case.out, common=case.common)


def kernel_source(kernels: Sequence[tuple[str, Sequence[Case]]],
                  operand: Callable[[int, int], str] = lambda j, k: f"in{j}_{k}[i]") -> str:
    """One translation unit. Kernel `name` computes, for each of its cases j,
    `out<j>[i] = <expr>` over tensor pointers `in<j>_<k>` (operand k of case j) and the case's
    numbers as constants. Parameters: per case its tensor inputs then its output, then int n."""
    lines = [f'#include "{cops.RUNTIME_HEADER_NAME}"', ""]
    for name, group in kernels:
        params, body = [], []
        for j, case in enumerate(group):
            args = []
            for k, (o, dt) in enumerate(zip(case.operands, case.dtypes)):
                if isinstance(o, DataType):
                    params.append(f"const {cops.ctype(dt)}* __restrict__ in{j}_{k}")
                    args.append(operand(j, k))
                else:
                    args.append(cops.emit_constant(o, dt))
            params.append(f"{cops.ctype(case.out)}* __restrict__ out{j}")
            body.append(f"  // {case}")
            body.append(f"  out{j}[i] = {expression(case, args)};")
        lines.append(f'extern "C" __global__ void {name}({", ".join(params)}, int n) {{')
        lines.append("  int i = blockIdx.x * blockDim.x + threadIdx.x;")
        lines.append("  if (i >= n) return;")
        lines += body
        lines.append("}")
    return "\n".join(lines) + "\n"


def chunks(items: Sequence[Any], size: int) -> list[list[Any]]:
    return [list(items[k:k + size]) for k in range(0, len(items), size)]


# --- compile everything -----------------------------------------------------------------------------


def test_cases_cover_every_op_and_dtype():
    got = cases()
    ops = {c.op for c in got}
    assert set(UnaryOpType) <= ops
    assert set(_FRONTEND_BINARY) <= ops
    assert set(TernaryOpType) <= ops
    # each dtype appears as an operand and as a result
    assert {d for c in got for d in c.dtypes} == set(ALL_DTYPES)
    assert {c.out for c in got} == set(ALL_DTYPES)
    assert len(got) > 2000


def unsupported(case: Case) -> bool:
    """The combinations the frontend accepts that the runtime does not implement (PyTorch has
    no kernel for them either): nextafter on fp8."""
    return case.op is BinaryOpType.Nextafter and case.out in (DataType.Float8_e4m3fn, DataType.Float8_e5m2)


def test_only_the_known_unsupported_cases_raise():
    for case in cases():
        if unsupported(case):
            with pytest.raises(NotImplementedError, match="nextafter"):
                expression(case, ["a", "b"])
        else:
            expression(case, ["a", "b", "c"][: len(case.operands)])


def _operand_expr(j: int, k: int) -> str:
    # exercise precedence: operands arrive as arbitrary expressions, not just names
    return f"*(in{j}_{k} + i)"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc on PATH")
def test_every_case_compiles_with_nvcc():
    # a number operand compiles like a tensor one of its dtype (a literal instead of a load):
    # one case per (op, operand dtypes, result, common type) suffices, eight to a kernel
    distinct: dict[tuple, Case] = {}
    for c in cases():
        if not unsupported(c):
            distinct.setdefault((c.op, c.dtypes, c.out, c.common), c)
    kernels = [(f"k{n}", group) for n, group in enumerate(chunks(list(distinct.values()), 8))]
    source = kernel_source(kernels, _operand_expr)
    # a few extra uses of the runtime: vector load/store, Array, constants as initialisers
    source += _EXTRA
    with tempfile.TemporaryDirectory(prefix="fuser-codegen-test-") as tmp:
        for fname, text in cops.runtime_headers().items():
            Path(tmp, fname).write_text(text)
        Path(tmp, "all_ops.cu").write_text(source)
        proc = subprocess.run(
            ["nvcc", "-cubin", "-arch=sm_90", "--std=c++17", "-I", tmp, "-o", "all_ops.cubin", "all_ops.cu"],
            cwd=tmp, capture_output=True, text=True, timeout=600,
        )
        assert proc.returncode == 0, _first_errors(proc.stdout + proc.stderr, source)
        cubin = Path(tmp, "all_ops.cubin").read_bytes()
    assert cubin[:4] == b"\x7fELF"
    assert len(distinct) > 2500


_EXTRA = r"""
extern "C" __global__ void vec_copy(const __half* __restrict__ a, __half* __restrict__ b,
                                    const float* __restrict__ f, float* __restrict__ g,
                                    const double* __restrict__ d, double* __restrict__ e,
                                    const bool* __restrict__ p, bool* __restrict__ q) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  __half r[8];
  fuser::load_vec<__half, 8>(r, a + 8 * i);
  fuser::store_vec<__half, 8>(b + 8 * i, r);
  fuser::Array<float, 4> v;
  fuser::load_vec<float, 4>(v, f + 4 * i);
  v[0] = fuser::maximum(v[0], v[1]);
  fuser::store_vec<float, 4>(g + 4 * i, v);
  fuser::Array<double, 4> w = fuser::load_vec<double, 4>(d + 4 * i);  // two 16-byte loads
  fuser::store_vec<double, 4>(e + 4 * i, w);
  bool s[2];
  fuser::load_vec<bool, 2>(s, p + 2 * i);
  fuser::store_vec<bool, 2>(q + 2 * i, s);
  __shared__ __half smem[32];
  smem[threadIdx.x % 32] = fuser::half_from_bits(0x3c00);
  __syncthreads();
  fuser::complex<double> z(1.0, 2.0);
  e[0] = fuser::abs(z / z) + (double)sizeof(fuser::Array<__half, 3>) + fuser::half_to_float(smem[(threadIdx.x + 1) % 32]);
}
static_assert(sizeof(__half) == 2 && alignof(__half) == 2, "half");
static_assert(sizeof(__bfloat) == 2 && sizeof(__e4m3) == 1 && sizeof(__e5m2) == 1, "narrow");
static_assert(sizeof(fuser::complex<float>) == 8 && alignof(fuser::complex<float>) == 8, "complex64");
static_assert(sizeof(fuser::complex<double>) == 16 && alignof(fuser::complex<double>) == 16, "complex128");
static_assert(alignof(fuser::Array<__half, 8>) == 16 && alignof(fuser::Array<float, 2>) == 8, "Array");
"""


def _first_errors(log: str, source: str, limit: int = 12) -> str:
    """The compiler's first error lines, each with the kernel line it points at."""
    lines = source.splitlines()
    out = []
    for row in log.splitlines():
        if "error" in row:
            out.append(row)
            head = row.split(": error")[0]
            if head.startswith("all_ops.cu(") and head.endswith(")"):
                n = int(head[len("all_ops.cu("):-1])
                out.append("    " + lines[max(n - 2, 0)])
                out.append("    " + lines[n - 1])
        if len(out) >= 3 * limit:
            break
    return "\n".join(out) or log[-4000:]


# --- constants ----------------------------------------------------------------------------------------

INF, NAN = float("inf"), float("nan")


@pytest.mark.parametrize(
    "value,dtype,want",
    [
        (INF, DataType.Float, "__uint_as_float(0x7f800000u)"),
        (-INF, DataType.Float, "__uint_as_float(0xff800000u)"),
        (NAN, DataType.Float, "__uint_as_float(0x7fc00000u)"),
        (INF, DataType.Double, "__longlong_as_double(0x7ff0000000000000LL)"),
        (-INF, DataType.Double, "(-__longlong_as_double(0x7ff0000000000000LL))"),
        (NAN, DataType.Double, "__longlong_as_double(0x7ff8000000000000LL)"),
        (-0.0, DataType.Float, "(-0.0f)"),
        (-0.0, DataType.Double, "(-0.0)"),
        (0.1, DataType.Float, "0.1f"),
        (0.1, DataType.Double, "0.1"),
        (3, DataType.Double, "3.0"),
        (1e300, DataType.Float, "__uint_as_float(0x7f800000u)"),  # overflows float
        (1e-300, DataType.Double, "1e-300"),
        (-1.5, DataType.Float, "(-1.5f)"),
        (True, DataType.Float, "1.0f"),
        (-(2**63), DataType.Int, "(-9223372036854775807LL - 1LL)"),
        (2**63 - 1, DataType.Int, "9223372036854775807LL"),
        (-(2**31), DataType.Int32, "(-2147483647 - 1)"),
        (-7, DataType.Int32, "(-7)"),
        (2.9, DataType.Int, "2LL"),
        (True, DataType.Int32, "1"),
        (0, DataType.Bool, "false"),
        (-2.5, DataType.Bool, "true"),
        (complex(1.5, -2), DataType.ComplexFloat, "fuser::complex<float>(1.5f, (-2.0f))"),
        (complex(INF, NAN), DataType.ComplexDouble,
         "fuser::complex<double>(__longlong_as_double(0x7ff0000000000000LL), __longlong_as_double(0x7ff8000000000000LL))"),
        (2, DataType.ComplexDouble, "fuser::complex<double>(2.0, 0.0)"),
        (1.0, DataType.Half, "fuser::half_from_bits(0x3c00)"),
        (-0.0, DataType.Half, "fuser::half_from_bits(0x8000)"),
        (INF, DataType.Half, "fuser::half_from_bits(0x7c00)"),
        (70000.0, DataType.Half, "fuser::half_from_bits(0x7c00)"),
        (1.0, DataType.BFloat16, "fuser::bfloat_from_bits(0x3f80)"),
        (-INF, DataType.BFloat16, "fuser::bfloat_from_bits(0xff80)"),
        (448.0, DataType.Float8_e4m3fn, "fuser::e4m3_from_bits(0x7e)"),
        (-1.0, DataType.Float8_e4m3fn, "fuser::e4m3_from_bits(0xb8)"),
        (1.0, DataType.Float8_e5m2, "fuser::e5m2_from_bits(0x3c)"),
        (INF, DataType.Float8_e5m2, "fuser::e5m2_from_bits(0x7c)"),
    ],
)
def test_emit_constant(value, dtype, want):
    assert cops.emit_constant(value, dtype) == want


def test_emit_constant_float_literals_round_trip():
    import struct

    for v in (1 / 3, 1e-45, 3.4028234663852886e38, 16777217.0, 2.5e-8, 123456789.0):
        text = cops.emit_constant(v, DataType.Float)
        assert text.endswith("f")
        assert struct.unpack("<f", struct.pack("<f", float(text[:-1])))[0] == struct.unpack("<f", struct.pack("<f", v))[0]
    for v in (1 / 3, 5e-324, 1.7976931348623157e308, -2.0**-1074):
        text = cops.emit_constant(v, DataType.Double)
        assert float(text.strip("()")) == v


def test_emit_constant_rejects_out_of_range_and_nan_integers():
    with pytest.raises(ValueError, match="out of range"):
        cops.emit_constant(2**63, DataType.Int)
    with pytest.raises(ValueError, match="out of range"):
        cops.emit_constant(2**31, DataType.Int32)
    with pytest.raises(ValueError, match="Int"):
        cops.emit_constant(NAN, DataType.Int)
    with pytest.raises(TypeError):
        cops.emit_constant("1", DataType.Int)


# --- emitters: types, shapes of expressions, errors ------------------------------------------------------


def test_ctype_and_compute_dtype():
    assert cops.ctype(DataType.Half) == "__half"
    assert cops.ctype(DataType.BFloat16) == "__bfloat"
    assert cops.ctype(DataType.Int) == "long long"
    assert cops.ctype(DataType.ComplexFloat) == "fuser::complex<float>"
    for dt in (DataType.Half, DataType.BFloat16, DataType.Float8_e4m3fn, DataType.Float8_e5m2):
        assert cops.compute_dtype(dt) is DataType.Float
    for dt in (DataType.Double, DataType.Int32, DataType.Bool, DataType.ComplexDouble):
        assert cops.compute_dtype(dt) is dt
    with pytest.raises(NotImplementedError, match="Null"):
        cops.ctype(DataType.Null)


def test_narrow_floats_compute_in_float_and_round_once():
    got = cops.emit_binary(BinaryOpType.Add, "a", "b", DataType.Half, DataType.Half, DataType.Half)
    assert got == "fuser::float_to_half((fuser::half_to_float(a) + fuser::half_to_float(b)))"
    got = cops.emit_unary(UnaryOpType.Exp, "x", DataType.BFloat16, DataType.BFloat16)
    assert got == "fuser::float_to_bfloat(fuser::exp(fuser::bfloat_to_float(x)))"
    # a cast between narrow types goes through float, as PyTorch's
    assert cops.emit_cast("x", DataType.Half, DataType.Float8_e4m3fn) == "fuser::float_to_e4m3(fuser::half_to_float(x))"
    assert cops.emit_cast("x", DataType.Double, DataType.Half) == "fuser::float_to_half(((float)x))"


def test_mixed_operands_convert_inside_the_expression():
    got = cops.emit_binary(BinaryOpType.Div, "a", "b", DataType.Int32, DataType.Int, DataType.Float)
    assert got == "(((float)a) / ((float)b))"
    # a float tensor against a double number compares in float (common), two tensors in double
    lt = cops.emit_binary(BinaryOpType.Lt, "a", "0.1", DataType.Float, DataType.Double, DataType.Bool, common=DataType.Float)
    assert lt == "(a < ((float)0.1))"
    lt = cops.emit_binary(BinaryOpType.Lt, "a", "b", DataType.Float, DataType.Double, DataType.Bool)
    assert lt == "(((double)a) < b)"


def test_operands_are_parenthesised():
    got = cops.emit_binary(BinaryOpType.Sub, "x + y", "p ? q : r", DataType.Float, DataType.Float, DataType.Float)
    assert got == "((x + y) - (p ? q : r))"
    got = cops.emit_binary(BinaryOpType.Mul, "f(x)", "t[i]", DataType.Int, DataType.Int, DataType.Int)
    assert got == "(f(x) * t[i])"
    assert cops.emit_cast("-x", DataType.Int, DataType.Int32) == "((int)(-x))"


def test_cast_semantics():
    assert cops.emit_cast("x", DataType.Float, DataType.Float) == "x"
    assert cops.emit_cast("x", DataType.Float, DataType.Bool) == "fuser::nonzero(x)"
    assert cops.emit_cast("z", DataType.ComplexDouble, DataType.Float) == "((float)fuser::real(z))"
    assert cops.emit_cast("x", DataType.Int, DataType.ComplexFloat) == "fuser::complex<float>(((float)x), 0.0f)"
    assert cops.emit_cast("z", DataType.ComplexFloat, DataType.ComplexDouble) == "fuser::complex<double>(z)"
    assert cops.emit_unary(UnaryOpType.Cast, "x", DataType.Bool, DataType.Half) == "fuser::float_to_half(((float)x))"


def test_where_lerp_clamp_threshold():
    w = cops.emit_ternary(TernaryOpType.Where, "c", "a", "2LL", (DataType.Bool, DataType.Int32, DataType.Int), DataType.Int32)
    assert w == "(c ? a : ((int)2LL))"
    t = cops.emit_ternary(TernaryOpType.Threshold, "x", "0.5", "7LL", (DataType.Int32, DataType.Double, DataType.Int),
                          DataType.Int32)
    assert t == "fuser::threshold<float>(x, ((float)0.5), ((int)7LL))"
    c = cops.emit_ternary(TernaryOpType.Clamp, "x", "lo", "hi", (DataType.Half,) * 3, DataType.Half)
    assert c.startswith("fuser::float_to_half(fuser::clamp(")


@pytest.mark.parametrize(
    "call,pattern",
    [
        (lambda: cops.emit_unary(UnaryOpType.Erf, "x", DataType.ComplexFloat, DataType.ComplexFloat),
         r"erf: .*ComplexFloat"),
        (lambda: cops.emit_unary(UnaryOpType.Sin, "x", DataType.Int, DataType.Int), r"sin: .*DataType\.Int"),
        (lambda: cops.emit_binary(BinaryOpType.Lt, "a", "b", DataType.ComplexFloat, DataType.ComplexFloat, DataType.Bool),
         r"lt: .*ComplexFloat, DataType\.ComplexFloat"),
        (lambda: cops.emit_binary(BinaryOpType.BitwiseAnd, "a", "b", DataType.Float, DataType.Float, DataType.Float),
         r"bitwise_and: .*DataType\.Float"),
        (lambda: cops.emit_binary(BinaryOpType.Nextafter, "a", "b", DataType.Float8_e4m3fn, DataType.Float8_e4m3fn,
                                  DataType.Float8_e4m3fn), r"nextafter: .*Float8_e4m3fn"),
        (lambda: cops.emit_binary(BinaryOpType.Atan2, "a", "b", DataType.Int, DataType.Int, DataType.Int),
         r"atan2: .*DataType\.Int"),
        (lambda: cops.emit_ternary(TernaryOpType.Lerp, "a", "b", "c", (DataType.Int,) * 3, DataType.Int),
         r"lerp: .*DataType\.Int"),
        (lambda: cops.emit_ternary(TernaryOpType.Clamp, "a", "b", "c", (DataType.ComplexFloat,) * 3,
                                   DataType.ComplexFloat), r"clamp: .*ComplexFloat"),
        (lambda: cops.emit_unary(UnaryOpType.Neg, "x", DataType.Null, DataType.Float), r"neg: .*Null"),
        (lambda: cops.emit_cast("x", DataType.Float, DataType.Null), r"cast: .*Null"),
    ],
)
def test_unsupported_combinations_name_op_and_dtypes(call, pattern):
    with pytest.raises(NotImplementedError, match=pattern):
        call()


def test_runtime_headers_are_package_data():
    headers = cops.runtime_headers()
    assert cops.RUNTIME_HEADER_NAME in headers
    text = headers[cops.RUNTIME_HEADER_NAME]
    assert "namespace fuser" in text and "struct alignas(2) __half" in text
    # self-contained: includes nothing (NVRTC compiles it without include paths)
    assert not any(line.lstrip().startswith("#include") for line in text.splitlines())


@pytest.mark.nvcc
def test_bfloat16_widens_as_a_pair_not_a_shift():
    # bf16 -> float puts the bits in a float's high half, built as the pair {0, b}: ptxas then
    # moves the high element of a loaded 32-bit word into place with one PRMT (a 16-bit shift
    # cost it a PRMT and a SHF). An RMSNorm row of bf16 widens every element so.
    import re

    import torch

    from cuda_units import ptx_of

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
        xf = fd.ops.cast(x, DataType.Float)
        ms = fd.ops.broadcast_in_dim(fd.ops.sum(fd.ops.mul(xf, xf), dims=[1]), shape=x.shape(), broadcast_dims=[0])
        fd.add_output(fd.ops.cast(fd.ops.mul(xf, fd.ops.rsqrt(ms)), DataType.BFloat16))
    ptx = ptx_of(fd.cuda_code_for([torch.empty(4096, 4096, dtype=torch.bfloat16, device="meta")]))
    assert ptx.count("cvt.u32.u16") == 0
    assert len(re.findall(r"mov\.b32\s+%r\d+, \{%rs\d+, %rs\d+\};", ptx)) >= 16
