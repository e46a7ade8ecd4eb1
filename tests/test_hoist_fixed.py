"""Values of a row loop's once-loaded inputs computed once (lower.row_loop.HOIST_FIXED): a
norm backward's bf16 weight is widened to float before the loop over the groups of rows,
not in each pass over each row. On the CPU: where the conversions go, which kernels keep
them in the loop (a register cap), and the kernel simulated against the reference
executor; on the GPU: against eager PyTorch."""
from __future__ import annotations

import pytest
import torch

import fuser.benchmarks.fusions as F
from fuser.lower import row_loop as RL
from fuser.scheduler import normalization as N


def _code(name: str, shape) -> str:
    f = F.by_name(name)
    return f.fusion_definition().cuda_code_for(f.make_inputs("meta", shape))


def _split(src: str) -> tuple[str, str]:
    """(the kernel before its row loop, the row loop and after)."""
    at = src.index("for (nvfuser_index_t it = 0;")
    return src[:at], src[at:]


@pytest.mark.parametrize("name", ["rmsnorm_bwd_bf16", "layernorm_bwd_bf16"])
def test_a_bf16_weight_is_widened_once_before_the_row_loop(switches, name):
    switches(RL, HOIST_FIXED=True)
    before, loop = _split(_code(name, (16384, 4096)))
    assert "__launch_bounds__(512)" in before  # (no register cap)
    assert before.count("= fuser::bfloat_to_float(r") == 1 and "float t" in before
    widened = before.split("= fuser::bfloat_to_float(r")[0].rsplit("\n", 1)[1].split("[")[0].strip()
    assert widened and widened in loop  # read in the loop, computed before it
    assert f"{widened}[u * 8 + v] =" not in loop
    weight = before.split("= fuser::bfloat_to_float(")[1].split("[")[0]
    assert weight not in loop.split("fuser::grid_sync")[0]  # nor converted nor laundered there
    switches(RL, HOIST_FIXED=False)
    before, loop = _split(_code(name, (16384, 4096)))
    assert "bfloat_to_float" not in before and loop.count(f"= fuser::bfloat_to_float({weight}[") == 2


def test_a_kernel_under_a_register_cap_keeps_its_conversions_in_the_loop(switches):
    # seed 001: three 256-thread blocks an SM, 80 registers (hoisted, it spilled 68 bytes)
    switches(RL, HOIST_FIXED=True)
    src = _code("seed001_rmsnorm_bwd_bf16", (56, 1024, 1024))
    assert "__launch_bounds__(256, 3)" in src
    assert "bfloat_to_float" not in _split(src)[0]


@pytest.mark.parametrize("name", ["rmsnorm_bwd_bf16", "layernorm_bwd_bf16"])
@pytest.mark.parametrize("shape", [(9, 4096), (6, 3072)], ids=str)
def test_hoisted_kernels_simulate_to_the_reference(switches, name, shape):
    """Groups of rows past the last row included (9 rows in groups of 4: the last block's
    threads past it skip the widening as they skip their rows)."""
    from kernel_sim import simulate_fusion

    switches(N, INNER_OUTER_FEW_ROWS_APART=False)  # (a few rows, as one kernel)
    switches(RL, HOIST_FIXED=True)
    f = F.by_name(name)
    torch.manual_seed(5)
    xs = f.make_inputs("cpu", shape)
    fd = f.fusion_definition()
    before, _ = _split(fd.cuda_code_for([x.to("meta") for x in xs]))
    assert "= fuser::bfloat_to_float(r" in before
    report = simulate_fusion(fd, xs)
    assert report.ok and report.status == "ok", str(report)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["rmsnorm_bwd_bf16", "layernorm_bwd_bf16"])
@pytest.mark.parametrize("shape", [(2048, 4096), (1030, 3072), (600, 16384)], ids=str)
def test_hoisted_kernels_match_eager_on_the_gpu(switches, poisoned_kernel_outputs, name, shape):
    pytest.importorskip("pycuda")
    from test_row_loop import bench_case_on_gpu

    switches(RL, HOIST_FIXED=True)
    fd = bench_case_on_gpu(name, shape, seed=31)
    src = fd.last_cuda_code()
    assert "fuser_inner_outer" in src and "= fuser::bfloat_to_float(r" in _split(src)[0]
