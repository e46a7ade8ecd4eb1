"""Fusions with index ops (select, index_select, gather, take_along_axis) and the
iota-built ones (iota, triu) that the indexing kernel tests compile on the CPU and run on
the GPU: each case makes fresh random inputs on a device (values away from zero, valid
indices) and builds its definition from them (`fd.from_pytorch`: sizes symbolic, strides
as given, so transposed and expanded inputs stay so); a case with `want` also gives eager
PyTorch's outputs for its inputs."""
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
    #: eager PyTorch's outputs for the inputs (on their device), where the case has them
    want: Callable | None = None


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


def _case(name, inputs, body, kernel=True, kind="fuser_pointwise", want=None):
    def build(fd, xs):
        for y in body(fd, *define(fd, xs)):
            fd.add_output(y)
    return Case(name, inputs, build, kernel, kind, want)


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
    "gather_index_expanded_along_other_dim",  # the output varies along it: a concrete axis
    lambda d: [rand(6, 5, device=d), indices(5, (1, 7), device=d).expand(6, 7)],
    lambda fd, x, i: [fd.ops.gather(x, i, 1)], want=lambda x, i: [torch.gather(x, 1, i)]))
CASES.append(_case(
    "take_along_axis_dim1",
    lambda d: [rand(5, 8, device=d), indices(8, (5, 11), device=d)],
    lambda fd, x, i: [fd.ops.take_along_axis(x, i, 1)]))
CASES.append(_case(
    "take_along_axis_dim0_int32_add",
    lambda d: [rand(6, 7, device=d), indices(6, (3, 7), I32, device=d), rand(3, 7, device=d)],
    lambda fd, x, i, y: [fd.ops.add(fd.ops.take_along_axis(x, i, 0), y)]))

# --- broadcast and expanded indices, read by ops over every row (issue 34) ----------------------
# The output of an index op varies along an axis where its lookup tensor or its index does:
# an index broadcast (or expanded) along an axis the lookup varies on picks different rows
# there, so the result must not be taken as constant along it by the ops that follow.


def _reversed_positions(fd, x, dim):
    """`size - 1 - iota(size)` along `dim` of x, broadcast to x's shape (a computed index,
    expanded along the other axes)."""
    n = fd.ops.size(x, dim)
    rev = fd.ops.sub(fd.ops.sub(n, 1), fd.ops.iota(n, 0, 1, dtype=DataType.Int))
    return fd.ops.broadcast_in_dim(rev, shape=x.shape(), broadcast_dims=[dim])


CASES.append(_case(
    "take_along_axis_computed_broadcast_index_broadcast_addend",  # issue 34's fusion
    lambda d: [rand(5, 8, device=d)],
    lambda fd, x: [fd.ops.add(fd.ops.take_along_axis(x, _reversed_positions(fd, x, 1), 1), fd.ops.broadcast_in_dim(
        fd.ops.cast(fd.ops.iota(fd.ops.size(x, 1), 0, 1, dtype=DataType.Int), DataType.Float), shape=x.shape(),
        broadcast_dims=[1]))],
    want=lambda x: [x.flip(1) + torch.arange(x.shape[1], dtype=x.dtype, device=x.device)]))
CASES.append(_case(
    "take_along_axis_computed_broadcast_index_add",  # with a full addend
    lambda d: [rand(5, 8, device=d), rand(5, 8, device=d)],
    lambda fd, x, y: [fd.ops.add(fd.ops.take_along_axis(x, _reversed_positions(fd, x, 1), 1), y)],
    want=lambda x, y: [x.flip(1) + y]))
CASES.append(_case(
    "take_along_axis_computed_broadcast_index_row_sums",  # reduced along the rows and within them
    lambda d: [rand(6, 40, device=d)],
    lambda fd, x: (lambda g: [fd.ops.sum(g, [0]), fd.ops.sum(fd.ops.mul(g, g), [1])])(
        fd.ops.take_along_axis(x, _reversed_positions(fd, x, 1), 1)),
    kind="fuser_reduction", want=lambda x: [x.flip(1).sum(0), (x.flip(1) ** 2).sum(1)]))
CASES.append(_case(
    "take_along_axis_expanded_index_input_sum_over_rows",  # a stride-0 int64 index input
    lambda d: [rand(7, 9, device=d), indices(9, (1, 6), device=d).expand(7, 6)],
    lambda fd, x, i: [fd.ops.sum(fd.ops.take_along_axis(x, i, 1), [0])],
    kind="fuser_reduction", want=lambda x, i: [torch.take_along_dim(x, i, 1).sum(0)]))
CASES.append(_case(
    "take_along_axis_expanded_index_input_add",
    lambda d: [rand(7, 9, device=d), indices(9, (1, 6), I32, device=d).expand(7, 6), rand(7, 6, device=d)],
    lambda fd, x, i, y: [fd.ops.add(fd.ops.take_along_axis(x, i, 1), y)],
    want=lambda x, i, y: [torch.take_along_dim(x, i.long(), 1) + y]))
CASES.append(_case(
    "take_along_axis_size1_index_broadcasts_to_the_input",  # [1, 3] index on [5, 8]: torch broadcasts
    lambda d: [rand(5, 8, device=d), indices(8, (1, 3), device=d), rand(5, 3, device=d)],
    lambda fd, x, i, y: [fd.ops.mul(fd.ops.take_along_axis(x, i, 1), y)],
    want=lambda x, i, y: [torch.take_along_dim(x, i, 1) * y]))
CASES.append(_case(
    "take_along_axis_expanded_input_concrete_index",  # the input constant along the rows, the index not
    lambda d: [rand(1, 8, device=d).expand(5, 8), indices(8, (5, 3), device=d), rand(5, 3, device=d)],
    lambda fd, x, i, y: [fd.ops.add(fd.ops.take_along_axis(x, i, 1), y)],
    want=lambda x, i, y: [torch.take_along_dim(x, i, 1) + y]))
CASES.append(_case(
    "take_along_axis_size1_input_concrete_index",
    lambda d: [rand(1, 8, device=d), indices(8, (5, 3), device=d), rand(5, 3, device=d)],
    lambda fd, x, i, y: [fd.ops.sub(fd.ops.take_along_axis(x, i, 1), y)],
    want=lambda x, i, y: [torch.take_along_dim(x, i, 1) - y]))
CASES.append(_case(
    "gather_expanded_index_add",
    lambda d: [rand(6, 5, device=d), indices(5, (1, 7), device=d).expand(6, 7), rand(6, 7, device=d)],
    lambda fd, x, i, y: [fd.ops.add(fd.ops.gather(x, i, 1), y)],
    want=lambda x, i, y: [torch.gather(x, 1, i) + y]))
CASES.append(_case(
    "gather_expanded_index_broadcast_addend",
    lambda d: [rand(6, 5, device=d), indices(5, (1, 7), device=d).expand(6, 7), rand(7, device=d)],
    lambda fd, x, i, b: [fd.ops.mul(fd.ops.gather(x, i, 1), fd.ops.broadcast_in_dim(b, shape=i.shape(),
                                                                                 broadcast_dims=[1]))],
    want=lambda x, i, b: [torch.gather(x, 1, i) * b]))
CASES.append(_case(
    "gather_expanded_index_sum_over_rows",
    lambda d: [rand(11, 5, device=d), indices(5, (1, 7), device=d).expand(9, 7)],  # fewer rows than x
    lambda fd, x, i: [fd.ops.sum(fd.ops.gather(x, i, 1), [0])],
    kind="fuser_reduction", want=lambda x, i: [torch.gather(x, 1, i).sum(0)]))
CASES.append(_case(
    "gather_computed_broadcast_index_add",  # positions iota(k) % n along dim 1, the same in every row
    lambda d: [rand(6, 5, device=d), rand(6, 12, device=d)],
    lambda fd, x, y: [fd.ops.add(fd.ops.gather(x, fd.ops.broadcast_in_dim(
        fd.ops.remainder(fd.ops.iota(fd.ops.size(y, 1), 0, 1, dtype=DataType.Int), fd.ops.size(x, 1)),
        shape=y.shape(), broadcast_dims=[1]), 1), y)],
    want=lambda x, y: [x[:, torch.arange(y.shape[1], device=x.device) % x.shape[1]] + y]))
CASES.append(_case(
    "gather_size1_index_then_full_addend",  # a [1, 4] result (row 0): broadcast by the add, as in torch
    lambda d: [rand(6, 5, device=d), indices(5, (1, 4), device=d), rand(6, 4, device=d)],
    lambda fd, x, i, y: [fd.ops.add(fd.ops.gather(x, i, 1), y)],
    want=lambda x, i, y: [torch.gather(x, 1, i) + y]))
CASES.append(_case(
    "index_select_expanded_index_add",  # one position repeated (stride 0): constant rows
    lambda d: [rand(6, 9, device=d), torch.tensor([4], device=d).expand(5), rand(5, 9, device=d)],
    lambda fd, x, i, y: [fd.ops.add(fd.ops.index_select(x, i, 0), y)],
    want=lambda x, i, y: [x[i] + y]))
CASES.append(_case(
    "index_select_expanded_index_sum_over_rows",  # a sum over an expanded axis: the row times 5
    lambda d: [rand(6, 9, device=d), torch.tensor([2], device=d).expand(5)],
    lambda fd, x, i: [fd.ops.sum(fd.ops.index_select(x, i, 0), [0])],
    want=lambda x, i: [x[i].sum(0)]))
CASES.append(_case(
    "index_select_computed_broadcast_index_add",  # an index of one value broadcast to 5 entries
    lambda d: [rand(6, 9, device=d), rand(5, 9, device=d)],
    lambda fd, x, y: [fd.ops.add(fd.ops.index_select(x, fd.ops.broadcast_in_dim(
        fd.ops.full([], fd.ops.sub(fd.ops.size(x, 0), 2), DataType.Int), shape=[fd.ops.size(y, 0)],
        broadcast_dims=[]), 0), y)],
    want=lambda x, y: [x[x.shape[0] - 2].expand_as(y) + y]))
CASES.append(_case(
    "select_expanded_lookup_add_full",  # the lookup constant along its rows: so is the result
    lambda d: [rand(1, 9, device=d).expand(5, 9), rand(5, device=d)],
    lambda fd, x, y: [fd.ops.add(fd.ops.select(x, 3, 1), y)],
    want=lambda x, y: [x[:, 3] + y]))
CASES.append(_case(
    "select_of_gathered_rows_sum",  # select of a take_along_axis result with an expanded index
    lambda d: [rand(6, 10, device=d), indices(10, (1, 4), device=d).expand(6, 4)],
    lambda fd, x, i: [fd.ops.sum(fd.ops.select(fd.ops.take_along_axis(x, i, 1), 2, 1), [0])],
    kind="fuser_reduction", want=lambda x, i: [torch.take_along_dim(x, i, 1)[:, 2].sum(0)]))

# --- floating-point index tensors (nvFuser converts them, truncated toward zero) -----------------
CASES.append(_case(
    "take_along_axis_float_index",
    lambda d: [rand(5, 8, device=d), indices(8, (5, 3), device=d).float()],
    lambda fd, x, i: [fd.ops.take_along_axis(x, i, 1)],
    want=lambda x, i: [torch.take_along_dim(x, i.long(), 1)]))
CASES.append(_case(
    "gather_bf16_index_add",
    lambda d: [rand(6, 30, device=d), indices(30, (6, 11), device=d).to(torch.bfloat16), rand(6, 11, device=d)],
    lambda fd, x, i, y: [fd.ops.add(fd.ops.gather(x, i, 1), y)],
    want=lambda x, i, y: [torch.gather(x, 1, i.long()) + y]))
CASES.append(_case(
    "index_select_double_index_fractional",  # 2.75 -> 2, as a C conversion and torch's .long()
    lambda d: [rand(9, 7, device=d), (indices(9, (12,), device=d).double() + 0.75).clamp(max=8.5)],
    lambda fd, x, i: [fd.ops.exp(fd.ops.index_select(x, i, 0))],
    want=lambda x, i: [torch.exp(x[i.long()])]))


def cross_entropy(fd, logits, target, ignore_index: int):
    """The loss fusion Thunder's nvFuser executor emits for
    `F.cross_entropy(logits, target, ignore_index=ignore_index)` (`cross_entropy_fwd`): the
    target's logit picked by take_along_axis with a Float index, `where(target !=
    ignore_index, target, 0.0)`; the log-softmax at it, masked; summed over the valid count."""
    zero = fd.define_scalar(0, dtype=DataType.Float)
    rows = fd.ops.size(target, 0)
    valid = fd.ops.ne(target, fd.define_scalar(ignore_index, dtype=DataType.Int))
    safe = fd.ops.where(valid, target, zero)  # Float: an int tensor with a float scalar
    picked = fd.ops.reshape(fd.ops.take_along_axis(
        logits, fd.ops.broadcast_in_dim(safe, shape=[rows, 1], broadcast_dims=[0]), dim=1), new_shape=[rows])
    amax = fd.ops.max(logits, 1)
    shifted = fd.ops.sub(logits, fd.ops.broadcast_in_dim(amax, shape=[rows, 1], broadcast_dims=[0]))
    lse = fd.ops.log(fd.ops.sum(fd.ops.exp(shifted), 1))
    nll = fd.ops.neg(fd.ops.sub(fd.ops.sub(picked, amax), lse))
    count = fd.ops.cast(fd.ops.sum(valid), dtype=DataType.Float)
    return [fd.ops.div(fd.ops.sum(fd.ops.where(valid, nll, zero)), count)]


def targets(classes: int, rows: int, ignore_index: int, device="cpu"):
    """Random class targets, about a third of them `ignore_index` (at least one valid)."""
    t = torch.randint(0, classes, (rows,))
    t[1:][torch.rand(rows - 1) < 0.35] = ignore_index
    return t.to(device)


for _ignore in (-100, -10):
    CASES.append(_case(
        f"cross_entropy_ignore_index{_ignore}",
        lambda d, ii=_ignore: [rand(37, 129, device=d), targets(129, 37, ii, device=d)],
        lambda fd, x, t, ii=_ignore: cross_entropy(fd, x, t, ii),
        kind="fuser_reduction",
        want=lambda x, t, ii=_ignore: [torch.nn.functional.cross_entropy(x, t, ignore_index=ii)]))

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
