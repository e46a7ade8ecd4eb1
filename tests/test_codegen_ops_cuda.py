"""Every elementwise (op, dtypes) combination the frontend accepts, run as a generated CUDA
kernel on the GPU and compared with the reference executor on the same CUDA inputs.

Kernels come from fuser.codegen.ops over the runtime header, compiled with NVRTC (one module
per op, compiled in parallel) and launched through fuser.runtime.launch. Inputs hold special
values (nan, +-inf, +-0, extreme magnitudes, integer extremes); outputs start as poison.
Cases whose result is undefined are steered clear of: integer division by zero, float ->
integer casts out of range, complex transcendental functions at non-finite points."""
from __future__ import annotations

import hashlib
import os
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("pycuda")

import torch  # noqa: E402

from fuser import DataType  # noqa: E402
from fuser.codegen.ops import RUNTIME_HEADER_NAME, compute_dtype, ctype, runtime_headers  # noqa: E402
from fuser.ir import BinaryOpType, TernaryOpType, UnaryOpType  # noqa: E402
from fuser.runtime.reference import run_reference  # noqa: E402
from fuser.runtime.tolerance import assert_close, tolerances  # noqa: E402
from test_codegen_ops import Case, cases, chunks, define, kernel_source, unsupported  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore:Casting complex values to real")]

N = 1037  # elements per case: not a multiple of the block
BLOCK = 128
PER_KERNEL = 8  # cases computed by one kernel

OP_NAMES = sorted(
    [op.value for op in UnaryOpType if op is not UnaryOpType.Cast]
    + ["cast"]
    + [op.value for op in BinaryOpType if op is not BinaryOpType.CeilDiv]
    + [op.value for op in TernaryOpType]
)

# complex ops computed with transcendental functions: tested on finite, moderate values
_COMPLEX_EXACT = {
    UnaryOpType.Abs, UnaryOpType.Neg, UnaryOpType.Real, UnaryOpType.Imag, UnaryOpType.IsFinite,
    UnaryOpType.IsInf, UnaryOpType.IsNan, UnaryOpType.IsReal, UnaryOpType.LogicalNot, UnaryOpType.Cast,
    BinaryOpType.Add, BinaryOpType.Sub, BinaryOpType.Eq, BinaryOpType.Ne, BinaryOpType.LogicalAnd,
    BinaryOpType.LogicalOr, TernaryOpType.Where,
}
_INT_DIVISIONS = {BinaryOpType.Div, BinaryOpType.Mod, BinaryOpType.Fmod, BinaryOpType.Remainder}

_FLOAT_SPECIALS = [
    float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.5, 1e30, -1e30,
    1e-30, -1e-30, 1e-40, 1e-310, 65504.0, 65520.0, 70000.0, 448.0, 464.0, 480.0, 500.0, -500.0, 57344.0, 61440.0,
    3.4e38, -3.4e38, 1e300, 2.0**-24, 0.1, -0.75,
]


# --- inputs -----------------------------------------------------------------------------------------


def _generator(case: Case, k: int) -> torch.Generator:
    salt = os.environ.get("FUSER_TEST_SEED", "0")
    digest = hashlib.sha256(f"{salt}:{case}:{k}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))


def _floats(gen: torch.Generator, moderate: bool) -> torch.Tensor:
    if moderate:
        return torch.randn(N, generator=gen, dtype=torch.float64) * 1.5
    scale = 10.0 ** (torch.rand(N, generator=gen, dtype=torch.float64) * 6 - 3)
    x = torch.randn(N, generator=gen, dtype=torch.float64) * scale
    x[: len(_FLOAT_SPECIALS)] = torch.tensor(_FLOAT_SPECIALS, dtype=torch.float64)
    return x


def _values(dt: DataType, gen: torch.Generator, moderate: bool) -> torch.Tensor:
    """N values of `dt` on the CPU: specials first, then random ones."""
    if dt is DataType.Bool:
        return torch.rand(N, generator=gen) < 0.5
    if dt.is_integral:
        info = torch.iinfo(dt.torch)
        small = torch.randint(-100, 101, (N,), generator=gen, dtype=torch.int64)
        big = torch.randint(info.min, info.max, (N,), generator=gen, dtype=torch.int64)
        x = torch.where(torch.rand(N, generator=gen) < 0.15, big, small).to(dt.torch)
        specials = [0, 1, -1, 2, -2, 3, -3, 7, -7, 31, 32, 63, 64, info.max, info.min, info.max - 1, info.min + 1]
        x[: len(specials)] = torch.tensor(specials, dtype=dt.torch)
        return x
    if dt.is_complex:
        re, im = _floats(gen, moderate), _floats(gen, moderate)
        if not moderate:
            im = im[torch.randperm(N, generator=gen)]  # specials paired with ordinary values too
        return torch.complex(re, im).to(dt.torch)
    return _floats(gen, moderate).to(torch.float32 if dt.is_reduced_float else dt.torch).to(dt.torch)


def _compute_kind(case: Case) -> DataType:
    """The dtype the case's op runs in (as fuser.codegen.ops chooses it)."""
    if isinstance(case.op, BinaryOpType) and (case.op.is_comparison or case.op.is_logical):
        return compute_dtype(case.common)
    return compute_dtype(case.out)


def _moderate(case: Case) -> bool:
    complex_operands = any(d.is_complex for d in case.dtypes) or case.out.is_complex
    return complex_operands and case.op not in _COMPLEX_EXACT


def make_inputs(case: Case) -> list[torch.Tensor]:
    """CPU tensors for the case's tensor operands, with undefined cases removed."""
    moderate = _moderate(case)
    xs = {k: _values(case.dtypes[k], _generator(case, k), moderate) for k in case.tensor_positions}
    op, comp = case.op, _compute_kind(case)
    if op in _INT_DIVISIONS and (comp.is_integral or comp.is_boolean):
        if 1 in xs:  # no division by zero
            d = xs[1]
            xs[1] = torch.ones_like(d) if d.dtype == torch.bool else torch.where(d == 0, torch.ones_like(d), d)
        if 0 in xs and xs[0].dtype != torch.bool:  # no INT_MIN % -1
            info = torch.iinfo(xs[0].dtype)
            xs[0] = torch.where(xs[0] == info.min, torch.full_like(xs[0], info.min + 1), xs[0])
    if op is BinaryOpType.Gcd:
        for k, x in xs.items():
            if x.dtype != torch.bool:
                info = torch.iinfo(x.dtype)
                xs[k] = torch.where(x == info.min, torch.full_like(x, info.min + 1), x)
    if op is BinaryOpType.Pow and (comp.is_integral or comp.is_boolean) and 0 not in xs and 1 in xs:
        xs[1] = xs[1].clamp(min=0) if xs[1].dtype != torch.bool else xs[1]  # torch refuses n ** -k for a number n
    if op is BinaryOpType.Pow and comp.is_complex:
        for k, x in xs.items():  # huge integer powers: the phase of an overflowed result is noise
            if x.dtype in (torch.int32, torch.int64):
                xs[k] = x.remainder(17) - 8
    if op is UnaryOpType.Cast and (case.out.is_integral) and not (case.dtypes[0].is_integral or case.dtypes[0].is_boolean):
        # float -> integer is defined only for finite values in range
        x = xs[0]
        wide = x.to(torch.complex128 if x.is_complex() else torch.float64)
        re = wide.real if x.is_complex() else wide
        re = torch.where(torch.isfinite(re), re.clamp(-1e9, 1e9), torch.zeros_like(re))
        wide = torch.complex(re, wide.imag) if x.is_complex() else re
        xs[0] = wide.to(x.dtype)
    return [xs[k] for k in case.tensor_positions]


def reference(case: Case, inputs: list[torch.Tensor]) -> torch.Tensor:
    extra = (case.out,) if case.op is UnaryOpType.Cast else ()
    fd = define(case.name, case.operands, extra)
    (out,) = run_reference(fd.fusion, inputs)
    return out


def _poison(dt: DataType) -> torch.Tensor:
    raw = torch.full((N * dt.itemsize,), 0xA5, dtype=torch.uint8, device="cuda")
    return raw.view(dt.torch)


# --- compiling --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def modules():
    """op name -> (cubin or the compile error, [(kernel name, cases)])."""
    from fuser.runtime import nvrtc

    arch = nvrtc.device_arch(None)
    headers = runtime_headers()
    by_name: dict[str, list[Case]] = defaultdict(list)
    for case in cases():
        if not unsupported(case):
            by_name[case.name].append(case)
    groups = {name: [(f"{name}_{k}", g) for k, g in enumerate(chunks(cs, PER_KERNEL))] for name, cs in by_name.items()}

    def build(name: str):
        try:
            return nvrtc.compile(kernel_source(groups[name]), name=f"{name}.cu", arch=arch, headers=headers)
        except Exception as err:  # reported by the op's test
            return err

    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 4)) as pool:
        cubins = dict(zip(groups, pool.map(build, groups)))
    return {name: (cubins[name], groups[name]) for name in groups}


# --- checking -----------------------------------------------------------------------------------------


def _mismatches(case: Case, inputs: list[torch.Tensor], got: torch.Tensor, want: torch.Tensor, limit: int = 4) -> str:
    """The first differing elements, with their inputs."""
    g, w = got.cpu(), want.cpu()
    wide = torch.complex128 if w.is_complex() else torch.float64
    if w.is_floating_point() or w.is_complex():
        r, a = tolerances(want.dtype)
        bad = ~torch.isclose(g.to(wide), w.to(wide), rtol=r, atol=a, equal_nan=True)
    else:
        bad = g != w
    rows = [f"{case}: {int(bad.sum())} of {N} elements differ"]
    for i in bad.nonzero().flatten()[:limit].tolist():
        ins = ", ".join(repr(x[i].item()) for x in inputs)
        rows.append(f"    [{i}] inputs ({ins}): got {g[i].item()!r}, reference {w[i].item()!r}")
    return "\n".join(rows)


@pytest.mark.parametrize("name", OP_NAMES)
def test_generated_op_matches_reference(name, modules):
    from fuser.runtime.launch import CompiledKernel

    if name not in modules:
        pytest.skip(f"the frontend accepts {name} for no dtype")
    cubin, groups = modules[name]
    if isinstance(cubin, Exception):
        raise cubin
    failures, skipped, checked = [], [], 0
    grid = ((N + BLOCK - 1) // BLOCK, 1, 1)
    for kname, group in groups:
        args, checks = [], []
        for case in group:
            cpu_inputs = make_inputs(case)
            inputs = [x.cuda() for x in cpu_inputs]
            try:
                want = reference(case, inputs)
            except Exception as err:  # torch has no CUDA kernel for it: nothing to compare with
                skipped.append(f"{case}: {type(err).__name__}: {str(err).splitlines()[0][:120]}")
                want = None
            out = _poison(case.out)
            args += [x.data_ptr() for x in inputs] + [out.data_ptr()]
            checks.append((case, cpu_inputs, inputs, out, want))  # CUDA inputs live until the launch ends
        kernel = CompiledKernel(cubin, kname, "P" * len(args) + "i")
        kernel.launch(grid, (BLOCK, 1, 1), [*args, N])
        torch.cuda.synchronize()
        for case, cpu_inputs, _, out, want in checks:
            if want is None:
                continue
            checked += 1
            if out.dtype == torch.bool and bool((out.view(torch.uint8) > 1).any()):
                failures.append(f"{case}: elements left unwritten (or not 0/1)")
                continue
            try:
                assert_close(out, want, what=str(case))
            except AssertionError:
                failures.append(_mismatches(case, cpu_inputs, out, want))
    if skipped:
        print(f"\n{name}: {len(skipped)} case(s) not compared (the reference fails on CUDA):\n  " + "\n  ".join(skipped))
    assert not failures, f"{len(failures)} of {checked} {name} cases differ from the reference:\n" + "\n".join(failures)
    if not checked:
        pytest.skip(f"{name}: the reference runs none of its {len(skipped)} cases on CUDA")


# --- vectorised access ------------------------------------------------------------------------------

_VECTORS = [
    (DataType.Half, 8), (DataType.Half, 2), (DataType.BFloat16, 4), (DataType.Float, 4), (DataType.Float, 1),
    (DataType.Double, 4), (DataType.Bool, 2), (DataType.Bool, 16), (DataType.Float8_e4m3fn, 16),
    (DataType.Float8_e5m2, 4), (DataType.Int32, 2), (DataType.Int, 2), (DataType.ComplexFloat, 2),
    (DataType.ComplexDouble, 1), (DataType.ComplexDouble, 2),
]


def test_load_vec_store_vec_copy_bits():
    """load_vec into a register array and into an Array, store_vec back: every bit pattern
    (NaNs, non-canonical bools) survives, for 1- to 32-byte vectors."""
    from fuser.runtime import nvrtc
    from fuser.runtime.launch import CompiledKernel

    lines = [f'#include "{RUNTIME_HEADER_NAME}"']
    for k, (dt, n) in enumerate(_VECTORS):
        t = ctype(dt)
        lines.append(f"""
extern "C" __global__ void vec{k}(const {t}* __restrict__ in, {t}* __restrict__ out, int count) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i * {n} >= count) return;
  {t} r[{n}];
  fuser::load_vec<{t}, {n}>(r, in + i * {n});
  fuser::Array<{t}, {n}> a;
  fuser::load_vec<{t}, {n}>(a, in + i * {n});
#pragma unroll
  for (int j = 1; j < {n}; j += 2) r[j] = a[j];
  if (i % 2) {{
    fuser::store_vec<{t}, {n}>(out + i * {n}, r);
  }} else {{
    fuser::store_vec<{t}, {n}>(out + i * {n}, a);
  }}
}}""")
    cubin = nvrtc.compile("\n".join(lines) + "\n", name="vectors.cu", arch=nvrtc.device_arch(None),
                          headers=runtime_headers())
    gen = torch.Generator().manual_seed(0)
    for k, (dt, n) in enumerate(_VECTORS):
        count = n * 257
        raw = torch.randint(0, 256, (count * dt.itemsize,), generator=gen, dtype=torch.uint8).cuda()
        src = raw.view(dt.torch)
        dst = torch.full_like(raw, 0xA5).view(dt.torch)
        CompiledKernel(cubin, f"vec{k}", "PPi").launch(((257 + 63) // 64, 1, 1), (64, 1, 1),
                                                       [src.data_ptr(), dst.data_ptr(), count])
        torch.cuda.synchronize()
        assert torch.equal(dst.view(torch.uint8), raw), f"load_vec/store_vec of {n} x {dt} changed the bits"
