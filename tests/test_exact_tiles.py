"""Inner-persistent kernels whose rows fill their blocks and whose threads' vectors fill each
row exactly check no bounds (normalization.EXACT_TILES, ReductionParams.exact).

On the CPU: which shapes drop the checks (rows or columns left over keep them, and so do the
switch off and the inner-outer kernels, whose rows are taken in turn), and the kernels
simulated against the reference executor (the simulator faults on any access out of
bounds). On the GPU: the same fusions against the reference executor at exact and inexact
shapes, outputs poisoned."""
from __future__ import annotations

import re

import pytest
import torch

from fuser import FusionDefinition
from fuser.benchmarks.fusions import by_name
from fuser.runtime.reference import run_reference
from fuser.runtime.tolerance import assert_close
from fuser.scheduler import normalization

from test_reduction_cuda import poisoned_outputs, ran_segments  # noqa: F401 (a fixture)

#: a bounds check of the generated code: an index compared with an extent parameter
CHECK = re.compile(r"< i\d+\b")
FUSIONS = ("rmsnorm_fwd_bf16", "layernorm_fwd_fp32", "softmax_fwd_bf16", "dropout_add_layernorm_fwd_bf16")


def _define(name: str) -> FusionDefinition:
    with FusionDefinition() as fd:
        by_name(name).build(fd)
    return fd


def _inputs(name: str, shape, device="cpu"):
    torch.manual_seed(23)
    return by_name(name).inputs(torch.device(device), shape)


def _code(name: str, shape) -> str:
    return _define(name).cuda_code_for([torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
                                        for t in _inputs(name, shape)])


@pytest.mark.parametrize("name", FUSIONS[:3])
@pytest.mark.parametrize("shape,exact", [
    ((512, 4096), True),    # 256 threads of 16 elements (fp32: 4 vectors of 4) a row, a row a block
    ((13, 1024), True),     # rows too few for the SMs: a row a block
    ((1024, 1024), True),   # 4 rows a block (bf16: 64 threads of 16 elements)
    ((1001, 1024), False),  # ... one row left over in the last block
    ((512, 4100), False),   # the row's last vector partly outside
    ((64, 1000), False),
])
def test_only_exact_tiles_drop_the_bounds_checks(name, shape, exact):
    src = _code(name, shape)
    assert src.count("__global__") == 1
    assert (CHECK.search(src) is None) == exact, src


def test_the_switch_keeps_the_checks(monkeypatch):
    monkeypatch.setattr(normalization, "EXACT_TILES", False)
    assert CHECK.search(_code("rmsnorm_fwd_bf16", (512, 4096)))


def test_inner_outer_kernels_keep_their_row_checks():
    # blocks take groups of rows in turn: the last round depends on the grid
    src = _code("rmsnorm_bwd_bf16", (16384, 4096))
    assert "fuser_inner_outer" in src and CHECK.search(src)


@pytest.mark.parametrize("name", FUSIONS)
@pytest.mark.parametrize("shape", [(8, 4096), (13, 1024), (6, 1000), (530, 1024)])
def test_kernels_with_and_without_checks_simulate_to_the_reference(name, shape):
    from kernel_sim import simulate_fusion

    inputs = _inputs(name, shape)
    report = simulate_fusion(_define(name), inputs)
    assert report.ok and report.status == "ok" and report.simulated >= 1, str(report)


@pytest.mark.gpu
@pytest.mark.parametrize("name", FUSIONS[:3])
@pytest.mark.parametrize("shape", [(2048, 4096), (4096, 1024), (4098, 1024), (1000, 8192), (64, 1000)])
def test_exact_and_inexact_tiles_match_the_reference_on_the_gpu(name, shape, poisoned_outputs):
    pytest.importorskip("pycuda")
    from test_reduction_cuda import assert_kernels_ran

    fd = _define(name)
    inputs = _inputs(name, shape, "cuda")
    got = fd.execute(inputs)
    assert_kernels_ran(ran_segments(fd), f"{name} {shape}")
    for k, (g, w) in enumerate(zip(got, run_reference(fd.fusion, inputs))):
        assert_close(g, w, what=f"{name} {shape} output {k}")
