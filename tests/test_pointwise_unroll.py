"""Vectors per thread of a pointwise kernel follow the device (scheduler/issue.py): two
where the arithmetic takes most of the issue slots the memory's speed per SM clock leaves
per element (GELU on an H200), one elsewhere (GELU on an H100, casts, sigmoid); and
kernels unrolled so match the reference on every pointwise case on the GPU."""
import pytest
import torch

from fuser import DataType, FusionCache, FusionDefinition
from fuser.runtime.reference import run_reference
from fuser.runtime.tolerance import assert_close
from fuser.scheduler import issue
from fuser.scheduler.runtime_info import TARGET_ENV, TARGETS

from cuda_units import compile_all
from pointwise_cases import CASES, _gelu


def _code(build, shape, dtype=torch.bfloat16) -> str:
    FusionCache.reset()  # (a cached runner keeps the kernel planned for another target)
    with FusionDefinition() as fd:
        build(fd)
    return fd.cuda_code_for([torch.empty(shape, dtype=dtype, device="meta")])


def _sigmoid(fd):
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
    fd.add_output(fd.ops.cast(fd.ops.sigmoid(fd.ops.cast(x, DataType.Float)), DataType.BFloat16))


def _unrolls(src: str) -> set[str]:
    import re

    return set(re.findall(r"u1 < (\d+)", src))


@pytest.mark.nvcc
def test_gelu_unrolls_on_an_h200_not_on_an_h100(monkeypatch):
    big = (16384, 8192)
    monkeypatch.setenv(TARGET_ENV, "h200")
    gelu200 = _code(_gelu, big)
    assert _unrolls(gelu200) == {"2"}
    assert _unrolls(_code(_sigmoid, big)) == {"1"}
    assert _unrolls(_code(_gelu, (64, 4096))) == {"1"}  # too few blocks for fewer, longer threads
    monkeypatch.setenv(TARGET_ENV, "h100")
    assert _unrolls(_code(_gelu, big)) == {"1"}
    assert compile_all([gelu200])[:4] == b"\x7fELF"


def test_issue_share_weighs_the_ops_and_the_device():
    FusionCache.reset()
    with FusionDefinition() as fd:
        _gelu(fd)
    exprs = fd.fusion.exprs()
    h100, h200 = TARGETS["h100"], TARGETS["h200"]
    tanh_form = issue.issue_share(exprs, 4, h200)
    assert tanh_form > issue.issue_share(exprs, 4, h100)  # faster memory per clock: less time per element
    assert issue.issue_share(exprs, 8, h200) == pytest.approx(tanh_form / 2)  # twice the bytes: half the rate
    from fuser.preseg import tanh_sigmoid

    fusion, _ = fd.fusion.clone()
    assert tanh_sigmoid.tanh_to_sigmoid(fusion) == 1
    sigmoid_form = issue.issue_share(fusion.exprs(), 4, h200)
    assert issue.issue_share(exprs[:1], 4, h200) < issue.UNROLL_ABOVE < sigmoid_form < tanh_form
    assert issue.issue_share(fusion.exprs(), 4, h100) < issue.UNROLL_ABOVE


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_kernels_with_two_vectors_a_thread_match_the_reference(case, monkeypatch, poisoned_kernel_outputs):
    """Tails, broadcasts, unaligned and non-contiguous inputs with unroll 2 forced."""
    pytest.importorskip("pycuda")
    import fuser.scheduler.pointwise as pw

    monkeypatch.setattr(pw, "unroll", lambda *a: 2)
    FusionCache.reset()
    torch.manual_seed(1)
    with FusionDefinition() as fd:
        case.build(fd)
    inputs = case.inputs("cuda")
    got = fd.execute(inputs)
    if case.name.endswith("_empty"):
        return
    src = fd.last_cuda_code()
    assert "fuser_pointwise" in src
    for kernel in src.split('extern "C"')[1:]:  # a 2D schedule has no unrolled loop
        assert _unrolls(kernel) == ({"2"} if "blockIdx.y" not in kernel else set()), kernel[:200]
    want = run_reference(fd.fusion, inputs)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, what=f"{case.name} output {k}")
