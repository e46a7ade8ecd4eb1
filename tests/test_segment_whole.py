"""One kernel when one scheduler takes the whole fusion (issue 9, item 3).

nvFuser asks the schedulers about the complete fusion before it segments; fuser's greedy
pairwise merging once cut the RMSNorm backward of nvFuser's benchmarks into three
segments (reduction, reduction, transpose) although inner_outer_persistent accepts all of
it: no pair of those groups was schedulable, only the three together. The normalisation
backwards here are written as nvFuser's benchmarks write them (inputs grad, x, the saved
statistics as [N, 1] fp32, weight [H]; math in float) and must be one
inner_outer_persistent segment whose results, run on CPU, match eager PyTorch.
"""
from __future__ import annotations

import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.examples.rmsnorm_backward import make_inputs as seed001_inputs
from fuser.examples.rmsnorm_backward import rmsnorm_backward as seed001_definition
from fuser.frontend.segmentation import segment
from fuser.ir import LoadStoreOp
from fuser.runtime.info import runtime_info
from fuser.scheduler import SchedulerType, schedulers_for
from fuser.scheduler.analysis import SCALAR, expr_kind
from fuser.segment import segment_fusion

#: (N, H) of the runs checked against eager PyTorch on CPU, and of segmentation-only
#: checks at a benchmark's size (meta tensors: no memory, no work)
CPU_SHAPE = (96, 1024)
BENCH_SHAPE = (16384, 4096)
DTYPES = {"fp32": (DataType.Float, torch.float32), "bf16": (DataType.BFloat16, torch.bfloat16)}
#: (rtol, atol) per dtype: the fusion computes in float as eager does here, but sums in
#: another order; bf16 outputs differ by a rounding step now and then
TOLERANCE = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (2e-2, 2e-2)}


def _to_float(fd: FusionDefinition, t, dtype: DataType):
    return fd.ops.cast(t, dtype=DataType.Float) if dtype is not DataType.Float else t


def _from_float(fd: FusionDefinition, t, dtype: DataType):
    return fd.ops.cast(t, dtype=dtype) if dtype is not DataType.Float else t


def rmsnorm_backward(fd: FusionDefinition, dtype: DataType) -> None:
    """RMSNorm backward as nvFuser's benchmarks define it: dweight first, then dx.

    x_hat = x * rstd; dx = rstd * (grad * w - x_hat * mean(grad * w * x_hat, -1));
    dweight = sum(grad * x_hat, 0).
    """
    grad = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype, is_cpu=False)
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype, is_cpu=False)
    rstd = fd.define_tensor(shape=[-1, 1], contiguity=[True, None], dtype=DataType.Float, is_cpu=False)
    weight = fd.define_tensor(shape=[-1], contiguity=[True], dtype=dtype, is_cpu=False)
    grad, x, weight = (_to_float(fd, t, dtype) for t in (grad, x, weight))
    shape = x.shape()
    rstd_b = fd.ops.broadcast_in_dim(rstd, shape=shape, broadcast_dims=[0, 1])
    x_hat = fd.ops.mul(x, rstd_b)
    dweight = fd.ops.sum(fd.ops.mul(grad, x_hat), dims=[0], keepdim=False)
    weight_b = fd.ops.broadcast_in_dim(weight, shape=shape, broadcast_dims=[1])
    grad_w = fd.ops.mul(grad, weight_b)
    row = fd.ops.sum(fd.ops.mul(grad_w, x_hat), dims=[1], keepdim=False)
    mean = fd.ops.div(fd.ops.broadcast_in_dim(row, shape=shape, broadcast_dims=[0]), fd.ops.size(x, 1))
    dx = fd.ops.mul(rstd_b, fd.ops.sub(grad_w, fd.ops.mul(x_hat, mean)))
    fd.add_output(_from_float(fd, dx, dtype))
    fd.add_output(_from_float(fd, dweight, dtype))


def layernorm_backward(fd: FusionDefinition, dtype: DataType) -> None:
    """LayerNorm backward as nvFuser's benchmarks define it.

    x_hat = (x - mean) * rstd; g = grad * w;
    dx = rstd * (g - mean(g, -1) - x_hat * mean(g * x_hat, -1));
    dweight = sum(grad * x_hat, 0); dbias = sum(grad, 0).
    """
    grad = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype, is_cpu=False)
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype, is_cpu=False)
    mean = fd.define_tensor(shape=[-1, 1], contiguity=[True, None], dtype=DataType.Float, is_cpu=False)
    rstd = fd.define_tensor(shape=[-1, 1], contiguity=[True, None], dtype=DataType.Float, is_cpu=False)
    weight = fd.define_tensor(shape=[-1], contiguity=[True], dtype=dtype, is_cpu=False)
    grad, x, weight = (_to_float(fd, t, dtype) for t in (grad, x, weight))
    shape = x.shape()
    mean_b = fd.ops.broadcast_in_dim(mean, shape=shape, broadcast_dims=[0, 1])
    rstd_b = fd.ops.broadcast_in_dim(rstd, shape=shape, broadcast_dims=[0, 1])
    x_hat = fd.ops.mul(fd.ops.sub(x, mean_b), rstd_b)
    weight_b = fd.ops.broadcast_in_dim(weight, shape=shape, broadcast_dims=[1])
    g = fd.ops.mul(grad, weight_b)
    n = fd.ops.size(x, 1)
    a = fd.ops.div(fd.ops.sum(g, dims=[1], keepdim=True), n)
    b = fd.ops.div(fd.ops.sum(fd.ops.mul(g, x_hat), dims=[1], keepdim=True), n)
    a_b = fd.ops.broadcast_in_dim(a, shape=shape, broadcast_dims=[0, 1])
    b_b = fd.ops.broadcast_in_dim(b, shape=shape, broadcast_dims=[0, 1])
    dx = fd.ops.mul(rstd_b, fd.ops.sub(fd.ops.sub(g, a_b), fd.ops.mul(x_hat, b_b)))
    dweight = fd.ops.sum(fd.ops.mul(grad, x_hat), dims=[0], keepdim=False)
    dbias = fd.ops.sum(grad, dims=[0], keepdim=False)
    fd.add_output(_from_float(fd, dx, dtype))
    fd.add_output(_from_float(fd, dweight, dtype))
    fd.add_output(_from_float(fd, dbias, dtype))


def _rms_inputs(shape, tdtype, device="cpu", seed=0):
    n, h = shape
    if device == "meta":
        return [torch.empty(n, h, dtype=tdtype, device="meta"), torch.empty(n, h, dtype=tdtype, device="meta"),
                torch.empty(n, 1, device="meta"), torch.empty(h, dtype=tdtype, device="meta")]
    g = torch.Generator().manual_seed(seed)
    grad = torch.randn(n, h, generator=g).to(tdtype)
    x = torch.randn(n, h, generator=g).to(tdtype)
    rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)
    weight = (1.0 + 0.1 * torch.randn(h, generator=g)).to(tdtype)
    return [grad, x, rstd, weight]


def _ln_inputs(shape, tdtype, device="cpu", seed=0):
    n, h = shape
    if device == "meta":
        return [torch.empty(n, h, dtype=tdtype, device="meta"), torch.empty(n, h, dtype=tdtype, device="meta"),
                torch.empty(n, 1, device="meta"), torch.empty(n, 1, device="meta"),
                torch.empty(h, dtype=tdtype, device="meta")]
    g = torch.Generator().manual_seed(seed)
    grad = torch.randn(n, h, generator=g).to(tdtype)
    x = (2.0 + 3.0 * torch.randn(n, h, generator=g)).to(tdtype)
    var, mean = torch.var_mean(x.float(), dim=-1, keepdim=True, correction=0)
    rstd = torch.rsqrt(var + 1e-5)
    weight = (1.0 + 0.1 * torch.randn(h, generator=g)).to(tdtype)
    return [grad, x, mean, rstd, weight]


def _rms_eager(grad, x, rstd, weight):
    """dx, dweight by autograd through RMSNorm's forward (rstd is what the forward saved)."""
    xf = x.float().requires_grad_()
    wf = weight.float().requires_grad_()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5) * wf
    y.backward(grad.float())
    return [xf.grad.to(x.dtype), wf.grad.to(x.dtype)]


def _ln_eager(grad, x, mean, rstd, weight):
    """dx, dweight, dbias by autograd through LayerNorm's forward."""
    xf = x.float().requires_grad_()
    wf = weight.float().requires_grad_()
    bf = torch.zeros_like(wf, requires_grad=True)
    y = torch.nn.functional.layer_norm(xf, (x.shape[-1],), wf, bf, eps=1e-5)
    y.backward(grad.float())
    return [xf.grad.to(x.dtype), wf.grad.to(x.dtype), bf.grad.to(x.dtype)]


CASES = {
    "rmsnorm_bwd": (rmsnorm_backward, _rms_inputs, _rms_eager),
    "layernorm_bwd": (layernorm_backward, _ln_inputs, _ln_eager),
}


def _define(build, *args) -> FusionDefinition:
    with FusionDefinition() as fd:
        build(fd, *args)
    return fd


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("shape", [CPU_SHAPE, BENCH_SHAPE], ids=["cpu_shape", "bench_shape"])
def test_normalization_backward_is_one_inner_outer_persistent_segment(name, dtype, shape):
    build, make, _ = CASES[name]
    dt, tdt = DTYPES[dtype]
    fd = _define(build, dt)
    inputs = make(shape, tdt, "meta")
    verdicts = schedulers_for(fd.fusion, runtime_info(fd.fusion, inputs))
    assert verdicts[SchedulerType.inner_outer_persistent] is None, verdicts
    seg = segment(fd, inputs)
    assert [g.scheduler for g in seg.groups] == [SchedulerType.inner_outer_persistent], repr(seg)
    assert seg.edges == []
    # without remat and forwarding too: nothing to recompute when nothing is cut
    bare = segment_fusion(fd.fusion, seg.runtime_info, forwarding=False, rematerialize=False)
    assert [g.scheduler for g in bare.groups] == [SchedulerType.inner_outer_persistent]


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("name", sorted(CASES))
def test_normalization_backward_matches_eager_pytorch_on_cpu(name, dtype):
    build, make, eager = CASES[name]
    dt, tdt = DTYPES[dtype]
    fd = _define(build, dt)
    inputs = make(CPU_SHAPE, tdt)
    seg = fd.segmented_fusion_for(inputs)
    assert [g.scheduler for g in seg.groups] == [SchedulerType.inner_outer_persistent]
    got = fd.execute(inputs)
    want = eager(*inputs)
    assert len(got) == len(want)
    rtol, atol = TOLERANCE[tdt]
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, f"output {k}: {g.dtype} {tuple(g.shape)}"
        assert w.float().abs().max() > 1e-2, f"output {k} of eager PyTorch is ~0: the check would be vacuous"
        scale = w.float().abs().max().item()
        torch.testing.assert_close(g, w, rtol=rtol, atol=atol * scale, msg=lambda m, k=k: f"{name} {dtype} output {k}: {m}")


def test_a_segment_set_still_cuts_a_fusion_one_scheduler_takes():
    # the RMSNorm backward with part of dx passed through a segment_set: without the cut
    # one scheduler would take it all (the test above), but the user asked for a boundary
    fd = _define(_rms_with_segment_set)
    inputs = _rms_inputs(CPU_SHAPE, torch.float32)
    seg = fd.segmented_fusion_for(inputs)
    assert len(seg.groups) >= 2
    # in the fusion execute segments: the pre-segmentation passes' copy of fd.fusion
    sset = next(e for e in seg.complete_fusion.exprs() if isinstance(e, LoadStoreOp))
    operand = sset.inputs[0]
    assert operand in {e.val for e in seg.edges}
    assert not any(sset in g.exprs and operand.definition in g.exprs for g in seg.groups)
    got = fd.execute(inputs)
    for k, (g, w) in enumerate(zip(got, _rms_eager(*inputs))):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4 * w.abs().max().item(), msg=lambda m, k=k: f"output {k}: {m}")


def _rms_with_segment_set(fd: FusionDefinition) -> None:
    grad = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
    rstd = fd.define_tensor(shape=[-1, 1], contiguity=[True, None], dtype=DataType.Float)
    weight = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
    shape = x.shape()
    rstd_b = fd.ops.broadcast_in_dim(rstd, shape=shape, broadcast_dims=[0, 1])
    x_hat = fd.ops.mul(x, rstd_b)
    dweight = fd.ops.sum(fd.ops.mul(grad, x_hat), dims=[0], keepdim=False)
    grad_w = fd.ops.mul(grad, fd.ops.broadcast_in_dim(weight, shape=shape, broadcast_dims=[1]))
    row = fd.ops.sum(fd.ops.mul(grad_w, x_hat), dims=[1], keepdim=False)
    mean = fd.ops.div(fd.ops.broadcast_in_dim(row, shape=shape, broadcast_dims=[0]), fd.ops.size(x, 1))
    inner = fd.ops.segment_set(fd.ops.sub(grad_w, fd.ops.mul(x_hat, mean)))
    fd.add_output(fd.ops.mul(rstd_b, inner))
    fd.add_output(dweight)


def test_custom_segmentation_is_not_overruled_by_the_whole_fusion_check():
    fd = _define(rmsnorm_backward, DataType.Float)
    inputs = _rms_inputs(CPU_SHAPE, torch.float32, "meta")
    assert schedulers_for(fd.fusion, runtime_info(fd.fusion, inputs))[SchedulerType.inner_outer_persistent] is None
    never = segment(fd, inputs, custom_should_merge=lambda a, b: False)
    assert len(never.groups) == len([e for e in fd.fusion.exprs() if expr_kind(e) != SCALAR])
    assert all(g.scheduler is SchedulerType.none for g in never.groups)


def test_seed001_is_one_segment_as_inner_outer_takes_all_of_it():
    with FusionDefinition() as fd:
        seed001_definition(fd)
    inputs = seed001_inputs("meta")
    verdicts = schedulers_for(fd.fusion, runtime_info(fd.fusion, inputs))
    assert [st for st, why in verdicts.items() if why is None] == [SchedulerType.inner_outer_persistent], verdicts
    seg = segment(fd, inputs)
    assert [g.scheduler for g in seg.groups] == ["inner_outer_persistent"]
    assert seg.edges == []


def test_seed001_stays_two_kernels_when_no_scheduler_takes_all_of_it(monkeypatch):
    monkeypatch.setenv("FUSER_DISABLE", "row_segments")
    with FusionDefinition() as fd:
        seed001_definition(fd)
    inputs = seed001_inputs("meta")
    verdicts = schedulers_for(fd.fusion, runtime_info(fd.fusion, inputs))
    assert all(why is not None for why in verdicts.values()), verdicts
    seg = segment(fd, inputs)
    assert [g.scheduler for g in seg.groups] == ["reduction", "inner_outer_persistent"]
    assert seg.edges == []
