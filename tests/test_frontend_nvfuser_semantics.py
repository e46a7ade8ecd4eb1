"""nvFuser's semantics for fd.ops where they differ from PyTorch's (issue 10, item 1):
integer `div` truncates toward zero like C (builders, reference executor and generated
CUDA), `truediv` gives floats, ops on scalars alone keep the scalars' dtype (a Python
float is Double, an int is Int; where(cond, 3.0, 5.0) is Double), scalar arithmetic
promotes as nvFuser's computeTypes does, and shape vectors accept its results."""
import torch

from fuser import DataType, FusionDefinition
from fuser.codegen import ops as cops
from fuser.ir import BinaryOpType


def _define(build):
    with FusionDefinition() as fd:
        build(fd)
    return fd


# --- integer div -----------------------------------------------------------------------------------
def test_integer_div_truncates_toward_zero():
    a = torch.tensor([-7, 7, -7, 7, 9, -9, 0], dtype=torch.int64)
    b = torch.tensor([2, 2, -2, -2, 3, 4, 5], dtype=torch.int64)

    def build(fd):
        x = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int)
        y = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int)
        fd.add_output(fd.ops.div(x, y))
        fd.add_output(x / y)  # nvFuser's `/` on fusion values is div
        fd.add_output(fd.ops.truediv(x, y))

    div, slash, tdiv = _define(build).execute([a, b])
    assert div.dtype == torch.int64 and div.tolist() == [-3, 3, 3, -3, 3, -2, 0]
    assert torch.equal(slash, div)
    assert tdiv.dtype == torch.float32
    torch.testing.assert_close(tdiv, torch.tensor([-3.5, 3.5, 3.5, -3.5, 3.0, -2.25, 0.0]))


def test_int32_div_keeps_int32_and_mixes_with_int64():
    a = torch.tensor([-7, 100], dtype=torch.int32)

    def build(fd):
        x = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int32)
        fd.add_output(fd.ops.div(x, 3))  # a Python int beside an int32 tensor: int32, as in PyTorch
        fd.add_output(fd.ops.div(x, fd.define_scalar(-3, dtype=DataType.Int)))

    d3, dm3 = _define(build).execute([a])
    assert d3.dtype == torch.int32 and d3.tolist() == [-2, 33]
    assert dm3.dtype == torch.int32 and dm3.tolist() == [2, -33]


def test_large_int64_div_is_exact():
    big = 2**62 + 12345  # float64 cannot hold it: true division then truncation would be off
    a = torch.tensor([big, -big], dtype=torch.int64)
    (out,) = _define(lambda fd: fd.add_output(fd.ops.div(
        fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int), 7))).execute([a])
    assert out.tolist() == [big // 7, -(big // 7)]


def test_float_div_is_true_division():
    x = torch.tensor([-7.0, 7.5])
    (out,) = _define(lambda fd: fd.add_output(fd.ops.div(
        fd.define_tensor(shape=[-1], contiguity=[True]), 2))).execute([x])
    torch.testing.assert_close(out, torch.tensor([-3.5, 3.75]))


def test_scalar_integer_div_and_truediv():
    def build(fd):
        a, b = fd.define_scalar(dtype=DataType.Int), fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.div(a, b))
        fd.add_output(fd.ops.truediv(a, b))
        fd.add_output(fd.ops.div(a, fd.define_scalar(2.0)))

    q, t, f = _define(build).execute([-9, 4])
    assert (q, type(q)) == (-2, int)
    assert (t, type(t)) == (-2.25, float)
    assert (f, type(f)) == (-4.5, float)


def test_generated_cuda_divides_integers_as_c_does():
    # the emitter for an int/int div with an integer result: C's `/` (truncating), no float
    assert cops.emit_binary(BinaryOpType.Div, "a", "b", DataType.Int, DataType.Int, DataType.Int) == "(a / b)"
    assert cops.emit_binary(BinaryOpType.Div, "a", "b", DataType.Int32, DataType.Int32, DataType.Int32) == "(a / b)"
    # truediv of integers: divided in float
    assert cops.emit_binary(BinaryOpType.Div, "a", "b", DataType.Int, DataType.Int, DataType.Float) == (
        "(((float)a) / ((float)b))")
    # and the frontend builds exactly that: a Div with an integer output for fd.ops.div
    fd = _define(lambda fd: fd.add_output(fd.ops.div(
        fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int),
        fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int))))
    (e,) = fd.fusion.exprs()
    assert e.op_type is BinaryOpType.Div and e.output.dtype is DataType.Int


def test_bool_div_is_refused_and_bool_truediv_is_float():
    def build(fd):
        x = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Bool)
        fd.add_output(fd.ops.truediv(x, x))

    (out,) = _define(build).execute([torch.tensor([True, True])])
    assert out.dtype == torch.float32 and out.tolist() == [1.0, 1.0]
    try:
        _define(lambda fd: fd.add_output(fd.ops.div(
            fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Bool), True)))
    except TypeError as err:
        assert "div" in str(err) and "bool" in str(err)
    else:
        raise AssertionError("div of bools was accepted")


# --- the dtype of ops on scalars ------------------------------------------------------------------
def test_where_of_two_float_numbers_is_double():
    cond = torch.tensor([True, False, True])

    def build(fd):
        c = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Bool)
        fd.add_output(fd.ops.where(c, 3.0, 5.0))
        fd.add_output(fd.ops.where(c, 3, 5))
        fd.add_output(fd.ops.where(c, fd.define_scalar(3.0, dtype=DataType.Float), 5.0))
        fd.add_output(fd.ops.where(fd.define_scalar(False), 3.0, 5.0))

    dbl, ints, mixed, scalar = _define(build).execute([cond])
    assert dbl.dtype == torch.float64 and dbl.tolist() == [3.0, 5.0, 3.0]
    assert ints.dtype == torch.int64 and ints.tolist() == [3, 5, 3]
    # Float beside Double scalars: the wrapped numbers promote to Double, as nvFuser's
    assert mixed.dtype == torch.float64
    assert (scalar, type(scalar)) == (5.0, float)


def test_python_numbers_are_double_and_int():
    def build(fd):
        fd.add_output(fd.ops.mul(fd.define_scalar(dtype=DataType.Int), 2))
        fd.add_output(fd.ops.mul(fd.define_scalar(dtype=DataType.Int), 2.5))
        fd.add_output(fd.ops.add(fd.define_scalar(dtype=DataType.Double), 1))

    fd = _define(build)
    assert [fd.fusion.outputs[k].dtype for k in range(3)] == [DataType.Int, DataType.Double, DataType.Double]
    assert fd.execute([3, 4, 0.5]) == [6, 10.0, 1.5]


def test_scalars_of_one_dtype_keep_it():
    def build(fd):
        f = fd.define_scalar(1.5, dtype=DataType.Float)
        i = fd.define_scalar(3, dtype=DataType.Int32)
        fd.add_output(fd.ops.add(f, f))
        fd.add_output(fd.ops.mul(i, i))
        fd.add_output(fd.ops.add(i, fd.define_scalar(2)))  # Int32 with Int: Int

    fd = _define(build)
    assert [v.dtype for v in fd.fusion.outputs] == [DataType.Float, DataType.Int32, DataType.Int]
    assert fd.execute([]) == [3.0, 9, 5]


def test_tensor_beside_a_scalar_of_its_dtype_keeps_it():
    x = torch.tensor([1.0, 2.0], dtype=torch.float64)

    def build(fd):
        t = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Double)
        fd.add_output(fd.ops.mul(t, fd.define_scalar(2.0)))
        fd.add_output(fd.ops.mul(fd.ops.cast(t, DataType.Half), fd.define_scalar(2.0, dtype=DataType.Half)))

    d, h = _define(build).execute([x])
    assert d.dtype == torch.float64 and h.dtype == torch.float16
    assert d.tolist() == [2.0, 4.0] and h.tolist() == [2.0, 4.0]


# --- shape vectors accept scalar results ------------------------------------------------------------
def test_reshape_and_broadcast_to_computed_sizes():
    x = torch.arange(24.0).reshape(4, 6)

    def build(fd):
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        rows, cols = fd.ops.size(t, 0), fd.ops.size(t, 1)
        half = fd.ops.div(cols, 2)  # an Int: integer div of sizes
        fd.add_output(fd.ops.reshape(t, [fd.ops.mul(rows, 2), half]))
        fd.add_output(fd.ops.reshape(t, new_shape=[rows, 2, -1]))
        v = fd.define_vector([rows, 1, cols])
        fd.add_output(fd.ops.broadcast_in_dim(fd.ops.sum(t, dims=[0]), shape=[1, fd.ops.mul(cols, 1)], broadcast_dims=[1]))
        fd.add_output(fd.ops.reshape(t, v))

    a, b, c, d = _define(build).execute([x])
    assert torch.equal(a, x.reshape(8, 3))
    assert torch.equal(b, x.reshape(4, 2, 3))
    assert torch.equal(c, x.sum(0, keepdim=True))
    assert torch.equal(d, x.reshape(4, 1, 6))


def test_slice_bounds_computed_from_sizes():
    x = torch.arange(30.0).reshape(5, 6)

    def build(fd):
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        rows, cols = fd.ops.size(t, 0), fd.ops.size(t, 1)
        fd.add_output(fd.ops.slice(t, [fd.ops.div(rows, 2), 1], [rows, fd.ops.sub(cols, 1)]))
        # a negative computed bound counts from the end, as nvFuser normalises it
        fd.add_output(fd.ops.slice(t, [0, fd.ops.sub(fd.ops.mul(cols, 0), 2)], [rows, cols]))

    a, b = _define(build).execute([x])
    assert torch.equal(a, x[2:5, 1:5])
    assert torch.equal(b, x[:, -2:])
    # other sizes, same definition: the bounds are evaluated per call
    y = torch.arange(56.0).reshape(7, 8)
    a, b = _define(build).execute([y])
    assert torch.equal(a, y[3:7, 1:7]) and torch.equal(b, y[:, -2:])
