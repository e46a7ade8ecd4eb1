"""Binding `fd.execute` inputs to a Fusion's inputs, validating them before anything runs.

`BindingPlan(fusion)` precomputes, once per fusion, what every input must look like;
`bind_inputs` checks one call's inputs against it and binds extents and scalars.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from fuser.ir.base import Scalar, Val
from fuser.ir.domain import IterDomain
from fuser.ir.dtype import DataType
from fuser.ir.fusion import Fusion
from fuser.ir.mapping import ExactMap
from fuser.ir.tensor import TensorView


class InputError(ValueError):
    """An input of `execute` does not match the fusion's definition."""


@dataclass(slots=True)
class Binding:
    """One call's inputs, checked: values in fusion.inputs order, bound extents and scalars."""

    tensors: list[object]
    extents: dict[Scalar, int]
    scalars: dict[Scalar, object]
    device: torch.device


# kinds of input axes
_ITER, _BCAST, _EXPANDED = 0, 1, 2


def _const_int(s: Scalar) -> int | None:
    return s.value if s.is_const else None


def _describe(x: object) -> str:
    """A short description of a value for error messages."""
    if isinstance(x, torch.Tensor):
        return f"a {x.ndim}-D tensor of dtype {x.dtype} and shape {tuple(x.shape)}"
    return f"{type(x).__name__} {x!r}"


class _Dim:
    """What one input axis requires, and which extent scalars it binds."""

    __slots__ = ("kind", "const", "bind", "bind_one")

    def __init__(self, id_: IterDomain) -> None:
        if not id_.is_broadcast:
            self.kind = _ITER
            extent = id_.extent
        elif id_.expanded_extent is not None:
            self.kind = _EXPANDED
            extent = id_.expanded_extent
        else:
            self.kind = _BCAST
            extent = None
        self.const = _const_int(extent) if extent is not None else None
        self.bind = extent if extent is not None and not extent.is_const else None
        # a broadcast's own extent is 1 even where the axis is expanded
        self.bind_one = id_.extent if id_.is_broadcast and not id_.extent.is_const else None


class _TensorInput:
    """Precomputed requirements of one TensorView input."""

    __slots__ = ("index", "label", "tv", "torch_dtype", "dtype", "ndim", "axes", "dims", "alloc", "order_note",
                 "is_cpu_scalar", "root_note", "bind_ones")

    def __init__(self, index: int, tv: TensorView) -> None:
        self.index = index
        self.tv = tv
        self.label = f"input {index} (T{tv.name})"
        self.dtype = tv.dtype
        self.torch_dtype = tv.dtype.torch
        # the tensor holds the root where the logical domain only adds broadcasts to it
        # (seed 000): those axes are in no memory, so the tensor has no dims for them
        axes = tv.tensor_axes()
        added = tv.domain.added_broadcasts()
        self.axes = axes
        self.ndim = len(axes)
        self.dims = [_Dim(i) for i in axes]
        self.is_cpu_scalar = bool(getattr(tv, "is_cpu_scalar", False))
        self.root_note = ""
        self.bind_ones: list[Scalar] = []
        if added:
            from fuser.ir.printer import id_str

            logical = tv.logical_no_reductions()
            where = ", ".join(str(logical.index(i)) for i in added)
            self.root_note = (f" (its root domain ({', '.join(id_str(i) for i in axes)}): the logical domain "
                              f"({', '.join(id_str(i) for i in logical)}) adds broadcast dim{'s' if len(added) > 1 else ''} "
                              f"{where}, which the tensor does not hold)")
            for i in added:
                if i.expanded_extent is not None and not i.expanded_extent.is_const:
                    raise ValueError(f"T{tv.name}: broadcast {id_str(i)} added to the root is expanded to a size "
                                     "no dim of the tensor gives")
                if not i.extent.is_const:
                    self.bind_ones.append(i.extent)
        pos = {i: d for d, i in enumerate(axes)}
        alloc = [(i, c) for i, c in zip(tv.allocation, tv.domain.contiguity) if not i.is_reduction and i not in added]
        if {i for i, _ in alloc} != set(axes) or len(alloc) != len(axes):
            kind = "root" if added else "logical"
            raise ValueError(f"T{tv.name}: the allocation domain is not a permutation of the {kind} domain")
        # innermost first; broadcast axes constrain no stride here (expanded ones: see rule 5)
        self.alloc = [(pos[i], c is True) for i, c in reversed(alloc) if not i.is_broadcast]
        order = [pos[i] for i, _ in alloc]
        if order != sorted(order):
            stride_order = [0] * self.ndim
            for p, d in enumerate(order):
                stride_order[d] = self.ndim - 1 - p
            self.order_note = f" with stride order {stride_order}"
        else:
            self.order_note = ""


class _ScalarInput:
    """Precomputed requirements of one Scalar input."""

    __slots__ = ("index", "label", "scalar", "dtype")

    def __init__(self, index: int, s: Scalar) -> None:
        self.index = index
        self.scalar = s
        self.dtype = s.dtype
        self.label = f"input {index} ({s.dtype.scalar_prefix}{s.name})"


class _Group:
    """Input axes (input index, dim) that must have one size, and a constant it must equal."""

    __slots__ = ("members", "const", "const_note")

    def __init__(self, members: list[tuple[int, int]], const: int | None, const_note: str) -> None:
        self.members = members
        self.const = const
        self.const_note = const_note


class BindingPlan:
    """Per-fusion tables for `bind_inputs`: each input's requirements and the input axes
    that must agree in size (exactly mapped, or sharing an extent scalar)."""

    def __init__(self, fusion: Fusion) -> None:
        self._exprs = fusion.exprs()  # identity tells whether the fusion changed since
        self.n_inputs = len(fusion.inputs)
        self.input_names = ", ".join(
            f"T{v.name}" if isinstance(v, TensorView) else f"{v.dtype.scalar_prefix}{v.name}" for v in fusion.inputs
        )
        self.specs: list[_TensorInput | _ScalarInput] = []
        for k, v in enumerate(fusion.inputs):
            if isinstance(v, TensorView):
                self.specs.append(_TensorInput(k, v))
            elif isinstance(v, Scalar):
                self.specs.append(_ScalarInput(k, v))
            else:
                raise TypeError(f"fusion input {k} is a {type(v).__name__}; only tensors and scalars can be inputs")
        self.tensor_specs = [s for s in self.specs if isinstance(s, _TensorInput)]
        self.groups = self._extent_groups(fusion)

    @classmethod
    def of(cls, fusion: Fusion) -> "BindingPlan":
        """The fusion's cached plan, rebuilt when the fusion changed since it was made."""
        plan = getattr(fusion, "_binding_plan", None)
        if plan is None or fusion._sorted is None or plan._exprs is not fusion._sorted:
            plan = cls(fusion)
            fusion._binding_plan = plan
        return plan

    def _extent_groups(self, fusion: Fusion) -> list[_Group]:
        exact = ExactMap(fusion)
        # union-find over exact-class representatives and extent scalars
        parent: dict[Val, Val] = {}

        def find(x: Val) -> Val:
            parent.setdefault(x, x)
            while parent[x] is not x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        def union(a: Val, b: Val) -> None:
            ra, rb = find(a), find(b)
            if ra is not rb:
                parent[rb] = ra

        members: list[tuple[tuple[int, int], Val]] = []
        class_reps: dict[IterDomain, None] = {}  # first ID of each exact class with an input axis
        for spec in self.tensor_specs:
            for d, (id_, dim) in enumerate(zip(spec.axes, spec.dims)):
                nodes: list[Val] = []
                if dim.kind == _ITER:
                    rep = exact.class_of(id_)[0]
                    class_reps[rep] = None
                    nodes.append(rep)
                if dim.bind is not None:
                    nodes.append(dim.bind)
                if not nodes:
                    continue
                for other in nodes[1:]:
                    union(nodes[0], other)
                members.append(((spec.index, d), nodes[0]))

        by_group: dict[Val, list[tuple[int, int]]] = {}
        for m, node in members:
            by_group.setdefault(find(node), []).append(m)
        consts: dict[Val, tuple[int, str]] = {}
        owners = _id_owners(fusion)
        for rep in class_reps:
            g = find(rep)
            if g in consts:
                continue
            for id_ in exact.class_of(rep):
                c = _const_int(id_.extent)
                if not id_.is_broadcast and c is not None and c >= 0:
                    consts[g] = (c, owners.get(id_, f"axis {id_!r}"))
                    break
        groups = []
        for g, ms in by_group.items():
            const, note = consts.get(g, (None, ""))
            if len(ms) > 1 or const is not None:
                groups.append(_Group(ms, const, note))
        return groups

    # --- per call --------------------------------------------------------------------
    def bind(self, inputs: Sequence[object], device: torch.device | str | None = None) -> Binding:
        """Check `inputs` against the fusion and bind them; raises InputError."""
        if len(inputs) != self.n_inputs:
            raise InputError(
                f"expected {self.n_inputs} input{'s' if self.n_inputs != 1 else ''} "
                f"({self.input_names or 'none'}), got {len(inputs)}"
            )
        values = list(inputs)
        extents: dict[Scalar, int] = {}
        scalars: dict[Scalar, object] = {}
        shapes: list[tuple[int, ...]] = [()] * self.n_inputs
        for spec in self.specs:
            x = values[spec.index]
            if isinstance(spec, _TensorInput):
                shapes[spec.index] = _check_tensor(spec, x)
                for dim, size in zip(spec.dims, shapes[spec.index]):
                    if dim.bind is not None:
                        extents[dim.bind] = size
                    if dim.bind_one is not None:
                        extents[dim.bind_one] = 1
                for one in spec.bind_ones:
                    extents[one] = 1
            else:
                value = _check_scalar(spec, x)
                values[spec.index] = value
                scalars[spec.scalar] = value
        for g in self.groups:
            _check_group(self, g, shapes)
        return Binding(values, extents, scalars, self._device(values, device))

    def _device(self, values: list[object], want: torch.device | str | None) -> torch.device:
        found: torch.device | None = None
        first: _TensorInput | None = None
        meta = False
        for spec in self.tensor_specs:
            d = values[spec.index].device
            if d.type == "meta" and not spec.is_cpu_scalar:
                meta = True  # shapes only (code generation without running): any device
                continue
            if spec.is_cpu_scalar:
                if d.type != "cpu":
                    raise InputError(
                        f"{spec.label}: defined as a CPU scalar (is_cpu=True), so it needs a 0-dim CPU tensor, "
                        f"got a tensor on {d}"
                    )
                continue
            if found is None:
                found, first = d, spec
            elif d != found:
                raise InputError(
                    f"{spec.label} is on {d}, but {first.label} is on {found}: all tensor inputs must be on one "
                    f"device (only tensors defined with is_cpu=True may be CPU scalars beside CUDA tensors)"
                )
        if want is not None:
            want = torch.device(want)  # an int is a CUDA index, as in nvFuser
            if found is None:
                return torch.device("cuda", torch.cuda.current_device()) if want == torch.device("cuda") else want
            if found.type != want.type or (want.index is not None and found.index != want.index):
                raise InputError(f"{first.label} is on {found}, but device {want} was requested")
        if found is None and meta:
            return torch.device("meta")
        if found is None:
            # no tensor says where: nvFuser runs on the current CUDA device when there is one
            return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
        return found


def _id_owners(fusion: Fusion) -> dict[IterDomain, str]:
    """Where each axis lives, for messages: `T3 dim 0`."""
    owners: dict[IterDomain, str] = {}
    for tv in fusion.tensors():
        for d, i in enumerate(tv.logical):
            owners.setdefault(i, f"T{tv.name} dim {d}")
        for d, i in enumerate(tv.root):
            owners.setdefault(i, f"T{tv.name} root dim {d}")
    return owners


def _check_tensor(spec: _TensorInput, x: object) -> tuple[int, ...]:
    """Rules 2-8 for a tensor input; returns its shape."""
    label = spec.label
    if not isinstance(x, torch.Tensor):
        if isinstance(x, (bool, int, float, complex)):
            # nvFuser's text, which scripts match on, then what fuser adds
            from fuser.ir.printer import tv_str

            raise InputError(f"Expected input {spec.index}, {tv_str(spec.tv)}, to be an at::Tensor but got scalar "
                             f"{x} ({label}: expected a torch.Tensor, got {_describe(x)})")
        raise InputError(f"{label}: expected a torch.Tensor, got {_describe(x)}")
    if x.dtype != spec.torch_dtype:
        raise InputError(f"{label}: expected dtype {spec.torch_dtype} ({spec.dtype}), got {x.dtype}")
    shape = tuple(x.shape)
    if len(shape) != spec.ndim:
        raise InputError(f"{label}: expected a {spec.ndim}-D tensor{spec.root_note}, got a {len(shape)}-D tensor "
                         f"of shape {shape}")
    strides = x.stride()
    # nothing is read from an empty tensor, so its strides do not matter (nvFuser agrees)
    check_strides = 0 not in shape
    dims = spec.dims
    for d, dim in enumerate(dims):
        size = shape[d]
        if dim.kind == _BCAST and size != 1:
            raise InputError(
                f"{label}: dim {d} is defined as a broadcast (size 1), got size {size}; define it with a "
                f"symbolic size (-1) to accept other sizes"
            )
        if dim.kind == _EXPANDED:
            if dim.const is not None and size != dim.const:
                raise InputError(f"{label}: dim {d} is defined as expanded to size {dim.const}, got size {size}")
            # a size-1 axis reads only element 0, so its stride is never used
            if check_strides and size > 1 and strides[d] != 0:
                raise InputError(
                    f"{label}: dim {d} is defined as an expanded broadcast, so it needs stride 0, got stride "
                    f"{strides[d]} (size {size}); pass an expanded tensor (t.expand(...)) or define the dim as "
                    f"an ordinary one"
                )
    for d, dim in enumerate(dims):
        if dim.kind == _ITER and dim.const is not None and shape[d] != dim.const:
            raise InputError(f"{label}: dim {d} has size {shape[d]}, but the definition fixes it to {dim.const}")
    if not check_strides:
        return shape
    for d, dim in enumerate(dims):
        if dim.kind == _ITER and strides[d] == 0 and shape[d] > 1:
            raise InputError(
                f"{label}: dim {d} is expanded (stride 0, size {shape[d]}) but defined as not expanded; define it "
                f"as an expanded broadcast or pass a materialized tensor (.contiguous())"
            )
    expected, inner = 1, -1
    for d, contiguous in spec.alloc:
        size = shape[d]
        if size == 1:
            continue
        stride = strides[d]
        if contiguous and stride != expected:
            need = "stride 1 as the innermost dim" if inner < 0 else f"stride {expected} (dim {inner}'s stride × size)"
            raise InputError(
                f"{label}: dim {d} has stride {stride}, but the definition declares it contiguous{spec.order_note}, "
                f"which needs {need}; sizes {shape}, strides {tuple(strides)}. Pass a tensor with that layout "
                f"(e.g. .contiguous()) or define the tensor with contiguity False"
            )
        expected, inner = stride * size, d
    return shape


def _check_scalar(spec: _ScalarInput, x: object) -> object:
    """Rules 2-3 for a scalar input; returns its value as the Python type of its dtype."""
    label, dt = spec.label, spec.dtype
    if isinstance(x, torch.Tensor):
        if x.ndim != 0:
            raise InputError(f"{label}: expected a Python number or a 0-dim tensor for a {dt} scalar, got {_describe(x)}")
        if not _tensor_dtype_fits(dt, x.dtype):
            raise InputError(f"{label}: expected {_scalar_kind(dt)} for {dt}, got a 0-dim tensor of dtype {x.dtype}")
        value = x.item()
    elif isinstance(x, (bool, int, float, complex)):
        if not _number_fits(dt, x):
            raise InputError(f"{label}: expected {_scalar_kind(dt)} for {dt}, got {_describe(x)}")
        value = x
    else:
        raise InputError(f"{label}: expected a Python number or a 0-dim tensor for a {dt} scalar, got {_describe(x)}")
    if dt.is_boolean:
        return bool(value)
    if dt.is_integral:
        return int(value)
    if dt.is_floating:
        return float(value)
    return complex(value)


def _number_fits(dt: DataType, x: bool | int | float | complex) -> bool:
    """Whether a Python number may be passed for a scalar of `dt`: bool only for Bool,
    int for any numeric type, float for floating and complex, complex for complex."""
    if isinstance(x, bool):
        return dt.is_boolean
    if dt.is_boolean:
        return False
    if isinstance(x, int):
        return True
    if isinstance(x, float):
        return dt.is_floating or dt.is_complex
    return dt.is_complex


def _tensor_dtype_fits(dt: DataType, tdt: torch.dtype) -> bool:
    """`_number_fits` for the dtype of a 0-dim tensor."""
    if tdt == torch.bool:
        return dt.is_boolean
    if dt.is_boolean:
        return False
    if tdt.is_complex:
        return dt.is_complex
    if tdt.is_floating_point:
        return dt.is_floating or dt.is_complex
    return True


def _scalar_kind(dt: DataType) -> str:
    if dt.is_boolean:
        return "a bool"
    if dt.is_integral:
        return "an int"
    if dt.is_floating:
        return "an int or a float"
    return "an int, float or complex"


def _check_group(plan: BindingPlan, g: _Group, shapes: list[tuple[int, ...]]) -> None:
    """Rule 9: axes the fusion uses as one axis have one size."""
    specs = plan.specs
    if g.const is not None:
        for k, d in g.members:
            if shapes[k][d] != g.const:
                raise InputError(
                    f"{specs[k].label} dim {d} has size {shapes[k][d]}, but the fusion uses it as the same axis "
                    f"as {g.const_note}, whose extent is {g.const}"
                )
    (k0, d0), rest = g.members[0], g.members[1:]
    s0 = shapes[k0][d0]
    for k, d in rest:
        if shapes[k][d] != s0:
            raise InputError(
                f"{specs[k].label} dim {d} has size {shapes[k][d]}, but {specs[k0].label} dim {d0} has size {s0} "
                f"and the fusion uses them as the same axis"
            )


def device_conflict(placed: Sequence[tuple[int, torch.device, int]],
                    names: Sequence[str] | None = None) -> str | None:
    """What is wrong with tensor inputs given as (position, device, ndim) that sit on more
    than one device, or None when they may run together; `names` labels the inputs by
    position (their fusion values, as the other input errors name them)."""
    first: tuple[int, torch.device] | None = None
    strays: list[tuple[int, torch.device]] = []
    for k, dev, ndim in placed:
        # nvFuser reads a 0-dim CPU tensor on the host (a CPU scalar), beside tensors of any device
        if ndim == 0 and dev.type == "cpu":
            continue
        if first is None:
            first = (k, dev)
        elif dev != first[1]:
            strays.append((k, dev))
    if not strays:
        return None
    k0, dev0 = first

    def label(k: int) -> str:
        return f"input {k} ({names[k]})" if names is not None and k < len(names) else f"input {k}"

    named = ", ".join(f"{label(k)} is on {dev}" for k, dev in strays)
    if dev0.type == "meta" or any(dev.type == "meta" for _, dev in strays):
        # moving data onto meta drops it: say what a meta input is for instead
        fix = "a meta tensor holds no data, so pass only meta tensors (to make code without running) or none"
    else:
        fix = f"move {'it' if len(strays) == 1 else 'them'} with .to('{dev0}')"
    return (f"{named} but {label(k0)} is on {dev0}: all tensor inputs must be on one device (a 0-dim CPU scalar "
            f"tensor may join CUDA inputs); {fix}")


def check_one_device(inputs: Sequence[object], fusion: Fusion | None = None) -> None:
    """Refuse one call's tensor inputs when they sit on different devices, before anything
    runs (naming them by `fusion`'s input values where it is given)."""
    names = None
    if fusion is not None:
        names = [f"T{v.name}" if isinstance(v, TensorView) else f"{v.dtype.scalar_prefix}{v.name}"
                 for v in fusion.inputs]
    message = device_conflict([(k, x.device, x.ndim) for k, x in enumerate(inputs) if isinstance(x, torch.Tensor)],
                              names)
    if message is not None:
        raise InputError(message)


def bind_inputs(fusion: Fusion, inputs: Sequence[object], *, device: torch.device | None = None) -> Binding:
    """Check `inputs` of one `execute` call against `fusion` and bind extents and scalars."""
    return BindingPlan.of(fusion).bind(inputs, device)


__all__ = ["InputError", "Binding", "BindingPlan", "bind_inputs", "check_one_device", "device_conflict"]
