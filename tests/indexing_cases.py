"""Fusions with index ops (select, index_select, gather, take_along_axis) and the
iota-built ones (iota, triu) that the indexing kernel tests compile on the CPU and run on
the GPU: each case makes fresh random inputs on a device (values away from zero, valid
indices) and builds its definition from them (`fd.from_pytorch`: sizes symbolic, strides
as given, so transposed and expanded inputs stay so)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from fuser import DataType
from fuser.ir.dtype import from_torch


@dataclass
class Case:
    name: str
    inputs: Callable  # device -> list of tensors and scalars
    build: Callable  # (fd, defined inputs) -> None
    #: the segment becomes a generated kernel (False: a shape the kernels leave to the reference)
    kernel: bool = True
    #: the kind of kernel it becomes (its name in the CUDA source)
    kind: str = "fuser_pointwise"


def rand(*shape, dtype=torch.float32, device="cpu"):
    """Random values away from zero (booleans: both values)."""
    if dtype.is_complex:
        return torch.randn(shape, dtype=dtype, device=device) + (0.5 + 0.5j)
    if dtype.is_floating_point:
        x = torch.randn(shape, dtype=torch.float32, device=device)
        return (x + 0.25 * x.sign()).to(dtype)
    if dtype is torch.bool:
        return torch.rand(*shape, device=device) > 0.5
    return torch.randint(-50, 50, shape, dtype=torch.int64, device=device).to(dtype)


def indices(n, shape, dtype=torch.int64, device="cpu"):
    """Random positions in [0, n) of `shape` (each position at least once where there are
    enough elements)."""
    numel = 1
    for s in shape:
        numel *= s
    flat = torch.randint(0, max(n, 1), (numel,), dtype=torch.int64)
    if numel >= n > 0:
        flat[torch.randperm(numel)[:n]] = torch.arange(n)
    return flat.reshape(shape).to(dtype).to(device)


def define(fd, xs):
    """Definition inputs for `xs`: tensors laid out as given, Python ints as Int scalars."""
    out = []
    for x in xs:
        if not isinstance(x, torch.Tensor):
            out.append(fd.define_scalar(dtype=DataType.Int))
        elif x.ndim == 0:  # a device tensor (from_pytorch makes a CPU one a host scalar)
            out.append(fd.define_tensor(shape=[], contiguity=[], dtype=from_torch(x.dtype)))
        else:
            out.append(fd.from_pytorch(x))
    return out


def meta(x):
    """`x` as a meta tensor of the same layout (scalars as they are): kernels generated
    without a device."""
    return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta") if isinstance(x, torch.Tensor) else x


def defined(case):
    """(the finished definition of `case`, the CPU inputs it was defined from)."""
    from fuser import FusionDefinition

    xs = case.inputs("cpu")
    with FusionDefinition() as fd:
        case.build(fd, xs)
    return fd, xs


def on_cpu(xs):
    """`xs` with each tensor copied to the CPU in its layout: its storage copied and viewed
    with its strides (a plain .cpu() materialises expanded axes, which a definition from
    the tensor says are stride 0)."""
    out = []
    for x in xs:
        if isinstance(x, torch.Tensor):
            storage = x.as_strided((x.untyped_storage().nbytes() // x.element_size(),), (1,), 0).cpu()
            x = storage.as_strided(x.shape, x.stride(), x.storage_offset())
        out.append(x)
    return out


def _case(name, inputs, body, kernel=True, kind="fuser_pointwise"):
    def build(fd, xs):
        for y in body(fd, *define(fd, xs)):
            fd.add_output(y)
    return Case(name, inputs, build, kernel, kind)


CASES: list[Case] = []
F32, I32, I64 = torch.float32, torch.int32, torch.int64

# --- index_select: embeddings and other dims ----------------------------------------------------
CASES.append(_case(
    "embedding_scale_add",
    lambda d: [rand(37, 65, device=d), indices(37, (29,), device=d), rand(65, device=d)],
    lambda fd, w, i, b: [fd.ops.add(fd.ops.mul(fd.ops.index_select(w, i, 0), 0.5),
                                    fd.ops.broadcast_in_dim(b, shape=[fd.ops.size(i, 0), fd.ops.size(w, 1)],
                                                            broadcast_dims=[1]))]))
CASES.append(_case(
    "embedding_bf16_int32_index_scalar_scale",
    lambda d: [rand(50, 64, dtype=torch.bfloat16, device=d), indices(50, (33,), I32, device=d), 3],
    lambda fd, w, i, s: [fd.ops.mul(fd.ops.cast(fd.ops.index_select(w, i, 0), DataType.Float), s)]))
CASES.append(_case(
    "embedding_two_lookups_one_table",  # token + position embeddings of one table
    lambda d: [rand(41, 24, device=d), indices(41, (17,), device=d), indices(41, (17,), I32, device=d)],
    lambda fd, w, a, b: [fd.ops.add(fd.ops.index_select(w, a, 0), fd.ops.index_select(w, b, 0))]))
for _dtype in (torch.float16, torch.float64, torch.int32, torch.int64, torch.bool, torch.complex64):
    CASES.append(_case(
        f"index_select_{str(_dtype).split('.')[1]}",
        lambda d, dt=_dtype: [rand(9, 5, dtype=dt, device=d), indices(9, (13,), device=d)],
        lambda fd, w, i: [fd.ops.index_select(w, i, 0)]))
CASES.append(_case(
    "index_select_middle_dim_3d",
    lambda d: [rand(5, 9, 7, device=d), indices(9, (11,), I32, device=d)],
    lambda fd, x, i: [fd.ops.exp(fd.ops.index_select(x, i, 1))]))
CASES.append(_case(
    "index_select_innermost",
    lambda d: [rand(6, 13, device=d), indices(13, (17,), device=d)],
    lambda fd, x, i: [fd.ops.neg(fd.ops.index_select(x, i, -1))]))
CASES.append(_case(
    "index_select_transposed_lookup_strided_index",
    lambda d: [rand(13, 6, device=d).t(), indices(13, (2 * 19,), device=d)[::2]],
    lambda fd, x, i: [fd.ops.index_select(x, i, 1)]))
CASES.append(_case(
    "index_select_expanded_lookup_axis",  # the looked-up axis is an expanded broadcast
    lambda d: [rand(7, device=d).expand(5, 7), indices(5, (8,), device=d)],
    lambda fd, x, i: [fd.ops.mul(fd.ops.index_select(x, i, 0), 2.0)]))
CASES.append(_case(
    "index_select_expanded_other_axis_expanded_index",
    lambda d: [rand(6, device=d)[:, None].expand(6, 9), torch.tensor([4], device=d).expand(3)],
    lambda fd, x, i: [fd.ops.index_select(x, i, 0)]))
CASES.append(_case(
    "index_select_size1_dims",
    lambda d: [rand(4, 1, 6, device=d), indices(4, (3,), device=d), rand(1, 9, device=d), indices(9, (5,), device=d)],
    lambda fd, x, i, y, j: [fd.ops.index_select(x, i, 0), fd.ops.index_select(y, j, 1)]))
CASES.append(_case(
    "index_select_0dim_index",
    lambda d: [rand(7, 5, device=d), torch.tensor(3, device=d)],
    lambda fd, x, i: [fd.ops.index_select(x, i, 0)]))
CASES.append(_case(
    "index_select_lookup_also_read_pointwise",  # the table is loaded too (T == V)
    lambda d: [rand(12, 8, device=d), indices(12, (12,), device=d)],
    lambda fd, w, i: [fd.ops.sub(fd.ops.index_select(w, i, 0), w)]))
CASES.append(_case(
    "index_select_computed_index",  # the index tensor computed in the kernel
    lambda d: [rand(10, 6, device=d), indices(5, (7,), I32, device=d)],
    lambda fd, w, i: [fd.ops.index_select(w, fd.ops.add(fd.ops.mul(i, 2), 1), 0)]))

# --- select ---------------------------------------------------------------------------------------
CASES.append(_case(
    "select_constant_index",
    lambda d: [rand(5, 7, 3, device=d)],
    lambda fd, x: [fd.ops.select(x, 4, 1), fd.ops.add(fd.ops.select(x, -2, 0), 1.0), fd.ops.select(x, 2, 2)]))
CASES.append(_case(
    "select_scalar_index_half",
    lambda d: [rand(6, 11, dtype=torch.float16, device=d), -3],
    lambda fd, x, k: [fd.ops.mul(fd.ops.select(x, k, 0), 2.0)]))
CASES.append(_case(
    "select_int32_bool",
    lambda d: [rand(4, 9, dtype=torch.int32, device=d), rand(9, 3, dtype=torch.bool, device=d), 2],
    lambda fd, x, b, k: [fd.ops.select(x, k, 0), fd.ops.select(b, k, 1)]))
CASES.append(_case(
    "select_transposed",
    lambda d: [rand(9, 6, device=d).t()],
    lambda fd, x: [fd.ops.select(x, 5, 1)]))

# --- gather, take_along_axis ------------------------------------------------------------------
CASES.append(_case(
    "gather_dim0_smaller_index",
    lambda d: [rand(6, 5, device=d), indices(6, (4, 3), device=d)],
    lambda fd, x, i: [fd.ops.gather(x, i, 0)]))
CASES.append(_case(
    "gather_dim1_3d_int32",
    lambda d: [rand(4, 9, 5, device=d), indices(9, (3, 12, 5), I32, device=d)],
    lambda fd, x, i: [fd.ops.sigmoid(fd.ops.gather(x, i, 1))]))
CASES.append(_case(
    "gather_innermost_transposed_index_bf16",
    lambda d: [rand(7, 10, dtype=torch.bfloat16, device=d), indices(10, (15, 7), device=d).t()],
    lambda fd, x, i: [fd.ops.gather(x, i, 1)]))
CASES.append(_case(
    "gather_size1_index_dim",
    lambda d: [rand(5, 8, device=d), indices(8, (5, 1), device=d)],
    lambda fd, x, i: [fd.ops.gather(x, i, 1)]))
CASES.append(_case(
    "gather_index_expanded_along_gathered_dim",  # the output is constant along it
    lambda d: [rand(6, 5, device=d), indices(6, (1, 5), device=d).expand(4, 5)],
    lambda fd, x, i: [fd.ops.gather(x, i, 0)]))
CASES.append(_case(
    "gather_index_expanded_along_other_dim",  # the value varies along an axis the output stores once
    lambda d: [rand(6, 5, device=d), indices(5, (1, 7), device=d).expand(6, 7)],
    lambda fd, x, i: [fd.ops.gather(x, i, 1)], kernel=False))
CASES.append(_case(
    "take_along_axis_dim1",
    lambda d: [rand(5, 8, device=d), indices(8, (5, 11), device=d)],
    lambda fd, x, i: [fd.ops.take_along_axis(x, i, 1)]))
CASES.append(_case(
    "take_along_axis_dim0_int32_add",
    lambda d: [rand(6, 7, device=d), indices(6, (3, 7), I32, device=d), rand(3, 7, device=d)],
    lambda fd, x, i, y: [fd.ops.add(fd.ops.take_along_axis(x, i, 0), y)]))

# --- iota, triu ---------------------------------------------------------------------------------
CASES.append(_case(
    "iota_times_input",
    lambda d: [rand(3, 37, device=d)],
    lambda fd, x: [fd.ops.mul(x, fd.ops.broadcast_in_dim(
        fd.ops.iota(fd.ops.size(x, 1), 2, 3, dtype=DataType.Float), shape=x.shape(), broadcast_dims=[1]))]))
CASES.append(_case(
    "triu",
    lambda d: [rand(7, 9, device=d)],
    lambda fd, x: [fd.ops.triu(x, 1)]))
CASES.append(_case(
    "triu_3d_negative_diagonal_half",
    lambda d: [rand(2, 5, 6, dtype=torch.float16, device=d)],
    lambda fd, x: [fd.ops.triu(x, -1)]))

# --- index ops in reduction prologues ------------------------------------------------------------
CASES.append(_case(
    "embedding_row_sum",  # reduced along the hidden axis (inner)
    lambda d: [rand(37, 129, device=d), indices(37, (45,), device=d)],
    lambda fd, w, i: [fd.ops.sum(fd.ops.index_select(w, i, 0), [1])], kind="fuser_reduction"))
CASES.append(_case(
    "embedding_token_sum_bf16",  # reduced over the tokens (outer)
    lambda d: [rand(23, 70, dtype=torch.bfloat16, device=d), indices(23, (131,), I32, device=d)],
    lambda fd, w, i: [fd.ops.cast(fd.ops.sum(fd.ops.cast(fd.ops.index_select(w, i, 0), DataType.Float), [0]),
                                  DataType.BFloat16)], kind="fuser_reduction"))
CASES.append(_case(
    "embedding_rms_normalised",  # inner persistent: the lookup read again after the reduction
    lambda d: [rand(50, 1024, device=d), indices(50, (19,), device=d)],
    lambda fd, w, i: (lambda e: [fd.ops.div(e, fd.ops.broadcast_in_dim(
        fd.ops.sqrt(fd.ops.sum(fd.ops.mul(e, e), [1])), shape=[fd.ops.size(i, 0), fd.ops.size(w, 1)],
        broadcast_dims=[0]))])(fd.ops.index_select(w, i, 0)), kind="fuser_reduction"))
CASES.append(_case(
    "gather_then_sum",
    lambda d: [rand(21, 64, device=d), indices(64, (21, 9), device=d)],
    lambda fd, x, i: [fd.ops.sum(fd.ops.mul(fd.ops.gather(x, i, 1), 2.0), [1])], kind="fuser_reduction"))
CASES.append(_case(
    "select_then_var_mean",
    lambda d: [rand(5, 300, device=d), 3],
    lambda fd, x, k: list(fd.ops.var_mean(fd.ops.select(x, k, 0), [0], correction=1)), kind="fuser_reduction"))
