"""The IR's building blocks: values, expressions and the guard naming the fusion they go in."""
from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from .dtype import DataType, python_scalar_dtype

if TYPE_CHECKING:
    from .fusion import Fusion

_guard = threading.local()


def current_fusion() -> "Fusion":
    """The fusion new IR nodes are created in (set by `fusion_guard`)."""
    stack = getattr(_guard, "stack", None)
    if not stack:
        raise RuntimeError("no active Fusion: create IR inside `with fusion_guard(fusion):`")
    return stack[-1]


@contextlib.contextmanager
def fusion_guard(fusion: "Fusion") -> Iterator["Fusion"]:
    """Make `fusion` the container of IR nodes created in this block."""
    stack = getattr(_guard, "stack", None)
    if stack is None:
        stack = _guard.stack = []
    stack.append(fusion)
    try:
        yield fusion
    finally:
        stack.pop()


class Val:
    """A value in a fusion: a scalar, a tensor, or an iteration domain.

    `name` is a number unique per kind within the fusion (T3, i7, iS12); `definition` is
    the Expr producing it (None for inputs and constants); `uses` are the Exprs reading it.
    """

    kind = "val"  # naming counter this class draws from

    def __init__(self, dtype: DataType, fusion: "Fusion | None" = None, named: bool = True) -> None:
        self.fusion = fusion if fusion is not None else current_fusion()
        self.dtype = dtype
        # constants print as their value, so they take no name: i0, i1.. stay dense
        self.name = self.fusion._next_name(self.kind) if named else -1
        self.definition: Expr | None = None
        self.uses: list[Expr] = []

    # Identity semantics: IR nodes are graph vertices, not values.
    __hash__ = object.__hash__

    def __eq__(self, other: object) -> bool:  # noqa: D105 - identity, explicit for clarity
        return self is other

    @property
    def is_fusion_input(self) -> bool:
        return self in self.fusion._input_set

    @property
    def is_fusion_output(self) -> bool:
        return self in self.fusion._output_set

    def __repr__(self) -> str:
        from .printer import val_str

        return val_str(self)


class Scalar(Val):
    """A scalar: a constant when `value` is not None, else a fusion input or a computed value."""

    kind = "scalar"

    def __init__(self, dtype: DataType | None = None, value: Any = None, fusion: "Fusion | None" = None) -> None:
        if dtype is None:
            if value is None:
                raise ValueError("a Scalar needs a dtype or a value")
            dtype = python_scalar_dtype(value)
        super().__init__(dtype, fusion, named=value is None)
        self.value = _coerce(value, dtype) if value is not None else None

    @property
    def is_const(self) -> bool:
        return self.value is not None


def _coerce(value: Any, dtype: DataType) -> Any:
    """The Python value a constant of `dtype` holds (an int extent stays an int)."""
    if dtype.is_boolean:
        return bool(value)
    if dtype.is_integral:
        if isinstance(value, float) and not value.is_integer():
            raise TypeError(f"the constant {value!r} is not an integer, but its dtype is {dtype}")
        return int(value)
    if dtype.is_complex:
        return complex(value)
    if dtype.is_floating:
        if isinstance(value, complex):
            raise TypeError(f"the complex constant {value!r} cannot have the real dtype {dtype}")
        return float(value)
    raise TypeError(f"a scalar cannot have dtype {dtype}")


class Expr:
    """An operation: reads `inputs`, defines `outputs`; subclasses add attributes.

    `attr_names` lists the attributes that, with the class, inputs and outputs, fully
    describe the operation: cloning and structural comparison go through them.
    """

    attr_names: tuple[str, ...] = ()
    #: registered in the fusion's expression list (IterDomain transforms are not)
    tensor_level = True

    def __init__(self, inputs: Sequence[Val], outputs: Sequence[Val], **attrs: Any) -> None:
        missing = set(self.attr_names) - set(attrs)
        extra = set(attrs) - set(self.attr_names)
        if missing or extra:
            raise TypeError(f"{type(self).__name__}: missing attributes {sorted(missing)}, unexpected {sorted(extra)}")
        self.inputs: list[Val] = list(inputs)
        self.outputs: list[Val] = list(outputs)
        for k, v in attrs.items():
            setattr(self, k, v)
        fusion = outputs[0].fusion if outputs else current_fusion()
        self.fusion = fusion
        for out in self.outputs:
            if out.definition is not None:
                raise RuntimeError(f"{out!r} already has a definition")
            out.definition = self
        for inp in self.inputs:
            # an expr reading one val twice (x * x) is still one use
            if not inp.uses or inp.uses[-1] is not self:
                inp.uses.append(self)
        fusion._register_expr(self)

    __hash__ = object.__hash__

    def __eq__(self, other: object) -> bool:
        return self is other

    @property
    def input(self) -> Val:
        return self.inputs[0]

    @property
    def output(self) -> Val:
        return self.outputs[0]

    def __repr__(self) -> str:
        from .printer import expr_str

        return expr_str(self).rstrip()
