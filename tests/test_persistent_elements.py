"""Elements of its row an inner-persistent thread holds follow the device
(scheduler.normalization.persistent_elements): twice PERSISTENT_ELEMENTS where the
segment's arithmetic takes more than PERSISTENT_WIDE_ABOVE of the issue slots the memory's
speed leaves per element (LayerNorm and softmax bf16 on an H200), PERSISTENT_ELEMENTS
elsewhere (an H100; float rows, which move twice the bytes an element)."""
import re

import pytest
import torch

from fuser.benchmarks import fusions as F
from fuser.frontend.cache import FusionCache
from fuser.scheduler import normalization as N
from fuser.scheduler.runtime_info import TARGET_ENV

from cuda_units import compile_all


def _block(name: str, shape) -> tuple[int, int, str]:
    """(threads a row, rows a block, source) of the bench fusion's persistent kernel."""
    FusionCache.reset()  # (a cached runner keeps the kernel planned for another target)
    f = F.by_name(name)
    src = F.define(name).cuda_code_for([x.to("meta") for x in f.inputs(torch.device("cpu"), shape)])
    (bdx,) = set(re.findall(r"block_allreduce_x<false, (\d+)>", src))
    (threads,) = set(re.findall(r"__launch_bounds__\((\d+),", src))
    return int(bdx), int(threads) // int(bdx), src


@pytest.mark.parametrize("name", ["layernorm_fwd_bf16", "softmax_fwd_bf16", "rmsnorm_fwd_bf16"])
def test_bf16_norms_take_longer_thread_rows_on_an_h200(monkeypatch, name):
    monkeypatch.setenv(TARGET_ENV, "h100")
    assert _block(name, (16384, 4096))[:2] == (256, 1)  # 16 elements a thread
    monkeypatch.setenv(TARGET_ENV, "h200")
    assert _block(name, (16384, 4096))[:2] == (128, 2)  # 32: half the threads a row, two rows a block
    assert _block(name, (16384, 1024))[:2] == (32, 8)
    # rows of 8192 already hold 32 elements a thread in 256 threads (PREFERRED_MAX_BDX)
    assert _block(name, (8192, 8192))[:2] == (256, 1)


@pytest.mark.parametrize("name", ["layernorm_fwd_fp32", "softmax_fwd_fp32", "rmsnorm_fwd_fp32"])
def test_float_rows_move_twice_the_bytes_and_keep_the_default(monkeypatch, name):
    monkeypatch.setenv(TARGET_ENV, "h200")
    assert _block(name, (16384, 4096))[:2] == (256, 1)


def test_the_threshold_and_the_aim_decide(monkeypatch):
    monkeypatch.setenv(TARGET_ENV, "h200")
    monkeypatch.setattr(N, "PERSISTENT_WIDE_ABOVE", 10.0)  # no segment's share is that high
    assert _block("layernorm_fwd_bf16", (16384, 4096))[:2] == (256, 1)
    monkeypatch.setattr(N, "PERSISTENT_WIDE_ABOVE", 0.0)
    monkeypatch.setenv(TARGET_ENV, "h100")
    assert _block("softmax_fwd_fp32", (16384, 4096))[:2] == (128, 2)
    # a row whose held inputs would pass MAX_HELD_BYTES a thread keeps more threads
    assert _block("layernorm_fwd_fp32", (16384, 4096))[:2] == (256, 1)


@pytest.mark.nvcc
def test_the_h200_kernels_compile(monkeypatch):
    monkeypatch.setenv(TARGET_ENV, "h200")
    sources = [_block(n, (16384, 4096))[2] for n in ("layernorm_fwd_bf16", "softmax_fwd_bf16", "rmsnorm_fwd_bf16")]
    assert compile_all(sources)[:4] == b"\x7fELF"
