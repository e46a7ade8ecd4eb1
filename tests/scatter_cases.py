"""Scatter fusions that the scatter kernel tests compile on the CPU and run on the GPU: each
case makes fresh random inputs on a device (values away from zero; indices unique along
`dim` at every other position, so the result does not depend on which write lands last,
except with a scalar src, where every write is the same value) and builds its definition
from them (`fd.from_pytorch`: sizes symbolic, strides as given, so transposed and
expanded inputs stay so)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from fuser import DataType

from indexing_cases import define, rand


@dataclass
class Case:
    name: str
    inputs: Callable  # device -> list of tensors and scalars
    build: Callable  # (fd, defined inputs) -> None
    #: the copy of arg reads every tensor at the output's linear index, with vectors
    flat: bool = False


def unique_index(n: int, shape, dim: int, dtype=torch.int64, device="cpu") -> torch.Tensor:
    """Positions in [0, n) of `shape`, distinct along `dim` at every other position
    (shape[dim] <= n): the first shape[dim] of a random permutation of range(n) each."""
    full = list(shape)
    full[dim] = n
    perm = torch.rand(full).argsort(dim=dim)
    return perm.narrow(dim, 0, shape[dim]).contiguous().to(dtype).to(device)


def any_index(n: int, shape, dtype=torch.int64, device="cpu") -> torch.Tensor:
    """Random positions in [0, n), repeats included."""
    return torch.randint(0, n, tuple(shape), dtype=torch.int64).to(dtype).to(device)


def _case(name, inputs, dim, src_scalar=None, flat=False, arg=None, index=None, src=None):
    """A case writing `fd.ops.scatter(arg(x), index(i), src, dim)`; `src_scalar` (a Python
    number or "input": a Double scalar input) replaces the src tensor; `arg`, `index`,
    `src` build producers of the operands from the defined inputs."""
    def build(fd, xs):
        if src_scalar == "input":  # a Double scalar input (indexing_cases' define makes Ints)
            x, i = define(fd, xs[:2])
            s = fd.define_scalar(dtype=DataType.Double)
        else:
            x, i, *rest = define(fd, xs)
            s = rest[0] if src_scalar is None else src_scalar
        x = arg(fd, x) if arg else x
        i = index(fd, i) if index else i
        s = src(fd, s) if src else s
        fd.add_output(fd.ops.scatter(x, i, s, dim))
    return Case(name, inputs, build, flat)


F32, F64, F16, BF16 = torch.float32, torch.float64, torch.float16, torch.bfloat16
I32, I64 = torch.int32, torch.int64

CASES: list[Case] = [
    # 1-D to 4-D, dims first, middle and last, src larger than index, odd sizes
    _case("1d_src_larger", lambda d: [rand(1001, device=d), unique_index(1001, (357,), 0, device=d),
                                      rand(400, device=d)], 0, flat=True),
    _case("2d_dim0", lambda d: [rand(37, 65, device=d), unique_index(37, (20, 50), 0, device=d),
                                rand(25, 65, device=d)], 0, flat=True),
    _case("2d_dim1_bf16_int32_index", lambda d: [rand(33, 129, dtype=BF16, device=d),
                                                 unique_index(129, (33, 77), 1, dtype=I32, device=d),
                                                 rand(40, 80, dtype=BF16, device=d)], 1, flat=True),
    _case("2d_negative_dim", lambda d: [rand(9, 31, device=d), unique_index(31, (7, 30), 1, device=d),
                                        rand(7, 30, device=d)], -1, flat=True),
    _case("3d_dim1_half", lambda d: [rand(5, 17, 31, dtype=F16, device=d), unique_index(17, (4, 9, 30), 1, device=d),
                                     rand(4, 9, 30, dtype=F16, device=d)], 1, flat=True),
    _case("4d_dim3_double", lambda d: [rand(2, 3, 5, 19, dtype=F64, device=d),
                                       unique_index(19, (2, 3, 4, 7), 3, device=d),
                                       rand(2, 3, 5, 8, dtype=F64, device=d)], 3, flat=True),
    _case("4d_dim0_int32", lambda d: [rand(6, 3, 4, 5, dtype=I32, device=d),
                                      unique_index(6, (4, 2, 4, 5), 0, dtype=I32, device=d),
                                      rand(4, 3, 4, 5, dtype=I32, device=d)], 0, flat=True),
    _case("2d_int64", lambda d: [rand(11, 13, dtype=I64, device=d), unique_index(11, (11, 13), 0, device=d),
                                 rand(11, 13, dtype=I64, device=d)], 0, flat=True),
    _case("2d_bool", lambda d: [rand(12, 40, dtype=torch.bool, device=d), unique_index(40, (12, 21), 1, device=d),
                                rand(12, 21, dtype=torch.bool, device=d)], 1, flat=True),
    _case("2d_complex64", lambda d: [rand(10, 14, dtype=torch.complex64, device=d),
                                     unique_index(10, (6, 14), 0, device=d),
                                     rand(6, 14, dtype=torch.complex64, device=d)], 0, flat=True),
    _case("size1_dims", lambda d: [rand(1, 50, 1, device=d), unique_index(50, (1, 20, 1), 1, device=d),
                                   rand(1, 20, 1, device=d)], 1, flat=True),
    # scalar src: repeated indices are fine (every write is the same value)
    _case("scalar_src_repeats", lambda d: [rand(40, 33, device=d), any_index(33, (40, 50), device=d)], 1,
          src_scalar=3.5, flat=True),
    _case("scalar_src_input", lambda d: [rand(8, 24, dtype=BF16, device=d), any_index(8, (19, 24), device=d), -1.75],
          0, src_scalar="input", flat=True),
    _case("scalar_src_bool", lambda d: [rand(16, 9, dtype=torch.bool, device=d), any_index(9, (16, 4), device=d)],
          1, src_scalar=True, flat=True),
    # layouts: every operand non-contiguous; expanded src and arg
    _case("transposed_arg_sliced_index_transposed_src",
          lambda d: [rand(48, 30, device=d).t(), unique_index(30, (20, 38), 0, device=d)[:, ::2],
                     rand(19, 30, device=d).t()], 0),
    _case("expanded_src", lambda d: [rand(30, 70, device=d), unique_index(70, (30, 50), 1, device=d),
                                     rand(1, 50, device=d).expand(30, 50)], 1, flat=True),
    _case("expanded_arg", lambda d: [rand(1, 40, device=d).expand(25, 40), unique_index(25, (10, 40), 0, device=d),
                                     rand(10, 40, device=d)], 0),
    # broadcast and expanded indices (issue 34): every row writes at the same positions
    _case("expanded_index_along_other_dim", lambda d: [rand(6, 20, device=d),
                                                       unique_index(20, (1, 9), 1, device=d).expand(6, 9),
                                                       rand(6, 9, device=d)], 1, flat=True),
    _case("computed_broadcast_index", lambda d: [rand(6, 20, device=d), unique_index(20, (9,), 0, device=d),
                                                 rand(6, 9, device=d)], 1, flat=True,
          index=lambda fd, i: fd.ops.broadcast_in_dim(i, shape=[6, fd.ops.size(i, 0)], broadcast_dims=[1])),
    # a floating-point index, converted as nvFuser's kernels convert it (truncated toward zero)
    _case("float_index", lambda d: [rand(12, 30, device=d), unique_index(30, (12, 10), 1, device=d).float() + 0.5,
                                    rand(12, 10, device=d)], 1, flat=True),
    # zero-size index: the output is a copy of arg
    _case("zero_size_index", lambda d: [rand(7, 9, device=d), torch.empty(0, 9, dtype=I64, device=d),
                                        rand(0, 9, device=d)], 0, flat=True),
    # elementwise producers of the operands, in the scatter's segment
    _case("producers_of_every_operand",
          lambda d: [rand(24, 36, device=d), unique_index(36, (24, 20), 1, dtype=I32, device=d),
                     rand(24, 20, dtype=BF16, device=d)], 1,
          arg=lambda fd, x: fd.ops.mul(fd.ops.neg(x), 2.0),
          index=lambda fd, i: fd.ops.cast(i, DataType.Int),
          src=lambda fd, s: fd.ops.add(fd.ops.cast(s, DataType.Float), 1.0), flat=True),
    _case("strided_arg_producer", lambda d: [rand(20, 16, device=d)[:, :15], unique_index(20, (12, 15), 0, device=d),
                                             rand(12, 15, device=d)], 0,
          arg=lambda fd, x: fd.ops.abs(x)),
]
