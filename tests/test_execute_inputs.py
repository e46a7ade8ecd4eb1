"""Every bad-input case of fd.execute is rejected before anything runs, with a message
naming the input (index and T name) and what was expected; good edge cases run."""
import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.runtime.binding import InputError


def _fd(build):
    with FusionDefinition() as fd:
        build(fd)
    return fd


def _add2d(fd):
    a = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
    b = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
    fd.add_output(fd.ops.add(a, b))


def _bad(fd, inputs, pattern):
    with pytest.raises(InputError, match=pattern):
        fd.execute(inputs)


def test_count():
    _bad(_fd(_add2d), [torch.randn(2, 3)], r"2 inputs.*got 1|expected 2.*1")


def test_type():
    _bad(_fd(_add2d), [torch.randn(2, 3), "not a tensor"], r"input 1 \(T1\)")


def test_dtype():
    _bad(_fd(_add2d), [torch.randn(2, 3), torch.randn(2, 3, dtype=torch.float64)], r"input 1 \(T1\).*dtype.*float32")


def test_rank():
    _bad(_fd(_add2d), [torch.randn(2, 3, 1), torch.randn(2, 3)], r"input 0 \(T0\): expected a 2-D tensor, got a 3-D")


def test_consistent_extents_across_inputs():
    _bad(_fd(_add2d), [torch.randn(2, 3), torch.randn(2, 4)], r"input 1 \(T1\) dim 1 has size 4.*input 0 \(T0\) dim 1 has size 3")


def test_broadcast_dim_needs_size_one():
    def build(fd):
        a = fd.define_tensor(shape=[-1, 1], contiguity=[True, None])
        fd.add_output(fd.ops.neg(a))

    fd = _fd(build)
    _bad(fd, [torch.randn(4, 3)], r"input 0 \(T0\): dim 1 is defined as a broadcast \(size 1\), got size 3")
    (out,) = fd.execute([x := torch.randn(4, 1)])
    assert torch.equal(out, -x)


def test_expanded_dims():
    def build(fd):  # dim 0 declared expanded (stride 0), as seed 001's inputs
        a = fd.define_tensor(shape=[-1, -1], contiguity=[None, True])
        fd.add_output(fd.ops.mul(a, 2.0))

    fd = _fd(build)
    _bad(fd, [torch.randn(5, 8)], r"input 0 \(T0\) dim 0.*stride 0|expanded")
    x = torch.randn(8).expand(5, 8)
    (out,) = fd.execute([x])
    assert torch.equal(out, x * 2.0)


def test_undeclared_expanded_dim():
    fd = _fd(_add2d)
    _bad(fd, [torch.randn(3).expand(2, 3), torch.randn(2, 3)], r"input 0 \(T0\): dim 0 is expanded \(stride 0")


def test_contiguity():
    fd = _fd(_add2d)
    x = torch.randn(3, 4).t()  # sizes (4, 3), strides (1, 4): not contiguous
    _bad(fd, [x, torch.randn(4, 3)], r"input 0 \(T0\).*contigu")
    y = torch.randn(4, 6)[:, :3]  # row stride 6: inner contiguous, outer not
    _bad(fd, [torch.randn(4, 3), y], r"input 1 \(T1\).*contigu")


def test_stride_order():
    def build(fd):
        a = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], stride_order=[0, 1])
        fd.add_output(fd.ops.exp(a))

    fd = _fd(build)
    _bad(fd, [torch.randn(4, 3)], r"input 0 \(T0\)")
    x = torch.randn(3, 4).t()  # column-major, as declared
    (out,) = fd.execute([x])
    torch.testing.assert_close(out, x.exp())


def test_cpu_scalar_only_where_declared():
    def build(fd):
        a = fd.define_tensor(shape=[-1], contiguity=[True])
        s = fd.define_tensor(shape=[], contiguity=[], is_cpu=True)
        fd.add_output(fd.ops.mul(a, s))

    fd = _fd(build)
    _bad(fd, [torch.randn(3), torch.randn(2)], r"input 1 \(T1\)")
    x, s = torch.randn(3), torch.tensor(1.5)
    (out,) = fd.execute([x, s])
    assert torch.equal(out, x * 1.5)


def test_scalar_input():
    def build(fd):
        a = fd.define_tensor(shape=[-1], contiguity=[True])
        s = fd.define_scalar(dtype=DataType.Double)
        fd.add_output(fd.ops.add(a, s))

    fd = _fd(build)
    _bad(fd, [torch.randn(3), "2.0"], r"input 1 \(d\d+\)")
    x = torch.randn(3)
    (out,) = fd.execute([x, 2.5])
    assert torch.equal(out, x + 2.5)


def test_zero_size_and_zero_dim_inputs_run():
    def build(fd):
        a = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        b = fd.define_tensor(shape=[], contiguity=[])
        fd.add_output(fd.ops.add(a, b))
        fd.add_output(fd.ops.sum(a, dims=[0]))

    fd = _fd(build)
    a, b = torch.randn(0, 5), torch.tensor(3.0)
    out, total = fd.execute([a, b])
    assert out.shape == (0, 5) and torch.equal(total, torch.zeros(5))
