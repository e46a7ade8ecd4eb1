"""Blocks that take their data from the end (lower.kir.BLOCKS_FROM_END): the first block
dispatched works on the last rows of an inner reduction or persistent kernel, or the last
elements of a pointwise kernel, and an outer reduction walks its reduced rows from the last,
so a kernel reads first what its input's producer wrote last (still in L2). The switch is
on by default; these tests set it on, so that they keep covering it if it is turned off. A
user's schedule is lowered as written either way.

On the CPU: the generated index, and the kernels simulated against the reference executor.
On the GPU: the reduction and pointwise case lists against the reference executor, with
outputs poisoned, as test_reduction_cuda and test_pointwise_cuda run them."""
from __future__ import annotations

import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.lower import kir

import pointwise_cases
import reduction_cases
from test_reduction_cuda import check_against_reference, poisoned_outputs  # noqa: F401 (a fixture)

FROM_END = "((nvfuser_index_t)gridDim.x) - 1 - ((nvfuser_index_t)blockIdx.x)"


@pytest.fixture
def from_end(monkeypatch):
    monkeypatch.setattr(kir, "BLOCKS_FROM_END", True)


def _meta(xs):
    return [torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta") for x in xs]


def _rmsnorm(fd: FusionDefinition) -> None:
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
    xf = fd.ops.cast(x, DataType.Float)
    ms = fd.ops.mul(fd.ops.sum(fd.ops.mul(xf, xf), [1], keepdim=True), 1.0 / 4096)
    r = fd.ops.rsqrt(fd.ops.add(ms, 1e-6))
    fd.add_output(fd.ops.cast(fd.ops.mul(xf, r), DataType.BFloat16))


def _gelu(fd: FusionDefinition) -> None:
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
    xf = fd.ops.cast(x, DataType.Float)
    t = fd.ops.tanh(fd.ops.mul(fd.ops.add(xf, fd.ops.mul(fd.ops.mul(fd.ops.mul(xf, xf), xf), 0.044715)),
                               0.7978845608028654))
    fd.add_output(fd.ops.cast(fd.ops.mul(fd.ops.mul(xf, 0.5), fd.ops.add(t, 1.0)), DataType.BFloat16))


def _code(build, xs) -> str:
    with FusionDefinition() as fd:
        build(fd)
    return fd.cuda_code_for(_meta(xs))


@pytest.mark.parametrize("build", [_rmsnorm, _gelu], ids=["rmsnorm", "gelu"])
def test_blocks_index_the_data_from_the_end_only_with_the_switch(build, monkeypatch):
    xs = [torch.randn(1024, 4096).to(torch.bfloat16)]
    monkeypatch.setattr(kir, "BLOCKS_FROM_END", False)
    assert FROM_END not in _code(build, xs)
    monkeypatch.setattr(kir, "BLOCKS_FROM_END", True)
    src = _code(build, xs)
    assert FROM_END in src
    # every data index goes through the reversed block: no bare blockIdx.x is left
    assert src.count("blockIdx.x") == src.count(FROM_END), src


def test_kernels_from_the_end_compile_for_sm90(from_end):
    from cuda_units import compile_all

    srcs = [_code(b, [torch.randn(m, n).to(torch.bfloat16)]) for b in (_rmsnorm, _gelu)
            for m, n in ((37, 1000), (16384, 4096))]
    assert all(FROM_END in s for s in srcs)
    assert compile_all(srcs)[:4] == b"\x7fELF"


def test_a_user_schedule_is_lowered_as_written(from_end):
    from test_user_schedule import MyFusion

    src = MyFusion().cuda_code_for([torch.randn(5, 300)])
    assert "fuser_user" in src and "blockIdx.x" in src and FROM_END not in src


#: (the inner kernels' longest rows simulate for seconds each and add no index path the
#: shorter ones lack; the outer ones over 65537 rows take the grid-y split)
_SIM_REDUCTIONS = [c for c in reduction_cases.CPU_CASES
                   if any(k in c.name for k in ("inner", "outer", "dim0", "softmax", "layernorm", "rmsnorm",
                                                "var_mean", "welford"))
                   and not (c.name.endswith(("_n4096", "_n8192", "_n65537")) and "outer" not in c.name)]


@pytest.mark.parametrize("case", _SIM_REDUCTIONS, ids=[c.name for c in _SIM_REDUCTIONS])
def test_reduction_kernels_from_the_end_simulate_to_the_reference(case, from_end):
    from kernel_sim import simulate_fusion

    torch.manual_seed(11)
    inputs = case.inputs("cpu")
    with FusionDefinition() as fd:
        case.build(fd, inputs)
    report = simulate_fusion(fd, inputs)
    assert report.ok and report.status == "ok", str(report)
    # (a reduction of size-1 or expanded rows is a no_op segment: no kernel)
    assert report.simulated >= 1 or all(s.scheduler == "no_op" for s in report.segments), str(report)


@pytest.mark.parametrize("case", pointwise_cases.CASES, ids=[c.name for c in pointwise_cases.CASES])
def test_pointwise_kernels_from_the_end_simulate_to_the_reference(case, from_end):
    from kernel_sim import simulate_fusion

    torch.manual_seed(13)
    with FusionDefinition() as fd:
        case.build(fd)
    report = simulate_fusion(fd, case.inputs("cpu"))
    assert report.ok and report.status == "ok", str(report)
    assert report.simulated >= 1 or case.name.endswith("_empty"), str(report)


@pytest.mark.gpu
@pytest.mark.parametrize("case", reduction_cases.CASES, ids=[c.name for c in reduction_cases.CASES])
def test_reduction_kernels_from_the_end_match_the_reference_on_the_gpu(case, from_end, poisoned_outputs):
    pytest.importorskip("pycuda")
    check_against_reference(case, "cuda", poisoned_outputs)


@pytest.mark.gpu
@pytest.mark.parametrize("case", pointwise_cases.CASES, ids=[c.name for c in pointwise_cases.CASES])
def test_pointwise_kernels_from_the_end_match_the_reference_on_the_gpu(case, from_end, poisoned_kernel_outputs):
    pytest.importorskip("pycuda")
    from test_pointwise_cuda import check_against_reference as check_pointwise

    fd, _, _ = check_pointwise(case)
    if not case.name.endswith("_empty"):  # an empty output launches no kernel
        code = fd.last_cuda_code()
        if "((nvfuser_index_t)blockIdx.x)" in code:  # a 0-d output's one block indexes nothing
            assert FROM_END in code
