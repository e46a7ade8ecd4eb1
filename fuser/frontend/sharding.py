"""Placing a definition's tensors on devices (nvFuser's multidevice API): a DeviceMesh per
tensor, and the axis each is sharded on, as nvFuser's frontend spells them:

    mesh = DeviceMesh(torch.arange(d))
    tv.set_device_mesh(mesh)
    tv.outer_split(0, d)                          # [n] -> [d, n/d] (loop axes)
    tv.axis(0).parallelize(ParallelType.mesh_x)   # device k holds the k-th block of n

or the older `fd.sched._set_device_mesh(tv, mesh)` and a mesh_x axis of extent d. Both
record the same thing: the logical axis sharded in equal blocks over the mesh.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fuser.errors import DefinitionError, DefinitionTypeError
from fuser.ir import ParallelType

if TYPE_CHECKING:
    from .handles import Tensor


def _mesh(mesh: Any, what: str):
    from fuser.multidevice.mesh import DeviceMesh

    if isinstance(mesh, DeviceMesh):
        return mesh
    try:
        return DeviceMesh(mesh)
    except (TypeError, ValueError) as err:
        raise DefinitionTypeError(f"{what}: mesh={mesh!r} is not a DeviceMesh ({err})") from None


def set_device_mesh(tensor: "Tensor", mesh: Any, what: str = "set_device_mesh") -> None:
    """Place `tensor` on `mesh` (replicated until an axis is parallelised over it)."""
    fd = tensor.fd
    fd._own(tensor, what)
    m = _mesh(mesh, what)
    tensor.val.device_mesh = m
    fd._record("sched._set_device_mesh", (tensor, m.devices), (), ())


def loop_axes(tensor: "Tensor") -> list[tuple[int, str | None, int | None]]:
    """The tensor's loop axes as the user split them: (logical axis, None | "outer" |
    "inner", the number of blocks an outer part is where known) each."""
    views = tensor.fd.__dict__.setdefault("_loop_views", {})
    got = views.get(tensor.index)
    if got is None:
        got = views[tensor.index] = [(k, None, None) for k in range(tensor.ndim)]
    return got


def split(tensor: "Tensor", axis: int, factor: int, inner_split: bool = True) -> None:
    """Split loop axis `axis` into (outer, inner); `factor` is the inner extent for an
    inner split, the outer one (the number of blocks) for an outer split."""
    name = "inner_split" if inner_split else "outer_split"
    tensor.fd._own(tensor, name)
    axes = loop_axes(tensor)
    if not isinstance(axis, int) or not -len(axes) <= axis < len(axes):
        raise DefinitionError(f"{name}: axis={axis!r} is out of range for a tensor of {len(axes)} loop axes")
    if not isinstance(factor, int) or isinstance(factor, bool) or factor < 1:
        raise DefinitionError(f"{name}: factor={factor!r} must be a positive int")
    axis %= len(axes)
    logical, part, _ = axes[axis]
    if part is not None:
        raise NotImplementedError(f"{name}: loop axis {axis} is already a split of logical axis {logical}; "
                                  "splitting it again is not supported")
    # the outer part of an outer split is `factor` blocks (of an inner split: unknown here)
    axes[axis:axis + 1] = [(logical, "outer", None if inner_split else factor), (logical, "inner", None)]


def parallelize(tensor: "Tensor", axis: int, parallel_type: ParallelType) -> None:
    """`tensor.axis(axis).parallelize(parallel_type)` with `axis` a loop axis."""
    axes = loop_axes(tensor)
    if not isinstance(axis, int) or not -len(axes) <= axis < len(axes):
        raise DefinitionError(f"parallelize: axis={axis!r} is out of range for a tensor of {len(axes)} loop axes")
    logical, part, blocks = axes[axis % len(axes)]
    if parallel_type is not ParallelType.DIDx:
        if part is not None:
            raise NotImplementedError(f"parallelize: loop axis {axis} is a split of logical axis {logical}; only "
                                      "ParallelType.mesh_x may parallelise a split axis")
        tensor.fd.sched.parallelize(tensor, logical, parallel_type)
        return
    if part == "inner":
        raise NotImplementedError(
            f"parallelize: loop axis {axis} is the inner part of a split of logical axis {logical}: each device "
            "would hold every n-th element (a cyclic sharding); shard the outer part of a split instead")
    mesh = tensor.val.device_mesh
    if mesh is not None and blocks is not None and blocks != mesh.size:  # one block per device
        raise DefinitionError(f"parallelize: logical axis {logical} is split into {blocks} blocks but "
                              f"{tensor!r}'s mesh has {mesh.size} devices")
    shard(tensor, logical)


def shard(tensor: "Tensor", axis: int) -> None:
    """Shard `tensor`'s logical axis `axis` over its mesh (recorded as fd.sched.parallelize)."""
    fd = tensor.fd
    fd._own(tensor, "parallelize")
    tv = tensor.val
    if tv.device_mesh is None:
        raise DefinitionError(f"parallelize: {tensor!r} has no device mesh; call set_device_mesh(mesh) before "
                              "parallelising an axis with ParallelType.mesh_x")
    ids = tv.logical_no_reductions()
    if not isinstance(axis, int) or not -len(ids) <= axis < len(ids):
        raise DefinitionError(f"parallelize: axis={axis!r} is out of range for a tensor of {len(ids)} dims")
    axis %= len(ids)
    if ids[axis].is_broadcast:
        raise DefinitionError(f"parallelize: axis {axis} of {tensor!r} is a broadcast and cannot be sharded")
    if any(i.parallel_type is ParallelType.DIDx for k, i in enumerate(ids) if k != axis):
        raise NotImplementedError(f"parallelize: {tensor!r} is sharded on another axis already; one sharded axis "
                                  "per tensor is supported (a 1-D mesh)")
    ids[axis].parallel_type = ParallelType.DIDx
    fd._record("sched.parallelize", (tensor, axis, ParallelType.DIDx), (), ())
