"""RoPE as LitGPT's Llama-3 attention applies it and Thunder hands it to nvFuser (seed 002,
nvFuser PR 4269 "Forward full op"): q and k of [B, n_head, T, head_size] bf16 rotated by
cos/sin of [B, T, head_size] (rope_n_elem = head_size, so the un-rotated tail
`x[..., rope_n_elem:]` is empty and concatenated back).

The forward computes, for x in (q, k), as LitGPT's `apply_rope`:
    x1, x2 = x[..., :h/2], x[..., h/2:];  rotated = cat(-x2, x1)
    roped = bf16(float(x) * float(cos) + float(rotated) * float(sin));  out = cat(roped, x[..., h:])
The backward takes the gradients of both outputs and returns dq [B, n_head, T, h] and dk
reshaped to [B, n_query_groups, q_per_kv, T, h] (the grouped-query layout whose sum over
q_per_kv, in another fusion, is k's gradient): each the slices' pads (x1's and x2's
gradients placed back), the direct term g * cos, and a `full` of zeros both gradients
start from, the tensor seed 002 shows crossing a segment boundary.

Thunder writes the sizes into the program (slice bounds, pad widths, broadcast shapes), so
each definition is for one shape: seed 002's, [1, 32, 8192, 128], by default.
"""
from __future__ import annotations

from typing import Sequence

import torch

from fuser import DataType, FusionDefinition

#: seed 002's [B, n_head, T, head_size]
SHAPE = (1, 32, 8192, 128)
#: Llama-3 8B's query heads per key/value head (n_head 32 over 8 query groups)
Q_PER_KV = 4


def _tensor(fd: FusionDefinition, shape: Sequence[int]):
    return fd.define_tensor(shape=list(shape), contiguity=[None if n == 1 else True for n in shape],
                            dtype=DataType.BFloat16, is_cpu=False, stride_order=list(range(len(shape) - 1, -1, -1)))


def _float(fd: FusionDefinition, x):
    return fd.ops.cast(x, dtype=DataType.Float)


def _bf16(fd: FusionDefinition, x):
    return fd.ops.cast(x, dtype=DataType.BFloat16)


def rope_forward(fd: FusionDefinition, shape: Sequence[int] = SHAPE) -> None:
    """The forward: inputs q, k [B, H, T, h], cos, sin [B, T, h]; outputs q, k rotated."""
    b, h, t, d = shape
    half = d // 2
    q = _tensor(fd, shape)
    k = _tensor(fd, shape)
    cos = _tensor(fd, (b, t, d))
    sin = _tensor(fd, (b, t, d))
    cos_b = fd.ops.broadcast_in_dim(cos, shape=[b, h, t, d], broadcast_dims=[0, 2, 3])
    sin_b = fd.ops.broadcast_in_dim(sin, shape=[b, h, t, d], broadcast_dims=[0, 2, 3])
    for x in (q, k):
        xr = fd.ops.slice(x, start_indices=[0, 0, 0, 0], end_indices=[b, h, t, d], strides=[1, 1, 1, 1])
        x1 = fd.ops.slice(xr, start_indices=[0, 0, 0, 0], end_indices=[b, h, t, half], strides=[1, 1, 1, 1])
        x2 = fd.ops.slice(xr, start_indices=[0, 0, 0, half], end_indices=[b, h, t, d], strides=[1, 1, 1, 1])
        rotated = fd.ops.cat([_bf16(fd, fd.ops.neg(_float(fd, x2))), x1], dim=-1)
        roped = fd.ops.add(fd.ops.mul(_float(fd, xr), _float(fd, cos_b)),
                           fd.ops.mul(_float(fd, rotated), _float(fd, sin_b)))
        tail = fd.ops.slice(x, start_indices=[0, 0, 0, d], end_indices=[b, h, t, d], strides=[1, 1, 1, 1])
        fd.add_output(fd.ops.cat([_bf16(fd, roped), tail], dim=-1))


def rope_backward(fd: FusionDefinition, shape: Sequence[int] = SHAPE) -> None:
    """The backward: inputs cos [B, T, h], dq_out, dk_out [B, H, T, h], sin [B, T, h];
    outputs dq [B, H, T, h] and dk as [B, H / Q_PER_KV, Q_PER_KV, T, h]."""
    b, h, t, d = shape
    half = d // 2
    cos = _tensor(fd, (b, t, d))
    gq = _tensor(fd, shape)
    gk = _tensor(fd, shape)
    sin = _tensor(fd, (b, t, d))
    zeros = fd.ops.full(shape=[b, h, t, d], fill_value=fd.define_scalar(0.0), dtype=DataType.BFloat16)
    cos_f = _float(fd, fd.ops.broadcast_in_dim(cos, shape=[b, h, t, d], broadcast_dims=[0, 2, 3]))
    sin_f = _float(fd, fd.ops.broadcast_in_dim(sin, shape=[b, h, t, d], broadcast_dims=[0, 2, 3]))
    grads = []
    for g in (gq, gk):
        g_roped = _float(fd, fd.ops.slice(g, start_indices=[0, 0, 0, 0], end_indices=[b, h, t, d],
                                          strides=[1, 1, 1, 1]))
        d_rot = _bf16(fd, fd.ops.mul(g_roped, sin_f))
        d_neg_x2 = fd.ops.slice(d_rot, start_indices=[0, 0, 0, 0], end_indices=[b, h, t, half], strides=[1, 1, 1, 1])
        d_x1 = fd.ops.slice(d_rot, start_indices=[0, 0, 0, half], end_indices=[b, h, t, d], strides=[1, 1, 1, 1])
        d_x2 = _bf16(fd, fd.ops.neg(_float(fd, d_neg_x2)))
        pad_x1 = fd.ops.pad(d_x1, [0, half, 0, 0, 0, 0, 0, 0], fd.define_scalar(0.0))
        pad_x2 = fd.ops.pad(d_x2, [half, 0, 0, 0, 0, 0, 0, 0], fd.define_scalar(0.0))
        acc = fd.ops.add(_float(fd, zeros), _float(fd, pad_x1))
        acc = fd.ops.add(acc, _float(fd, pad_x2))
        acc = fd.ops.add(acc, fd.ops.mul(g_roped, cos_f))
        grads.append(_bf16(fd, acc))
    fd.add_output(grads[0])
    fd.add_output(fd.ops.reshape(grads[1], new_shape=[b, h // Q_PER_KV, Q_PER_KV, t, d]))


def make_forward_inputs(device, shape: Sequence[int] = SHAPE) -> list[torch.Tensor]:
    """q, k, cos, sin: random bf16 (never zeros)."""
    b, h, t, d = shape
    return [torch.randn(*shape, device=device, dtype=torch.bfloat16),
            torch.randn(*shape, device=device, dtype=torch.bfloat16),
            torch.randn(b, t, d, device=device, dtype=torch.bfloat16),
            torch.randn(b, t, d, device=device, dtype=torch.bfloat16)]


def make_backward_inputs(device, shape: Sequence[int] = SHAPE) -> list[torch.Tensor]:
    """cos, dq_out, dk_out, sin: random bf16."""
    b, h, t, d = shape
    return [torch.randn(b, t, d, device=device, dtype=torch.bfloat16),
            torch.randn(*shape, device=device, dtype=torch.bfloat16),
            torch.randn(*shape, device=device, dtype=torch.bfloat16),
            torch.randn(b, t, d, device=device, dtype=torch.bfloat16)]


def eager_forward(inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """LitGPT's apply_rope on q and k (float math, bf16 results)."""
    q, k, cos, sin = inputs
    c, s = cos.unsqueeze(1).float(), sin.unsqueeze(1).float()
    outs = []
    for x in (q, k):
        half = x.shape[-1] // 2
        rotated = torch.cat(((-x[..., half:].float()).bfloat16(), x[..., :half]), dim=-1)
        outs.append((x.float() * c + rotated.float() * s).bfloat16())
    return outs


def eager_backward(inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The gradients of `eager_forward`'s outputs w.r.t. q and k, dk in the grouped layout."""
    cos, gq, gk, sin = inputs
    c, s = cos.unsqueeze(1).float(), sin.unsqueeze(1).float()
    outs = []
    for g in (gq, gk):
        half = g.shape[-1] // 2
        gf = g.float()
        d_rot = (gf * s).bfloat16()
        d_x2 = (-d_rot[..., :half].float()).bfloat16()
        d_x1 = d_rot[..., half:]
        dx = gf * c + torch.cat((d_x1.float(), d_x2.float()), dim=-1)
        outs.append(dx.bfloat16())
    b, h, t, d = gk.shape
    return [outs[0], outs[1].reshape(b, h // Q_PER_KV, Q_PER_KV, t, d)]
