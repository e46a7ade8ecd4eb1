"""Reduction and inner-persistent kernels (issue 8, item 6), on the cases of
tests/reduction_cases.py.

On the GPU (`gpu`-marked; skipped without CUDA): each case runs through fd.execute on fresh
inputs, with every output a generated kernel allocates poisoned first (NaN / -7 / True, and
on the second call -7 / 7 / False), and matches the reference executor on the same inputs;
then again on new inputs through the cached kernel. Every segment scheduled `reduction` or
`inner_persistent` must have run a generated kernel (issue 8: no silent fallback); while the
kernels land, FUSER_TEST_ALLOW_REFERENCE=1 turns that assertion into a warning.

On the CPU (not gpu-marked): each case (but the GPU-only big ones) runs through fd.execute
and matches eager PyTorch, which validates the case definitions, and its segmentation
schedules a reduction where the case says it reduces.

The GPU tests are marked one by one (`gpu`), not with a module-wide ``pytestmark``, so the
CPU tests of this file run everywhere.
"""
from __future__ import annotations

import hashlib
import os
import warnings
from types import SimpleNamespace

import pytest
import torch

from fuser import FusionDefinition
import fuser.kernel as kernels_mod
from fuser.runtime.reference import run_reference
from fuser.runtime.tolerance import assert_close

from kernel_writes import poison_
from reduction_cases import CASES, CPU_CASES, KERNEL_SCHEDULERS, ROW_LENGTHS, Case

gpu = pytest.mark.gpu

#: every scheduler a reduction can land in (the persistent ones included)
REDUCING_SCHEDULERS = ("reduction", "inner_persistent", "outer_persistent", "inner_outer_persistent")


@pytest.fixture(autouse=True)
def _seed(request):
    """Fresh random inputs per test, reproducible from its id (FUSER_TEST_SEED varies them)."""
    salt = os.environ.get("FUSER_TEST_SEED", "0")
    digest = hashlib.sha256(f"{salt}:{request.node.nodeid}".encode()).digest()
    torch.manual_seed(int.from_bytes(digest[:8], "little"))


# ----------------------------------------------------------------------------------------------
# helpers


def _kernel_class():
    """The generated-kernel class (GeneratedKernel; PointwiseKernel before the rename)."""
    return getattr(kernels_mod, "GeneratedKernel", None) or kernels_mod.PointwiseKernel


@pytest.fixture
def poisoned_outputs(monkeypatch):
    """Poison every output a generated kernel allocates; `.round` picks the poison."""
    cls = _kernel_class()
    real = cls.allocate_outputs
    state = SimpleNamespace(round=0, allocations=0)

    def poisoned(self):
        state.allocations += 1
        return poison_(real(self), state.round)

    monkeypatch.setattr(cls, "allocate_outputs", poisoned)
    return state


def ran_segments(fd) -> list[tuple[str, bool]]:
    """(scheduler, ran a generated kernel) for each segment of the last execute of `fd`."""
    out = []
    for r in fd._entry.last_runner.runs:
        sched = r.group.scheduler
        out.append((str(getattr(sched, "value", sched)), bool(r.kernel)))
    return out


def allow_reference() -> bool:
    """FUSER_TEST_ALLOW_REFERENCE=1: reduction segments on the reference executor only warn."""
    return os.environ.get("FUSER_TEST_ALLOW_REFERENCE", "") not in ("", "0")


def assert_kernels_ran(segs: list[tuple[str, bool]], what: str) -> None:
    """Every `reduction` / `inner_persistent` segment ran a generated kernel (strict unless
    FUSER_TEST_ALLOW_REFERENCE=1, which warns instead)."""
    missing = [s for s, ran in segs if s in KERNEL_SCHEDULERS and not ran]
    if not missing:
        return
    msg = (f"{what}: {len(missing)} {'/'.join(sorted(set(missing)))} segment(s) ran on the reference executor, "
           f"not as generated kernels (segments: {segs})")
    if allow_reference():
        warnings.warn(msg + " [allowed by FUSER_TEST_ALLOW_REFERENCE=1]", stacklevel=2)
        return
    pytest.fail(msg + "; FUSER_TEST_ALLOW_REFERENCE=1 allows it while the kernels land")


def _define(case: Case, inputs) -> FusionDefinition:
    with FusionDefinition() as fd:
        case.build(fd, inputs)
    return fd


def _compare(case: Case, got, want, what: str) -> None:
    assert len(got) == len(want), f"{what}: {len(got)} outputs, expected {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        rtol, atol = case.tolerance(k, w)
        assert_close(g, w, what=f"{what} output {k}", rtol=rtol, atol=atol)


def _ids(cases):
    return [c.name for c in cases]


# ----------------------------------------------------------------------------------------------
# GPU: generated kernels against the reference executor


def check_against_reference(case: Case, device: str, poison, *, strict: bool = True) -> list[tuple[str, bool]]:
    """Run `case` through fd.execute on `device` and compare with the reference executor on
    the same inputs; then again on new inputs (the cached kernel), poisoned differently.
    `strict`: assert that reduction / inner-persistent segments ran kernels. Returns the
    segments of the first call."""
    inputs = case.inputs(device)
    fd = _define(case, inputs)
    got = fd.execute(inputs)
    segs = ran_segments(fd)
    want = run_reference(fd.fusion, inputs)
    _compare(case, got, want, f"{case.name} {segs}")
    if strict:
        assert_kernels_ran(segs, case.name)
    poison.round = 1
    inputs = case.inputs(device)
    got = fd.execute(inputs)
    _compare(case, got, run_reference(fd.fusion, inputs), f"{case.name} (second call) {ran_segments(fd)}")
    if strict:
        assert_kernels_ran(ran_segments(fd), f"{case.name} (second call)")
    return segs


@gpu
@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_reduction_kernel_matches_reference(case, poisoned_outputs):
    pytest.importorskip("pycuda")
    check_against_reference(case, "cuda", poisoned_outputs)


@gpu
def test_reduction_kernels_match_eager_on_gpu():
    """A few cases against eager PyTorch on the GPU too (the reference executor is the oracle
    above; this checks the oracle agrees with PyTorch's CUDA kernels)."""
    pytest.importorskip("pycuda")
    names = ["sum_bf16_inner_n65537", "var_mean_c1_fp32_inner", "softmax_bf16_n4097", "layernorm_bf16_n4097",
             "rmsnorm_bf16_n1025", "prod_fp32_inner_n4097", "max_fp16_inner_n65537", "sum_int32_inner"]
    by_name = {c.name: c for c in CASES}
    for name in names:
        case = by_name[name]
        inputs = case.inputs("cuda")
        fd = _define(case, inputs)
        _compare(case, fd.execute(inputs), case.eager(*inputs), f"{name} vs eager")


@gpu
def test_reduction_kernel_reused_across_sizes(poisoned_outputs):
    """One symbolic definition on several row counts and lengths (each a new signature)."""
    pytest.importorskip("pycuda")
    case = next(c for c in CASES if c.name == "softmax_fp32_n1025")
    for shape in [(64, 1025), (3, 1025), (257, 4097), (1, 3)]:
        x = torch.randn(shape, device="cuda")
        fd = _define(case, [x])
        (got,) = fd.execute([x])
        assert_close(got, run_reference(fd.fusion, [x])[0], what=f"softmax {shape}")
        assert_kernels_ran(ran_segments(fd), f"softmax {shape}")


# ----------------------------------------------------------------------------------------------
# CPU: the case definitions against eager PyTorch (every execute runs the reference executor)


@pytest.mark.parametrize("case", CPU_CASES, ids=_ids(CPU_CASES))
def test_case_matches_eager_on_cpu(case):
    inputs = case.inputs("cpu")
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.numel():
            assert bool((x != 0).any()), f"{case.name}: inputs must not be all zeros"
    fd = _define(case, inputs)
    got = fd.execute(inputs)
    _compare(case, got, case.eager(*inputs), f"{case.name} vs eager")
    segs = ran_segments(fd)
    assert all(not ran for _, ran in segs)  # no generated kernels on the CPU
    if case.reduces:
        assert any(s in REDUCING_SCHEDULERS for s, _ in segs), f"{case.name}: no reduction segment in {segs}"


def test_reference_check_path_on_cpu(poisoned_outputs):
    """The GPU test's own path (execute, reference, second call) on CPU tensors, where every
    segment runs on the reference executor (so no kernel assertion)."""
    names = ["sum_bf16_inner_n1025", "var_mean_c1_fp32_outer", "softmax_bf16_n127", "layernorm_bf16_n3",
             "sum_fp32_empty_reduced_dim", "sums_both_directions_fp32", "sum_fp32_stride_order_dims1",
             "sum_fp32_inner_n1", "welford_int32_inner"]
    check_reference_path_on_cpu(CPU_CASES, names, poisoned_outputs)


def check_reference_path_on_cpu(cases, names: list[str], poisoned_outputs) -> None:
    """The GPU tests' path (execute, reference, second call) for the named `cases` on CPU
    tensors: every segment on the reference executor, and no kernel allocating anything."""
    by_name = {c.name: c for c in cases}
    for name in names:
        poisoned_outputs.round = 0
        segs = check_against_reference(by_name[name], "cpu", poisoned_outputs, strict=False)
        assert segs and all(not ran for _, ran in segs)
    assert poisoned_outputs.allocations == 0


def test_cases_cover_item_6():
    names = {c.name for c in CASES}
    for op in ("sum", "max", "min", "prod"):
        for dt in ("fp32", "fp16", "bf16", "fp64", "int32", "int64", "bool"):
            assert f"{op}_{dt}_inner" in names, (op, dt)
    for dt in ("fp32", "fp16", "bf16", "fp64"):
        assert {f"var_{dt}_inner", f"var_mean_c0_{dt}_inner", f"var_mean_c1_{dt}_inner"} <= names
    assert {"welford_fp32_inner", "welford_int32_inner", "amax_abs_bf16_all"} <= names
    for n in ROW_LENGTHS:
        assert {f"sum_fp32_inner_n{n}", f"sum_bf16_inner_n{n}", f"sum_fp32_outer_n{n}"} <= names
    for what in ("inner", "outer", "middle", "all"):
        assert f"sum_fp32_3d_{what}" in names
    assert any(n.startswith("sum_bf16_4d_dims") for n in names)
    assert sum("empty" in n for n in names) >= 4
    for word in ("sliced", "transposed", "stride_order", "permuted", "expanded", "keepdim"):
        assert any(word in n for n in names), word
    for n in (1025, 4097, 65537):
        assert {f"softmax_bf16_n{n}", f"layernorm_bf16_n{n}", f"rmsnorm_bf16_n{n}"} <= names
    assert {"sum_max_mean_min_fp32", "mean_epilogue_fp32", "sums_both_directions_fp32"} <= names
    big = [c for c in CASES if c.big]
    assert any(c.name == "sum_fp32_inner_n16777216" for c in big)


def test_poison_fills_fresh_outputs():
    f, i, b = torch.empty(3, 4), torch.empty(5, dtype=torch.int64), torch.empty(2, dtype=torch.bool)
    expanded, empty = torch.zeros(1, 4).expand(3, 4), torch.empty(0, 3)
    poison_([f, i, b, expanded, empty])
    assert f.isnan().all() and (i == -7).all() and b.all()
    assert expanded.isnan().all()  # through its one stored row
    poison_([f, i, b], 1)
    assert (f == -7).all() and (i == 7).all() and not b.any()


def test_poisoned_outputs_fixture_patches_the_kernel_class(poisoned_outputs):
    cls = _kernel_class()
    assert cls.allocate_outputs.__name__ == "poisoned"
    assert poisoned_outputs.round == 0 and poisoned_outputs.allocations == 0


def test_ran_segments_and_strictness(monkeypatch):
    case = next(c for c in CPU_CASES if c.name == "softmax_fp32_n1025")
    inputs = case.inputs("cpu")
    fd = _define(case, inputs)
    fd.execute(inputs)
    segs = ran_segments(fd)
    assert segs == [("inner_persistent", False)]
    monkeypatch.delenv("FUSER_TEST_ALLOW_REFERENCE", raising=False)
    with pytest.raises(pytest.fail.Exception, match="inner_persistent segment"):
        assert_kernels_ran(segs, "softmax")
    monkeypatch.setenv("FUSER_TEST_ALLOW_REFERENCE", "1")
    with pytest.warns(UserWarning, match="FUSER_TEST_ALLOW_REFERENCE"):
        assert_kernels_ran(segs, "softmax")
    monkeypatch.setenv("FUSER_TEST_ALLOW_REFERENCE", "0")
    with pytest.raises(pytest.fail.Exception):
        assert_kernels_ran(segs, "softmax")
    # kernels that ran, and segments of other schedulers, pass
    assert_kernels_ran([("reduction", True), ("inner_persistent", True), ("pointwise", False),
                        ("expr_eval", False), ("outer_persistent", False)], "ok")
