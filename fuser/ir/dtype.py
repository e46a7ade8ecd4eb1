"""Data types of fusion values and PyTorch's type-promotion rules over them."""
from __future__ import annotations

import enum
from typing import Iterable

import torch


class DataType(enum.Enum):
    """Element type of a tensor or scalar; the names are nvFuser's."""

    Double = "Double"
    Float = "Float"
    Half = "Half"
    BFloat16 = "BFloat16"
    Float8_e4m3fn = "Float8_e4m3fn"
    Float8_e5m2 = "Float8_e5m2"
    Float4_e2m1fn_x2 = "Float4_e2m1fn_x2"
    Int = "Int"
    Int32 = "Int32"
    UInt64 = "UInt64"
    Bool = "Bool"
    ComplexFloat = "ComplexFloat"
    ComplexDouble = "ComplexDouble"
    Null = "Null"

    def __repr__(self) -> str:
        return f"DataType.{self.name}"

    __str__ = __repr__

    # --- classification -------------------------------------------------
    @property
    def is_floating(self) -> bool:
        return self in _FLOATING

    @property
    def is_integral(self) -> bool:
        return self in (DataType.Int, DataType.Int32, DataType.UInt64)

    @property
    def is_boolean(self) -> bool:
        return self is DataType.Bool

    @property
    def is_complex(self) -> bool:
        return self in (DataType.ComplexFloat, DataType.ComplexDouble)

    @property
    def is_reduced_float(self) -> bool:
        """Half, bfloat16 and fp8: stored narrow, computed in float."""
        return self in (DataType.Half, DataType.BFloat16, DataType.Float8_e4m3fn, DataType.Float8_e5m2)

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self]

    @property
    def category(self) -> int:
        """0 bool, 1 integer, 2 floating, 3 complex (PyTorch's promotion categories)."""
        if self is DataType.Bool:
            return 0
        if self.is_integral:
            return 1
        if self.is_floating:
            return 2
        if self.is_complex:
            return 3
        raise ValueError("DataType.Null has no promotion category")

    @property
    def torch(self) -> torch.dtype:
        if self is DataType.Null:
            raise ValueError("DataType.Null has no torch dtype")
        return _TO_TORCH[self]

    @property
    def cpp(self) -> str:
        """The name nvFuser prints for this type in IR dumps (`T0_g_float`)."""
        return _CPP[self]

    @property
    def scalar_prefix(self) -> str:
        """Prefix of a scalar's printed name: `i0`, `d3`, `b2`, `f1`, `c4`."""
        if self.is_boolean:
            return "b"
        if self.is_integral:
            return "i"
        if self in (DataType.Double,):
            return "d"
        if self.is_complex:
            return "c"
        return "f"


_FLOATING = (
    DataType.Double,
    DataType.Float,
    DataType.Half,
    DataType.BFloat16,
    DataType.Float8_e4m3fn,
    DataType.Float8_e5m2,
)

_TO_TORCH = {
    DataType.Double: torch.float64,
    DataType.Float: torch.float32,
    DataType.Half: torch.float16,
    DataType.BFloat16: torch.bfloat16,
    DataType.Float8_e4m3fn: torch.float8_e4m3fn,
    DataType.Float8_e5m2: torch.float8_e5m2,
    DataType.Float4_e2m1fn_x2: torch.float4_e2m1fn_x2,
    DataType.Int: torch.int64,
    DataType.Int32: torch.int32,
    DataType.UInt64: torch.uint64,
    DataType.Bool: torch.bool,
    DataType.ComplexFloat: torch.complex64,
    DataType.ComplexDouble: torch.complex128,
}
_FROM_TORCH = {v: k for k, v in _TO_TORCH.items()}

_ITEMSIZE = {dt: torch.empty((), dtype=t).element_size() for dt, t in _TO_TORCH.items()}
_ITEMSIZE[DataType.Null] = 0

_CPP = {
    DataType.Double: "double",
    DataType.Float: "float",
    DataType.Half: "__half",
    DataType.BFloat16: "__bfloat",
    DataType.Float8_e4m3fn: "__e4m3",
    DataType.Float8_e5m2: "__e5m2",
    DataType.Float4_e2m1fn_x2: "__e2m1",
    DataType.Int: "int64_t",
    DataType.Int32: "int",
    DataType.UInt64: "uint64_t",
    DataType.Bool: "bool",
    DataType.ComplexFloat: "std::complex<float>",
    DataType.ComplexDouble: "std::complex<double>",
    DataType.Null: "null",
}


def from_torch(dtype: torch.dtype) -> DataType:
    """The DataType of a torch dtype; raises TypeError for dtypes fuser does not support."""
    try:
        return _FROM_TORCH[dtype]
    except KeyError:
        supported = ", ".join(str(t) for t in _FROM_TORCH)
        raise TypeError(f"torch dtype {dtype} is not supported by fuser (supported: {supported})") from None


torch_dtype_to_nvfuser_dtype = from_torch


def python_scalar_dtype(value: object) -> DataType:
    """The DataType nvFuser gives a Python constant: bool, int64, double or complex double."""
    if isinstance(value, bool):
        return DataType.Bool
    if isinstance(value, int):
        return DataType.Int
    if isinstance(value, float):
        return DataType.Double
    if isinstance(value, complex):
        return DataType.ComplexDouble
    raise TypeError(f"cannot infer a DataType for the Python value {value!r} of type {type(value).__name__}")


def promote_types(a: DataType, b: DataType) -> DataType:
    """torch.promote_types over DataTypes (tensor with tensor, or scalar with scalar)."""
    return from_torch(torch.promote_types(a.torch, b.torch))


def to_complex(dt: DataType) -> DataType:
    return DataType.ComplexDouble if dt is DataType.Double else DataType.ComplexFloat


def to_real(dt: DataType) -> DataType:
    """The real counterpart of a complex type (complex64 -> float32); others unchanged."""
    if dt is DataType.ComplexFloat:
        return DataType.Float
    if dt is DataType.ComplexDouble:
        return DataType.Double
    return dt


def result_type(tensor_dtypes: Iterable[DataType], scalar_dtypes: Iterable[DataType]) -> DataType:
    """PyTorch's result type of an op over tensors and scalars ("wrapped numbers").

    Tensors promote among themselves; a scalar only matters when its category (bool <
    integer < floating < complex) is higher than every tensor's, and then it contributes
    the default type of its category (int64, float32, complex64 widened by the tensors).
    With no tensors at all, scalars promote among themselves.
    """
    tensor_dtypes = list(tensor_dtypes)
    scalar_dtypes = list(scalar_dtypes)
    if not tensor_dtypes:
        if not scalar_dtypes:
            raise ValueError("result_type needs at least one operand")
        out = scalar_dtypes[0]
        for s in scalar_dtypes[1:]:
            out = promote_types(out, s)
        return out
    out = tensor_dtypes[0]
    for t in tensor_dtypes[1:]:
        out = promote_types(out, t)
    if scalar_dtypes:
        top = max(scalar_dtypes, key=lambda d: d.category)
        if top.category > out.category:
            if top.category == 1:
                out = DataType.Int
            elif top.category == 2:
                out = DataType.Float
            else:
                out = DataType.ComplexDouble if out is DataType.Double else DataType.ComplexFloat
    return out


def compute_dtype(dt: DataType) -> DataType:
    """The type arithmetic on `dt` is computed in: narrow floats widen to float."""
    return DataType.Float if dt.is_reduced_float else dt
