"""DTensor inputs and outputs: the fusion runs sharded as the inputs' placements say and
returns DTensors placed as the propagation leaves its outputs."""
from __future__ import annotations

import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.runtime.tolerance import assert_close

dt = pytest.importorskip("torch.distributed.tensor")


@pytest.fixture
def torch_mesh(comm):
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(comm.device.type, (comm.size(),))


def _define(ops):
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        b = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        for out in ops(fd, a, b):
            fd.add_output(out)
    return fd


def test_shard_and_replicate_placements_give_sharded_outputs(comm, torch_mesh, seed):
    d = comm.size()
    a, b = torch.randn(4 * d, 6, device=comm.device), torch.randn(4 * d, 6, device=comm.device)
    da = dt.distribute_tensor(a, torch_mesh, [dt.Shard(0)])
    db = dt.distribute_tensor(b, torch_mesh, [dt.Replicate()])
    fd = _define(lambda fd, x, y: [fd.ops.mul(fd.ops.relu(x), y)])
    (out,) = fd.execute([da, db])
    assert isinstance(out, dt.DTensor) and out.placements == (dt.Shard(0),)
    assert tuple(out.shape) == (4 * d, 6)
    assert_close(out.to_local(), (a.relu() * b).chunk(d, 0)[comm.rank()])
    assert_close(out.full_tensor(), a.relu() * b)


def test_a_reduction_over_a_sharded_axis_returns_a_partial_dtensor(comm, torch_mesh, seed):
    d = comm.size()
    a, b = torch.randn(2 * d, 5, device=comm.device), torch.randn(2 * d, 5, device=comm.device)
    da = dt.distribute_tensor(a, torch_mesh, [dt.Shard(0)])
    db = dt.distribute_tensor(b, torch_mesh, [dt.Shard(0)])
    fd = _define(lambda fd, x, y: [fd.ops.sum(fd.ops.mul(x, y), [0]), fd.ops.add(x, y)])
    total, both = fd.execute([da, db])
    assert total.placements == (dt.Partial("sum"),)
    assert_close(total.full_tensor(), (a * b).sum(0))  # DTensor combines the partial sums
    assert both.placements == (dt.Shard(0),)
    assert_close(both.full_tensor(), a + b)


def test_column_then_row_parallel_linear_on_dtensors(comm, torch_mesh, seed):
    d = comm.size()
    x = torch.randn(6, 8, device=comm.device)
    w1, w2 = torch.randn(4 * d, 8, device=comm.device), torch.randn(5, 4 * d, device=comm.device)
    with FusionDefinition() as fd:
        xt, w1t, w2t = (fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
                        for _ in range(3))
        fd.add_output(fd.ops.linear(fd.ops.relu(fd.ops.linear(xt, w1t)), w2t))
    (out,) = fd.execute([dt.distribute_tensor(x, torch_mesh, [dt.Replicate()]),
                         dt.distribute_tensor(w1, torch_mesh, [dt.Shard(0)]),
                         dt.distribute_tensor(w2, torch_mesh, [dt.Shard(1)])])
    assert out.placements == (dt.Partial("sum"),)
    assert_close(out.full_tensor(), torch.nn.functional.linear(torch.nn.functional.linear(x, w1).relu(), w2))


def test_a_partial_input_read_twice_is_summed_once_and_left_as_given(comm, torch_mesh, seed):
    d = comm.size()
    parts = [torch.randn(3, 4, device=comm.device) for _ in range(d)]  # every rank draws all
    mine = parts[comm.rank()].clone()
    p = dt.DTensor.from_local(mine, torch_mesh, [dt.Partial("sum")], run_check=False)
    q = dt.distribute_tensor(torch.ones(3, 4, device=comm.device), torch_mesh, [dt.Replicate()])
    fd = _define(lambda fd, x, y: [fd.ops.neg(x), fd.ops.add(x, y)])
    neg, plus = fd.execute([p, q])
    total = sum(parts)
    assert_close(neg.full_tensor(), -total)
    assert_close(plus.full_tensor(), total + 1)
    assert torch.equal(mine, parts[comm.rank()])
