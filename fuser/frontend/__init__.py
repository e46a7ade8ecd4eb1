"""nvFuser's Python frontend: FusionDefinition, fd.ops, the structural fusion cache."""
from .cache import FusionCache
from .fusion_definition import FusionDefinition
from .handles import Scalar, Tensor, Vector
from .replay import clone

__all__ = ["FusionDefinition", "FusionCache", "Tensor", "Scalar", "Vector", "clone"]
