"""Shorthands for building Fusion IR directly in tests (inside a `fusion.guard()`)."""
from fuser.ir import DataType, IterDomain, IterType, Scalar, TensorDomain, TensorView


def sym() -> Scalar:
    """A fresh symbolic integer (an extent bound at execute time)."""
    return Scalar(DataType.Int)


def it(extent=None) -> IterDomain:
    """An iteration axis of `extent` (symbolic when None)."""
    return IterDomain(extent if extent is not None else sym())


def bc(expanded=None) -> IterDomain:
    """A broadcast axis, expanded to `expanded` when given."""
    return IterDomain(1, IterType.Broadcast, expanded_extent=expanded)


def tv(ids, dtype=DataType.Float, **kw) -> TensorView:
    """A tensor over `ids`."""
    return TensorView(TensorDomain(ids, **kw), dtype)
