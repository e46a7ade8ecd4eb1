"""The many-pointwise-ops fusion: `a = cos(a) + sin(a)` repeated, fp16 in and out.

nvFuser's segmenter stalls on this shape past about 22 iterations; we use it to keep
definition and segmentation costs linear in the number of ops.
"""
from __future__ import annotations

from fuser import DataType, FusionDefinition


def pointwise_chain(fd: FusionDefinition, iterations: int) -> None:
    """Define the chain with `iterations` repetitions of cos + sin + add."""
    t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Half)
    a = fd.ops.cast(t0, DataType.Float)
    for _ in range(iterations):
        a = fd.ops.add(fd.ops.cos(a), fd.ops.sin(a))
    fd.add_output(fd.ops.cast(a, DataType.Half))
