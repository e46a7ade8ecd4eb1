"""Every elementwise (op, dtypes) combination the frontend accepts, run as a generated CUDA
kernel on the GPU and compared with the reference executor on the same CUDA inputs.

Kernels come from fuser.codegen.ops over the runtime header, compiled with NVRTC (one module
per op, compiled in parallel) and launched through fuser.driver.launch. Inputs hold special
values (nan, +-inf, +-0, extreme magnitudes, integer extremes); outputs start as poison (NaN,
-7, True: tests/kernel_writes.py), and each kernel runs twice, the second time into outputs
holding the first's bitwise complement, so every element must be written
(`kernel_writes.assert_written`: poison alone misses an element whose answer is the poison).
Cases whose result is undefined are steered clear of: integer division by zero, float ->
integer casts out of range, complex transcendental functions at non-finite points. A case
is left uncompared only where PyTorch has no CUDA kernel for the reference
(`expected_reference_gap`); every op must have cases compared.

The GPU tests are marked one by one (`gpu`); the CPU tests of this file (the input and
reference side, the reasons a case may be dropped) run everywhere."""
from __future__ import annotations

import hashlib
import os
import re
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from fuser import DataType
from fuser.codegen.ops import RUNTIME_HEADER_NAME, compute_dtype, ctype, runtime_headers
from fuser.ir import BinaryOpType, TernaryOpType, UnaryOpType
from fuser.runtime.reference import run_reference
from fuser.runtime.tolerance import assert_close, tolerances
from kernel_writes import assert_written, complement_like, poison_
from test_codegen_ops import Case, cases, chunks, define, kernel_source, unsupported

pytestmark = pytest.mark.filterwarnings("ignore:Casting complex values to real")
gpu = pytest.mark.gpu

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


def poisoned_output(dt: DataType, device: str = "cuda") -> torch.Tensor:
    """N elements of `dt` holding the poison (NaN, -7 or True: outside every tolerance)."""
    return poison_([torch.empty(N, dtype=dt.torch, device=device)])[0]


#: the one reason a case may go uncompared: PyTorch has no CUDA kernel for the reference's
#: op on one of the case's dtypes (its dispatch error: "<kernel>_cuda" not implemented for
#: '<dtype>'). Anything else the reference raises is a failure (test_reference_runs_every_case_on_cpu:
#: on the CPU it raises for none)
_NO_CUDA_KERNEL = re.compile(r'^"(\w+)_cuda" not implemented for \'(\w+)\'$')


#: torch's names of dtypes in its dispatch errors (the C++ scalar type names)
_CPP_NAME = {torch.float16: "Half", torch.bfloat16: "BFloat16", torch.float32: "Float", torch.float64: "Double",
             torch.int32: "Int", torch.int64: "Long", torch.bool: "Bool", torch.complex64: "ComplexFloat",
             torch.complex128: "ComplexDouble", torch.float8_e4m3fn: "Float8_e4m3fn",
             torch.float8_e5m2: "Float8_e5m2"}


def expected_reference_gap(case: Case, err: Exception) -> str | None:
    """Why `case` may go uncompared, given what the reference raised on CUDA inputs; None
    when that is no expected reason (the test then fails)."""
    if not isinstance(err, (RuntimeError, NotImplementedError)) or not str(err).strip():
        return None
    m = _NO_CUDA_KERNEL.match(str(err).strip().splitlines()[0])
    if m is None:
        return None
    dtypes = (*case.dtypes, case.out)
    named = {_CPP_NAME[d.torch] for d in dtypes}
    if any(d.is_reduced_float or d in (DataType.Float8_e4m3fn, DataType.Float8_e5m2) for d in dtypes):
        named.add("Float")  # the reference computes narrow floats in float
    if m.group(2) not in named:
        return None
    return f"PyTorch has no CUDA kernel {m.group(1)}_cuda for {m.group(2)}"


# --- compiling --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def modules():
    """op name -> (cubin or the compile error, [(kernel name, cases)])."""
    pytest.importorskip("pycuda")
    from fuser.driver import nvrtc

    arch = nvrtc.device_arch(None)
    headers = runtime_headers()
    groups = {name: [(f"{name}_{k}", g) for k, g in enumerate(chunks(cs, PER_KERNEL))] for name, cs in by_op().items()}

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


def by_op() -> dict[str, list[Case]]:
    """op name -> its supported cases."""
    got: dict[str, list[Case]] = defaultdict(list)
    for case in cases():
        if not unsupported(case):
            got[case.name].append(case)
    return got


@gpu
@pytest.mark.parametrize("name", OP_NAMES)
def test_generated_op_matches_reference(name, modules):
    from fuser.driver.launch import CompiledKernel

    assert name in modules, f"{name}: the frontend accepts it for no dtype, so no case checks it"
    cubin, groups = modules[name]
    if isinstance(cubin, Exception):
        raise cubin
    failures, dropped, checked = [], [], 0
    grid = ((N + BLOCK - 1) // BLOCK, 1, 1)
    for kname, group in groups:
        inputs_of, outs, shadows, checks = [], [], [], []
        for case in group:  # every case of the kernel gets its arguments, compared or not
            cpu_inputs = make_inputs(case)
            inputs = [x.cuda() for x in cpu_inputs]
            try:
                want = reference(case, inputs)
            except Exception as err:  # noqa: BLE001 - only the expected reason may drop a case
                want = None
                why = expected_reference_gap(case, err)
                if why is None:
                    failures.append(f"{case}: the reference raised {type(err).__name__}: "
                                    f"{str(err).strip()[:200]} (no expected reason: see expected_reference_gap)")
                else:
                    dropped.append(f"{case}: {why}")
            out = poisoned_output(case.out)
            inputs_of.append(inputs)  # CUDA inputs live until the launches end
            outs.append(out)
            # the second launch's output: every byte the complement of the first's poison
            shadows.append(complement_like(out))
            checks.append((case, cpu_inputs, out, want))
        kernel = CompiledKernel(cubin, kname, "P" * (sum(len(i) for i in inputs_of) + len(outs)) + "i")
        for targets in (shadows, outs):
            args = []
            for inputs, out in zip(inputs_of, targets):
                args += [x.data_ptr() for x in inputs] + [out.data_ptr()]
            kernel.launch(grid, (BLOCK, 1, 1), [*args, N])
        torch.cuda.synchronize()
        for (case, cpu_inputs, out, want), shadow in zip(checks, shadows):
            try:
                assert_written([out], [shadow], str(case))
            except AssertionError as err:
                failures.append(str(err))
                continue
            if want is None:
                continue
            checked += 1
            if out.dtype == torch.bool and bool((out.view(torch.uint8) > 1).any()):
                failures.append(f"{case}: bool elements not 0/1")
                continue
            try:
                assert_close(out, want, what=str(case))
            except AssertionError:
                failures.append(_mismatches(case, cpu_inputs, out, want))
    if dropped:
        print(f"\n{name}: {len(dropped)} case(s) not compared:\n  " + "\n  ".join(dropped))
    assert not failures, f"{len(failures)} {name} cases failed ({checked} compared):\n" + "\n".join(failures)
    # an op none of whose cases is compared checks nothing: that is a failure, not a skip
    assert checked, f"{name}: none of its {len(dropped)} cases compared ({dropped[:3]})"


# --- CPU: the cases, the inputs and the reasons a case may go uncompared --------------------------


def test_every_op_has_cases():
    """Each op the GPU test runs has supported cases (an op without would check nothing)."""
    got = by_op()
    counts = {name: len(got.get(name, ())) for name in OP_NAMES}
    assert all(counts.values()), {n: c for n, c in counts.items() if not c}
    assert set(got) == set(OP_NAMES), set(got) ^ set(OP_NAMES)


def test_reference_runs_every_case_on_cpu():
    """On the CPU the reference raises for no case (so on the GPU only PyTorch's missing
    CUDA kernels may drop one), on inputs that are not all zeros; and every op has
    cases whose answer is not all the float poison's neighbourhood (not all ~0)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # small tensors: the thread pool costs more than it gives
    try:
        for name, cs in by_op().items():
            nonzero = 0
            for case in cs:
                inputs = make_inputs(case)
                assert all(bool((x != 0).any()) for x in inputs), f"{case}: all-zero inputs"
                want = reference(case, inputs)
                assert want.shape == (N,), case
                nonzero += bool((want != 0).any())
            assert nonzero, f"{name}: every case's answer is all zeros"
    finally:
        torch.set_num_threads(before)


def test_expected_reference_gap_names_only_missing_cuda_kernels():
    """The reason a case may be dropped is PyTorch's dispatch error for a missing CUDA kernel
    on one of the case's dtypes (or float, which narrow floats compute in); nothing else."""
    half = next(c for c in cases() if c.name == "nextafter" and c.dtypes == (DataType.Half, DataType.Half))
    err = NotImplementedError('"nextafter_cuda" not implemented for \'Half\'')
    assert expected_reference_gap(half, err) == "PyTorch has no CUDA kernel nextafter_cuda for Half"
    assert expected_reference_gap(half, RuntimeError('"nextafter_cuda" not implemented for \'Half\'')) is not None
    # another dtype than the case's, a CPU kernel, another error, another exception type
    assert expected_reference_gap(half, NotImplementedError('"nextafter_cuda" not implemented for \'Long\'')) is None
    assert expected_reference_gap(half, NotImplementedError('"nextafter_cpu" not implemented for \'Half\'')) is None
    shapes = RuntimeError("The size of tensor a (3) must match the size of tensor b (4)")
    assert expected_reference_gap(half, shapes) is None
    assert expected_reference_gap(half, TypeError('"nextafter_cuda" not implemented for \'Half\'')) is None
    assert expected_reference_gap(half, RuntimeError("")) is None


def test_old_byte_poison_hid_unwritten_elements_and_nan_does_not():
    """0xA5 bytes (the old poison) read as -2.9e-16 in fp32 and bf16 and -0.0195 in fp8
    e5m2, within tolerance of an answer of 0 (relu of a negative input); NaN is not."""
    for dt in (torch.float32, torch.bfloat16, torch.float8_e5m2):
        old = torch.full((8 * torch.empty((), dtype=dt).element_size(),), 0xA5, dtype=torch.uint8).view(dt)
        zero = torch.zeros(8, dtype=dt)
        assert_close(old, zero, what="0xA5 poison")  # the hole: it passes, at the dtype's tolerance
        new = poison_([torch.empty(8, dtype=dt)])[0]
        with pytest.raises(AssertionError):
            assert_close(new, zero, what="NaN poison")


def test_unwritten_element_fails_the_kernel_check():
    """The check the GPU test makes, on stand-in launches that compute relu(x) (answers of
    0 for half the inputs) into both outputs but skip element 100: it fails naming the
    element, for every kind of dtype, even where the skipped element's answer equals the
    poison (a bool True); writing the element passes."""
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(N, generator=gen)
    x[100] = 2.0
    for dt in (DataType.Float, DataType.BFloat16, DataType.Float8_e5m2, DataType.Int32, DataType.Bool,
               DataType.ComplexFloat):
        value = (torch.relu(x) > 0) if dt is DataType.Bool else torch.relu(x).to(dt.torch)
        out = poisoned_output(dt, "cpu")
        shadow = complement_like(out)
        for t in (shadow, out):  # the two launches
            t[:100] = value[:100]
            t[101:] = value[101:]
        if dt is DataType.Bool:
            assert torch.equal(out, value)  # compared with the answer, the unwritten True passes
        with pytest.raises(AssertionError, match=r"1 of 1037 stored elements left unwritten.*\[100\]"):
            assert_written([out], [shadow], str(dt))
        out[100] = shadow[100] = value[100]
        assert_written([out], [shadow], str(dt))


# --- vectorised access ------------------------------------------------------------------------------

_VECTORS = [
    (DataType.Half, 8), (DataType.Half, 2), (DataType.BFloat16, 4), (DataType.Float, 4), (DataType.Float, 1),
    (DataType.Double, 4), (DataType.Bool, 2), (DataType.Bool, 16), (DataType.Float8_e4m3fn, 16),
    (DataType.Float8_e5m2, 4), (DataType.Int32, 2), (DataType.Int, 2), (DataType.ComplexFloat, 2),
    (DataType.ComplexDouble, 1), (DataType.ComplexDouble, 2),
]


@gpu
def test_load_vec_store_vec_copy_bits():
    """load_vec into a register array and into an Array, store_vec back: every bit pattern
    (NaNs, non-canonical bools) survives, for 1- to 32-byte vectors."""
    pytest.importorskip("pycuda")
    from fuser.driver import nvrtc
    from fuser.driver.launch import CompiledKernel

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
        dst = raw.bitwise_not().view(dt.torch)  # every byte differs from the answer: none passes unwritten
        CompiledKernel(cubin, f"vec{k}", "PPi").launch(((257 + 63) // 64, 1, 1), (64, 1, 1),
                                                       [src.data_ptr(), dst.data_ptr(), count])
        torch.cuda.synchronize()
        assert torch.equal(dst.view(torch.uint8), raw), f"load_vec/store_vec of {n} x {dt} changed the bits"
