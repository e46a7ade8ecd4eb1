"""nvFuser's `compute_contiguity` and `compute_tensor_descriptor`: a tensor's layout as
the contiguity (and stride order) that `define_tensor` takes."""
from __future__ import annotations

from typing import Sequence


def _check(sizes: Sequence[int], strides: Sequence[int], name: str) -> None:
    if len(sizes) != len(strides):
        raise ValueError(f"{name}: sizes and strides must have the same number of dimensions")
    for i, s in enumerate(strides):
        if s < 0:
            raise ValueError(f"{name}: negative stride on tensor is not supported: strides[{i}]={s}")


def compute_contiguity(sizes: Sequence[int], strides: Sequence[int]) -> list[bool | None]:
    """Contiguity of each dim in logical order: None for broadcast (size 1) or expanded
    (stride 0) dims, else whether the dim's stride is the next inner non-broadcast dim's
    stride times its size (stride 1 for the innermost one)."""
    if len(sizes) != len(strides):
        raise ValueError("compute_contiguity: sizes and strides must have the same number of dimensions")
    n = len(sizes)
    real = [strides[i] != 0 and sizes[i] != 1 for i in range(n)]
    contiguity: list[bool | None] = [None] * n
    inner = None  # the next non-broadcast dim to the right
    for i in range(n - 1, -1, -1):
        if not real[i]:
            continue
        expected = 1 if inner is None else strides[inner] * sizes[inner]
        contiguity[i] = strides[i] == expected
        inner = i
    return contiguity


def compute_tensor_descriptor(
    sizes: Sequence[int], strides: Sequence[int]
) -> tuple[list[bool | None], list[int]]:
    """(contiguity in allocation order, stride order per logical dim) of a strided tensor.

    stride_order[i] is dim i's rank by stride, the outermost dim having rank n - 1.
    Dims with nonzero stride are ordered by decreasing stride, ties kept in logical order;
    stride-0 dims keep their logical position. Contiguity is None for dims with stride 0
    or size 1, else whether the stride is the next inner such dim's stride times its size.
    """
    _check(sizes, strides, "compute_tensor_descriptor")
    n = len(sizes)
    order = sorted((i for i in range(n) if strides[i] != 0), key=lambda i: -strides[i])  # stable
    for i in range(n):
        # stride-0 dims are inserted in index order at their own index, as nvFuser does
        if strides[i] == 0:
            order.insert(i, i)
    real = [strides[i] != 0 and sizes[i] != 1 for i in order]
    contiguity: list[bool | None] = [None] * n
    inner = None  # allocation position of the next non-broadcast dim inward
    for p in range(n - 1, -1, -1):
        if not real[p]:
            continue
        expected = 1 if inner is None else strides[order[inner]] * sizes[order[inner]]
        contiguity[p] = strides[order[p]] == expected
        inner = p
    stride_order = [0] * n
    for p, dim in enumerate(order):
        stride_order[dim] = n - 1 - p
    return contiguity, stride_order


__all__ = ["compute_contiguity", "compute_tensor_descriptor"]
