"""Pointwise fusions the kernel tests run on the GPU and compile on the CPU: each case
builds a definition and makes fresh random inputs (never zeros) on a device."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from fuser import DataType


@dataclass
class Case:
    name: str
    build: Callable
    inputs: Callable  # device -> list


def _rand(*shape, dtype=torch.float32, device="cpu"):
    if dtype.is_floating_point:
        x = torch.randn(shape, dtype=torch.float32, device=device)
        return (x + 0.25 * x.sign()).to(dtype)  # away from 0
    if dtype is torch.bool:
        return torch.rand(*shape, device=device) > 0.5
    return torch.randint(-50, 50, shape, dtype=torch.int64, device=device).to(dtype)


def _gelu(fd, dt=DataType.BFloat16):
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dt)
    xf = fd.ops.cast(x, DataType.Float)
    inner = fd.ops.mul(fd.ops.add(xf, fd.ops.mul(fd.ops.mul(fd.ops.mul(xf, xf), xf), 0.044715)), math.sqrt(2 / math.pi))
    y = fd.ops.mul(fd.ops.mul(xf, 0.5), fd.ops.add(fd.ops.tanh(inner), 1.0))
    fd.add_output(fd.ops.cast(y, dt))


def _bias_relu(fd):
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
    b = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.BFloat16)
    bb = fd.ops.broadcast_in_dim(b, shape=x.shape(), broadcast_dims=[1])
    fd.add_output(fd.ops.relu(fd.ops.add(x, bb)))


def _cast_chain(fd):
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
    fd.add_output(fd.ops.cast(fd.ops.cast(x, DataType.BFloat16), DataType.Float))


def _where3(fd):
    a = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Half)
    b = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Half)
    c = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Half)
    fd.add_output(fd.ops.where(fd.ops.gt(a, b), a, c))


def _where_scalar(fd):  # a Bool scalar input as the condition: one operand everywhere
    s = fd.define_scalar(None, dtype=DataType.Bool)
    a = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
    b = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
    fd.add_output(fd.ops.where(s, a, b))


def _row_scale(fd):  # [M, 1] broadcast along the innermost axis, and a 3-D case
    x = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True])
    s = fd.define_tensor(shape=[-1, -1, 1], contiguity=[True, True, None])
    fd.add_output(fd.ops.mul(x, s))


def _strided(fd):  # a transposed input (not contiguous) and an expanded one
    x = fd.define_tensor(shape=[-1, -1], contiguity=[False, False])
    e = fd.define_tensor(shape=[-1, -1], contiguity=[None, True])
    fd.add_output(fd.ops.sub(fd.ops.exp(x), e))


def _scalar_and_factory(fd):
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
    s = fd.define_scalar(dtype=DataType.Double)
    f = fd.ops.full([x.size(0), x.size(1)], 2.0, dtype=DataType.Float)
    fd.add_output(fd.ops.add(fd.ops.mul(x, s), f))


def _iota(fd):
    x = fd.define_tensor(shape=[-1], contiguity=[True])
    i = fd.ops.iota(x.size(0), 3, 2, dtype=DataType.Int)
    fd.add_output(fd.ops.add(fd.ops.cast(i, DataType.Float), x))


def _two_outputs_smaller(fd):  # an output lacking an axis of the reference
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
    b = fd.define_tensor(shape=[-1], contiguity=[True])
    fd.add_output(fd.ops.add(x, fd.ops.broadcast(b, [True, False])))
    fd.add_output(fd.ops.mul(b, 3.0))


def _ints(fd):
    a = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Int32)
    b = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Int32)
    q = fd.ops.remainder(a, fd.ops.add(fd.ops.abs(b), 1))
    fd.add_output(fd.ops.bitwise_xor(fd.ops.mul(q, a), b))
    fd.add_output(fd.ops.lt(a, b))


def _zero_dim(fd):
    x = fd.define_tensor(shape=[], contiguity=[])
    fd.add_output(fd.ops.sin(x))


def _segmented(fd):  # two kernels through segment_set
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
    y = fd.ops.segment_set(fd.ops.mul(x, 2.0))
    fd.add_output(fd.ops.add(fd.ops.exp(y), x))


def _stride_order_out(fd):
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
    fd.add_output(fd.ops.neg(x), stride_order=[0, 1])


CASES = [
    Case("gelu_bf16_1025x127", _gelu, lambda d: [_rand(1025, 127, dtype=torch.bfloat16, device=d)]),
    Case("gelu_bf16_64x4096", _gelu, lambda d: [_rand(64, 4096, dtype=torch.bfloat16, device=d)]),
    Case("gelu_bf16_1x1", _gelu, lambda d: [_rand(1, 1, dtype=torch.bfloat16, device=d)]),
    Case("gelu_bf16_3x3", _gelu, lambda d: [_rand(3, 3, dtype=torch.bfloat16, device=d)]),
    Case("gelu_bf16_empty", _gelu, lambda d: [_rand(0, 8, dtype=torch.bfloat16, device=d)]),
    Case("bias_relu_256x1024", _bias_relu, lambda d: [_rand(256, 1024, dtype=torch.bfloat16, device=d),
                                                     _rand(1024, dtype=torch.bfloat16, device=d)]),
    Case("bias_relu_33x127", _bias_relu, lambda d: [_rand(33, 127, dtype=torch.bfloat16, device=d),
                                                   _rand(127, dtype=torch.bfloat16, device=d)]),
    Case("cast_chain_300x301", _cast_chain, lambda d: [_rand(300, 301, device=d)]),
    Case("where3_fp16_129x64", _where3, lambda d: [_rand(129, 64, dtype=torch.half, device=d) for _ in range(3)]),
    Case("where_true_scalar", _where_scalar, lambda d: [True, _rand(33, 17, device=d), _rand(33, 17, device=d)]),
    Case("where_false_scalar", _where_scalar, lambda d: [False, _rand(33, 17, device=d), _rand(33, 17, device=d)]),
    Case("row_scale_3d", _row_scale, lambda d: [_rand(4, 5, 128, device=d), _rand(4, 5, 1, device=d)]),
    Case("strided_expanded", _strided, lambda d: [_rand(96, 40, device=d).t(), _rand(1, 96, device=d).expand(40, 96)]),
    Case("scalar_and_full", _scalar_and_factory, lambda d: [_rand(17, 9, device=d), 1.5]),
    Case("iota_1025", _iota, lambda d: [_rand(1025, device=d)]),
    Case("two_outputs_smaller", _two_outputs_smaller, lambda d: [_rand(7, 33, device=d), _rand(33, device=d)]),
    Case("int32_ops", _ints, lambda d: [_rand(65, 33, dtype=torch.int32, device=d), _rand(65, 33, dtype=torch.int32, device=d)]),
    Case("zero_dim", _zero_dim, lambda d: [_rand(dtype=torch.float32, device=d)]),
    Case("segment_set_two_kernels", _segmented, lambda d: [_rand(31, 65, device=d)]),
    Case("stride_order_output", _stride_order_out, lambda d: [_rand(12, 20, device=d)]),
]
