"""Tensors on different meshes (pipeline stages): a whole tensor held by one device is sent
to another device's mesh, or broadcast to a mesh of several; each device runs only the work
of its meshes, and an output on a mesh without it comes back empty. Every rank passes every
input (the devices outside an input's mesh pass a tensor of its shape, which is not read)."""
from __future__ import annotations

import re

import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.multidevice import DeviceMesh
from fuser.runtime.tolerance import assert_close


def _program(fd) -> str:
    return str(fd._entry.last_runner.program)


def test_a_two_stage_pipeline_sends_the_first_stage_output(comm, seed):
    first, second = DeviceMesh([0]), DeviceMesh([1])
    x = torch.randn(6, 5, device=comm.device)
    with FusionDefinition() as fd:
        xt = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        y = fd.ops.relu(fd.ops.add(xt, 1.0))
        z = fd.ops.mul(fd.ops.exp(y), 2.0)
        fd.add_output(z)
        xt.set_device_mesh(first)
        y.set_device_mesh(first)
        z.set_device_mesh(second)
    given = x if comm.rank() == 0 else torch.full_like(x, float("nan"))  # not read off its mesh
    (out,) = fd.execute([given])
    if comm.rank() == 1:
        assert_close(out, (x + 1).relu().exp() * 2)
    else:
        assert out.numel() == 0
    text = _program(fd)
    if comm.rank() in (0, 1):
        assert re.search(r"Communication 0 \(type=SendRecv, team=\(0 1\), input=T\d+.*root=0\)", text), text
    # each device runs its own stage only
    assert text.count("PostOnStream") + text.count("LaunchKernel") == 1, text


def test_a_one_device_tensor_is_broadcast_to_a_mesh_of_several(comm, seed):
    d = comm.size()
    one, every = DeviceMesh([0]), DeviceMesh(torch.arange(d))
    x = torch.randn(4, 7, device=comm.device)
    with FusionDefinition() as fd:
        xt = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        y = fd.ops.sin(xt)
        z = fd.ops.add(y, 1.0)
        fd.add_output(z)
        xt.set_device_mesh(one)
        y.set_device_mesh(one)
        z.set_device_mesh(every)
    (out,) = fd.execute([x if comm.rank() == 0 else torch.zeros_like(x)])
    assert_close(out, x.sin() + 1)
    assert "type=Broadcast" in _program(fd)


def test_a_sharded_tensor_cannot_move_to_another_mesh_yet(comm):
    d = comm.size()
    with FusionDefinition() as fd:
        xt = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        y = fd.ops.neg(xt)
        fd.add_output(y)
        xt.set_device_mesh(DeviceMesh(torch.arange(d)))
        xt.outer_split(0, d)
        from fuser import ParallelType

        xt.axis(0).parallelize(ParallelType.mesh_x)
        y.set_device_mesh(DeviceMesh([0]))
    with pytest.raises(NotImplementedError, match="across meshes only a whole tensor held by one device moves"):
        fd.execute([torch.randn(2, 3, device=comm.device)])
