"""Tensor-parallel MLP and attention, forward and backward, against the single-device layer
(fuser/examples/tensor_parallel.py): every rank checks its blocks."""
from __future__ import annotations

import pytest
import torch

from fuser import DataType
from fuser.examples import tensor_parallel as tp
from fuser.runtime.tolerance import assert_close as _assert_close


def assert_close(got, want):
    """Within 2% of the reference's largest magnitude (or dtype-aware, in float32): a bf16
    layer's elements near zero come from cancelling products, whose rounding the sharded
    and the single-device sums differ in; a wrong block or a missing sum is off by O(1)."""
    if got.dtype == torch.float32:
        _assert_close(got, want)
    else:
        _assert_close(got, want, rtol=2e-2, atol=2e-2 * float(want.abs().max()))


def block(t, axis, comm):
    return t.chunk(comm.size(), axis)[comm.rank()].contiguous()


def _dtypes(comm):
    # gloo reduces no bfloat16; flash attention takes only half types
    return (torch.bfloat16, DataType.BFloat16) if comm.backend == "nccl" else (torch.float32, DataType.Float)


def test_tensor_parallel_mlp_forward_and_backward(comm, mesh, seed):
    d = comm.size()
    tdt, fdt = _dtypes(comm)
    T, H = 16, 8 * d
    dev = comm.device
    x = torch.randn(T, H, device=dev, dtype=tdt)
    w1, b1 = torch.randn(4 * H, H, device=dev, dtype=tdt) / H ** 0.5, torch.randn(4 * H, device=dev, dtype=tdt)
    w2, b2 = torch.randn(H, 4 * H, device=dev, dtype=tdt) / (4 * H) ** 0.5, torch.randn(H, device=dev, dtype=tdt)
    gy = torch.randn(T, H, device=dev, dtype=tdt)
    # the reference in float (rounded to the tested dtype at the end): the sharded layer sums
    # its partial products in another order than one device would
    want = {k: v.to(tdt) for k, v in tp.mlp_reference(*(t.float() for t in (x, w1, b1, w2, b2, gy))).items()}

    fwd = tp.mlp_forward(mesh, fdt)
    y, h = fwd.execute([x, block(w1, 0, comm), block(b1, 0, comm), block(w2, 1, comm), b2])
    assert_close(y, want["y"])
    assert_close(h, block(want["h"], 1, comm))

    bwd = tp.mlp_backward(mesh, fdt)
    gx, gw1, gb1, gw2, gb2 = bwd.execute([gy, x, h, block(w1, 0, comm), block(w2, 1, comm)])
    assert_close(gx, want["grad_x"])
    assert_close(gw1, block(want["grad_w1"], 0, comm))
    assert_close(gb1, block(want["grad_b1"], 0, comm))
    assert_close(gw2, block(want["grad_w2"], 1, comm))
    assert_close(gb2, want["grad_b2"])
    # one allreduce each way (the forward's second linear, the backward's grad_x)
    assert str(fwd._entry.last_runner.program).count("type=Allreduce") == 1
    assert str(bwd._entry.last_runner.program).count("type=Allreduce") == 1


def test_tensor_parallel_attention_forward_and_backward(comm, mesh, seed):
    d = comm.size()
    tdt, fdt = _dtypes(comm)
    if comm.backend != "nccl":
        pytest.skip("fuser runs flash attention (sdpfa_fwd / sdpfa_bwd) on CUDA only")
    B, S, E, heads, D = 2, 32, 64, 2 * d, 32
    dev = comm.device
    x = torch.randn(B, S, E, device=dev, dtype=tdt)
    wq, wk, wv = (torch.randn(heads, E, D, device=dev, dtype=tdt) / E ** 0.5 for _ in range(3))
    wo = torch.randn(heads, D, E, device=dev, dtype=tdt) / (heads * D) ** 0.5
    gy = torch.randn(B, S, E, device=dev, dtype=tdt)
    want = {k: v.to(tdt) for k, v in tp.attention_reference(*(t.float() for t in (x, wq, wk, wv, wo, gy))).items()}

    fwd = tp.attention_forward(mesh, fdt)
    y, q, k, v, o, lse = fwd.execute([x] + [block(w, 0, comm) for w in (wq, wk, wv, wo)])
    assert_close(y, want["y"])
    bwd = tp.attention_backward(mesh, fdt)
    seed_t = torch.zeros((), dtype=torch.int64, device=dev)
    grads = bwd.execute([gy, x, q, k, v, o, lse] + [block(w, 0, comm) for w in (wq, wk, wv, wo)] + [seed_t, seed_t])
    assert_close(grads[0], want["grad_x"])
    for got, name in zip(grads[1:], ("grad_wq", "grad_wk", "grad_wv", "grad_wo")):
        assert_close(got, block(want[name], 0, comm))
