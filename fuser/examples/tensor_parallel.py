"""Megatron-style tensor-parallel transformer layers as sharded fusions (one definition,
each rank passes its blocks), with their single-device references.

MLP: y = linear(gelu(linear(x, w1, b1)), w2, b2) with w1 [4H, H] and b1 sharded on
their rows (column-parallel: each device computes its slice of the hidden layer) and w2
[H, 4H] on its columns (row-parallel: each device's partial product, summed by one
allreduce). Attention: per-head projections w_q, w_k, w_v [heads, E, D] and w_o
[heads, D, E] sharded on the heads, SDPA through ATen on each device's heads, and the
output projection summed over the heads (the allreduce). Backward passes are written
out by hand, as Thunder would send them.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from fuser import DataType, FusionDefinition, ParallelType

_K = math.sqrt(2.0 / math.pi)


def _place(t: Any, mesh: Any, axis: int | None) -> None:
    if mesh is None:  # the layer on one device
        return
    t.set_device_mesh(mesh)
    if axis is not None:
        t.outer_split(axis, mesh.size)
        t.axis(axis).parallelize(ParallelType.mesh_x)


def _input(fd: FusionDefinition, ndim: int, dtype: DataType) -> Any:
    return fd.define_tensor(shape=[-1] * ndim, contiguity=[True] * ndim, dtype=dtype)


def _gelu(fd: FusionDefinition, h: Any) -> tuple[Any, Any]:
    """(tanh-GELU of float h, tanh(u)) in float."""
    x = fd.ops.cast(h, DataType.Float)
    u = fd.ops.mul(fd.ops.add(x, fd.ops.mul(fd.ops.mul(fd.ops.mul(x, x), x), 0.044715)), _K)
    t = fd.ops.tanh(u)
    return fd.ops.mul(fd.ops.mul(x, 0.5), fd.ops.add(t, 1.0)), t


def mlp_forward(mesh: Any, dtype: DataType = DataType.BFloat16) -> FusionDefinition:
    """(With `mesh` None: the whole layer on one device.) Inputs x [T, H], w1 [4H, H] (rows sharded), b1 [4H] (sharded), w2 [H, 4H] (columns
    sharded), b2 [H]; outputs y [T, H] (replicated) and h = x w1^T + b1 [T, 4H] (its
    columns sharded: what the backward pass reads)."""
    with FusionDefinition() as fd:
        x, w1, b1, w2, b2 = (_input(fd, n, dtype) for n in (2, 2, 1, 2, 1))
        h = fd.ops.linear(x, w1, b1)
        a, _ = _gelu(fd, h)
        y = fd.ops.linear(fd.ops.cast(a, dtype), w2, b2)
        fd.add_output(y)
        fd.add_output(h)
        for t, axis in ((x, None), (w1, 0), (b1, 0), (w2, 1), (b2, None)):
            _place(t, mesh, axis)
    return fd


def mlp_backward(mesh: Any, dtype: DataType = DataType.BFloat16) -> FusionDefinition:
    """Inputs grad_y [T, H], x [T, H], h [T, 4H] (sharded), w1 (sharded rows), w2 (sharded
    columns); outputs grad_x (replicated), grad_w1, grad_b1, grad_w2 (sharded as their
    weights) and grad_b2 (replicated)."""
    with FusionDefinition() as fd:
        gy, x, h, w1, w2 = (_input(fd, 2, dtype) for _ in range(5))
        a, t = _gelu(fd, h)
        hf = fd.ops.cast(h, DataType.Float)
        ga = fd.ops.cast(fd.ops.matmul(gy, w2), DataType.Float)
        # d gelu / dh = 0.5 (1 + t) + 0.5 h (1 - t^2) k (1 + 3 * 0.044715 h^2)
        du = fd.ops.mul(fd.ops.add(fd.ops.mul(fd.ops.mul(hf, hf), 3 * 0.044715), 1.0), _K)
        dt = fd.ops.mul(fd.ops.mul(fd.ops.mul(hf, 0.5), fd.ops.sub(1.0, fd.ops.mul(t, t))), du)
        gh = fd.ops.cast(fd.ops.mul(ga, fd.ops.add(fd.ops.mul(fd.ops.add(t, 1.0), 0.5), dt)), dtype)
        grad_x = fd.ops.matmul(gh, w1)
        grad_w1 = fd.ops.matmul(fd.ops.permute(gh, [1, 0]), x)
        grad_b1 = fd.ops.cast(fd.ops.sum(gh, [0]), dtype)
        grad_w2 = fd.ops.matmul(fd.ops.permute(gy, [1, 0]), fd.ops.cast(a, dtype))
        grad_b2 = fd.ops.cast(fd.ops.sum(gy, [0]), dtype)
        for g in (grad_x, grad_w1, grad_b1, grad_w2, grad_b2):
            fd.add_output(g)
        for tv, axis in ((gy, None), (x, None), (h, 1), (w1, 0), (w2, 1)):
            _place(tv, mesh, axis)
    return fd


def mlp_reference(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor,
                  gy: torch.Tensor) -> dict[str, torch.Tensor]:
    """The unsharded layer and its gradients (autograd, float32 accumulation as ATen's)."""
    leaves = [t.detach().clone().requires_grad_(True) for t in (x, w1, b1, w2, b2)]
    xx, ww1, bb1, ww2, bb2 = leaves
    h = torch.nn.functional.linear(xx, ww1, bb1)
    y = torch.nn.functional.linear(torch.nn.functional.gelu(h.float(), approximate="tanh").to(x.dtype), ww2, bb2)
    y.backward(gy)
    return {"y": y.detach(), "h": h.detach(), "grad_x": xx.grad, "grad_w1": ww1.grad, "grad_b1": bb1.grad,
            "grad_w2": ww2.grad, "grad_b2": bb2.grad}


def attention_forward(mesh: Any, dtype: DataType = DataType.BFloat16, causal: bool = True) -> FusionDefinition:
    """Inputs x [B, S, E], w_q, w_k, w_v [heads, E, D] and w_o [heads, D, E] (heads
    sharded); outputs y [B, S, E] (replicated) and, for the backward pass, q, k, v, the
    attention output o [B, heads, S, D] and its log-sum-exp (heads sharded)."""
    with FusionDefinition() as fd:
        x = _input(fd, 3, dtype)
        wq, wk, wv, wo = (_input(fd, 3, dtype) for _ in range(4))
        xb = fd.ops.broadcast(x, [False, True, False, False])
        q, k, v = (fd.ops.matmul(xb, w) for w in (wq, wk, wv))
        o, lse, seed, offset = fd.ops.sdpfa_fwd(q, k, v, fd.define_scalar(0.0), fd.define_scalar(causal), None)
        # the sum over heads (each device's, then the allreduce) in float, as the reference
        y = fd.ops.cast(fd.ops.sum(fd.ops.cast(fd.ops.matmul(o, wo), DataType.Float), [1]), dtype)
        for t in (y, q, k, v, o, lse):
            fd.add_output(t)
        _place(x, mesh, None)
        for w in (wq, wk, wv, wo):
            _place(w, mesh, 0)
    return fd


def attention_backward(mesh: Any, dtype: DataType = DataType.BFloat16, causal: bool = True) -> FusionDefinition:
    """Inputs grad_y [B, S, E], x, q, k, v, o [B, heads, S, D], lse [B, heads, S] (heads
    sharded), w_q, w_k, w_v, w_o (heads sharded); outputs grad_x (replicated) and the four
    weight gradients (heads sharded)."""
    with FusionDefinition() as fd:
        gy, x = _input(fd, 3, dtype), _input(fd, 3, dtype)
        q, k, v, o = (_input(fd, 4, dtype) for _ in range(4))
        lse = _input(fd, 3, DataType.Float)
        wq, wk, wv, wo = (_input(fd, 3, dtype) for _ in range(4))
        gyb = fd.ops.broadcast(gy, [False, True, False, False])
        grad_wo = fd.ops.cast(fd.ops.sum(fd.ops.matmul(fd.ops.permute(o, [0, 1, 3, 2]), gyb), [0]), dtype)
        go = fd.ops.matmul(gyb, fd.ops.permute(wo, [0, 2, 1]))
        seed = fd.define_tensor(shape=[], contiguity=[], dtype=DataType.Int)
        offset = fd.define_tensor(shape=[], contiguity=[], dtype=DataType.Int)
        gq, gk, gv = fd.ops.sdpfa_bwd(go, q, k, v, o, lse, fd.define_scalar(0.0), fd.define_scalar(causal), seed,
                                      offset, None)
        xt = fd.ops.permute(fd.ops.broadcast(x, [False, True, False, False]), [0, 1, 3, 2])
        grads_w = [fd.ops.cast(fd.ops.sum(fd.ops.matmul(xt, g), [0]), dtype) for g in (gq, gk, gv)]
        gx = None
        for g, w in ((gq, wq), (gk, wk), (gv, wv)):  # summed in float, over heads and devices
            part = fd.ops.cast(fd.ops.matmul(g, fd.ops.permute(w, [0, 2, 1])), DataType.Float)
            gx = part if gx is None else fd.ops.add(gx, part)
        grad_x = fd.ops.cast(fd.ops.sum(gx, [1]), dtype)
        fd.add_output(grad_x)
        for g in (*grads_w, grad_wo):
            fd.add_output(g)
        for t, axis in ((gy, None), (x, None), (q, 1), (k, 1), (v, 1), (o, 1), (lse, 1), (wq, 0), (wk, 0), (wv, 0),
                        (wo, 0), (seed, None), (offset, None)):
            _place(t, mesh, axis)
    return fd


def attention_reference(x: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor, wo: torch.Tensor,
                        gy: torch.Tensor, causal: bool = True) -> dict[str, torch.Tensor]:
    """The unsharded layer and its gradients (autograd)."""
    leaves = [t.detach().clone().requires_grad_(True) for t in (x, wq, wk, wv, wo)]
    xx, q_w, k_w, v_w, o_w = leaves
    xb = xx.unsqueeze(1)
    q, k, v = xb @ q_w, xb @ k_w, xb @ v_w
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    y = (o @ o_w).float().sum(1).to(x.dtype)
    y.backward(gy)
    return {"y": y.detach(), "grad_x": xx.grad, "grad_wq": q_w.grad, "grad_wk": k_w.grad, "grad_wv": v_w.grad,
            "grad_wo": o_w.grad}
