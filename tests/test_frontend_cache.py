"""The structural fusion cache: the same program (defined again in a separate `with`
block) maps to the same entry and adds nothing; any difference (op, constant value,
1 vs 1.0, dims, dtype, shape, contiguity, output order) adds exactly one entry."""
import pytest
import torch

from fuser import DataType, FusionCache, FusionDefinition


def _program(op="exp", const=2.0, dims=(1,), keepdim=False, in_dtype=DataType.Float, shape=(-1, -1),
             contiguity=(True, True), alias=False, extra_output=False, stride_order=None):
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=list(shape), contiguity=list(contiguity), dtype=in_dtype, stride_order=stride_order)
        t1 = getattr(fd.ops, op)(fd.ops.cast(t0, DataType.Float))
        t2 = fd.ops.mul(t1, const)
        t3 = fd.ops.sum(t2, dims=list(dims), keepdim=keepdim)
        fd.add_output(t3)
        if extra_output:
            fd.add_output(t2)
    return fd


def _num():
    return FusionCache.get().num_fusions()


def test_same_program_twice_shares_the_entry():
    first = _program()
    n = _num()
    second = _program()
    assert second.id() == first.id()
    assert _num() == n
    third = _program()
    assert third.id() == first.id() and _num() == n
    assert str(second) == str(first)


def test_second_definition_executes_with_the_same_results():
    first = _program()
    second = _program()
    x = torch.randn(3, 5)
    a, b = first.execute([x])[0], second.execute([x])[0]
    assert torch.equal(a, b)
    torch.testing.assert_close(b, (torch.exp(x) * 2.0).sum(1))
    # and the other way round, after the first ran
    assert torch.equal(first.execute([x])[0], a)


@pytest.mark.parametrize(
    "change",
    [
        dict(op="sin"),  # a different op
        dict(const=3.0),  # a different constant value
        dict(const=2),  # 2 vs 2.0
        dict(const=True),  # True vs 1 vs 1.0
        dict(dims=(0,)),  # different dims
        dict(dims=(-1,)),  # the same dim, spelled differently: a different program text
        dict(keepdim=True),
        dict(in_dtype=DataType.Half),
        dict(shape=(-1, 1), contiguity=(True, None)),
        dict(shape=(4, -1)),
        dict(contiguity=(False, True)),
        dict(stride_order=[0, 1]),
        dict(extra_output=True),
    ],
    ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()),
)
def test_a_different_program_adds_exactly_one(change):
    base = _program()
    n = _num()
    other = _program(**change)
    assert other.id() != base.id()
    assert _num() == n + 1
    again = _program(**change)  # and defining it once more adds nothing
    assert again.id() == other.id() and _num() == n + 1


def test_one_vs_one_point_zero_differ_in_results_dtype():
    with FusionDefinition() as fd_int:
        t0 = fd_int.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int)
        fd_int.add_output(fd_int.ops.add(t0, 1))
    with FusionDefinition() as fd_float:
        t0 = fd_float.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int)
        fd_float.add_output(fd_float.ops.add(t0, 1.0))
    assert fd_int.id() != fd_float.id()
    x = torch.arange(4)
    a, b = fd_int.execute([x])[0], fd_float.execute([x])[0]
    assert a.dtype == torch.int64 and torch.equal(a, x + 1)
    assert b.dtype == torch.float32 and torch.equal(b, x + 1.0)


def test_nan_constants_match_themselves():
    def define():
        with FusionDefinition() as fd:
            t0 = fd.define_tensor(shape=[-1], contiguity=[True])
            fd.add_output(fd.ops.where(fd.ops.isnan(t0), float("nan"), t0))
        return fd

    first = define()
    n = _num()
    second = define()
    assert second.id() == first.id() and _num() == n


def test_operator_spelling_and_ops_spelling_share_the_entry():
    with FusionDefinition() as fd1:
        a = fd1.define_tensor(shape=[-1], contiguity=[True])
        b = fd1.define_tensor(shape=[-1], contiguity=[True])
        fd1.add_output(a * b + 2.0)
    n = _num()
    with FusionDefinition() as fd2:
        a = fd2.define_tensor(shape=[-1], contiguity=[True])
        b = fd2.define_tensor(shape=[-1], contiguity=[True])
        fd2.add_output(fd2.ops.add(fd2.ops.mul(a, b), fd2.define_scalar(2.0, dtype=DataType.Double)))
    assert fd2.id() == fd1.id() and _num() == n


def test_the_order_of_inputs_matters():
    with FusionDefinition() as fd1:
        a = fd1.define_tensor(shape=[-1], contiguity=[True])
        b = fd1.define_tensor(shape=[-1], contiguity=[True])
        fd1.add_output(fd1.ops.sub(a, b))
    with FusionDefinition() as fd2:
        a = fd2.define_tensor(shape=[-1], contiguity=[True])
        b = fd2.define_tensor(shape=[-1], contiguity=[True])
        fd2.add_output(fd2.ops.sub(b, a))
    assert fd1.id() != fd2.id()
    x, y = torch.randn(3), torch.randn(3)
    assert torch.equal(fd1.execute([x, y])[0], x - y)
    assert torch.equal(fd2.execute([x, y])[0], y - x)


def test_subclass_and_with_block_share_the_entry():
    class Neg(FusionDefinition):
        def definition(self):
            t0 = self.define_tensor(shape=[-1, -1], contiguity=[True, True])
            self.add_output(self.ops.neg(t0))

    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(fd.ops.neg(t0))
    n = _num()
    sub = Neg()
    assert sub.id() == fd.id() and _num() == n


def test_ids_are_cache_indices():
    first = _program(op="cos", const=0.25)
    assert FusionCache.get().fusion(first.id()).id == first.id()
    assert 0 <= first.id() < _num()


def test_zero_and_negative_zero_are_different_programs():
    def define(c):
        with FusionDefinition() as fd:
            t0 = fd.define_tensor(shape=[-1], contiguity=[True])
            fd.add_output(fd.ops.div(1.0, fd.ops.mul(t0, c)))
        return fd

    pos, neg = define(0.0), define(-0.0)
    assert pos.id() != neg.id()
    x = torch.ones(2)
    assert torch.equal(pos.execute([x])[0], torch.full((2,), float("inf")))
    assert torch.equal(neg.execute([x])[0], torch.full((2,), float("-inf")))
