"""DTensor inputs and outputs (torch.distributed.tensor): a call given DTensors runs the
fusion sharded as their placements say and returns DTensors placed as the propagation
leaves the outputs: Shard(d), Replicate(), or Partial where a reduction over a sharded
axis is not combined (the caller, or DTensor's redistribute, combines it)."""
from __future__ import annotations

import sys
from typing import Any, Sequence

import torch


def _dtensor_types():
    try:
        from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
    except ImportError:  # torch without distributed support
        return None
    return DTensor, Shard, Replicate, Partial


def has_dtensors(inputs: Sequence[Any]) -> bool:
    """Whether any input is a DTensor (none can be before torch.distributed.tensor is
    imported: the cached call path pays one dictionary lookup)."""
    mod = sys.modules.get("torch.distributed.tensor")
    if mod is None:
        return False
    cls = mod.DTensor
    for x in inputs:
        if isinstance(x, cls):
            return True
    return False


def unwrap(inputs: Sequence[Any]) -> tuple[list[Any], tuple, Any]:
    """(local tensors, placements ((position, Sharding), ...), the torch DeviceMesh): every
    DTensor input must be on one 1-D mesh; plain tensors are replicated inputs."""
    from fuser.multidevice.mesh import DeviceMesh
    from fuser.multidevice.sharding import Sharding

    DTensor, Shard, Replicate, Partial = _dtensor_types()  # type: ignore[misc]
    torch_mesh = mesh = None
    locals_: list[Any] = []
    placements = []
    for k, x in enumerate(inputs):
        if not isinstance(x, DTensor):
            locals_.append(x)
            continue
        if torch_mesh is None:
            torch_mesh = x.device_mesh
        elif x.device_mesh != torch_mesh:
            raise ValueError(f"input {k} is a DTensor on another device mesh than input 0's DTensors: one mesh per "
                             "call is supported")
        if torch_mesh.ndim != 1:
            raise NotImplementedError(f"input {k} is a DTensor on a {torch_mesh.ndim}-D device mesh; only 1-D meshes "
                                      "are supported")
        if mesh is None:
            mesh = DeviceMesh(torch_mesh.mesh.flatten().tolist())
        (p,) = x.placements
        if isinstance(p, Shard):
            s = Sharding(mesh, axis=p.dim % x.ndim)
        elif isinstance(p, Replicate):
            s = Sharding(mesh)
        elif isinstance(p, Partial):
            op = str(getattr(p, "reduce_op", "sum")).lower()
            if op not in ("sum", "max", "min"):
                raise NotImplementedError(f"input {k} is Partial({op!r}); sum, max and min partials are supported")
            s = Sharding(mesh, partial=op)
        else:
            raise NotImplementedError(f"input {k} has placement {p!r}; Shard, Replicate and Partial are supported")
        local = x.to_local()
        locals_.append(local if local.is_contiguous() else local.contiguous())
        placements.append((k, s))
    if mesh is not None:
        placements += [(k, Sharding(mesh)) for k, x in enumerate(inputs)
                       if isinstance(x, torch.Tensor) and not isinstance(x, DTensor)]
        placements.sort(key=lambda p: p[0])
    return locals_, tuple(placements), torch_mesh


def wrap(outs: Sequence[Any], shardings: Sequence[Any], torch_mesh: Any) -> list[Any]:
    """Each local output as a DTensor on `torch_mesh` placed as its Sharding says."""
    DTensor, Shard, Replicate, Partial = _dtensor_types()  # type: ignore[misc]
    got = []
    for out, s in zip(outs, shardings):
        if not isinstance(out, torch.Tensor) or s is None:
            got.append(out)
            continue
        if s.partial:
            p = Partial(s.partial)
        elif s.axis is not None:
            p = Shard(s.axis)
        else:
            p = Replicate()
        got.append(DTensor.from_local(out, torch_mesh, [p], run_check=False))
    return got
