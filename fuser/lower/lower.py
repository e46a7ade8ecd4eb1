"""Lowering's entry points: scheduled fusions to kernel IR, one function per kind of kernel."""
from .errors import NotLowerable
from .pointwise import lower_pointwise

__all__ = ["NotLowerable", "lower_pointwise"]
