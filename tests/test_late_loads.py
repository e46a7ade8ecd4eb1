"""Inner-persistent kernels that load each input at the first pass over the row that reads it
(`ReductionParams.late_loads`, normalization.PERSISTENT_LATE_LOADS): a norm's weights after
its reductions, so that the kernel holds less across them. Generated without a GPU, compiled
with nvcc, simulated on the CPU against the reference executor (alone and under a row loop),
and on the GPU against eager PyTorch."""
from __future__ import annotations

import re

import pytest
import torch

from cuda_units import compile_all
from fuser import DataType, FusionDefinition
from fuser.lower import row_loop
from fuser.scheduler import normalization
from test_row_loop import (CASES, GPU_CASES, _TDT, _bench_code, _case_inputs, _layernorm, bench_case_ids,
                           bench_case_on_gpu)


@pytest.fixture
def late(switches):
    def set_(on: bool = True, loop: str = "never", loads: str = "direct") -> None:
        switches(row_loop, ROW_LOOP_LOADS=loads)
        switches(normalization, PERSISTENT_LATE_LOADS=on, PERSISTENT_ROW_LOOP=loop)

    return set_


def test_a_layernorms_weight_and_bias_load_after_its_reductions(late):
    late(False)
    early = _bench_code("layernorm_fwd_bf16", (16384, 4096))
    late(True)
    src = _bench_code("layernorm_fwd_bf16", (16384, 4096))
    last_reduction = src.rindex("block_allreduce_x")
    weight, bias, row = (src.index(f"(&r{k}[u * 8], &T{k}[") for k in (1, 2, 0))
    assert row < last_reduction < weight < bias
    assert early.index("(&r1[u * 8], &T1[") < early.index("block_allreduce_x")
    # each vector's weight and bias just before its use, in the loop that writes it
    assert re.search(r"&T2\[[^\n]*\n\s+#pragma unroll\n\s+for \(int v = 0; v < 8; \+\+v\) \{", src)
    # nothing laundered before it is loaded: the weights' registers only after their load
    assert "fuser::launder(r1)" not in src
    # held across the reductions: the row alone (8 blocks of 256 threads per SM, not 6)
    assert "__launch_bounds__(256, 6)" in early and "__launch_bounds__(256, 8)" in src
    assert compile_all([early, src])[:4] == b"\x7fELF"


@pytest.mark.parametrize("loop", ["never", "always"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_late_loads_simulate_to_the_reference(late, name, loop):
    from kernel_sim import simulate_fusion

    late(True, loop, "staged" if loop == "always" else "direct")
    fd, xs = _case_inputs(name)
    report = simulate_fusion(fd, xs, resident=3)
    assert report.ok and report.status == "ok", str(report)
    (seg,) = report.segments
    assert seg.scheduler == "inner_persistent" and seg.kernel, str(report)


@pytest.mark.gpu
@pytest.mark.parametrize("name,shape", GPU_CASES, ids=bench_case_ids(GPU_CASES))
def test_late_loads_match_eager_on_the_gpu(late, poisoned_kernel_outputs, name, shape):
    pytest.importorskip("pycuda")
    late(True)
    fd = bench_case_on_gpu(name, shape, seed=2)
    runs = fd._entry.last_runner.runs
    assert any(getattr(getattr(r.kernel, "params", None), "late_loads", False) for r in runs)


def test_the_simulation_fails_where_a_row_is_loaded_after_its_first_use(late, monkeypatch):
    """The check can fail: every input loaded in the last pass only, after the reductions
    that read the row."""
    from kernel_sim import simulate_fusion

    from fuser.lower.reduction import ReductionLowering

    monkeypatch.setattr(ReductionLowering, "_loads_at", lambda self, tv, k, exprs, reds: k == self._last_stage)
    late(True)
    fd, xs = _case_inputs("rms_bf16_37x1000")
    report = simulate_fusion(fd, xs, resident=3)
    assert not report.ok, str(report)


def test_an_input_read_only_in_the_first_pass_is_let_go_and_counted(late):
    """z is read only beside the reduction (for another output): it is not laundered after
    it (a launder would keep its registers live to the end), and the occupancy target counts
    it, since the first pass holds it beside the row (a target that left it out spilled)."""
    def build(fd):
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        z = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        fd.add_output(fd.ops.mul(x, z))
        m = fd.ops.sum(fd.ops.mul(x, x), dims=[1], keepdim=True)
        fd.add_output(fd.ops.mul(x, fd.ops.rsqrt(m)))

    xs = [torch.empty(16384, 4096, device="meta")] * 2
    codes = {}
    for on in (False, True):
        late(on)
        with FusionDefinition() as fd:
            build(fd)
        codes[on] = fd.cuda_code_for(xs)
    early, src = codes[False], codes[True]
    after = src[src.index("block_allreduce_x"):]
    assert "fuser::launder(r0);" in after and "fuser::launder(r1);" not in after
    assert "fuser::launder(r1);" in early[early.index("block_allreduce_x"):]
    bounds = re.findall(r"__launch_bounds__\(256, (\d+)\)", src)
    assert bounds == re.findall(r"__launch_bounds__\(256, (\d+)\)", early) == ["5"]


# --- the shipped rule: late loads where the kernel keeps a value across a reduction ----------------


def _late_planned(name: str, shape) -> str:
    """"late" where the bench fusion's kernel loads an input after its last block reduction
    (a sum's or a Welford triple's)."""
    src = _bench_code(name, shape)
    last = [m.end() for m in re.finditer(r"fuser::block_(allreduce|welford)_x", src)][-1]
    return "late" if re.search(r"load_vec(_stream)?<", src[last:]) else "early"


@pytest.mark.parametrize("name,shape,want", [
    ("dropout_add_layernorm_fwd_bf16", (16384, 4096), "late"),  # keeps its random numbers
    ("dropout_add_layernorm_fwd_fp32", (16384, 4096), "late"),
    ("dropout_add_layernorm_fwd_bf16", (128, 1000), "early"),  # one wave of blocks: latency exposed
    ("layernorm_fwd_bf16", (16384, 4096), "early"),  # keeps nothing
    ("rmsnorm_fwd_fp32", (16384, 4096), "early"),
    ("softmax_fwd_bf16", (16384, 4096), "early"),  # keeps exp, but has no input to load later
])
def test_the_shipped_rule_loads_late_where_the_kernel_keeps_a_value(switches, name, shape, want):
    switches(normalization, PERSISTENT_LATE_LOADS="kept")
    assert _late_planned(name, shape) == want
    switches(normalization, PERSISTENT_LATE_LOADS=False)  # the check can fail
    assert _late_planned(name, shape) == "early"


def test_keeps_across_reductions_follows_the_values_not_the_reduction_inputs():
    from fuser.benchmarks import fusions as F
    from fuser.scheduler.analysis import FusionAnalysis

    seen = {name: normalization.keeps_across_reductions(FusionAnalysis(F.define(name).fusion).whole())
            for name in ("dropout_add_layernorm_fwd_bf16", "softmax_fwd_bf16", "layernorm_fwd_bf16")}
    # dropout's random numbers feed the row the later passes recompute; softmax's exp, read
    # after its sum; LayerNorm recomputes everything from the loaded row
    assert seen == {"dropout_add_layernorm_fwd_bf16": True, "softmax_fwd_bf16": True, "layernorm_fwd_bf16": False}


@pytest.mark.parametrize("name,shape,want", [
    ("layernorm_fwd_bf16", (2048, 16384), "late"),  # two blocks of 512 threads an SM, loading early
    ("rmsnorm_fwd_fp32", (8192, 8192), "late"),
    ("layernorm_fwd_bf16", (16384, 4096), "early"),  # six blocks
    ("rmsnorm_fwd_bf16", (16384, 4096), "early"),
])
def test_few_blocks_an_sm_load_late_where_the_switch_says(switches, name, shape, want):
    switches(normalization, PERSISTENT_LATE_LOADS="kept", LATE_LOADS_FEW_BLOCKS=2)
    assert _late_planned(name, shape) == want
    switches(normalization, LATE_LOADS_FEW_BLOCKS=0)  # shipped: only kept values decide
    assert _late_planned(name, shape) == "early"


@pytest.mark.gpu
@pytest.mark.parametrize("name,shape", [("layernorm_fwd_bf16", (2048, 16384)), ("rmsnorm_fwd_fp32", (1030, 8192)),
                                        ("layernorm_fwd_fp32", (600, 16384))], ids=str)
def test_few_blocks_loading_late_match_eager_on_the_gpu(switches, poisoned_kernel_outputs, name, shape):
    pytest.importorskip("pycuda")
    switches(normalization, PERSISTENT_LATE_LOADS="kept", LATE_LOADS_FEW_BLOCKS=2)
    fd = bench_case_on_gpu(name, shape, seed=41)
    runs = fd._entry.last_runner.runs
    assert any(getattr(getattr(r.kernel, "params", None), "late_loads", False) for r in runs)


# --- rows whose early loads one block's registers cannot hold -----------------------------------


def test_fits_one_block_counts_a_threads_registers_and_the_sms():
    from fuser.scheduler.runtime_info import DeviceLimits

    h100 = DeviceLimits.target("h100")
    assert normalization.persistent_registers(192) == 64  # 48 held, 16 more
    assert normalization.fits_one_block(h100, 1024, 192)
    assert not normalization.fits_one_block(h100, 1024, 196)  # 72 registers x 1024 threads: past 65536
    assert normalization.fits_one_block(h100, 256, 900)  # 248 registers
    assert not normalization.fits_one_block(h100, 32, 1000)  # 272: past the 255 a thread may address


@pytest.mark.parametrize("name,shape,want", [
    ("layernorm_fwd_fp32", (1024, 32768), "late"),  # 1024 threads of 32: row, weight and bias, 96 floats
    ("layernorm_fwd_fp32", (100, 32768), "late"),  # one wave of blocks: late all the same
    ("layernorm_fwd_fp32", (2048, 24576), "late"),
    ("rmsnorm_fwd_fp32", (1024, 32768), "late"),
    ("layernorm_fwd_bf16", (256, 49152), "late"),
    # (one wave of blocks: early without the switch, though it keeps its random numbers)
    ("dropout_add_layernorm_fwd_fp32", (100, 16384), "late"),
    ("layernorm_fwd_fp32", (2048, 16384), "early"),  # 48 floats a thread: one block holds them
    ("layernorm_fwd_bf16", (1024, 32768), "early"),
    ("softmax_fwd_fp32", (1024, 32768), "early"),  # no input to load later
])
def test_rows_one_block_cannot_hold_load_late_where_the_switch_says(switches, name, shape, want):
    switches(normalization, PERSISTENT_LATE_LOADS="kept", LATE_LOADS_OVER_REGISTERS=True)
    assert _late_planned(name, shape) == want
    switches(normalization, LATE_LOADS_OVER_REGISTERS=False)  # shipped: off until timed
    assert _late_planned(name, shape) == "early"


@pytest.mark.nvcc
def test_loading_late_spills_nothing_where_loading_early_spills(switches):
    """ptxas sm_90: LayerNorm fp32 [1024, 32768] early holds 96 floats a thread where 1024
    threads may take 64 registers each, and spills; late, it holds the row alone across the
    reduction."""
    from cuda_units import ptxas_usage

    switches(normalization, PERSISTENT_LATE_LOADS="kept", LATE_LOADS_OVER_REGISTERS=False)
    (early,) = ptxas_usage(_bench_code("layernorm_fwd_fp32", (1024, 32768)))
    switches(normalization, LATE_LOADS_OVER_REGISTERS=True)
    (late,) = ptxas_usage(_bench_code("layernorm_fwd_fp32", (1024, 32768)))
    assert early[0] <= 64 and early[1] > 0
    assert late[0] <= 64 and late[1] == 0


@pytest.mark.parametrize("dt,n", [(DataType.Float, 32768), (DataType.BFloat16, 49152)])
def test_rows_one_block_cannot_hold_simulate_to_the_reference(switches, dt, n):
    from kernel_sim import simulate_fusion

    switches(normalization, PERSISTENT_LATE_LOADS="kept", LATE_LOADS_OVER_REGISTERS=True)
    torch.manual_seed(7)
    t = _TDT[dt]
    # rows far from zero and a weight and bias of their own, so that a value from the wrong
    # pass or vector shows
    xs = [(torch.randn(3, n) * 3 + 5).to(t), torch.randn(n).to(t), torch.randn(n).to(t)]
    with FusionDefinition() as fd:
        _layernorm(fd, dt)
    src = fd.cuda_code_for([x.to("meta") for x in xs])
    assert src.index("&T1[") > src.rindex("fuser::block_welford_x")  # the weight after the reduction
    report = simulate_fusion(fd, xs, resident=3)
    assert report.ok and report.status == "ok", str(report)
    (seg,) = report.segments
    assert seg.scheduler == "inner_persistent" and seg.kernel, str(report)


@pytest.mark.gpu
@pytest.mark.parametrize("name,shape", [("layernorm_fwd_fp32", (1024, 32768)), ("layernorm_fwd_fp32", (100, 32768)),
                                        ("layernorm_fwd_fp32", (333, 24576)), ("rmsnorm_fwd_fp32", (1030, 32768)),
                                        ("layernorm_fwd_bf16", (257, 49152)),
                                        ("dropout_add_layernorm_fwd_fp32", (100, 16384))], ids=str)
def test_rows_one_block_cannot_hold_match_eager_on_the_gpu(switches, poisoned_kernel_outputs, name, shape):
    pytest.importorskip("pycuda")
    switches(normalization, PERSISTENT_LATE_LOADS="kept", LATE_LOADS_OVER_REGISTERS=True)
    fd = bench_case_on_gpu(name, shape, seed=43)
    runs = fd._entry.last_runner.runs
    assert any(getattr(getattr(r.kernel, "params", None), "late_loads", False) for r in runs)
