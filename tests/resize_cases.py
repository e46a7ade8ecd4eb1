"""Slice, pad, cat and reshape fusions shared by the CPU codegen tests
(tests/test_codegen_resize.py) and the GPU ones (tests/test_resize_cuda.py): odd sizes,
steps, negative and out-of-range bounds, negative pads, size-0 and size-1 dims,
non-contiguous and expanded inputs, and seed 002's RoPE at a small shape."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from fuser import DataType, FusionDefinition
from fuser.examples import rope

BIG = 1 << 62  # an open slice end: clamped to the extent, as Python's slices are


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[FusionDefinition], None]
    inputs: Callable[[str], list]
    #: the schedulers of the segments it should become
    schedulers: tuple[str, ...] = ("resize",)


def _t(fd, ndim, dtype=DataType.Float, contiguity=None):
    return fd.define_tensor(shape=[-1] * ndim, contiguity=contiguity or [True] * ndim, dtype=dtype)


def _rand(*shape, dtype=torch.float32):
    def make(device):
        return torch.randn(*shape, device=device).to(dtype)
    return make


def slice_odd(fd):
    x = _t(fd, 2)
    fd.add_output(fd.ops.mul(fd.ops.slice(x, [1, 3], [5, 19], [1, 1]), 2.0))


def slice_steps_and_bounds(fd):
    # dim 0: every second row from -7 (counted from the end); dim 1: [-30, 100) clamps to
    # the extent, every third column
    x = _t(fd, 2, DataType.BFloat16)
    y = fd.ops.slice(x, [-7, -30], [BIG, 100], [2, 3])
    fd.add_output(fd.ops.cast(fd.ops.add(fd.ops.cast(y, DataType.Float), 1.0), DataType.BFloat16))


def slice_empty_range(fd):
    # start past end: an empty slice, concatenated beside a real one
    x = _t(fd, 2)
    empty = fd.ops.slice(x, [0, 9], [BIG, 4], [1, 1])
    fd.add_output(fd.ops.cat([fd.ops.slice(x, [0, 2], [BIG, 7], [1, 1]), empty], dim=1))


def pad_negative(fd):
    # the last dim grows by 2 + 3, the first loses a row at the front and gains one at the back
    x = _t(fd, 2)
    y = fd.ops.pad(x, [2, 3, -1, 1], fd.define_scalar(1.5))
    fd.add_output(fd.ops.add(y, 1.0))


def pad_crop_both(fd):
    x = _t(fd, 2, DataType.BFloat16)
    fd.add_output(fd.ops.pad(x, [-3, -5]))


def pad_vector(fd):
    # widths of 8: bf16 vectors of 8 lanes stay inside or outside the input
    x = _t(fd, 2, DataType.BFloat16)
    y = fd.ops.pad(x, [8, 16])
    fd.add_output(fd.ops.cast(fd.ops.mul(fd.ops.cast(y, DataType.Float), 3.0), DataType.BFloat16))


def cat_with_empty(fd):
    a, b, c = _t(fd, 2), _t(fd, 2), _t(fd, 2)
    fd.add_output(fd.ops.cat([a, b, c], dim=1))


def cat_dim0_bf16(fd):
    a, b = _t(fd, 2, DataType.BFloat16), _t(fd, 2, DataType.BFloat16)
    c = fd.ops.cat([a, b], dim=0)
    fd.add_output(fd.ops.cast(fd.ops.neg(fd.ops.cast(c, DataType.Float)), DataType.BFloat16))


def cat_of_slices(fd):
    x = _t(fd, 2, DataType.BFloat16)
    fd.add_output(fd.ops.cat([fd.ops.slice(x, [0, 8], [BIG, BIG], [1, 1]),
                              fd.ops.slice(x, [0, 0], [BIG, 8], [1, 1])], dim=1))


def strided_and_expanded(fd):
    # x is a transposed view; b an expanded row: x[2:, 1:] + b[2:, 1:]
    x = fd.define_tensor(shape=[-1, -1], contiguity=[False, False])
    b = fd.define_tensor(shape=[-1, -1], contiguity=[None, True], stride_order=[1, 0])
    y = fd.ops.add(fd.ops.slice(x, [2, 1], [BIG, BIG], [1, 1]), fd.ops.slice(b, [2, 1], [BIG, BIG], [1, 1]))
    fd.add_output(y)


def size_one_dims(fd):
    x = fd.define_tensor(shape=[1, -1, -1], contiguity=[None, True, True])
    y = fd.ops.slice(x, [0, 1, 0], [1, BIG, 1], [1, 1, 1])
    fd.add_output(fd.ops.pad(y, [0, 0, 1, 2, 1, 0]))


def outputs_beside_the_resize(fd):
    # y = x * 2 is an output and is padded: the padded tensor's loop writes y where inside
    x = _t(fd, 2)
    y = fd.ops.mul(x, 2.0)
    fd.add_output(y)
    fd.add_output(fd.ops.pad(y, [3, 1, 0, 2], fd.define_scalar(-1.0)))


def cat_inputs_as_outputs(fd):
    a, b = _t(fd, 2), _t(fd, 2)
    ea = fd.ops.exp(a)
    fd.add_output(ea)
    fd.add_output(fd.ops.cat([ea, fd.ops.neg(b)], dim=1))


def reshape_between_pointwise(fd):
    x, y = _t(fd, 2), _t(fd, 3)
    r = fd.ops.reshape(fd.ops.mul(x, 2.0), new_shape=[6, 5, 8])
    fd.add_output(fd.ops.add(r, y))


def reshape_merge(fd):
    x = _t(fd, 3, DataType.BFloat16)
    r = fd.ops.reshape(fd.ops.cast(x, DataType.Float), new_shape=[4, 42])
    fd.add_output(fd.ops.cast(fd.ops.exp(r), DataType.BFloat16))


def slice_then_reshape(fd):
    x = _t(fd, 2)
    s = fd.ops.slice(x, [0, 8], [BIG, 56], [1, 1])
    fd.add_output(fd.ops.exp(fd.ops.reshape(s, new_shape=[4, 6, 8])))


ROPE_SMALL = (1, 8, 24, 64)


def rope_fwd(fd):
    rope.rope_forward(fd, ROPE_SMALL)


def rope_bwd(fd):
    rope.rope_backward(fd, ROPE_SMALL)


def cat_manual_static(fd):
    # nvFuser's manual padding: the pads place [5, 3] and [5, 6] side by side -> a plain cat
    a = fd.define_tensor(shape=[5, 3], contiguity=[True, True])
    b = fd.define_tensor(shape=[5, 6], contiguity=[True, True])
    pa, pb = fd.ops.pad(a, [0, 6]), fd.ops.pad(b, [3, 0])
    fd.add_output(fd.ops.cat([pa, pb], dim=1, manual_padding=True))


def cat_manual_symbolic(fd):
    # symbolic sizes: each position takes the first pad whose data holds it; the pads'
    # values (2.5, -1) never show, and along dim 0 the regions overlap (a's rows win)
    a, b = _t(fd, 2, DataType.BFloat16), _t(fd, 2, DataType.BFloat16)
    pa = fd.ops.pad(a, [0, 0, 0, 4], fd.define_scalar(2.5))
    pb = fd.ops.pad(b, [0, 0, 3, 0], fd.define_scalar(-1.0))
    fd.add_output(fd.ops.cat([pa, pb], dim=0, manual_padding=True))


def _strided(device):
    x = torch.randn(25, 30, device=device).t()  # [30, 25], strides (1, 30)
    b = torch.randn(1, 25, device=device).expand(30, 25)
    return [x, b]


CASES = [
    Case("slice_odd", slice_odd, lambda d: [_rand(7, 21)(d)]),
    Case("slice_steps_and_bounds", slice_steps_and_bounds, lambda d: [_rand(13, 40, dtype=torch.bfloat16)(d)]),
    Case("slice_empty_range", slice_empty_range, lambda d: [_rand(5, 11)(d)]),
    Case("pad_negative", pad_negative, lambda d: [_rand(6, 10)(d)]),
    Case("pad_crop_both", pad_crop_both, lambda d: [_rand(3, 17, dtype=torch.bfloat16)(d)]),
    Case("pad_vector", pad_vector, lambda d: [_rand(4, 64, dtype=torch.bfloat16)(d)]),
    Case("cat_with_empty", cat_with_empty, lambda d: [_rand(5, 8)(d), _rand(5, 0)(d), _rand(5, 16)(d)]),
    Case("cat_odd", cat_with_empty, lambda d: [_rand(5, 3)(d), _rand(5, 4)(d), _rand(5, 5)(d)]),
    Case("cat_dim0_bf16", cat_dim0_bf16, lambda d: [_rand(3, 40, dtype=torch.bfloat16)(d),
                                                    _rand(5, 40, dtype=torch.bfloat16)(d)]),
    Case("cat_of_slices", cat_of_slices, lambda d: [_rand(6, 72, dtype=torch.bfloat16)(d)]),
    Case("strided_and_expanded", strided_and_expanded, _strided),
    Case("size_one_dims", size_one_dims, lambda d: [_rand(1, 5, 1)(d)]),
    Case("outputs_beside_the_resize", outputs_beside_the_resize, lambda d: [_rand(4, 9)(d)]),
    Case("cat_inputs_as_outputs", cat_inputs_as_outputs, lambda d: [_rand(3, 7)(d), _rand(3, 5)(d)]),
    Case("reshape_between_pointwise", reshape_between_pointwise, lambda d: [_rand(6, 40)(d), _rand(6, 5, 8)(d)],
         schedulers=("pointwise",)),
    Case("reshape_merge", reshape_merge, lambda d: [_rand(4, 6, 7, dtype=torch.bfloat16)(d)],
         schedulers=("pointwise",)),
    Case("slice_then_reshape", slice_then_reshape, lambda d: [_rand(4, 64)(d)]),
    Case("cat_manual_static", cat_manual_static, lambda d: [_rand(5, 3)(d), _rand(5, 6)(d)]),
    Case("cat_manual_symbolic", cat_manual_symbolic, lambda d: [_rand(3, 7, dtype=torch.bfloat16)(d),
                                                                _rand(4, 7, dtype=torch.bfloat16)(d)]),
    Case("rope_fwd", rope_fwd, lambda d: rope.make_forward_inputs(d, ROPE_SMALL)),
    Case("rope_bwd", rope_bwd, lambda d: rope.make_backward_inputs(d, ROPE_SMALL)),
]
