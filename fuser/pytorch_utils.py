"""Conversions between torch dtypes and DataType (nvfuser.pytorch_utils)."""
from .ir.dtype import from_torch as torch_dtype_to_nvfuser_dtype


def nvfuser_dtype_to_torch_dtype(dtype):
    """The torch dtype of a DataType."""
    return dtype.torch


__all__ = ["torch_dtype_to_nvfuser_dtype", "nvfuser_dtype_to_torch_dtype"]
