"""Fusions and helpers the pre-segmentation pass tests share: row-wise fusions as Thunder
writes them (softmax), defining a fusion from a builder, meta inputs, whether the kernels ran."""
from __future__ import annotations

import torch

from fuser import DataType, FusionDefinition

F32, BF16, F16 = DataType.Float, DataType.BFloat16, DataType.Half
TORCH = {F32: torch.float32, BF16: torch.bfloat16, F16: torch.float16, DataType.Double: torch.float64}


def define(build) -> FusionDefinition:
    with FusionDefinition() as fd:
        build(fd)
    return fd


def matrix(fd, dt: DataType):
    return fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dt)


def row(fd, t, shape):
    """A [M] row value broadcast over `shape`'s columns (expanded, as Thunder writes it)."""
    return fd.ops.broadcast_in_dim(t, shape=shape, broadcast_dims=[0])


def softmax(dt: DataType = BF16, out: DataType | None = BF16, divide: bool = True):
    """softmax over the last dim in float: exp(x - max) / sum as Thunder defines it, or
    (`divide` False) times the sum's reciprocal; the result cast to `out` (None: left in
    float, a fusion output)."""

    def build(fd):
        x = matrix(fd, dt)
        xf = fd.ops.cast(x, F32) if dt is not F32 else x
        e = fd.ops.exp(fd.ops.sub(xf, row(fd, fd.ops.max(xf, dims=[1]), x.shape())))
        s = row(fd, fd.ops.sum(e, dims=[1]), x.shape())
        y = fd.ops.div(e, s) if divide else fd.ops.mul(e, fd.ops.reciprocal(s))
        fd.add_output(fd.ops.cast(y, out) if out is not None else y)

    return build


def meta(shape, dt: DataType) -> torch.Tensor:
    return torch.empty(shape, dtype=TORCH[dt], device="meta")


def ran_kernels(fd) -> bool:
    """Whether every segment of the last execution ran a generated kernel."""
    return all(run.kernel for run in fd._entry.last_runner.segment_runs())
