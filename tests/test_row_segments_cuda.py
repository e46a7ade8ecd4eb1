"""Inner-outer kernels whose outer reductions reduce some of the rows' axes (issue 9, seed
001's sums over the sequence per batch): a norm backward over [B, M, N] rows whose weight
gradient is wanted per batch ([B, N], a sum over M) beside the usual one ([N], a sum over
B and M). One kernel computes all of them: each block flushes its column tiles at every
batch it leaves, and after the grid synchronises the partials of each (batch, column) are
combined in block order.

CPU: the segmentation (one inner_outer_persistent segment when the kept axes are the outer
row axes; more when they are not) and nvcc compiles the kernels. GPU: the outputs against
eager PyTorch with poisoned kernel outputs, over shapes where blocks cross several batches,
batches span several blocks, and rows per batch are odd (one row per block row group).
"""
from __future__ import annotations

import pytest
import torch

import test_reduction_cuda as trc
from cuda_units import compile_all
from fuser import DataType, FusionDefinition
from fuser.benchmarks.fusions import reduction_tolerance
from fuser.runtime.tolerance import assert_close

gpu = pytest.mark.gpu
_seed = trc._seed
poisoned_outputs = trc.poisoned_outputs

_DT = {torch.float32: DataType.Float, torch.bfloat16: DataType.BFloat16, torch.float16: DataType.Half}


def build(fd: FusionDefinition, dtype: torch.dtype, kept: int = 0) -> None:
    """dx of an RMSNorm-like backward over rows [B, M] of N, the weight gradient summed
    over the rows of each index of axis `kept` (0: per batch; 1: per position, over the
    batches) and over all rows, and the gradient's sum per index of `kept`."""
    x = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True], dtype=_DT[dtype])
    g = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True], dtype=_DT[dtype])
    w = fd.define_tensor(shape=[-1], contiguity=[True], dtype=_DT[dtype])
    xf, gf, wf = (fd.ops.cast(t, DataType.Float) for t in (x, g, w))
    gw = fd.ops.mul(gf, fd.ops.broadcast_in_dim(wf, shape=fd.ops.shape(x), broadcast_dims=[2]))
    s = fd.ops.sum(fd.ops.mul(gw, xf), dims=[2], keepdim=True)
    n = fd.ops.size(x, 2)
    dx = fd.ops.sub(gw, fd.ops.div(fd.ops.mul(s, xf), n))
    gx = fd.ops.mul(gf, xf)
    reduced = 1 - kept
    fd.add_output(fd.ops.cast(dx, _DT[dtype]))
    fd.add_output(fd.ops.cast(fd.ops.sum(gx, dims=[reduced]), _DT[dtype]))
    fd.add_output(fd.ops.cast(fd.ops.sum(gx, dims=[0, 1]), _DT[dtype]))
    fd.add_output(fd.ops.cast(fd.ops.sum(gf, dims=[reduced]), _DT[dtype]))


def eager(x, g, w, kept: int = 0):
    xf, gf, wf = x.float(), g.float(), w.float()
    gw = gf * wf
    dx = gw - (gw * xf).sum(2, keepdim=True) * xf / x.shape[2]
    gx = gf * xf
    reduced = 1 - kept
    return [t.to(x.dtype) for t in (dx, gx.sum(reduced), gx.sum((0, 1)), gf.sum(reduced))]


def inputs(b: int, m: int, n: int, dtype: torch.dtype, device: str):
    def rand(*shape):
        if device == "meta":
            return torch.empty(shape, dtype=dtype, device="meta")
        t = torch.randn(shape, device=device)
        return (t + torch.where(t < 0, -0.25, 0.25)).to(dtype)  # away from 0
    return [rand(b, m, n), rand(b, m, n), rand(n)]


def _segments(fd: FusionDefinition, ins) -> list[str]:
    return [str(getattr(g.scheduler, "value", g.scheduler)) for g in fd.segmented_fusion_for(ins).groups]


SHAPES = [(3, 1000, 1024), (7, 5, 127), (1, 7, 4097), (56, 1024, 1024), (130, 3, 1000), (2, 20000, 256)]


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{b}x{m}x{n}" for b, m, n in SHAPES])
def test_sums_per_batch_are_in_the_inner_outer_kernel(shape):
    ins = inputs(*shape, torch.bfloat16, "meta")
    with FusionDefinition() as fd:
        build(fd, torch.bfloat16)
    assert _segments(fd, ins) == ["inner_outer_persistent"]
    src = fd.cuda_code_for(ins)
    assert src.count("fuser::segment_partials(") == 2 and src.count("fuser::column_partials<1>(") == 1
    assert compile_all([src])[:4] == b"\x7fELF"


def test_sums_over_an_outer_axis_per_inner_one_are_not():
    # per position over the batches: a segment's rows are not consecutive
    ins = inputs(3, 1000, 1024, torch.float32, "meta")
    with FusionDefinition() as fd:
        build(fd, torch.float32, kept=1)
    assert len(_segments(fd, ins)) > 1


def test_disabled_by_name(monkeypatch):
    monkeypatch.setenv("FUSER_DISABLE", "row_segments")
    ins = inputs(3, 1000, 1024, torch.float32, "meta")
    with FusionDefinition() as fd:
        build(fd, torch.float32)
    assert len(_segments(fd, ins)) > 1


def test_eager_twin_matches_the_definition_on_cpu():
    ins = inputs(3, 10, 33, torch.float32, "cpu")
    with FusionDefinition() as fd:
        build(fd, torch.float32)
    for k, (g, w) in enumerate(zip(fd.execute(ins), eager(*ins))):
        assert_close(g, w, what=f"output {k}")


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("kept", [0, 1], ids=["per_batch", "per_position"])
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{b}x{m}x{n}" for b, m, n in SHAPES])
def test_matches_eager_on_gpu(shape, kept, dtype, poisoned_outputs):
    pytest.importorskip("pycuda")
    b, m, n = shape
    with FusionDefinition() as fd:
        build(fd, dtype, kept)
    for _ in range(2):  # again on new inputs, through the cached kernel
        ins = inputs(b, m, n, dtype, "cuda")
        got = fd.execute(ins)
        segs = trc.ran_segments(fd)
        assert all(ran for _, ran in segs), segs
        if kept == 0:
            assert [s for s, _ in segs] == ["inner_outer_persistent"], segs
        want = eager(*ins, kept)
        summed = [n, shape[1 - kept], b * m, shape[1 - kept]]
        for k, (g, w, terms) in enumerate(zip(got, want, summed)):
            rtol, atol = reduction_tolerance(dtype, terms, 8.0)
            assert_close(g, w, what=f"{shape} output {k} {segs}", rtol=rtol, atol=atol)
