"""Indexing, factory, random and ATen-backed ops against eager PyTorch: select,
index_select, gather, take_along_axis, scatter, full, iota, uniform, normal, rand_like,
randn_like, triu, matmul and linear."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from _opcheck import (  # noqa: F401 - _seed is an autouse fixture
    DEVICE,
    DTYPES,
    FLOATS,
    _seed,
    assert_rejects,
    check,
    define_fusion,
    execute,
    expect,
    fusion,
    ids,
    rand,
)
from fuser import DataType, FusionDefinition
from fuser.errors import DefinitionTypeError
from fuser.ir import IterType
from fuser.ir.dtype import from_torch

import indexing_cases
from scatter_cases import unique_index

_INDEX_DTYPES = [DataType.Int32, DataType.Int]


# --- select, index_select --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_select(dtype):
    x = rand((4, 5, 3), dtype)
    for dim, index in [(0, 2), (1, 0), (2, 2), (-1, 1), (1, -1), (0, -4)]:
        (out,) = fusion(lambda fd, t: fd.ops.select(t, index, dim), [x])
        check(out, x.select(dim, index), f"select(dim={dim}, index={index})")


def test_select_scalar_input_index():
    x = torch.randn(6, 4)
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x)
        i = fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.select(t, i, 0))
    for index in (0, 3, 5):
        (out,) = execute(fd, [x, index])
        check(out, x[index])


@pytest.mark.parametrize("index_dtype", _INDEX_DTYPES, ids=ids(_INDEX_DTYPES))
@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_index_select(dtype, index_dtype):
    x = rand((5, 7), dtype)
    for dim, n in [(0, 3), (1, 10), (-1, 1), (0, 0)]:
        index = torch.randint(0, x.shape[dim], (n,), dtype=index_dtype.torch)
        (out,) = fusion(lambda fd, t, i: fd.ops.index_select(t, i, dim), [x, index])
        check(out, torch.index_select(x, dim, index), f"index_select(dim={dim}, n={n})")


def test_index_select_noncontiguous_and_expanded():
    for x in (torch.randn(7, 5).t(), torch.randn(7).expand(5, 7)):
        index = torch.tensor([4, 0, 4, 2])
        (out,) = fusion(lambda fd, t, i: fd.ops.index_select(t, i, 0), [x, index])
        check(out, torch.index_select(x, 0, index))


_FLOAT_INDEX = [DataType.Half, DataType.BFloat16, DataType.Float, DataType.Double]


def _fractional(index: torch.Tensor, dtype: DataType) -> torch.Tensor:
    """`index` as `dtype` with a fraction added that the conversion drops (truncation toward
    zero keeps the position), where the dtype holds it exactly."""
    frac = 0.5 if dtype in (DataType.Half, DataType.BFloat16) else 0.75
    return (index.double() + frac).to(dtype.torch)


@pytest.mark.parametrize("dtype", _FLOAT_INDEX, ids=ids(_FLOAT_INDEX))
def test_floating_point_index_tensors_are_truncated_as_nvfuser_converts_them(dtype):
    """nvFuser takes a floating-point index in index_select, gather, take_along_axis and
    scatter (its kernels convert the element to the index type): so does fuser, as torch's
    `.long()` converts it."""
    x = rand((6, 9), DataType.Float)
    i1 = _fractional(torch.randint(0, 6, (11,)), dtype).to(x.device)
    (out,) = fusion(lambda fd, t, i: fd.ops.index_select(t, i, 0), [x, i1])
    check(out, torch.index_select(x, 0, i1.long()), "index_select")
    i2 = _fractional(torch.randint(0, 9, (6, 13)), dtype).to(x.device)
    for name, want in (("gather", torch.gather(x, 1, i2.long())),
                       ("take_along_axis", torch.take_along_dim(x, i2.long(), 1))):
        (out,) = fusion(lambda fd, t, i: getattr(fd.ops, name)(t, i, 1), [x, i2])
        check(out, want, name)
    i3 = _fractional(unique_index(9, (6, 5), 1), dtype).to(x.device)
    src = rand((6, 5), DataType.Float)
    (out,) = fusion(lambda fd, t, i, s: fd.ops.scatter(t, i, s, 1), [x, i3, src])
    check(out, torch.scatter(x, 1, i3.long(), src), "scatter")


def test_negative_fraction_index_truncates_toward_zero():
    """-0.5 converts to 0 (in range), -1.5 to -1 (out of range), as a C conversion does."""
    x = rand((4, 5), DataType.Float)
    (out,) = fusion(lambda fd, t, i: fd.ops.index_select(t, i, 0), [x, torch.tensor([-0.5, 3.9, 1.2], device=x.device)])
    check(out, x[[0, 3, 1]])
    with pytest.raises(IndexError):  # the reference's message is torch's, a kernel's names the value
        fusion(lambda fd, t, i: fd.ops.index_select(t, i, 0), [x, torch.tensor([-1.5], device=x.device)])


@pytest.mark.parametrize("op", ["index_select", "gather", "take_along_axis", "scatter"])
def test_index_tensor_of_bool_or_complex_is_rejected_naming_the_index(op):
    x = torch.randn(4, 3)
    for index in (torch.zeros(2, 3, dtype=torch.bool), torch.zeros(2, 3, dtype=torch.complex64)):
        if op == "index_select":
            index = index[0]
        args = [x, index] + ([torch.randn(2, 3)] if op == "scatter" else [])
        with pytest.raises(DefinitionTypeError, match=rf"fd\.ops\.{op}: .*index must be an integer or "
                                                      rf"floating-point tensor, got {from_torch(index.dtype)}"):
            define_fusion(lambda fd, *ts: getattr(fd.ops, op)(*ts, 0), args)


# --- gather, take_along_axis, scatter --------------------------------------------------------------


@pytest.mark.parametrize("index_dtype", _INDEX_DTYPES, ids=ids(_INDEX_DTYPES))
@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_gather(dtype, index_dtype):
    x = rand((5, 6, 4), dtype)
    for dim, index_shape in [(0, (3, 6, 4)), (1, (5, 9, 4)), (2, (2, 3, 1)), (-1, (5, 6, 7)), (1, (5, 0, 4))]:
        index = torch.randint(0, x.shape[dim], index_shape, dtype=index_dtype.torch)
        (out,) = fusion(lambda fd, t, i: fd.ops.gather(t, i, dim), [x, index])
        check(out, torch.gather(x, dim, index.long()), f"gather(dim={dim}, index {index_shape})")


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_take_along_axis(dtype):
    x = rand((4, 6, 3), dtype)
    for dim, n in [(0, 7), (1, 2), (2, 3), (-2, 1)]:
        shape = list(x.shape)
        shape[dim] = n
        index = torch.randint(0, x.shape[dim], shape)
        (out,) = fusion(lambda fd, t, i: fd.ops.take_along_axis(t, i, dim), [x, index])
        check(out, torch.take_along_dim(x, index, dim), f"take_along_axis(dim={dim}, n={n})")


def test_take_along_axis_argsort():
    """The classic use: sort values by their argsort."""
    x = torch.randn(3, 8)
    (out,) = fusion(lambda fd, t, i: fd.ops.take_along_axis(t, i, 1), [x, torch.argsort(x, 1)])
    check(out, torch.sort(x, 1).values)


@pytest.mark.parametrize("index_dtype", _INDEX_DTYPES, ids=ids(_INDEX_DTYPES))
@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_scatter(dtype, index_dtype):
    x = rand((6, 5), dtype)
    for dim in (0, 1, -1):
        # distinct positions along dim, so the result does not depend on write order
        n = x.shape[dim]
        other = x.shape[1 - dim % 2]
        perms = torch.stack([torch.randperm(n)[: n - 1] for _ in range(other)])
        index = (perms if dim % 2 == 1 else perms.t()).contiguous().to(index_dtype.torch)
        src = rand(index.shape, dtype)
        (out,) = fusion(lambda fd, t, i, s: fd.ops.scatter(t, i, s, dim), [x, index, src])
        check(out, torch.scatter(x, dim, index.long(), src), f"scatter(dim={dim})")


# --- broadcast and expanded indices (issue 34) ------------------------------------------------------


def _out_axes(build, *inputs):
    """(iter type, expanded) of each axis of `build`'s output, its inputs defined from
    `inputs` (meta tensors: sizes and strides only)."""
    with FusionDefinition() as fd:
        fd.add_output(build(fd, *[fd.from_pytorch(x) for x in inputs]))
    (out,) = fd.fusion.outputs
    return [(i.iter_type, i.has_expanded_extent) for i in out.logical_no_reductions()]


_I, _B, _E = (IterType.Iteration, False), (IterType.Broadcast, False), (IterType.Broadcast, True)


def _meta(*shape, expand=None, dtype=torch.float32):
    t = torch.empty(shape, dtype=dtype, device="meta")
    return t.expand(*expand) if expand else t


def test_take_along_axis_output_axes_follow_nvfuser_rule():
    """On the gathered axis the output's axis is the index's; on the others the input's,
    unless the input's is a broadcast and the index's is not, or the index's is expanded:
    the output varies along an axis where the input or the index does."""
    def axes(x, i):
        return _out_axes(lambda fd, t, j: fd.ops.take_along_axis(t, j, 1), x, i)

    idx = lambda *s, expand=None: _meta(*s, expand=expand, dtype=torch.int64)  # noqa: E731
    cases = [
        (_meta(5, 8), idx(5, 3), [_I, _I]),
        (_meta(5, 8), idx(1, 3, expand=(5, 3)), [_I, _I]),  # issue 34: the rows of x differ
        (_meta(5, 8), idx(1, 3), [_I, _I]),  # torch broadcasts the index over x's rows
        (_meta(1, 8), idx(5, 3), [_I, _I]),
        (_meta(1, 8, expand=(5, 8)), idx(5, 3), [_I, _I]),
        (_meta(1, 8), idx(1, 3), [_B, _I]),
        (_meta(1, 8, expand=(5, 8)), idx(1, 3), [_E, _I]),  # constant along the rows: both are
        (_meta(1, 8), idx(1, 3, expand=(5, 3)), [_E, _I]),
        (_meta(5, 8), idx(5, 1), [_I, _B]),
        (_meta(5, 8), idx(5, 1, expand=(5, 4)), [_I, _E]),  # the gathered axis is the index's
    ]
    for x, i, want in cases:
        assert axes(x, i) == want, (tuple(x.shape), x.stride(), tuple(i.shape), i.stride())


def test_gather_output_axes_vary_where_input_or_index_do():
    """gather keeps the index's sizes; an index expanded along an axis the input varies on
    gives a concrete axis (different input rows at each position)."""
    idx = lambda *s, expand=None: _meta(*s, expand=expand, dtype=torch.int64)  # noqa: E731
    gather = lambda fd, t, j: fd.ops.gather(t, j, 1)  # noqa: E731
    assert _out_axes(gather, _meta(6, 5), idx(1, 7, expand=(6, 7))) == [_I, _I]
    assert _out_axes(gather, _meta(6, 5), idx(1, 7)) == [_B, _I]  # one row: size 1, as torch's
    assert _out_axes(gather, _meta(1, 5, expand=(6, 5)), idx(1, 7, expand=(6, 7))) == [_E, _I]
    assert _out_axes(gather, _meta(6, 5), idx(6, 1, expand=(6, 3))) == [_I, _E]


def test_index_select_select_and_scatter_output_axes():
    """index_select and select: the lookup's axes (the index's on index_select's dim);
    scatter: the input's, an expanded one concrete (the writes differ along it)."""
    idx = lambda *s, expand=None: _meta(*s, expand=expand, dtype=torch.int64)  # noqa: E731
    assert _out_axes(lambda fd, t, j: fd.ops.index_select(t, j, 0), _meta(6, 1, expand=(6, 9)),
                     idx(1, expand=(4,))) == [_E, _E]
    assert _out_axes(lambda fd, t, j: fd.ops.index_select(t, j, 1), _meta(6, 9), idx(4)) == [_I, _I]
    assert _out_axes(lambda fd, t: fd.ops.select(t, 2, 1), _meta(1, 9, expand=(5, 9))) == [_E]
    assert _out_axes(lambda fd, t, j, s: fd.ops.scatter(t, j, s, 1), _meta(1, 9, expand=(5, 9)),
                     idx(1, 3, expand=(5, 3)), _meta(5, 3)) == [_I, _I]


_WANT_CASES = [c for c in indexing_cases.CASES if c.want is not None]


@pytest.mark.parametrize("case", _WANT_CASES, ids=[c.name for c in _WANT_CASES])
def test_index_ops_with_broadcast_expanded_computed_and_float_indices_match_torch(case):
    """Each index op with a broadcast, expanded (stride 0) or computed index, followed by an
    op that reads every row (an add of a full tensor, a sum over the rows), and with
    floating-point indices; Thunder's cross-entropy: fd.execute against eager PyTorch."""
    inputs = case.inputs(DEVICE)
    with FusionDefinition() as fd:
        case.build(fd, inputs)
    got = execute(fd, inputs)
    want = case.want(*inputs)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        check(g, w, f"{case.name} output {k}")


def test_issue_34_take_along_axis_broadcast_index_rows():
    """The issue's fusion: every row of the result is its own row of x reversed, plus iota
    (fuser gave row 0 in every row)."""
    for shape in ((3, 4), (6, 17)):
        x = rand(shape, DataType.Float)
        n = shape[1]

        def build(fd, t):
            io = fd.ops.iota(n, 0, 1, dtype=DataType.Int)
            idx = fd.ops.broadcast_in_dim(fd.ops.sub(n - 1, io), shape=list(shape), broadcast_dims=[1])
            iof = fd.ops.broadcast_in_dim(fd.ops.cast(io, DataType.Float), list(shape), [1])
            return fd.ops.add(fd.ops.take_along_axis(t, idx, 1), iof)

        (out,) = fusion(build, [x])
        want = torch.take_along_dim(x, (n - 1 - torch.arange(n, device=x.device)).expand(shape), 1) + \
            torch.arange(n, dtype=x.dtype, device=x.device)
        check(out, want, f"issue 34 {shape}")


def test_issue_34_stride0_index_input_then_sum():
    """A stride-0 int64 index input: the sum over the rows adds each row's own values."""
    x = rand((7, 10), DataType.Float)
    idx = torch.randint(0, 10, (1, 4)).expand(7, 4).to(x.device)
    for op, want in (("take_along_axis", torch.take_along_dim(x, idx, 1)), ("gather", torch.gather(x, 1, idx))):
        out = fusion(lambda fd, t, i: [fd.ops.sum(getattr(fd.ops, op)(t, i, 1), [0]),
                                       fd.ops.sum(getattr(fd.ops, op)(t, i, 1), [1])], [x, idx])
        check(out[0], want.sum(0), f"{op} summed over the rows")
        check(out[1], want.sum(1), f"{op} summed within the rows")


def test_take_along_axis_with_sizes_torch_cannot_broadcast_raises():
    """An expanded index of another size than the input's (neither 1) along an axis other
    than the gathered one: torch's error, not a result broadcast from one row."""
    x = rand((3, 5), DataType.Float)
    for idx in (torch.randint(0, 5, (1, 2)).expand(4, 2), torch.randint(0, 5, (1, 2)).expand(2, 2)):
        with pytest.raises(RuntimeError, match="must match the size"):
            torch.take_along_dim(x, idx.to(x.device), 1)
        with pytest.raises(RuntimeError, match="must match the size"):
            fusion(lambda fd, t, i: fd.ops.mul(fd.ops.take_along_axis(t, i, 1), 2.0), [x, idx.to(x.device)])
    xe = rand((1, 5), DataType.Float).expand(3, 5)
    with pytest.raises(RuntimeError, match="must match the size"):
        fusion(lambda fd, t, i: fd.ops.take_along_axis(t, i, 1), [xe, torch.randint(0, 5, (4, 2)).to(x.device)])


@pytest.mark.parametrize("ignore_index", [-100, -10])
def test_cross_entropy_as_thunder_emits_it(ignore_index):
    """Thunder's nvFuser cross_entropy: take_along_axis with the Float index
    `where(target != ignore_index, target, 0.0)`, masked, summed over the valid count."""
    for rows, classes in ((37, 129), (8, 1000), (1, 5)):
        logits = rand((rows, classes), DataType.Float)
        target = indexing_cases.targets(classes, rows, ignore_index, device=logits.device)
        with FusionDefinition() as fd:
            t, y = fd.from_pytorch(logits), fd.from_pytorch(target)
            for out in indexing_cases.cross_entropy(fd, t, y, ignore_index):
                fd.add_output(out)
        (loss,) = execute(fd, [logits, target])
        check(loss, F.cross_entropy(logits, target, ignore_index=ignore_index), f"{rows}x{classes}")


def test_scatter_with_broadcast_index_then_ops_over_every_row():
    """scatter with an index expanded (or broadcast in the fusion) along the rows writes
    each row's src at the same positions; an add of a full tensor and sums read every row."""
    x, src, y = rand((6, 20), DataType.Float), rand((6, 9), DataType.Float), rand((6, 20), DataType.Float)
    positions = unique_index(20, (9,), 0, device=x.device)
    want = torch.scatter(x, 1, positions.expand(6, 9), src)
    for expanded in (True, False):
        def build(fd, t, i, s, u):
            j = i if expanded else fd.ops.broadcast_in_dim(i, shape=[fd.ops.size(t, 0), fd.ops.size(i, 0)],
                                                            broadcast_dims=[1])
            out = fd.ops.scatter(t, j, s, 1)
            return [fd.ops.add(out, u), fd.ops.sum(out, [0]), fd.ops.sum(out, [1])]

        index = positions[None].expand(6, 9) if expanded else positions
        got = fusion(build, [x, index, src, y])
        for g, w, what in zip(got, (want + y, want.sum(0), want.sum(1)), ("add", "sum over rows", "row sums")):
            check(g, w, f"scatter then {what} (expanded index: {expanded})")


def test_scatter_rejects_mismatched_src_dtype():
    x, index, src = torch.randn(4, 3), torch.zeros(2, 3, dtype=torch.long), torch.randn(2, 3, dtype=torch.float64)
    assert_rejects("scatter", lambda fd, t, i, s: fd.ops.scatter(t, i, s, 0), [x, index, src])


# --- full, iota ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_full(dtype):
    fills = {DataType.Bool: [True, False], DataType.ComplexFloat: [1 - 2j, 3], DataType.ComplexDouble: [0.5j, -1.0]}
    for value in fills.get(dtype, [3, -1.5 if (dtype.is_floating) else -2]):
        for shape in ([2, 3], [0, 4], [1], [], [4, 1, 127]):
            (out,) = fusion(lambda fd: fd.ops.full(shape, value, dtype), [])
            check(out, torch.full(shape, value, dtype=dtype.torch), f"full({shape}, {value!r}, {dtype})")


def test_full_symbolic_shape_and_scalar_fill():
    x = torch.randn(3, 5)
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x)
        v = fd.define_scalar(dtype=DataType.Double)
        f = fd.ops.full(t.shape(), v, DataType.Float)
        fd.add_output(fd.ops.add(t, f))
        fd.add_output(fd.ops.full([fd.ops.size(t, 1), 2], 7, DataType.Int32))
    a, b = execute(fd, [x, 0.5])
    check(a, x + 0.5)
    check(b, torch.full((5, 2), 7, dtype=torch.int32))


_IOTA_DTYPES = [DataType.Int32, DataType.Int, DataType.Half, DataType.BFloat16, DataType.Float, DataType.Double]


@pytest.mark.parametrize("dtype", _IOTA_DTYPES, ids=ids(_IOTA_DTYPES))
def test_iota(dtype):
    cases = [(10, None, None), (5, 3, 2), (7, -4, -3), (0, 1, 1), (1, 5, 7), (127, 0, 1)]
    if dtype.is_floating:
        cases += [(9, 0.5, 0.25), (20, -1.5, 0.3), (130, 0.1, 0.7)]
    for length, start, step in cases:
        (out,) = fusion(lambda fd: fd.ops.iota(length, start, step, dtype=dtype), [])
        s0, st_ = (start if start is not None else 0), (step if step is not None else 1)
        # start + i * step, computed in float32 (narrow types) or the type itself, rounded once
        compute = torch.float32 if dtype in (DataType.Half, DataType.BFloat16) else dtype.torch
        if not dtype.is_floating:
            s0, st_ = int(s0), int(st_)
        want = (torch.arange(length, dtype=compute) * st_ + s0).to(dtype.torch)
        check(out, want, f"iota({length}, {start}, {step}, {dtype})")


def test_iota_symbolic_length():
    x = torch.randn(6)
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x)
        i = fd.ops.iota(fd.ops.size(t, 0), 0, 1, dtype=DataType.Int)
        fd.add_output(fd.ops.mul(t, i))
    (out,) = execute(fd, [x])
    check(out, x * torch.arange(6))


def test_iota_rejects_bad_dtypes():
    for dtype in (DataType.Bool, DataType.ComplexFloat):
        with pytest.raises(TypeError, match=r"fd\.ops\.iota"):
            fusion(lambda fd: fd.ops.iota(4, 0, 1, dtype=dtype), [])


# --- random ----------------------------------------------------------------------------------------

_N = 20000


@pytest.mark.parametrize("dtype", FLOATS, ids=ids(FLOATS))
def test_uniform(dtype):
    lo, hi = -1.5, 2.5
    (out,) = fusion(lambda fd: fd.ops.uniform(lo, hi, [4, _N // 4], dtype=dtype), [])
    assert out.dtype == dtype.torch and out.shape == (4, _N // 4)
    # narrow types may round a value just below hi up to hi
    assert out.min() >= lo and (out.max() < hi if dtype in (DataType.Float, DataType.Double) else out.max() <= hi)
    x = out.double()
    assert abs(x.mean().item() - (lo + hi) / 2) < 0.05
    assert abs(x.var().item() - (hi - lo) ** 2 / 12) < 0.05
    # spread over the range, not constant
    assert torch.histc(x, bins=8, min=lo, max=hi).min() > _N / 8 * 0.8


@pytest.mark.parametrize("dtype", FLOATS, ids=ids(FLOATS))
def test_normal(dtype):
    mean, std = 0.5, 2.0
    (out,) = fusion(lambda fd: fd.ops.normal(mean, std, [_N], dtype=dtype), [])
    assert out.dtype == dtype.torch and out.shape == (_N,)
    x = out.double()
    assert abs(x.mean().item() - mean) < 0.1
    assert abs(x.std().item() - std) < 0.1
    assert abs(((x - mean) / std).pow(3).mean().item()) < 0.1  # symmetric
    assert abs(((x - mean) / std).pow(4).mean().item() - 3) < 0.3  # gaussian tails


@pytest.mark.parametrize("kind", ["uniform", "normal"])
def test_rng_seed_and_offset_determinism(kind):
    def sample(seed, offset, shape=(3, 50)):
        with FusionDefinition() as fd:
            s, o = fd.define_scalar(dtype=DataType.Int), fd.define_scalar(dtype=DataType.Int)
            fd.add_output(getattr(fd.ops, kind)(0.0, 1.0, list(shape), rng_seed=s, rng_offset=o))
        (out,) = execute(fd, [seed, offset])
        return out

    a, b = sample(7, 0), sample(7, 0)
    assert torch.equal(a, b), "same seed and offset must give the same numbers"
    assert not torch.equal(a, sample(7, 1)), "another offset must give other numbers"
    assert not torch.equal(a, sample(8, 0)), "another seed must give other numbers"
    # constants work as well as inputs
    (c,) = fusion(lambda fd: getattr(fd.ops, kind)(0.0, 1.0, [3, 50], rng_seed=7, rng_offset=0), [])
    (d,) = fusion(lambda fd: getattr(fd.ops, kind)(0.0, 1.0, [3, 50], rng_seed=7, rng_offset=0), [])
    assert torch.equal(c, d)


def test_rng_without_seed_varies():
    fd = define_fusion(lambda fd: fd.ops.uniform(0.0, 1.0, [100]), [])
    (a,), (b,) = execute(fd, []), execute(fd, [])
    assert not torch.equal(a, b)


def test_rng_symbolic_shape_and_scalar_params():
    x = torch.randn(5, 40)
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x)
        lo, hi = fd.define_scalar(dtype=DataType.Double), fd.define_scalar(dtype=DataType.Double)
        fd.add_output(fd.ops.uniform(lo, hi, t.shape()))
    (out,) = execute(fd, [x, 3.0, 4.0])
    assert out.shape == x.shape and out.min() >= 3.0 and out.max() < 4.0


def test_rng_rejects_non_float_dtype():
    for dtype in (DataType.Int, DataType.Bool):
        with pytest.raises(TypeError, match=r"fd\.ops\.uniform"):
            fusion(lambda fd: fd.ops.uniform(0.0, 1.0, [4], dtype=dtype), [])


@pytest.mark.parametrize("dtype", FLOATS, ids=ids(FLOATS))
def test_rand_like_randn_like(dtype):
    x = rand((40, 500), dtype)
    u, n = fusion(lambda fd, t: [fd.ops.rand_like(t), fd.ops.randn_like(t)], [x])
    for out in (u, n):
        assert out.dtype == x.dtype and out.shape == x.shape
    assert u.min() >= 0 and u.max() <= 1 and abs(u.double().mean().item() - 0.5) < 0.02
    assert abs(n.double().mean().item()) < 0.05 and abs(n.double().std().item() - 1) < 0.05
    # seeded: deterministic
    a = fusion(lambda fd, t: fd.ops.rand_like(t, rng_seed=3, rng_offset=4), [x])[0]
    b = fusion(lambda fd, t: fd.ops.rand_like(t, rng_seed=3, rng_offset=4), [x])[0]
    assert torch.equal(a, b)


def test_rand_like_of_expanded_and_zero_size():
    for x in (torch.randn(6).expand(3, 6), torch.randn(0, 4), torch.randn(())):
        (out,) = fusion(lambda fd, t: fd.ops.randn_like(t), [x])
        assert out.shape == x.shape and out.dtype == x.dtype


# --- triu ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_triu(dtype):
    for shape in [(5, 5), (3, 7), (7, 3), (2, 4, 6), (2, 1, 3, 3), (0, 4), (1, 1)]:
        x = rand(shape, dtype)
        for diagonal in (0, 1, -1, 3, -5, 10):
            (out,) = fusion(lambda fd, t: fd.ops.triu(t, diagonal), [x])
            check(out, torch.triu(x, diagonal), f"triu({shape}, {diagonal})")


def test_triu_noncontiguous_and_default_diagonal():
    x = torch.randn(6, 4).t()
    (out,) = fusion(lambda fd, t: fd.ops.triu(t), [x])
    check(out, torch.triu(x))


def test_triu_rejects_1d():
    with pytest.raises(ValueError, match=r"fd\.ops\.triu"):
        fusion(lambda fd, t: fd.ops.triu(t), [torch.randn(4)])


# --- matmul, linear --------------------------------------------------------------------------------

_MM_DTYPES = [DataType.Half, DataType.BFloat16, DataType.Float, DataType.Double, DataType.ComplexFloat]
_MM_SHAPES = [
    ((5,), (5,)),
    ((3, 5), (5,)),
    ((5,), (5, 4)),
    ((3, 5), (5, 4)),
    ((2, 3, 5), (5, 4)),
    ((5,), (2, 5, 4)),
    ((2, 3, 5), (5,)),
    ((2, 3, 5), (2, 5, 4)),
    ((2, 1, 3, 5), (6, 5, 4)),  # batch dims broadcast
    ((1, 3, 5), (4, 5, 2)),
    ((3, 0), (0, 4)),
    ((0, 5), (5, 2)),
    ((1, 127), (127, 1)),
]


def _mm_tol(dtype, k):
    # float32 sums of k products may be ordered differently; half/bf16 are computed in
    # float32 and rounded once, so their dtype's tolerance covers them
    return {DataType.Float: {"rtol": 1e-4, "atol": 1e-5 * k},
            DataType.ComplexFloat: {"rtol": 1e-4, "atol": 1e-5 * k}}.get(dtype, {})


@pytest.mark.parametrize("dtype", _MM_DTYPES, ids=ids(_MM_DTYPES))
def test_matmul(dtype):
    for sa, sb in _MM_SHAPES:
        a, b = rand(sa, dtype), rand(sb, dtype)
        (out,) = fusion(lambda fd, x, y: fd.ops.matmul(x, y), [a, b])
        check(out, expect(torch.matmul, a, b), f"matmul({sa}, {sb})", **_mm_tol(dtype, sa[-1]))


def test_matmul_noncontiguous_and_expanded():
    for a, b in ((torch.randn(5, 3).t(), torch.randn(4, 5).t()), (torch.randn(5).expand(3, 5), torch.randn(5, 2)),
                 (torch.randn(8, 10)[::2, ::2], torch.randn(5, 3))):
        (out,) = fusion(lambda fd, x, y: fd.ops.matmul(x, y), [a, b])
        check(out, torch.matmul(a, b), **_mm_tol(DataType.Float, 5))


@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_matmul_random_batch_broadcast(data):
    m, k, n = (data.draw(st.integers(1, 4), label=x) for x in "mkn")
    ba = data.draw(st.lists(st.integers(1, 3), max_size=2), label="batch a")
    bb = data.draw(st.lists(st.integers(1, 3), max_size=2), label="batch b")
    # make the batch dims broadcastable: where both have a dim, equal or one of them 1
    r = min(len(ba), len(bb))
    for i in range(1, r + 1):
        if ba[-i] != bb[-i] and 1 not in (ba[-i], bb[-i]):
            bb[-i] = 1
    a, b = torch.randn(*ba, m, k), torch.randn(*bb, k, n)
    (out,) = fusion(lambda fd, x, y: fd.ops.matmul(x, y), [a, b])
    check(out, torch.matmul(a, b), f"matmul({tuple(a.shape)}, {tuple(b.shape)})", **_mm_tol(DataType.Float, k))


@pytest.mark.parametrize("dtype", [DataType.Bool, DataType.Int32, DataType.Int], ids=ids)
def test_matmul_rejects_integers(dtype):
    """No integer matmul on CUDA in torch either ("addmm_cuda" is not implemented for ints)."""
    a, b = rand((3, 4), dtype), rand((4, 2), dtype)
    assert_rejects("matmul", lambda fd, x, y: fd.ops.matmul(x, y), [a, b])


def test_matmul_rejects_mixed_dtypes():
    a, b = torch.randn(3, 4, dtype=torch.half), torch.randn(4, 2)
    with pytest.raises(RuntimeError):
        torch.matmul(a, b)
    assert_rejects("matmul", lambda fd, x, y: fd.ops.matmul(x, y), [a, b])


def _linear(x, w, b=None):
    """F.linear; a 1-D weight with a bias as F.linear computes it for inputs of rank != 2
    (for 2-D inputs torch's addmm path refuses the 1-D weight, a torch quirk)."""
    if w.ndim == 1 and b is not None:
        return F.linear(x, w) + b
    return F.linear(x, w, b)


@pytest.mark.parametrize("dtype", _MM_DTYPES, ids=ids(_MM_DTYPES))
def test_linear(dtype):
    for sx, sw, bias in [((4, 5), (3, 5), True), ((4, 5), (3, 5), False), ((2, 4, 5), (3, 5), True),
                         ((5,), (3, 5), True), ((4, 5), (5,), False), ((4, 5), (5,), True), ((0, 5), (3, 5), True),
                         ((2, 1, 127), (2, 127), False)]:
        x, w = rand(sx, dtype), rand(sw, dtype)
        args = [x, w] + ([rand(sw[:-1], dtype)] if bias else [])
        (out,) = fusion(lambda fd, *ts: fd.ops.linear(*ts), args)
        check(out, expect(_linear, *args), f"linear({sx}, {sw}, bias={bias})", **_mm_tol(dtype, sx[-1]))


def test_linear_noncontiguous_and_broadcast_bias():
    x, b = torch.randn(5, 4).t(), torch.randn(1).expand(6)
    w = torch.randn(5, 6).t()  # (6, 5) transposed
    (out,) = fusion(lambda fd, p, q, r: fd.ops.linear(p, q, r), [x, w, b])
    check(out, F.linear(x, w, b), **_mm_tol(DataType.Float, 5))


@pytest.mark.parametrize("dtype", [DataType.Int32, DataType.Bool], ids=ids)
def test_linear_rejects_integers(dtype):
    x, w = rand((3, 4), dtype), rand((2, 4), dtype)
    assert_rejects("linear", lambda fd, p, q: fd.ops.linear(p, q), [x, w])
