"""Definition-time errors: a bad call raises at the call itself, and the message names the
op (or argument) and what was expected. Nothing here executes a fusion."""
import re

import pytest
import torch

from fuser import DataType, FusionDefinition


@pytest.fixture
def fd():
    """An open definition with T0: [-1, -1], T1: [-1, -1, -1], T2: [3, 4], T3: [5, 4],
    T4: [-1, 1] (all Float); closed with an output after the test body."""
    f = FusionDefinition()
    f.__enter__()
    f.t0 = f.define_tensor(shape=[-1, -1], contiguity=[True, True])
    f.t1 = f.define_tensor(shape=[-1, -1, -1], contiguity=True)
    f.t2 = f.define_tensor(shape=[3, 4], contiguity=True)
    f.t3 = f.define_tensor(shape=[5, 4], contiguity=True)
    f.t4 = f.define_tensor(shape=[-1, 1], contiguity=[True, None])
    yield f
    f.add_output(f.t0)
    f.__exit__(None, None, None)


def _raises(exc, *patterns):
    """pytest.raises whose message must contain every pattern (regexes, case-sensitive)."""

    class _Check:
        def __enter__(self):
            self.ctx = pytest.raises(exc)
            self.info = self.ctx.__enter__()
            return self.info

        def __exit__(self, *args):
            handled = self.ctx.__exit__(*args)
            msg = str(self.info.value)
            for p in patterns:
                assert re.search(p, msg), f"message {msg!r} does not match {p!r}"
            return handled

    return _Check()


# --- dims out of range --------------------------------------------------------------------
@pytest.mark.parametrize(
    "op, call",
    [
        ("sum", lambda fd: fd.ops.sum(fd.t0, dims=[2])),
        ("sum", lambda fd: fd.ops.sum(fd.t0, dims=[-3])),
        ("prod", lambda fd: fd.ops.prod(fd.t0, dims=[5])),
        ("max", lambda fd: fd.ops.max(fd.t0, dims=[2], keepdim=True)),
        ("min", lambda fd: fd.ops.min(fd.t1, dims=[3])),
        ("var", lambda fd: fd.ops.var(fd.t0, dims=[2], correction=1)),
        ("var_mean", lambda fd: fd.ops.var_mean(fd.t0, dims=[2])),
        ("welford", lambda fd: fd.ops.welford(fd.t0, dims=[2])),
        ("squeeze", lambda fd: fd.ops.squeeze(fd.t4, dims=[2])),
        ("cumsum", lambda fd: fd.ops.cumsum(fd.t0, dim=2)),
        ("select", lambda fd: fd.ops.select(fd.t0, 0, dim=2)),
        ("size", lambda fd: fd.ops.size(fd.t0, dim=2)),
        ("cat", lambda fd: fd.ops.cat([fd.t0, fd.t0], dim=2)),
        ("at", lambda fd: fd.ops.at(fd.t0.shape(), 2)),
    ],
)
def test_dim_out_of_range(fd, op, call):
    with _raises(IndexError, rf"fd\.ops\.{op}\b", "out of range"):
        call(fd)


@pytest.mark.parametrize(
    "op, call, pattern",
    [
        ("sum", lambda fd: fd.ops.sum(fd.t0, dims=[0, 0]), "twice"),
        ("permute", lambda fd: fd.ops.permute(fd.t0, dims=[0, 2]), "permutation"),
        ("permute", lambda fd: fd.ops.permute(fd.t0, dims=[0, 0]), "permutation"),
        ("permute", lambda fd: fd.ops.permute(fd.t0, dims=[0]), "1 entries .* 2 dimensions"),
        ("stride_order", lambda fd: fd.ops.stride_order(fd.t0, [0, 0]), "permutation"),
        ("stride_order", lambda fd: fd.ops.stride_order(fd.t0, [0]), "permutation"),
        ("squeeze", lambda fd: fd.ops.squeeze(fd.t2, dims=[0]), "extent 3"),
    ],
)
def test_bad_dims(fd, op, call, pattern):
    with _raises(ValueError, rf"fd\.ops\.{op}\b", pattern):
        call(fd)


@pytest.mark.parametrize(
    "call",
    [lambda fd: fd.ops.sum(fd.t0, dims="x"), lambda fd: fd.ops.sum(fd.t0, dims=[0.5]), lambda fd: fd.ops.sum(fd.t0, dims=[None])],
)
def test_dims_must_be_ints(fd, call):
    with _raises(TypeError, r"fd\.ops\.sum", "dims"):
        call(fd)


def test_squeeze_expanded_needs_flag(fd):
    t = fd.define_tensor(shape=[-1, -1], contiguity=[None, True])
    with _raises(ValueError, r"fd\.ops\.squeeze", "expanded", "squeeze_expanded"):
        fd.ops.squeeze(t, dims=[0])


# --- binary ops -------------------------------------------------------------------------------
def test_binary_ranks_broadcast_from_the_left_but_extents_must_agree(fd):
    """A lower-rank operand gets leading broadcast axes (PyTorch and nvFuser); the aligned
    static extents must then agree."""
    t5 = fd.define_tensor(shape=[5], contiguity=[True])
    with _raises(ValueError, r"fd\.ops\.add", "extents", "4", "5"):
        fd.ops.add(fd.t2, t5)
    with _raises(ValueError, r"fd\.ops\.mul", "extents"):
        fd.t2 * t5


def test_binary_mismatched_static_extents(fd):
    with _raises(ValueError, r"fd\.ops\.sub", "extents", "3", "5"):
        fd.ops.sub(fd.t2, fd.t3)


def test_ternary_mismatched_static_extents(fd):
    with _raises(ValueError, r"fd\.ops\.where", "extents"):
        fd.ops.where(fd.ops.gt(fd.t2, 0.0), fd.t2, fd.t3)


def test_bad_operand_types(fd):
    with _raises(TypeError, r"fd\.ops\.add", "arg2", "str"):
        fd.ops.add(fd.t0, "x")
    with _raises(TypeError, r"fd\.ops\.neg", "torch.Tensor", "define_tensor"):
        fd.ops.neg(torch.ones(2))
    with _raises(TypeError, r"fd\.ops\.at", "Vector"):
        fd.ops.at(fd.t0, 0)


# --- broadcasts -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "call, exc, pattern",
    [
        (lambda fd: fd.ops.broadcast_in_dim(fd.t0, shape=[2, 3, 4], broadcast_dims=[0]), ValueError, "broadcast_dims has 1 entries"),
        (lambda fd: fd.ops.broadcast_in_dim(fd.t0, shape=[2, 3, 4], broadcast_dims=[0, 1, 2]), ValueError, "broadcast_dims has 3 entries"),
        (lambda fd: fd.ops.broadcast_in_dim(fd.t0, shape=[2, 3, 4], broadcast_dims=[0, 3]), IndexError, "out of range"),
        (lambda fd: fd.ops.broadcast_in_dim(fd.t0, shape=[2, 3, 4], broadcast_dims=[2, 1]), ValueError, "increasing"),
        (lambda fd: fd.ops.broadcast_in_dim(fd.t0, shape=[2, 3, 4], broadcast_dims=[1, 1]), ValueError, "increasing"),
        (lambda fd: fd.ops.broadcast_in_dim(fd.t1, shape=[2, 3], broadcast_dims=[0, 1, 2]), ValueError, "shape has 2 entries"),
        (lambda fd: fd.ops.broadcast_in_dim(fd.t2, shape=[7, 4], broadcast_dims=[0, 1]), ValueError, "extent 3"),
    ],
)
def test_bad_broadcast_in_dim(fd, call, exc, pattern):
    with _raises(exc, r"fd\.ops\.broadcast_in_dim", pattern):
        call(fd)


@pytest.mark.parametrize("flags", [[True, False], [False, False, False], [False], []])
def test_bad_is_broadcast_dim_count(fd, flags):
    with _raises(ValueError, r"fd\.ops\.broadcast\b", "is_broadcast_dim"):
        fd.ops.broadcast(fd.t0, is_broadcast_dim=flags)


def test_good_broadcast_is_accepted(fd):
    t = fd.ops.broadcast(fd.t0, is_broadcast_dim=[False, True, False])
    assert t.ndim == 3


@pytest.mark.parametrize(
    "call, pattern",
    [
        (lambda fd: fd.ops.expand(fd.t2, shape=[7, 4]), "extent 3"),
        (lambda fd: fd.ops.expand(fd.t2, shape=[4]), "1 entries"),
    ],
)
def test_bad_expand(fd, call, pattern):
    with _raises(ValueError, r"fd\.ops\.expand", pattern):
        call(fd)


# --- reshape, slice, pad ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "arg, new_shape, pattern",
    [
        ("t2", [5, 3], "15 elements.*12"),
        ("t2", [-1, -1], "more than one -1"),
        ("t0", [-1, -1], "more than one -1"),
        ("t2", [5, -1], "-1"),
        ("t0", [-2, 3], "-2"),
    ],
)
def test_bad_reshape(fd, arg, new_shape, pattern):
    with _raises(ValueError, r"fd\.ops\.reshape", pattern):
        fd.ops.reshape(getattr(fd, arg), new_shape=new_shape)


def test_bad_slice_and_pad(fd):
    with _raises(ValueError, r"fd\.ops\.slice", "start_indices"):
        fd.ops.slice(fd.t0, [0], [1, 1])
    with _raises(ValueError, r"fd\.ops\.pad", "even"):
        fd.ops.pad(fd.t0, [1])


# --- dtypes -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, call",
    [
        ("fd.ops.cast", lambda fd: fd.ops.cast(fd.t0, dtype="float")),
        ("fd.ops.cast", lambda fd: fd.ops.cast(fd.t0, dtype=torch.float32)),
        ("fd.ops.cast", lambda fd: fd.ops.cast(fd.t0, dtype=DataType.Null)),
        ("fd.ops.sum", lambda fd: fd.ops.sum(fd.t0, dims=[0], dtype=3)),
        ("fd.ops.max", lambda fd: fd.ops.max(fd.t0, dims=[0], dtype=torch.float32)),
        ("fd.ops.full", lambda fd: fd.ops.full([2], 1.0, dtype=None)),
        ("fd.ops.iota", lambda fd: fd.ops.iota(5, dtype=torch.int64)),
        ("fd.ops.uniform", lambda fd: fd.ops.uniform(0.0, 1.0, [2], dtype="Float")),
        ("fd.define_tensor", lambda fd: fd.define_tensor(shape=[-1], dtype=torch.float32)),
        ("fd.define_tensor", lambda fd: fd.define_tensor(shape=[-1], dtype="Float")),
        ("fd.define_tensor", lambda fd: fd.define_tensor(shape=[-1], dtype=DataType.Null)),
        ("fd.define_scalar", lambda fd: fd.define_scalar(1.0, dtype=float)),
        ("fd.define_scalar", lambda fd: fd.define_scalar(1.0, dtype=DataType.Null)),
        ("fd.define_vector", lambda fd: fd.define_vector([2, 3], dtype="int")),
        ("fd.define_vector", lambda fd: fd.define_vector([2, 3], dtype=DataType.Float)),
    ],
)
def test_bad_dtype(fd, name, call):
    with _raises(TypeError, re.escape(name), "dtype"):
        call(fd)


def test_bad_scalar_and_vector_values(fd):
    with _raises(TypeError, r"fd\.define_scalar", "value"):
        fd.define_scalar("x")
    with _raises(TypeError, r"fd\.define_vector", r"values\[0\]"):
        fd.define_vector([2.5, 3])


# --- define_tensor ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, exc, pattern",
    [
        (dict(shape=[-2, 3]), ValueError, r"shape\[0\]"),
        (dict(shape=[2.0, 3]), ValueError, r"shape\[0\]"),
        (dict(shape=[True]), ValueError, r"shape\[0\]"),
        (dict(shape=[-1, -1], contiguity=[True]), ValueError, "contiguity has 1 entries"),
        (dict(shape=[-1], contiguity=[True, True]), ValueError, "contiguity has 2 entries"),
        (dict(shape=[-1], contiguity=["yes"]), ValueError, r"contiguity\[0\]"),
        (dict(shape=[-1, -1], contiguity=[True, True], stride_order=[0, 0]), ValueError, "stride_order"),
        (dict(shape=[-1, -1], contiguity=[True, True], stride_order=[0]), ValueError, "stride_order"),
        (dict(shape=[-1, -1], contiguity=[True, True], stride_order=[1, 2]), ValueError, "stride_order"),
        (dict(shape=[-1], contiguity=[True], is_cpu=True), ValueError, "is_cpu"),
        (dict(shape=[2, 3], is_cpu=True), ValueError, "is_cpu"),
        (dict(), TypeError, "shape"),
        (dict(sizes=[2, 3]), ValueError, "strides"),
        (dict(sizes=[2, 3], strides=[1]), ValueError, "strides"),
        (dict(shape=[-1], sizes=[2], strides=[1]), TypeError, "shape"),
    ],
)
def test_bad_define_tensor(fd, kwargs, exc, pattern):
    with _raises(exc, r"fd\.define_tensor", pattern):
        fd.define_tensor(**kwargs)


def test_from_pytorch_needs_a_tensor(fd):
    with _raises(TypeError, r"fd\.from_pytorch", "torch.Tensor"):
        fd.from_pytorch([1, 2, 3])


# --- outputs ----------------------------------------------------------------------------------
def test_bad_add_output(fd):
    with _raises(TypeError, r"fd\.add_output", "output"):
        fd.add_output(torch.ones(2))
    with _raises(ValueError, r"fd\.add_output", "alias_input", "not a fusion input"):
        fd.add_output(fd.ops.neg(fd.t0), alias_input=fd.ops.neg(fd.t0))
    with _raises(TypeError, r"fd\.add_output", "alias_input"):
        fd.add_output(fd.t0, alias_input=3)
    with _raises(ValueError, r"fd\.add_output", "stride_order"):
        fd.add_output(fd.t0, stride_order=[0, 0])
    with _raises(ValueError, r"fd\.add_output", "stride_order"):
        fd.add_output(fd.t0, stride_order=[0, 1, 2])


def test_no_outputs():
    with _raises(ValueError, "no outputs", "add_output"):
        with FusionDefinition() as fd:
            t0 = fd.define_tensor(shape=[-1])
            fd.ops.neg(t0)


# --- lifecycle: closed definitions, foreign handles ------------------------------------------------
@pytest.fixture
def closed():
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1], contiguity=[True])
        s0 = fd.define_scalar(dtype=DataType.Double)
        t1 = fd.ops.neg(t0)
        fd.add_output(t1)
    return fd, t0, s0, t1


@pytest.mark.parametrize(
    "what, call",
    [
        ("fd.ops.neg", lambda fd, t, s, u: fd.ops.neg(t)),
        ("fd.ops.add", lambda fd, t, s, u: t + 1.0),
        ("fd.ops.mul", lambda fd, t, s, u: s * 2),
        ("fd.ops.sum", lambda fd, t, s, u: fd.ops.sum(u, dims=[0])),
        ("fd.define_tensor", lambda fd, t, s, u: fd.define_tensor(shape=[-1])),
        ("fd.define_scalar", lambda fd, t, s, u: fd.define_scalar(1.0)),
        ("fd.define_vector", lambda fd, t, s, u: fd.define_vector([1, 2])),
        ("fd.add_output", lambda fd, t, s, u: fd.add_output(u)),
    ],
)
def test_use_after_definition_closed(closed, what, call):
    fd, t0, s0, t1 = closed
    with _raises(RuntimeError, re.escape(what), "closed"):
        call(fd, t0, s0, t1)
    # the definition is unchanged and still runs
    x = torch.randn(3)
    assert torch.equal(fd.execute([x, 1.0])[0], -x)


def test_handle_of_another_definition(closed):
    _, t0, s0, _ = closed
    with FusionDefinition() as fd2:
        u = fd2.define_tensor(shape=[-1], contiguity=[True])
        with _raises(ValueError, r"fd\.ops\.neg", "another FusionDefinition"):
            fd2.ops.neg(t0)
        with _raises(ValueError, r"fd\.ops\.add", "arg2", "another FusionDefinition"):
            fd2.ops.add(u, t0)
        with _raises(ValueError, r"fd\.ops\.add", "another FusionDefinition"):
            u + t0
        with _raises(ValueError, r"fd\.ops\.mul", "another FusionDefinition"):
            fd2.ops.mul(u, s0)
        with _raises(ValueError, r"fd\.add_output", "another FusionDefinition"):
            fd2.add_output(t0)
        with _raises(ValueError, r"fd\.define_vector", "another FusionDefinition"):
            fd2.define_vector([s0])
        fd2.add_output(u)
    assert "T1 = fd.ops.neg(T0)" not in str(fd2)


def test_handle_of_another_open_definition():
    with FusionDefinition() as fd1:
        a = fd1.define_tensor(shape=[-1], contiguity=[True])
        with FusionDefinition() as fd2:
            b = fd2.define_tensor(shape=[-1], contiguity=[True])
            with _raises(ValueError, "another FusionDefinition"):
                fd2.ops.add(b, a)
            fd2.add_output(b)
        fd1.add_output(a)


def test_definition_cannot_be_redefined(closed):
    fd = closed[0]
    with _raises(RuntimeError, "already defined"):
        with fd:
            pass


def test_execute_while_open():
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1], contiguity=[True])
        fd.add_output(t0)
        with _raises(RuntimeError, "still open"):
            fd.execute([torch.randn(2)])


def test_error_inside_with_does_not_define():
    fd = FusionDefinition()
    with pytest.raises(IndexError):
        with fd:
            t0 = fd.define_tensor(shape=[-1], contiguity=[True])
            fd.add_output(fd.ops.sum(t0, dims=[3]))
    with _raises(RuntimeError, "closed"):
        fd.ops.neg(t0)


def test_symbolic_value_has_no_truth_value(closed):
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1], contiguity=[True])
        with _raises(TypeError, "truth value"):
            if t0 > 0:
                pass
        fd.add_output(t0)
