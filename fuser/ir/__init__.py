"""Fusion IR: data types, values, iteration domains, expressions and the Fusion container."""
from .base import Expr, Scalar, Val, current_fusion, fusion_guard
from .domain import (
    IterDomain,
    IterType,
    Merge,
    MemoryType,
    ParallelType,
    Resize,
    Split,
    TensorDomain,
)
from .dtype import DataType, from_torch, promote_types, result_type
from .exprs import *  # noqa: F401,F403 - the expression classes are the IR's vocabulary
from .exprs import TENSOR_EXPR_CLASSES
from .fusion import Fusion
from .printer import fusion_ir, fusion_str, transforms_str
from .tensor import TensorView
