"""Outer reductions whose blocks take their columns' whole rows (scheduler.reduction.
OUTER_WHOLE_COLUMNS): no grid split, so no partials and no arrival counters, with taller
blocks loading more rows a step, from column blocks of 0.9 of the SMs up. These tests set
it to 0.0: every outer reduction that would share rows between blocks takes it instead.

On the CPU: the plan (threads, no grid reduction) and the kernels simulated against the
reference executor. On the GPU: the reduction case list against the reference executor,
outputs poisoned, as test_reduction_cuda runs it."""
from __future__ import annotations

import re

import pytest
import torch

from fuser import DataType, FusionDefinition
import fuser.scheduler.reduction as reduction

import reduction_cases
from test_reduction_cuda import check_against_reference, poisoned_outputs  # noqa: F401 (a fixture)


@pytest.fixture
def whole(monkeypatch):
    monkeypatch.setattr(reduction, "OUTER_WHOLE_COLUMNS", 0.0)


def _sum_outer(dtype: DataType):
    """Sum over dim 0 in float, the result in `dtype` (so its vectors are as wide as the input's)."""
    def build(fd: FusionDefinition) -> None:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype)
        fd.add_output(fd.ops.cast(fd.ops.sum(fd.ops.cast(x, DataType.Float), dims=[0]), dtype))
    return build


def _code(build, shape, dtype=torch.float32) -> str:
    with FusionDefinition() as fd:
        build(fd)
    return fd.cuda_code_for([torch.empty(shape, dtype=dtype, device="meta")])


def _threads(src: str) -> int:
    return int(re.search(r"__launch_bounds__\((\d+)", src).group(1))


@pytest.mark.parametrize("setting,whole_rows", [(None, False), (0.9, True), (0.5, True), (1.0, False)])
def test_column_blocks_near_the_sm_count_take_whole_rows_from_the_threshold(monkeypatch, setting, whole_rows):
    # fp32 [16384, 8192]: 128 column blocks of 16 x 4 elements against the H100 target's
    # 132 SMs (0.97 of them): a grid split below the threshold, whole rows from it
    monkeypatch.setattr(reduction, "OUTER_WHOLE_COLUMNS", setting)
    src = _code(_sum_outer(DataType.Float), (16384, 8192))
    if whole_rows:
        assert _threads(src) == reduction.OUTER_WHOLE_BLOCK_THREADS
        assert "grid_arrive" not in src and "grid_finish" not in src, src
    else:
        assert _threads(src) == reduction.OUTER_BLOCK_THREADS and "grid_arrive" in src


def test_fewer_column_blocks_than_the_threshold_still_share_rows(monkeypatch):
    # fp32 [16384, 4096]: 64 column blocks, 0.48 of the SMs
    monkeypatch.setattr(reduction, "OUTER_WHOLE_COLUMNS", 0.5)
    assert "grid_arrive" in _code(_sum_outer(DataType.Float), (16384, 4096))
    monkeypatch.setattr(reduction, "OUTER_WHOLE_COLUMNS", 0.4)
    assert "grid_arrive" not in _code(_sum_outer(DataType.Float), (16384, 4096))


def test_whole_row_kernels_compile_for_sm90_without_spilling(whole):
    from cuda_units import ptxas_usage

    for shape, dtype, dt in (((16384, 8192), torch.float32, DataType.Float),
                             ((4100, 8200), torch.float32, DataType.Float),
                             ((16384, 4096), torch.bfloat16, DataType.BFloat16)):
        src = _code(_sum_outer(dt), shape, dtype)
        assert "grid_arrive" not in src and _threads(src) == reduction.OUTER_WHOLE_BLOCK_THREADS, shape
        (usage,) = ptxas_usage(src)
        assert usage[1] == 0 and usage[0] <= 64, (shape, usage)  # 1024 threads: at most 64 registers


def test_short_vectors_still_share_rows(monkeypatch):
    # only 16-byte vectors were measured: a float sum of bf16 columns (4-element vectors, set
    # by the float output) and 2-element float vectors (8194 columns) keep the grid split
    monkeypatch.setattr(reduction, "OUTER_WHOLE_COLUMNS", 0.0)
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
        fd.add_output(fd.ops.sum(fd.ops.cast(x, DataType.Float), dims=[0]))
    assert "grid_arrive" in fd.cuda_code_for([torch.empty(16384, 4096, dtype=torch.bfloat16, device="meta")])
    assert "grid_arrive" in _code(_sum_outer(DataType.Float), (2048, 8194))


#: outer reductions whose rows are enough for a grid split (steps > 8), kept small enough
#: to simulate: a last block of columns and a last step of rows partly outside, bf16,
#: Welford, a middle dim
_SIM = [
    ("sum_fp32_tails", lambda: [torch.randn(1300, 200)], lambda fd, x: [fd.ops.sum(x, [0])]),
    ("sum_bf16", lambda: [torch.randn(777, 520).to(torch.bfloat16)],
     lambda fd, x: [fd.ops.cast(fd.ops.sum(fd.ops.cast(x, DataType.Float), [0]), DataType.BFloat16)]),
    ("var_mean_fp32", lambda: [torch.randn(1000, 96)], lambda fd, x: list(fd.ops.var_mean(x, [0], correction=1))),
    ("max_fp32_middle", lambda: [torch.randn(3, 900, 40)], lambda fd, x: [fd.ops.max(x, [1])]),
]


@pytest.mark.parametrize("make,body", [(m, b) for _, m, b in _SIM], ids=[n for n, _, _ in _SIM])
def test_whole_row_kernels_simulate_to_the_reference(whole, make, body):
    from kernel_sim import simulate_fusion

    torch.manual_seed(17)
    inputs = make()
    with FusionDefinition() as fd:
        xs = [fd.from_pytorch(t) for t in inputs]
        for out in body(fd, *xs):
            fd.add_output(out)
    src = fd.cuda_code_for([torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
                            for t in inputs])
    assert "grid_arrive" not in src and _threads(src) == reduction.OUTER_WHOLE_BLOCK_THREADS, src[:1500]
    report = simulate_fusion(fd, inputs)
    assert report.ok and report.status == "ok" and report.simulated >= 1, str(report)


@pytest.mark.gpu
@pytest.mark.parametrize("case", reduction_cases.CASES, ids=[c.name for c in reduction_cases.CASES])
def test_reductions_with_whole_row_blocks_match_the_reference_on_the_gpu(case, whole, poisoned_outputs):
    pytest.importorskip("pycuda")
    check_against_reference(case, "cuda", poisoned_outputs)
