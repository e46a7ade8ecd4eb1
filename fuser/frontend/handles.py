"""The user's handles on definition states: Tensor, Scalar and Vector, with Python operators."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fuser.ir import DataType

from .records import StateRef

if TYPE_CHECKING:
    from fuser.ir import Scalar as IrScalar
    from fuser.ir import TensorView

    from .fusion_definition import FusionDefinition


class _State:
    """A state of a FusionDefinition: its index and the IR value behind it."""

    kind = "?"

    def __init__(self, fd: "FusionDefinition", index: int) -> None:
        self.fd = fd
        self.index = index

    @property
    def ref(self) -> StateRef:
        return StateRef(self.index, self.kind)

    @property
    def val(self) -> Any:
        return self.fd._state_vals[self.index]

    def __repr__(self) -> str:
        return f"Scalar(index={self.index})"

    def _get_fusion_definition(self) -> "FusionDefinition":
        return self.fd

    def __hash__(self) -> int:
        return hash((id(self.fd), self.index))

    # --- operators: each records the same op as the fd.ops call would -------------------
    def _op(self, name: str, *args: Any) -> Any:
        return getattr(self.fd.ops, name)(*args)

    def __add__(self, o):
        return self._op("add", self, o)

    def __radd__(self, o):
        return self._op("add", o, self)

    def __sub__(self, o):
        return self._op("sub", self, o)

    def __rsub__(self, o):
        return self._op("sub", o, self)

    def __mul__(self, o):
        return self._op("mul", self, o)

    def __rmul__(self, o):
        return self._op("mul", o, self)

    # nvFuser maps `/` to its truncating `div` and `%` to `mod` (C's fmod), not Python's
    def __truediv__(self, o):
        return self._op("div", self, o)

    def __rtruediv__(self, o):
        return self._op("div", o, self)

    def __mod__(self, o):
        return self._op("mod", self, o)

    def __rmod__(self, o):
        return self._op("mod", o, self)

    def __pow__(self, o):
        return self._op("pow", self, o)

    def __rpow__(self, o):
        return self._op("pow", o, self)

    def __and__(self, o):
        return self._op("bitwise_and", self, o)

    def __rand__(self, o):
        return self._op("bitwise_and", o, self)

    def __or__(self, o):
        return self._op("bitwise_or", self, o)

    def __ror__(self, o):
        return self._op("bitwise_or", o, self)

    def __xor__(self, o):
        return self._op("bitwise_xor", self, o)

    def __rxor__(self, o):
        return self._op("bitwise_xor", o, self)

    def __lshift__(self, o):
        return self._op("bitwise_left_shift", self, o)

    def __rshift__(self, o):
        return self._op("bitwise_right_shift", self, o)

    def __invert__(self):
        return self._op("bitwise_not", self)

    def __neg__(self):
        return self._op("neg", self)

    def __abs__(self):
        return self._op("abs", self)

    def __eq__(self, o):  # type: ignore[override]
        return self._op("eq", self, o)

    def __ne__(self, o):  # type: ignore[override]
        return self._op("ne", self, o)

    def __lt__(self, o):
        return self._op("lt", self, o)

    def __le__(self, o):
        return self._op("le", self, o)

    def __gt__(self, o):
        return self._op("gt", self, o)

    def __ge__(self, o):
        return self._op("ge", self, o)

    def __bool__(self) -> bool:
        from fuser.errors import DefinitionTypeError

        raise DefinitionTypeError(f"{self!r} is a symbolic value of a fusion definition and has no truth value")


class Tensor(_State):
    """A tensor of a fusion definition."""

    kind = "T"

    def __repr__(self) -> str:
        return f"Tensor(index={self.index}, ndim={self.ndim})"

    @property
    def val(self) -> "TensorView":
        return self.fd._state_vals[self.index]

    @property
    def ndim(self) -> int:
        return self.val.ndim

    @property
    def dtype(self) -> DataType:
        return self.val.dtype

    def shape(self) -> "Vector":
        return self.fd.ops.shape(self)

    def axis(self, dim: int) -> "Axis":
        """The tensor's logical axis `dim` (nvFuser's `tv.axis(i)`), to parallelise."""
        return Axis(self, dim)

    def size(self, dim: int) -> "Scalar":
        return self.fd.ops.size(self, dim)

    # --- placement on devices (fuser.frontend.sharding) ---------------------------------
    def set_device_mesh(self, mesh: Any) -> None:
        """Place the tensor on `mesh` (a DeviceMesh): replicated until an axis is sharded."""
        from .sharding import set_device_mesh

        set_device_mesh(self, mesh)

    def outer_split(self, axis: int, factor: int) -> None:
        """Split loop axis `axis` into `factor` blocks (outer) of the rest (inner)."""
        from .sharding import split

        split(self, axis, factor, inner_split=False)

    def inner_split(self, axis: int, factor: int) -> None:
        """Split loop axis `axis` into (outer, inner) with an inner extent of `factor`."""
        from .sharding import split

        split(self, axis, factor, inner_split=True)

    def split(self, axis: int, factor: int, inner_split: bool = True) -> None:
        """nvFuser's `tv.split`: `inner_split` or `outer_split`."""
        from .sharding import split

        split(self, axis, factor, inner_split=inner_split)

    def __len__(self) -> int:
        from fuser.errors import DefinitionTypeError

        raise DefinitionTypeError("len() of a fusion Tensor is not static; use t.size(0)")


class Scalar(_State):
    """A scalar of a fusion definition (a constant, an input, or computed)."""

    kind = "S"

    @property
    def val(self) -> "IrScalar":
        return self.fd._state_vals[self.index]

    @property
    def dtype(self) -> DataType:
        return self.val.dtype


class Vector(_State):
    """A shape vector of scalars (define_vector, fd.ops.shape)."""

    kind = "V"

    def __repr__(self) -> str:
        return f"Vector(index={self.index}, size={len(self.val)})"

    @property
    def val(self) -> list:
        return self.fd._state_vals[self.index]

    @property
    def size(self) -> int:
        return len(self.val)

    def __len__(self) -> int:
        return len(self.val)

    def __getitem__(self, i: int) -> "Scalar":
        return self.fd.ops.at(self, i)


class Axis:
    """One logical axis of a definition's tensor: `t.axis(0).parallelize(ParallelType.stream)`."""

    def __init__(self, tensor: Tensor, dim: int) -> None:
        self.tensor = tensor
        self.dim = dim

    def parallelize(self, parallel_type: Any) -> None:
        """Parallelise this loop axis (recorded as `fd.sched.parallelize` of the logical
        axis): ParallelType.stream, or ParallelType.mesh_x to shard it over the mesh."""
        from .sharding import parallelize

        parallelize(self.tensor, self.dim, parallel_type)

    def __repr__(self) -> str:
        return f"Axis({self.tensor!r}, {self.dim})"
