"""Inner-persistent kernels that fit few blocks an SM taking their rows in turn, each block's
next group of rows copied into shared memory while it reduces the current one
(`normalization.ROW_LOOP_STAGED_FEW_BLOCKS`, `ReductionParams.stage_rows` under a row loop):
planned without a GPU, compiled with nvcc, simulated on the CPU against the reference
executor (on a two-SM target, so that small shapes take the rule), and run on the GPU
against eager PyTorch."""
from __future__ import annotations

import dataclasses
import re

import pytest
import torch

from cuda_units import compile_all
from fuser.benchmarks import fusions as F
from fuser.scheduler import normalization, runtime_info
from test_row_loop import CASES, LOOP, _bench_code, _case_inputs, bench_case_ids, bench_case_on_gpu

COPY = "fuser::cp_async<16>("


def _plan(name: str, shape: tuple[int, ...]):
    from fuser.kernel import prepare_kernel
    from fuser.scheduler import SchedulerType

    f = F.by_name(name)
    inputs = [x.to("meta") for x in f.inputs(torch.device("cpu"), shape)]
    return prepare_kernel(SchedulerType.inner_persistent, F.define(name).fusion, inputs).params


@pytest.mark.parametrize("name,shape,staged", [
    ("rmsnorm_fwd_fp32", (2048, 16384), True),  # one block of 1024 threads an SM
    ("layernorm_fwd_fp32", (4096, 12288), True),
    ("rmsnorm_fwd_fp32", (16384, 4096), False),  # five blocks an SM
    ("layernorm_fwd_bf16", (2048, 16384), False),  # two blocks an SM
    ("rmsnorm_fwd_fp32", (100, 16384), False),  # one wave of blocks: no next row to fetch
    ("rmsnorm_fwd_fp32", (1024, 32768), False),  # two stages of its rows would take 256 KB
])
def test_one_block_an_sm_stages_its_next_rows_where_the_switch_says(switches, name, shape, staged):
    switches(normalization, ROW_LOOP_STAGED_FEW_BLOCKS=1)
    p = _plan(name, shape)
    assert (p.row_loop and p.stage_rows) == staged, p
    src = _bench_code(name, shape)
    assert (LOOP in src and COPY in src) == staged
    if staged:
        assert "extern __shared__" in src and "fuser::cp_async_wait<0>();" in src
    switches(normalization, ROW_LOOP_STAGED_FEW_BLOCKS=0)  # shipped: never
    p = _plan(name, shape)
    assert not p.stage_rows and not p.row_loop
    assert COPY not in _bench_code(name, shape)


def test_the_staged_kernels_compile(switches):
    switches(normalization, ROW_LOOP_STAGED_FEW_BLOCKS=2)
    sources = [_bench_code(n, s) for n, s in (("rmsnorm_fwd_fp32", (2048, 16384)), ("layernorm_fwd_fp32", (4096, 12288)),
                                              ("softmax_fwd_bf16", (2048, 16384)),
                                              ("dropout_add_layernorm_fwd_bf16", (4096, 16384)))]
    assert all(LOOP in s and COPY in s for s in sources)
    # dropout + add + LayerNorm stages both its rows (x and the residual)
    assert len(set(re.findall(r"stage_r\d+", sources[3]))) == 2
    assert compile_all(sources)[:4] == b"\x7fELF"


# --- simulated on a target of two SMs a block each: small shapes are then more than a wave ----------

#: CASES (test_row_loop) whose rows are whole 16-byte vectors: the ones that can be staged
STAGED_CASES = ("rms_bf16_37x1000", "layernorm_fp32_45x64", "layernorm_fp32_2201x64", "three_sums_bf16_23x256",
                "dropout_layernorm_bf16_19x256")


@pytest.fixture
def two_sms(switches, monkeypatch):
    """Plan for an H100 of two SMs holding a block each (no CUDA device here)."""
    small = dataclasses.replace(runtime_info.TARGETS["h100"], sm_count=2, max_blocks_per_sm=1)
    monkeypatch.setitem(runtime_info.TARGETS, "h100", small)
    monkeypatch.setenv(runtime_info.TARGET_ENV, "h100")
    switches(normalization, ROW_LOOP_STAGED_FEW_BLOCKS=1)


@pytest.mark.parametrize("name", STAGED_CASES)
def test_staged_rows_simulate_to_the_reference(two_sms, name):
    from kernel_sim import simulate_fusion

    fd, xs = _case_inputs(name)
    src = fd.cuda_code_for([x.to("meta") for x in xs])
    assert LOOP in src and COPY in src
    report = simulate_fusion(fd, xs, resident=2)
    assert report.ok and report.status == "ok", str(report)
    (seg,) = report.segments
    assert seg.scheduler == "inner_persistent" and seg.kernel, str(report)


def test_rows_of_vectors_under_16_bytes_are_not_staged(two_sms):
    fd, xs = _case_inputs("softmax_fp16_29x333")  # rows of 333: one element a vector
    assert COPY not in fd.cuda_code_for([x.to("meta") for x in xs])


def test_the_simulation_fails_with_one_stage(two_sms, switches):
    """The check can fail: with one stage the next group's copies land in the rows the
    block is still reading."""
    from kernel_sim import simulate_fusion

    switches(normalization, STAGES=1)
    fd, xs = _case_inputs("rms_bf16_37x1000")
    assert COPY in fd.cuda_code_for([x.to("meta") for x in xs])
    report = simulate_fusion(fd, xs, resident=2)
    assert not report.ok, str(report)


# --- on the GPU: against eager PyTorch ---------------------------------------------------------------

GPU_CASES = [("rmsnorm_fwd_fp32", (2048, 16384)), ("layernorm_fwd_fp32", (4096, 12288)),
             ("rmsnorm_fwd_fp32", (133, 16384)),  # a second round for one block only
             ("layernorm_fwd_fp32", (1001, 16384)), ("softmax_fwd_bf16", (2048, 16384)),
             ("rmsnorm_fwd_bf16", (1000, 32768)), ("dropout_add_layernorm_fwd_bf16", (4096, 16384))]


@pytest.mark.gpu
@pytest.mark.parametrize("name,shape", GPU_CASES, ids=bench_case_ids(GPU_CASES))
def test_staged_rows_match_eager_on_the_gpu(switches, poisoned_kernel_outputs, name, shape):
    pytest.importorskip("pycuda")
    switches(normalization, ROW_LOOP_STAGED_FEW_BLOCKS=2)
    fd = bench_case_on_gpu(name, shape, seed=43)
    src = fd.last_cuda_code()
    assert LOOP in src and COPY in src
    runs = fd._entry.last_runner.runs
    assert any(getattr(getattr(r.kernel, "params", None), "stage_rows", False) for r in runs)
