"""Shape ops against eager PyTorch: broadcast, broadcast_in_dim, expand, squeeze, reshape
(static, -1, symbolic), permute, stride_order (strides checked), slice, pad and cat."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from _opcheck import (  # noqa: F401 - _seed is an autouse fixture
    DTYPES,
    _seed,
    check,
    define_fusion,
    execute,
    expect,
    fusion,
    ids,
    rand,
    symbolic,
)
from fuser import DataType, FusionDefinition

# a compact dtype set for dtype-agnostic data movement; every dtype where it is cheap
_SOME = [DataType.Bool, DataType.Int32, DataType.BFloat16, DataType.Float, DataType.ComplexDouble]


# --- broadcast, broadcast_in_dim, expand -----------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_broadcast(dtype):
    for shape, flags in [((4, 5), [True, False, False]), ((4, 5), [False, True, False, True]),
                         ((3,), [True, True, False]), ((), [True, True]), ((0, 2), [False, True, False]),
                         ((2, 3), [False, False])]:
        x = rand(shape, dtype)
        (out,) = fusion(lambda fd, t: fd.ops.broadcast(t, flags), [x])
        it = iter(x.shape)
        want = x.reshape([1 if f else next(it) for f in flags])
        check(out, want, f"broadcast({shape}, {flags})")
        # a broadcast axis combines with a full one in the next op
        full = rand([3 if f else s for f, s in zip(flags, want.shape)], dtype)
        name = "logical_and" if dtype is DataType.Bool else "mul"
        (out,) = fusion(lambda fd, t, u: getattr(fd.ops, name)(fd.ops.broadcast(t, flags), u), [x, full])
        check(out, expect(getattr(torch, name), want, full), f"{name}(broadcast({shape}, {flags}), full)")


@pytest.mark.parametrize("dtype", _SOME, ids=ids(_SOME))
def test_broadcast_in_dim(dtype):
    cases = [
        ((5,), [3, 5], [1]),
        ((5,), [5, 3], [0]),
        ((3, 1), [3, 4], [0, 1]),  # a size-1 input dim becomes an expanded one
        ((1, 4), [2, 3, 4], [1, 2]),
        ((1, 1), [6, 2, 7], [0, 2]),
        ((), [2, 3], []),
        ((2, 0), [2, 3, 0], [0, 2]),
        ((4,), [4], [0]),
    ]
    for shape, out_shape, bdims in cases:
        x = rand(shape, dtype)
        (out,) = fusion(lambda fd, t: fd.ops.broadcast_in_dim(t, out_shape, bdims), [x])
        view = [1] * len(out_shape)
        for k, d in enumerate(bdims):
            view[d] = x.shape[k]
        check(out, x.reshape(view).expand(out_shape), f"broadcast_in_dim({shape}, {out_shape}, {bdims})")


def test_broadcast_in_dim_expanded_input_and_symbolic_shape():
    """An expanded (stride 0) input, and an output shape taken from another tensor."""
    x = torch.randn(5).expand(3, 5)
    y = torch.randn(2, 3, 5)
    with FusionDefinition() as fd:
        t, u = fd.from_pytorch(x), fd.from_pytorch(y)
        b = fd.ops.broadcast_in_dim(t, fd.ops.shape(u), [1, 2])
        fd.add_output(fd.ops.add(b, u))
    (out,) = execute(fd, [x, y])
    check(out, x + y)


def test_broadcast_in_dim_rejects_mismatch():
    x = torch.randn(3, 4)
    with pytest.raises(ValueError, match=r"fd\.ops\.broadcast_in_dim"):
        with FusionDefinition() as fd:
            t = fd.define_tensor(shape=[3, 4], contiguity=[True, True])
            fd.add_output(fd.ops.broadcast_in_dim(t, [3, 5], [0, 1]))
    with pytest.raises(ValueError, match=r"fd\.ops\.broadcast_in_dim"):
        fusion(lambda fd, t: fd.ops.broadcast_in_dim(t, [3, 4, 2], [0]), [x])


@pytest.mark.parametrize("dtype", _SOME, ids=ids(_SOME))
def test_expand(dtype):
    for shape, target in [((1, 5), [3, 5]), ((4, 1), [4, 6]), ((1, 1, 2), [2, 3, 2]), ((1,), [0]),
                          ((1, 3), [-1, 3]), ((2, 3), [2, 3]), ((1,), [1])]:
        x = rand(shape, dtype)
        (out,) = fusion(lambda fd, t: fd.ops.expand(t, target), [x])
        check(out, x.expand(target), f"expand({shape}, {target})")


def test_expand_then_reduce_and_symbolic_target():
    x, y = torch.randn(1, 6), torch.randn(4, 6)
    with FusionDefinition() as fd:
        t, u = fd.from_pytorch(x), fd.from_pytorch(y)
        e = fd.ops.expand(t, u.shape())
        fd.add_output(fd.ops.sum(e, [0]))
        fd.add_output(fd.ops.sub(e, u))
    s, d = execute(fd, [x, y])
    check(s, x.expand(4, 6).sum(0))
    check(d, x - y)


def test_expand_rejects_non_broadcast_dim():
    with pytest.raises(ValueError, match=r"fd\.ops\.expand"):
        with FusionDefinition() as fd:
            t = fd.define_tensor(shape=[2, 3], contiguity=[True, True])
            fd.add_output(fd.ops.expand(t, [4, 3]))


# --- squeeze ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", _SOME, ids=ids(_SOME))
def test_squeeze(dtype):
    for shape, dims in [((1, 5), [0]), ((4, 1), [-1]), ((1, 3, 1), [0, 2]), ((1,), [0]), ((1, 1), [1]),
                        ((2, 1, 0), [1])]:
        x = rand(shape, dtype)
        (out,) = fusion(lambda fd, t: fd.ops.squeeze(t, dims), [x])
        check(out, x.squeeze(dims) if dims else x, f"squeeze({shape}, {dims})")


def test_squeeze_expanded():
    """An expanded size-1 dim squeezes only with squeeze_expanded=True; it reads element 0."""
    x = torch.randn(1, 5).expand(3, 5)
    with pytest.raises(ValueError, match=r"fd\.ops\.squeeze.*squeeze_expanded"):
        fusion(lambda fd, t: fd.ops.squeeze(t, [0]), [x])
    (out,) = fusion(lambda fd, t: fd.ops.squeeze(t, [0], squeeze_expanded=True), [x])
    check(out, x[0])
    # an expanded dim created inside the fusion
    y = torch.randn(1, 4)
    (out,) = fusion(lambda fd, t: fd.ops.squeeze(fd.ops.expand(t, [6, 4]), [0], squeeze_expanded=True), [y])
    check(out, y[0])


def test_squeeze_rejects_non_size_one_dim():
    with pytest.raises(ValueError, match=r"fd\.ops\.squeeze"):
        with FusionDefinition() as fd:
            t = fd.define_tensor(shape=[3, 1], contiguity=[True, None])
            fd.add_output(fd.ops.squeeze(t, [0]))


# --- reshape ---------------------------------------------------------------------------------------

_RESHAPES = [
    ((2, 3, 4), [6, 4]),
    ((2, 3, 4), [2, 12]),
    ((2, 3, 4), [4, 3, 2]),
    ((2, 3, 4), [24]),
    ((2, 3, 4), [-1, 4]),
    ((2, 3, 4), [3, -1]),
    ((6, 4), [2, 3, 2, 2]),
    ((6, 4), [1, 24, 1]),
    ((1, 6, 1), [6]),
    ((1, 6, 1), [2, 1, 3]),
    ((5,), [5, 1]),
    ((), [1, 1]),
    ((1, 1), []),
    ((0, 3), [3, 0]),
    ((0, 3), [-1, 3]),
    ((4, 127), [127, 4]),
]


@pytest.mark.parametrize("static", [True, False], ids=["static", "symbolic"])
@pytest.mark.parametrize("dtype", _SOME, ids=ids(_SOME))
def test_reshape(dtype, static):
    """Static shapes (Split/Merge transforms) and symbolic inputs, -1 inferred."""
    for shape, new in _RESHAPES:
        x = rand(shape, dtype)
        (out,) = fusion(lambda fd, t: fd.ops.reshape(t, new), [x],
                        define=lambda fd, xs: [fd.from_pytorch(xs[0], static_sizes=static)])
        check(out, x.reshape(new), f"reshape({shape}, {new})")


def test_reshape_noncontiguous_and_expanded():
    for x, new in ((torch.randn(4, 6).t(), [4, 6]), (torch.randn(6).expand(2, 6), [3, 4]),
                   (torch.randn(8, 6)[::2], [2, 12]), (torch.randn(1, 3).expand(4, 3), [12])):
        (out,) = fusion(lambda fd, t: fd.ops.reshape(t, new), [x])
        check(out, x.reshape(new), f"reshape of {tuple(x.shape)}/{x.stride()} to {new}")


def test_reshape_symbolic_shape_from_other_tensor():
    x, y = torch.randn(2, 3, 4), torch.randn(6, 4)
    with FusionDefinition() as fd:
        t, u = fd.from_pytorch(x), fd.from_pytorch(y)
        r = fd.ops.reshape(t, fd.ops.shape(u))
        fd.add_output(fd.ops.add(r, u))
    (out,) = execute(fd, [x, y])
    check(out, x.reshape(6, 4) + y)
    # the same definition on other sizes
    x, y = torch.randn(5, 2, 3), torch.randn(10, 3)
    (out,) = execute(fd, [x, y])
    check(out, x.reshape(10, 3) + y)


def test_reshape_symbolic_sizes_and_at():
    """New shapes computed from fd.ops.size / fd.ops.at / Vector indexing."""
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True])
        n0 = fd.ops.size(t, 0)
        shape = fd.ops.shape(t)
        n1, n2 = fd.ops.at(shape, 1), shape[2]
        fd.add_output(fd.ops.reshape(t, [n0, n1 * n2]))
        fd.add_output(fd.ops.reshape(t, [-1, n2]))
        fd.add_output(fd.ops.reshape(t, [n2, -1, 1]))
        fd.add_output(n1 * n2)
    for shape in [(2, 3, 4), (1, 5, 1), (3, 0, 2)]:
        x = torch.randn(shape)
        a, b, c, n = execute(fd, [x])
        check(a, x.reshape(shape[0], -1))
        check(b, x.reshape(-1, shape[2]))
        check(c, x.reshape(shape[2], -1, 1))
        assert int(n) == shape[1] * shape[2]


def test_reshape_rejects_bad_static_shapes():
    x = torch.randn(2, 3)
    define = lambda fd, xs: [fd.from_pytorch(xs[0], static_sizes=True)]  # noqa: E731
    with pytest.raises(ValueError, match=r"fd\.ops\.reshape"):
        fusion(lambda fd, t: fd.ops.reshape(t, [4, 2]), [x], define=define)
    with pytest.raises(ValueError, match=r"fd\.ops\.reshape"):
        fusion(lambda fd, t: fd.ops.reshape(t, [-1, -1]), [x], define=define)
    with pytest.raises(ValueError, match=r"fd\.ops\.reshape"):
        fusion(lambda fd, t: fd.ops.reshape(t, [-1, 4]), [x], define=define)


@st.composite
def _factorization(draw):
    """A shape and a random refactoring of its element count (maybe with one -1)."""
    shape = draw(st.lists(st.integers(1, 5), min_size=0, max_size=4), label="shape")
    primes = []
    n = math.prod(shape)
    for p in (2, 3, 5):
        while n % p == 0:
            primes.append(p)
            n //= p
    k = draw(st.integers(1, 4), label="new rank")
    slots = draw(st.lists(st.integers(0, k - 1), min_size=len(primes), max_size=len(primes)), label="slots")
    new = [1] * k
    for p, s in zip(primes, slots):
        new[s] *= p
    if draw(st.booleans(), label="use -1"):
        new[draw(st.integers(0, k - 1), label="-1 at")] = -1
    return shape, new


@settings(max_examples=40, deadline=None)
@given(case=_factorization(), static=st.booleans())
def test_reshape_random_factorizations(case, static):
    shape, new = case
    x = torch.randn(shape)
    (out,) = fusion(lambda fd, t: fd.ops.reshape(t, new), [x],
                    define=lambda fd, xs: [fd.from_pytorch(xs[0], static_sizes=static)])
    check(out, x.reshape(new), f"reshape({shape}, {new})")
    # and back, through an op, so the output is computed rather than only viewed
    (out,) = fusion(lambda fd, t: fd.ops.reshape(fd.ops.neg(fd.ops.reshape(t, new)), list(shape)), [x],
                    define=lambda fd, xs: [fd.from_pytorch(xs[0], static_sizes=static)])
    check(out, -x)


# --- permute, stride_order -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", _SOME, ids=ids(_SOME))
def test_permute(dtype):
    for shape, dims in [((2, 3), [1, 0]), ((2, 3, 4), [2, 0, 1]), ((2, 3, 4), [-1, -3, -2]),
                        ((1, 5, 1), [2, 1, 0]), ((0, 3), [1, 0]), ((4,), [0])]:
        x = rand(shape, dtype)
        (out,) = fusion(lambda fd, t: fd.ops.permute(t, dims), [x])
        check(out, x.permute(dims), f"permute({shape}, {dims})")


def test_permute_noncontiguous_then_op():
    x = torch.randn(5, 3, 4).transpose(0, 2)
    (out,) = fusion(lambda fd, t: fd.ops.exp(fd.ops.permute(t, [1, 2, 0])), [x])
    check(out, x.permute(1, 2, 0).exp())


def _strides_for_order(shape, order):
    """Dense strides where dim i has memory rank order[i] (the highest rank outermost)."""
    strides = [0] * len(shape)
    acc = 1
    for d in sorted(range(len(shape)), key=lambda d: order[d]):
        strides[d] = acc
        acc *= max(shape[d], 1)
    return tuple(strides)


@pytest.mark.parametrize("dtype", [DataType.Int32, DataType.Half, DataType.Float], ids=ids)
def test_stride_order(dtype):
    for shape, order in [((2, 3, 4), [0, 1, 2]), ((2, 3, 4), [2, 1, 0]), ((2, 3, 4), [1, 2, 0]),
                         ((5, 7), [0, 1]), ((5, 7), [1, 0]), ((3, 1, 4), [0, 2, 1])]:
        x = rand(shape, dtype)
        (out,) = fusion(lambda fd, t: fd.ops.stride_order(fd.ops.neg(t), order), [x])
        check(out, -x, f"stride_order({shape}, {order})")
        want = _strides_for_order(shape, order)
        assert out.stride() == want, f"stride_order({shape}, {order}): strides {out.stride()}, expected {want}"
        # add_output(..., stride_order=...) lays out the output the same way
        (out,) = fusion(lambda fd, t: [], [x], define=lambda fd, xs: _output_with_order(fd, xs[0], order))
        check(out, -x)
        assert out.stride() == want, f"add_output stride_order={order}: strides {out.stride()}, expected {want}"


def _output_with_order(fd, x, order):
    t = fd.from_pytorch(x)
    fd.add_output(fd.ops.neg(t), stride_order=order)
    return [t]


def test_stride_order_of_noncontiguous_input():
    x = torch.randn(4, 6).t()  # (6, 4) with strides (1, 6)
    for order in ([1, 0], [0, 1]):
        (out,) = fusion(lambda fd, t: fd.ops.stride_order(t, order), [x])
        check(out, x)
        assert out.stride() == _strides_for_order((6, 4), order), f"order {order}: strides {out.stride()}"


# --- slice -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", _SOME, ids=ids(_SOME))
def test_slice(dtype):
    x = rand((7, 9), dtype)
    for start, end, strides in [
        ([0, 0], [7, 9], None),
        ([1, 2], [5, 8], None),
        ([1, 2], [5, 8], [2, 3]),
        ([-3, -5], [7, -1], [1, 2]),  # negative bounds count from the end
        ([-20, 3], [20, 100], [3, 1]),  # clamped to the extent
        ([5, 4], [2, 4], None),  # empty: end before start
        ([6, 8], [7, 9], [5, 5]),
        ([0, 0], [0, 9], None),
    ]:
        (out,) = fusion(lambda fd, t: fd.ops.slice(t, start, end, strides), [x])
        st_ = strides or [1, 1]
        want = x[start[0]:end[0]:st_[0], start[1]:end[1]:st_[1]]
        check(out, want, f"slice({start}, {end}, {strides})")


def test_slice_symbolic_and_noncontiguous():
    for x in (torch.randn(6, 10).t(), torch.randn(10).expand(4, 10), torch.randn(12, 20)[::2, ::2]):
        (out,) = fusion(lambda fd, t: fd.ops.slice(t, [1, 2], [3, -1], [1, 3]), [x])
        check(out, x[1:3, 2:-1:3])


def test_slice_symbolic_bounds_from_sizes():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        n = fd.ops.size(t, 1)
        fd.add_output(fd.ops.slice(t, [0, 1], [fd.ops.size(t, 0), n - 1], manual_normalization=True))
    for shape in [(3, 5), (2, 8), (4, 2)]:
        x = torch.randn(shape)
        (out,) = execute(fd, [x])
        check(out, x[:, 1:-1])


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 9), data=st.data())
def test_slice_random_bounds(n, data):
    start = data.draw(st.integers(-n - 3, n + 3), label="start")
    end = data.draw(st.integers(-n - 3, n + 3), label="end")
    step = data.draw(st.integers(1, 4), label="step")
    x = torch.randn(3, n)
    (out,) = fusion(lambda fd, t: fd.ops.slice(t, [0, start], [3, end], [1, step]), [x])
    check(out, x[:, start:end:step], f"[:, {start}:{end}:{step}] of size {n}")


def test_slice_rejects_nonpositive_stride():
    with pytest.raises(ValueError, match=r"fd\.ops\.slice"):
        fusion(lambda fd, t: fd.ops.slice(t, [0], [3], [0]), [torch.randn(4)])


# --- pad -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", _SOME + [DataType.Half], ids=ids(_SOME + [DataType.Half]))
def test_pad(dtype):
    x = rand((4, 5), dtype)
    for widths in ([1, 2], [0, 0, 2, 1], [3, 0, 0, 2], [-1, 2], [1, -2, -1, 1], [-2, -3], [0, 0]):
        (out,) = fusion(lambda fd, t: fd.ops.pad(t, widths), [x])
        check(out, F.pad(x, widths), f"pad({widths})")
    for value in (True, 3, -1.5):
        if dtype is DataType.Bool and value is not True:
            continue
        if dtype is DataType.Int32 and isinstance(value, float):
            continue
        (out,) = fusion(lambda fd, t: fd.ops.pad(t, [1, 1, 2, 0], value), [x])
        check(out, F.pad(x, [1, 1, 2, 0], value=value), f"pad(value={value!r})")


def test_pad_zero_size_and_expanded():
    for x, widths in ((torch.randn(0, 3), [1, 1, 2, 2]), (torch.randn(4).expand(3, 4), [1, 2]),
                      (torch.randn(5, 3).t(), [0, 1, -1, 0]), (torch.randn(2, 3), [-1, -2])):
        (out,) = fusion(lambda fd, t: fd.ops.pad(t, widths, 2.0), [x])
        check(out, F.pad(x, widths, value=2.0), f"pad {tuple(x.shape)} by {widths}")


def test_pad_value_input_scalar():
    x = torch.randn(3, 4)
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x)
        v = fd.define_scalar(dtype=DataType.Double)
        fd.add_output(fd.ops.pad(t, [2, 1], v))
    (out,) = execute(fd, [x, -7.0])
    check(out, F.pad(x, [2, 1], value=-7.0))


def test_pad_rejects_negative_extent():
    with pytest.raises(ValueError, match=r"fd\.ops\.pad"):
        with FusionDefinition() as fd:
            t = fd.define_tensor(shape=[3], contiguity=[True])
            fd.add_output(fd.ops.pad(t, [-2, -2]))


# --- cat -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_cat(dtype):
    for shapes, dim in [([(2, 3), (4, 3)], 0), ([(2, 3), (2, 1), (2, 5)], 1), ([(2, 3), (2, 3)], -1),
                        ([(0, 3), (2, 3)], 0), ([(3,), (4,), (1,)], 0), ([(2, 3, 4), (2, 1, 4)], 1)]:
        xs = [rand(s, dtype) for s in shapes]
        (out,) = fusion(lambda fd, *ts: fd.ops.cat(list(ts), dim), xs)
        check(out, torch.cat(xs, dim), f"cat({shapes}, {dim})")


def test_cat_mixed_dtypes():
    """torch.cat promotes: fuser casts each input to the result type."""
    for dtypes in ([DataType.Half, DataType.Float], [DataType.Int32, DataType.Half], [DataType.Bool, DataType.Int],
                   [DataType.BFloat16, DataType.Half], [DataType.Float, DataType.ComplexFloat],
                   [DataType.Int, DataType.Double, DataType.Bool]):
        xs = [rand((2, k + 1), dt) for k, dt in enumerate(dtypes)]
        (out,) = fusion(lambda fd, *ts: fd.ops.cat(list(ts), 1), xs)
        check(out, torch.cat(xs, 1), f"cat of {dtypes}")


def test_cat_noncontiguous_and_expanded():
    xs = [torch.randn(4, 3).t(), torch.randn(4).expand(2, 4), torch.randn(6, 8)[::2, ::2]]
    (out,) = fusion(lambda fd, *ts: fd.ops.cat(list(ts), 0), xs)
    check(out, torch.cat(xs, 0))


def test_cat_symbolic_sizes():
    fd = define_fusion(lambda fd, a, b: fd.ops.cat([a, b], 1), [torch.randn(2, 2), torch.randn(2, 2)],
                       define=symbolic)
    for n, m in ((3, 4), (1, 0), (5, 1)):
        a, b = torch.randn(2, n), torch.randn(2, m)
        (out,) = execute(fd, [a, b])
        check(out, torch.cat([a, b], 1))


def test_cat_rejects_mismatched_extents():
    with pytest.raises(ValueError, match=r"fd\.ops\.cat"):
        with FusionDefinition() as fd:
            a = fd.define_tensor(shape=[2, 3], contiguity=[True, True])
            b = fd.define_tensor(shape=[4, 5], contiguity=[True, True])
            fd.add_output(fd.ops.cat([a, b], 0))
    with pytest.raises(ValueError, match=r"fd\.ops\.cat"):
        fusion(lambda fd, a, b: fd.ops.cat([a, b], 0), [torch.randn(()), torch.randn(())])
