"""An inner-persistent kernel's register cap counts what it keeps live across each reduction
(`normalization.live_row_bytes`, PERSISTENT_CAP_LIVE): the inputs later passes read and the
values it keeps in registers (softmax's exp), not only the inputs it loads at the start.
Planned without a GPU; the caps are checked against ptxas (sm_90): the kernel they shape
spills nothing, where the old cap made it spill (and the loader compile it again uncapped)."""
from __future__ import annotations

import re

import pytest
import torch

from cuda_units import ptxas_usage
from fuser.benchmarks import fusions as F
from fuser.frontend.cache import FusionCache
from fuser.scheduler import normalization
from fuser.scheduler.analysis import FusionAnalysis
from fuser.scheduler.runtime_info import TARGET_ENV


def _live(name: str, late: bool) -> tuple[int, int]:
    """(live_row_bytes, row_held_bytes) of a bench fusion's row."""
    sub = FusionAnalysis(F.define(name).fusion).whole()
    cols = set().union(*(r.red_classes for r in sub.reductions()))
    return normalization.live_row_bytes(sub, cols, late), normalization.row_held_bytes(sub, cols, 0)


@pytest.mark.parametrize("name,late,live,held", [
    # the bf16 row (2 bytes) across the max; its exp as floats (4) across the sum
    ("softmax_fwd_bf16", False, 4, 2),
    ("softmax_fwd_fp32", False, 4, 4),
    # the row and its weight and bias across the mean and variance, loaded at the start...
    ("layernorm_fwd_bf16", False, 6, 6),
    # ...or the row alone, the weights loaded after the reduction
    ("layernorm_fwd_bf16", True, 2, 6),
    # x and the residual (bf16) and the random numbers (float) the later pass recomputes from
    ("dropout_add_layernorm_fwd_bf16", True, 8, 8),
    ("dropout_add_layernorm_fwd_fp32", True, 12, 16),
])
def test_what_a_row_keeps_live_across_its_reductions(name, late, live, held):
    assert _live(name, late) == (live, held)


def _plan(monkeypatch, target: str, name: str, shape) -> str:
    monkeypatch.setenv(TARGET_ENV, target)
    FusionCache.reset()  # (a meta signature does not name the target)
    f = F.by_name(name)
    return F.define(name).cuda_code_for([x.to("meta") for x in f.inputs(torch.device("cpu"), shape)])


@pytest.mark.parametrize("target,shape,blocks", [
    ("h100", (8192, 8192), "5"),  # 32 floats of exp a thread: 48 registers, not 32
    ("h100", (2048, 16384), "2"),
    ("h200", (16384, 4096), "5"),
    ("h200", (16384, 1024), "5"),
])
def test_softmax_is_capped_for_its_kept_exp_and_spills_nothing(monkeypatch, switches, target, shape, blocks):
    src = _plan(monkeypatch, target, "softmax_fwd_bf16", shape)
    assert re.findall(r"__launch_bounds__\(\d+, (\d+)\)", src) == [blocks]
    (regs, spill), = ptxas_usage(src)
    assert spill == 0, (regs, spill)
    # the check can fail: counting the loaded row alone asks for more blocks, and spills
    switches(normalization, PERSISTENT_CAP_LIVE=False)
    old = _plan(monkeypatch, target, "softmax_fwd_bf16", shape)
    assert re.findall(r"__launch_bounds__\(\d+, (\d+)\)", old) != [blocks]
    assert ptxas_usage(old)[0][1] > 0


def test_a_kernel_that_keeps_nothing_is_planned_as_before(monkeypatch, switches):
    """RMSNorm holds its row and weight from the start to the end: the cap is unchanged."""
    on = _plan(monkeypatch, "h100", "rmsnorm_fwd_bf16", (16384, 4096))
    switches(normalization, PERSISTENT_CAP_LIVE=False)
    assert _plan(monkeypatch, "h100", "rmsnorm_fwd_bf16", (16384, 4096)) == on
